//! A controller's debug-only view: its queue and each key's last passes ([`ControllerProbe`],
//! [`KeyReport`], [`PassRecord`]) and where each key stands in the queue ([`KeyState`]).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::sync::Arc;

use dashmap::DashMap;

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

/// Each key's last passes, newest last, as the controller keeps them.
pub type PassHistories = Arc<DashMap<ObjectKey, VecDeque<PassRecord>>>;

/// A read-only view of a controller's queue and last passes, taken before `run` consumes the
/// controller (`Controller::probe`) and valid while it runs.
#[derive(Clone)]
pub struct ControllerProbe {
    name: String,
    queue: ControllerQueue,
    passes: PassHistories,
}

impl std::fmt::Debug for ControllerProbe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControllerProbe")
            .field("name", &self.name)
            .field("keys_with_passes", &self.passes.len())
            .finish()
    }
}

impl ControllerProbe {
    /// A probe of the controller `name` (made by the controller, which fills `passes`; the
    /// queue keeps the pending causes).
    pub(crate) fn new(name: &str, queue: ControllerQueue, passes: PassHistories) -> Self {
        Self { name: name.to_string(), queue, passes }
    }

    /// The controller's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Every key the queue tracks or that had a pass, sorted by key.
    pub fn keys(&self) -> Vec<KeyReport> {
        let mut reports: std::collections::BTreeMap<ObjectKey, KeyReport> = self
            .passes
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
            self.passes.get(key).map(|passes| passes.iter().cloned().collect()).unwrap_or_default();
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
        for entry in self.passes.iter() {
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
