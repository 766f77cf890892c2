//! A controller's debug-only view: its queue, each key's last passes ([`ControllerProbe`],
//! [`KeyReport`], [`PassRecord`]), where each key stands in the queue ([`KeyState`]) and the
//! running totals of every pass ([`PassTotals`]: how many, how long in all, how many writes; a
//! reader turns two readings into rates).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use dashmap::DashMap;
use serde::Serialize;

use tokio::time::{Duration, Instant};

use crate::runtime::ObjectKey;
use crate::runtime::controller::PassResult;
use crate::runtime::controller::causes::{self, CauseLog, ControllerQueue};
use crate::runtime::controller::freshness::Waited;
use crate::runtime::controller::writes::PassWrite;

/// One pass of a key, for `/debug/queue`: why it ran, how it ended, what it wrote. The history
/// keeps the last few of each key as they are.
#[derive(Debug, Clone, PartialEq)]
pub struct PassRecord {
    /// Why it ran: the causes recorded since the previous pass.
    pub causes: CauseLog,
    /// When it started (after any wait for the caches).
    pub started: Instant,
    /// The outcome.
    pub result: PassResult,
    /// The error's message, for an error, a panic or a timeout.
    pub error: Option<Box<str>>,
    /// How long the pass took.
    pub took: Duration,
    /// What it wrote (the server's resourceVersions).
    pub writes: Box<[PassWrite]>,
    /// How long it waited first for the caches to deliver the previous pass's writes, if at all.
    pub stale_cache_wait: Option<Waited>,
    /// The key was in a hot loop after this pass.
    pub hot_loop: bool,
}

impl PassRecord {
    /// When the pass ended: its start and how long it took (a record is kept for every key, so
    /// it does not hold what it can derive).
    pub fn finished(&self) -> Instant {
        self.started + self.took
    }
}

/// Where a key stands in its work queue, as `WorkQueue::snapshot` reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeyPhase {
    /// Ready, waiting for a worker; `since` it was added (known when the queue has metrics).
    Queued {
        /// When it was added.
        since: Option<Instant>,
    },
    /// Handed out to a worker `since` then (known when the queue has metrics).
    Processing {
        /// When it was handed out.
        since: Option<Instant>,
        /// Added meanwhile: it runs once more after the claim is dropped.
        again: bool,
    },
    /// Waiting for its timer.
    Waiting {
        /// When the timer fires.
        until: Instant,
    },
    /// Its retry is due and waits for a token of the overall retry budget.
    WaitingForRetryBudget,
    /// Nothing pending; only its failure count is kept (until `forget`).
    Idle,
}

/// One tracked key in a work queue's `snapshot`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyState<K> {
    /// The key.
    pub key: K,
    /// Where it stands.
    pub phase: KeyPhase,
    /// A pending timer, also when the key is queued or processing meanwhile.
    pub timer: Option<Instant>,
    /// Failures since the last `forget` (`num_requeues`).
    pub requeues: u32,
    /// Queued (or due back after its claim) at low priority.
    pub low_priority: bool,
}

/// One key as the debug endpoint shows it: the queue's view and the last pass.
#[derive(Debug, Clone)]
pub struct KeyReport {
    /// The key.
    pub key: ObjectKey,
    /// The queue's state for the key, if it tracks any.
    pub queue: Option<KeyState<ObjectKey>>,
    /// The key's last pass, if it had one and still exists (or is still tracked).
    pub last: Option<PassRecord>,
    /// The causes recorded for its next pass.
    pub pending: CauseLog,
}

/// Each key's last passes, newest last, as the controller keeps them, and the totals of every
/// pass it ran.
#[derive(Debug, Default)]
pub struct PassLog {
    /// Each key's last passes, newest last.
    pub histories: DashMap<ObjectKey, VecDeque<PassRecord>>,
    /// Every pass, counted (also those of keys whose history is gone).
    pub totals: PassTotals,
}

/// The controller's [`PassLog`], shared by its workers (which write) and its probe (which reads).
pub type PassHistories = Arc<PassLog>;

/// Running totals of a controller's passes: cumulative, so that a reader takes two readings and
/// divides (passes per second, mean pass latency, writes per second) without the controller
/// keeping any window.
#[derive(Debug, Default)]
pub struct PassTotals {
    passes: AtomicU64,
    nanos: AtomicU64,
    writes: AtomicU64,
}

impl PassTotals {
    /// Counts `pass`.
    pub fn record(&self, pass: &PassRecord) {
        let nanos = u64::try_from(pass.took.as_nanos()).unwrap_or(u64::MAX);
        self.passes.fetch_add(1, Ordering::Relaxed);
        self.nanos.fetch_add(nanos, Ordering::Relaxed);
        self.writes.fetch_add(pass.writes.len() as u64, Ordering::Relaxed);
    }

    /// The totals so far.
    pub fn read(&self) -> PassCounts {
        PassCounts {
            passes: self.passes.load(Ordering::Relaxed),
            seconds: Duration::from_nanos(self.nanos.load(Ordering::Relaxed)).as_secs_f64(),
            writes: self.writes.load(Ordering::Relaxed),
        }
    }
}

/// One reading of [`PassTotals`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct PassCounts {
    /// Passes that ended.
    pub passes: u64,
    /// Their durations, summed, in seconds.
    pub seconds: f64,
    /// The API writes they made.
    pub writes: u64,
}

/// A read-only view of a controller's queue and last passes, taken before `run` consumes the
/// controller (`Controller::probe`) and valid while it runs.
#[derive(Clone)]
pub struct ControllerProbe {
    name: String,
    workers: usize,
    queue: ControllerQueue,
    passes: PassHistories,
}

impl std::fmt::Debug for ControllerProbe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControllerProbe")
            .field("name", &self.name)
            .field("keys_with_passes", &self.passes.histories.len())
            .finish()
    }
}

impl ControllerProbe {
    /// A probe of the controller `name` with `workers` workers (made by the controller, which
    /// fills `passes`; the queue keeps the pending causes).
    pub(crate) fn new(name: &str, workers: usize, queue: ControllerQueue, passes: PassHistories) -> Self {
        Self { name: name.to_string(), workers, queue, passes }
    }

    /// The controller's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// How many workers it runs (passes at once, at most).
    pub fn workers(&self) -> usize {
        self.workers
    }

    /// The totals of every pass so far.
    pub fn totals(&self) -> PassCounts {
        self.passes.totals.read()
    }

    /// Every key the queue tracks or that had a pass, sorted by key.
    pub fn keys(&self) -> Vec<KeyReport> {
        let mut reports: std::collections::BTreeMap<ObjectKey, KeyReport> = self
            .passes
            .histories
            .iter()
            .map(|entry| {
                let key = entry.key().clone();
                let last = entry.value().back().cloned();
                (key.clone(), KeyReport { key, queue: None, last, pending: CauseLog::default() })
            })
            .collect();
        for state in self.queue.snapshot() {
            let key = state.key.clone();
            reports.entry(key.clone()).or_insert_with(|| self.empty_report(key)).queue = Some(state);
        }
        for report in reports.values_mut() {
            report.pending = causes::pending(&self.queue, &report.key);
        }
        reports.into_values().collect()
    }

    /// The key's state and last passes (oldest first), if the controller knows the key.
    pub fn history(&self, key: &ObjectKey) -> Option<(KeyReport, Vec<PassRecord>)> {
        let passes: Vec<PassRecord> =
            self.passes.histories.get(key).map(|passes| passes.iter().cloned().collect()).unwrap_or_default();
        let queue = self.queue.snapshot().into_iter().find(|state| &state.key == key);
        let pending = causes::pending(&self.queue, key);
        if passes.is_empty() && queue.is_none() && pending.total() == 0 {
            return None;
        }
        let report = KeyReport { key: key.clone(), queue, last: passes.last().cloned(), pending };
        Some((report, passes))
    }

    /// The `limit` passes that ended last, across every key, newest first (a bounded heap: with
    /// many keys this reads each key's history only while it still has newer passes than the
    /// oldest kept).
    pub fn latest_passes(&self, limit: usize) -> Vec<(ObjectKey, PassRecord)> {
        let mut latest: BinaryHeap<Reverse<Latest>> = BinaryHeap::with_capacity(limit + 1);
        for entry in self.passes.histories.iter() {
            for pass in entry.value().iter().rev() {
                let finished = pass.finished();
                let older = latest.peek().is_some_and(|Reverse(oldest)| oldest.finished >= finished);
                if limit == 0 || (latest.len() == limit && older) {
                    break;
                }
                let (key, pass) = (entry.key().clone(), pass.clone());
                latest.push(Reverse(Latest { finished, key, pass }));
                if latest.len() > limit {
                    latest.pop();
                }
            }
        }
        latest.into_sorted_vec().into_iter().map(|Reverse(l)| (l.key, l.pass)).collect()
    }

    fn empty_report(&self, key: ObjectKey) -> KeyReport {
        KeyReport { key, queue: None, last: None, pending: CauseLog::default() }
    }
}

/// A pass ordered by when it ended, for [`ControllerProbe::latest_passes`].
pub(super) struct Latest {
    finished: Instant,
    key: ObjectKey,
    pass: PassRecord,
}

impl PartialEq for Latest {
    fn eq(&self, other: &Self) -> bool {
        self.finished == other.finished
    }
}

impl Eq for Latest {}

impl PartialOrd for Latest {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Latest {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.finished.cmp(&other.finished)
    }
}
