//! Metrics hooks: the seven workqueue metrics of client-go / controller-runtime, reported through
//! a small trait so the HTTP server can expose them (a prometheus-client adapter implements each
//! method with one call on a gauge, counter or histogram labelled with the queue's name).

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;

/// Receives one queue's metrics. Methods are called outside the queue's lock, may be called from
/// several threads at once, and must be cheap.
///
/// | method | controller-runtime metric |
/// |---|---|
/// | `depth` | `workqueue_depth` (gauge, ready keys) |
/// | `added` | `workqueue_adds_total` (adds that were not duplicates) |
/// | `queue_duration` | `workqueue_queue_duration_seconds` (add → handed out) |
/// | `work_duration` | `workqueue_work_duration_seconds` (handed out → claim dropped) |
/// | `unfinished_work` | `workqueue_unfinished_work_seconds` and `workqueue_longest_running_processor_seconds` |
/// | `retried` | `workqueue_retries_total` (`add_rate_limited` calls) |
pub trait QueueMetrics: Send + Sync + 'static {
    /// The number of ready keys changed by `delta`.
    fn depth(&self, delta: i64);
    /// A key was added (queued, or marked to run again after its current processing).
    fn added(&self);
    /// A key waited `waited` between being added and being handed out.
    fn queue_duration(&self, waited: Duration);
    /// A key was processed for `worked` (handed out → claim dropped).
    fn work_duration(&self, worked: Duration);
    /// Sampled every 500 ms: the summed age of all outstanding claims, and the oldest one's age.
    fn unfinished_work(&self, total: Duration, longest: Duration);
    /// A failure was reported with `add_rate_limited`.
    fn retried(&self);
}

/// A [`QueueMetrics`] that keeps the figures in memory, for tests and for the debug endpoint.
#[derive(Debug, Default)]
pub struct InMemoryMetrics {
    depth: AtomicI64,
    adds: AtomicU64,
    retries: AtomicU64,
    queue_durations: Mutex<Vec<Duration>>,
    work_durations: Mutex<Vec<Duration>>,
    unfinished: Mutex<(Duration, Duration)>,
}

impl InMemoryMetrics {
    /// Current `workqueue_depth`.
    pub fn depth(&self) -> i64 {
        self.depth.load(Ordering::Relaxed)
    }

    /// `workqueue_adds_total`.
    pub fn adds(&self) -> u64 {
        self.adds.load(Ordering::Relaxed)
    }

    /// `workqueue_retries_total`.
    pub fn retries(&self) -> u64 {
        self.retries.load(Ordering::Relaxed)
    }

    /// Every `workqueue_queue_duration_seconds` observation so far.
    pub fn queue_durations(&self) -> Vec<Duration> {
        self.queue_durations.lock().clone()
    }

    /// Every `workqueue_work_duration_seconds` observation so far.
    pub fn work_durations(&self) -> Vec<Duration> {
        self.work_durations.lock().clone()
    }

    /// The last sample of (`workqueue_unfinished_work_seconds`, `workqueue_longest_running_processor_seconds`).
    pub fn unfinished_work(&self) -> (Duration, Duration) {
        *self.unfinished.lock()
    }
}

impl QueueMetrics for InMemoryMetrics {
    fn depth(&self, delta: i64) {
        self.depth.fetch_add(delta, Ordering::Relaxed);
    }

    fn added(&self) {
        self.adds.fetch_add(1, Ordering::Relaxed);
    }

    fn queue_duration(&self, waited: Duration) {
        self.queue_durations.lock().push(waited);
    }

    fn work_duration(&self, worked: Duration) {
        self.work_durations.lock().push(worked);
    }

    fn unfinished_work(&self, total: Duration, longest: Duration) {
        *self.unfinished.lock() = (total, longest);
    }

    fn retried(&self) {
        self.retries.fetch_add(1, Ordering::Relaxed);
    }
}
