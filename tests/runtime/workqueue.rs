//! The work queue's semantics, one test per rule its documentation numbers, plus metrics and
//! snapshot.
//! Time-dependent tests run on tokio's paused clock: waits are exact and instant.
#![cfg(feature = "sim")]

use crate::common;

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use dbcluster_operator::runtime::ObjectKey;
use dbcluster_operator::runtime::workqueue::{
    BackoffConfig, DEFAULT_LOW_PRIORITY_MAX_WAIT, KeyPhase, Priority, QueueConfig, QueueMetrics, WorkQueue,
};
use tokio::time::{Instant, sleep, timeout};

mod observability;
mod ordering;
mod priority;
mod retries;
mod shutdown;

const HOUR: Duration = Duration::from_secs(3600);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn key(n: usize) -> ObjectKey {
    ObjectKey::namespaced("default", &format!("k-{n}"))
}

fn queue() -> WorkQueue<ObjectKey> {
    WorkQueue::new(QueueConfig::default())
}

/// True if `future` is still pending after an hour of (paused) time: every timer had its chance.
async fn stays_pending<F: Future>(future: F) -> bool {
    timeout(HOUR, future).await.is_err()
}

/// Claims the next key and returns it with how long that took.
async fn next(q: &WorkQueue<ObjectKey>) -> (ObjectKey, Duration) {
    let start = Instant::now();
    let claim =
        timeout(HOUR * 24, q.get()).await.expect("no key became ready within a day").expect("running");
    (claim.key().clone(), start.elapsed())
}

/// Claims `n` keys one after the other (each claim dropped at once) and returns them.
async fn drain(q: &WorkQueue<ObjectKey>, n: usize) -> Vec<ObjectKey> {
    let mut keys = Vec::new();
    for _ in 0..n {
        keys.push(next(q).await.0);
    }
    keys
}

/// Keys the queue holds any state for (queued, processing, waiting or with failures).
fn tracked(q: &WorkQueue<ObjectKey>) -> usize {
    q.snapshot().len()
}

/// Keys with a failure count (the state `forget` drops).
fn with_failures(q: &WorkQueue<ObjectKey>) -> usize {
    q.snapshot().iter().filter(|key| key.requeues > 0).count()
}
