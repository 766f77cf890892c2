//! What the runtime shows about itself: the informers and controllers a process registers, turned
//! into readiness, the `/debug/queue` and `/debug/cache` JSON documents ([`QueueReport`],
//! [`CacheReport`]: plain `Serialize` structs), and informer metrics. The debug-only views of a
//! controller ([`ControllerProbe`], [`KeyReport`], [`PassRecord`]) live here too, and the
//! `/debug/queue/<namespace>/<name>` document ([`KeyHistoryReport`]): a key's last passes with
//! their causes, results and writes.
//!
//! The operator registers each informer and each controller's probe once, at start-up; the HTTP
//! server only reads. Times are rendered as RFC 3339 wall-clock instants plus seconds relative to
//! now, so a reader sees both "when" and "how long".

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::sync::Arc;

use dashmap::DashMap;

use parking_lot::RwLock;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use serde::Serialize;
use tokio::sync::watch;
use tokio::time::{Duration, Instant};

use crate::runtime::ObjectKey;
use crate::runtime::causes::{self, CauseLog, ControllerQueue};
use crate::runtime::controller::PassResult;
use crate::runtime::freshness::Waited;
use crate::runtime::informer::{Informer, InformerStats};
use crate::runtime::object::InformerObject;
use crate::runtime::packed_pass::PackedPass;
use crate::runtime::workqueue::{KeyPhase, KeyState};
use crate::runtime::writes::PassWrite;

/// One pass of a key, for `/debug/queue`: why it ran, how it ended, what it wrote. The history
/// keeps it packed ([`PackedPass`]) and unpacks it for a reader.
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

/// Each key's last passes, newest last, as the controller keeps them: packed ([`PackedPass`]).
pub type PassHistories = Arc<DashMap<ObjectKey, VecDeque<PackedPass>>>;

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
                let last = entry.value().back().map(|pass| pass.unpack(&key));
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
        let passes: Vec<PassRecord> = self
            .passes
            .get(key)
            .map(|passes| passes.iter().map(|pass| pass.unpack(key)).collect())
            .unwrap_or_default();
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
        latest
            .into_sorted_vec()
            .into_iter()
            .map(|Reverse(l)| {
                let pass = l.pass.unpack(&l.key);
                (l.key, pass)
            })
            .collect()
    }

    fn empty_report(&self, key: ObjectKey) -> KeyReport {
        KeyReport { key, queue: None, last: None, pending: CauseLog::default() }
    }
}

/// A pass ordered by when it ended, for [`ControllerProbe::latest_passes`].
struct Latest {
    finished: Instant,
    key: ObjectKey,
    pass: PackedPass,
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

/// Anything that can report an informer's figures.
pub trait InformerProbe: Send + Sync + 'static {
    /// A snapshot of the figures.
    fn stats(&self) -> InformerStats;
    /// Whether its watch loop has ended for good.
    fn has_stopped(&self) -> bool;
}

impl<K> InformerProbe for Informer<K>
where
    K: InformerObject,
{
    fn stats(&self) -> InformerStats {
        Informer::stats(self)
    }

    fn has_stopped(&self) -> bool {
        Informer::has_stopped(self)
    }
}

#[derive(Default)]
struct Registered {
    informers: RwLock<Vec<(String, Arc<dyn InformerProbe>)>>,
    controllers: RwLock<Vec<ControllerProbe>>,
    leading: RwLock<Option<(String, watch::Receiver<bool>)>>,
}

/// The registry of what the process runs, shared by the operator (writes) and the HTTP server
/// (reads). Cloning gives another handle to the same registry.
#[derive(Clone, Default)]
pub struct Introspection {
    registered: Arc<Registered>,
}

impl std::fmt::Debug for Introspection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Introspection")
            .field("informers", &self.registered.informers.read().len())
            .field("controllers", &self.registered.controllers.read().len())
            .finish()
    }
}

impl Introspection {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers an informer under `name` (by convention the plural resource name).
    pub fn add_informer(&self, name: &str, informer: Arc<dyn InformerProbe>) {
        self.registered.informers.write().push((name.to_string(), informer));
    }

    /// Registers a controller's probe (take it with `Controller::probe` before `run`).
    pub fn add_controller(&self, probe: ControllerProbe) {
        self.registered.controllers.write().push(probe);
    }

    /// Registers the leader elector's signal for the lease `name`: shown in `/debug/queue` and as
    /// `leader_election_master_status{name}` (controller-runtime's metric).
    pub fn set_leading(&self, name: &str, leading: watch::Receiver<bool>) {
        *self.registered.leading.write() = Some((name.to_string(), leading));
    }

    /// Alive while every registered informer's watch loop is running; otherwise the names of those
    /// whose loop has ended (the process cannot recover them: the kubelet should restart it).
    pub fn liveness(&self) -> Result<(), Vec<String>> {
        let stopped: Vec<String> = self
            .registered
            .informers
            .read()
            .iter()
            .filter(|(_, informer)| informer.has_stopped())
            .map(|(name, _)| name.clone())
            .collect();
        if stopped.is_empty() { Ok(()) } else { Err(stopped) }
    }

    /// Ready when every registered informer has applied its first list; otherwise the names of
    /// those that have not. A standby (which may register nothing yet) is ready too.
    pub fn readiness(&self) -> Result<(), Vec<String>> {
        let unsynced: Vec<String> = self
            .registered
            .informers
            .read()
            .iter()
            .filter(|(_, informer)| !informer.stats().synced)
            .map(|(name, _)| name.clone())
            .collect();
        if unsynced.is_empty() { Ok(()) } else { Err(unsynced) }
    }

    /// The `/debug/queue` document: per controller, each key's state, requeues and last pass.
    pub fn queue_report(&self) -> QueueReport {
        let clock = Clock::now();
        let leading = self.registered.leading.read().as_ref().map(|(_, leading)| *leading.borrow());
        let controllers = self
            .registered
            .controllers
            .read()
            .iter()
            .map(|probe| ControllerReport {
                controller: probe.name().to_string(),
                keys: probe.keys().iter().map(|report| KeyView::of(report, &clock)).collect(),
            })
            .collect();
        QueueReport { now: clock.wall.to_string(), leading, controllers }
    }

    /// The `/debug/queue/<namespace>/<name>` document: per controller that knows the key, its
    /// state and its last passes. `None` when no controller knows it.
    pub fn key_history(&self, key: &ObjectKey) -> Option<KeyHistoryReport> {
        let clock = Clock::now();
        let controllers: Vec<KeyHistoryView> = self
            .registered
            .controllers
            .read()
            .iter()
            .filter_map(|probe| {
                let (report, passes) = probe.history(key)?;
                Some(KeyHistoryView {
                    controller: probe.name().to_string(),
                    key: KeyView::of(&report, &clock),
                    passes: passes.iter().rev().map(|pass| PassView::of(pass, &clock)).collect(),
                })
            })
            .collect();
        (!controllers.is_empty()).then(|| KeyHistoryReport { now: clock.wall.to_string(), controllers })
    }

    /// Per controller, the `limit` passes that ended last across its keys, newest first (the
    /// live page's timeline).
    pub fn latest_passes(&self, limit: usize) -> Vec<LatestPasses> {
        let clock = Clock::now();
        self.registered
            .controllers
            .read()
            .iter()
            .map(|probe| LatestPasses {
                controller: probe.name().to_string(),
                passes: probe
                    .latest_passes(limit)
                    .iter()
                    .map(|(key, pass)| (key.to_string(), PassView::of(pass, &clock)))
                    .collect(),
            })
            .collect()
    }

    /// The `/debug/cache` document: per informer, its figures.
    pub fn cache_report(&self) -> CacheReport {
        let informers = self
            .registered
            .informers
            .read()
            .iter()
            .map(|(name, informer)| InformerReport::of(name, informer.stats()))
            .collect();
        CacheReport { informers }
    }

    /// A Prometheus collector of the informers' figures, read at each scrape.
    pub fn informer_collector(&self) -> InformerCollector {
        InformerCollector { registered: Arc::clone(&self.registered) }
    }
}

/// The `/debug/queue` document.
#[derive(Debug, Clone, Serialize)]
pub struct QueueReport {
    /// When the report was made (RFC 3339).
    pub now: String,
    /// Whether this replica leads, with leader election; `null` without.
    pub leading: Option<bool>,
    /// One entry per registered controller.
    pub controllers: Vec<ControllerReport>,
}

/// One controller in `/debug/queue`.
#[derive(Debug, Clone, Serialize)]
pub struct ControllerReport {
    /// The controller's name.
    pub controller: String,
    /// Every key its queue tracks or that had a pass, sorted.
    pub keys: Vec<KeyView>,
}

/// One controller's latest passes across its keys, newest first, each with its key.
#[derive(Debug, Clone, Serialize)]
pub struct LatestPasses {
    /// The controller's name.
    pub controller: String,
    /// (key, pass), newest first.
    pub passes: Vec<(String, PassView)>,
}

/// The `/debug/queue/<namespace>/<name>` document.
#[derive(Debug, Clone, Serialize)]
pub struct KeyHistoryReport {
    /// When the report was made (RFC 3339).
    pub now: String,
    /// One entry per controller that knows the key.
    pub controllers: Vec<KeyHistoryView>,
}

/// One controller's view of a key in `/debug/queue/<namespace>/<name>`.
#[derive(Debug, Clone, Serialize)]
pub struct KeyHistoryView {
    /// The controller's name.
    pub controller: String,
    /// The key's state, as in `/debug/queue`.
    pub key: KeyView,
    /// Its last passes, newest first.
    pub passes: Vec<PassView>,
}

/// One key in `/debug/queue`: where it stands in the queue, rendered for a reader. Instants are
/// shown as wall-clock times plus seconds relative to now; fields that do not apply are left out.
#[derive(Debug, Clone, Serialize)]
pub struct KeyView {
    /// The key (`namespace/name`).
    pub key: String,
    /// `queued`, `processing`, `waiting`, `waiting_for_retry_budget` or `idle`.
    pub state: &'static str,
    /// When the key was queued, while queued.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queued_since: Option<String>,
    /// Seconds since it was queued, while queued.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queued_since_seconds_ago: Option<f64>,
    /// When its pass started, while processing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub processing_since: Option<String>,
    /// Seconds since its pass started, while processing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub processing_since_seconds_ago: Option<f64>,
    /// Added again during its pass: it runs once more afterwards.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub runs_again: bool,
    /// When its timer fires, if one is pending.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waiting_until: Option<String>,
    /// Seconds until its timer fires, if one is pending.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waiting_seconds_left: Option<f64>,
    /// Failures since the last success.
    pub requeues: u32,
    /// Queued (or due back) at low priority: from a list, behind live events.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub low_priority: bool,
    /// The causes recorded for its next pass (the dedup made visible: a queued key collects
    /// every reason it was added).
    #[serde(skip_serializing_if = "is_empty_log")]
    pub pending_causes: CauseLog,
    /// Its last pass, if it had one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_pass: Option<PassView>,
}

fn is_empty_log(log: &CauseLog) -> bool {
    log.total() == 0
}

/// One pass of a key in `/debug/queue` (its last) and `/debug/queue/<namespace>/<name>`.
#[derive(Debug, Clone, Serialize)]
pub struct PassView {
    /// Its first cause and the count of the others, as in the pass's log span.
    pub trigger: String,
    /// Why it ran.
    pub causes: CauseLog,
    /// When it started.
    pub started: String,
    /// How it ended.
    pub result: PassResult,
    /// The error's message, if it failed.
    pub error: Option<String>,
    /// When it ended.
    pub finished: String,
    /// Seconds since it ended.
    pub finished_seconds_ago: f64,
    /// How long it took, in seconds.
    pub took_seconds: f64,
    /// What it wrote.
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    pub writes: Box<[PassWrite]>,
    /// Seconds it first waited for the caches to deliver the previous pass's writes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stale_cache_wait_seconds: Option<f64>,
    /// That wait ended at its bound rather than with the caches up to date.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub stale_cache_wait_timed_out: bool,
    /// The key is in a hot loop: its passes keep writing.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub hot_loop: bool,
}

impl KeyView {
    fn of(report: &KeyReport, clock: &Clock) -> Self {
        let state = report.queue.as_ref();
        let phase = state.map_or(&KeyPhase::Idle, |s| &s.phase);
        let since = |at: Option<Instant>| at.map(|at| clock.render(at)).unzip();
        let ((queued_since, queued_ago), (processing_since, processing_ago)) = match phase {
            KeyPhase::Queued { since: at } => (since(*at), (None, None)),
            KeyPhase::Processing { since: at, .. } => ((None, None), since(*at)),
            _ => ((None, None), (None, None)),
        };
        let (waiting_until, left) = since(state.and_then(|s| s.timer));
        Self {
            key: report.key.as_str().to_string(),
            state: match phase {
                KeyPhase::Queued { .. } => "queued",
                KeyPhase::Processing { .. } => "processing",
                KeyPhase::Waiting { .. } => "waiting",
                KeyPhase::WaitingForRetryBudget => "waiting_for_retry_budget",
                KeyPhase::Idle => "idle",
            },
            queued_since,
            queued_since_seconds_ago: queued_ago.map(|offset| -offset),
            processing_since,
            processing_since_seconds_ago: processing_ago.map(|offset| -offset),
            runs_again: matches!(phase, KeyPhase::Processing { again: true, .. }),
            waiting_until,
            waiting_seconds_left: left.map(|offset| offset.max(0.0)),
            requeues: state.map_or(0, |s| s.requeues),
            low_priority: state.is_some_and(|s| s.low_priority),
            pending_causes: report.pending.clone(),
            last_pass: report.last.as_ref().map(|last| PassView::of(last, clock)),
        }
    }
}

impl PassView {
    fn of(pass: &PassRecord, clock: &Clock) -> Self {
        let (finished, offset) = clock.render(pass.finished());
        Self {
            trigger: pass.causes.trigger().to_string(),
            causes: pass.causes.clone(),
            started: clock.render(pass.started).0,
            result: pass.result,
            error: pass.error.as_deref().map(str::to_owned),
            finished,
            finished_seconds_ago: -offset,
            took_seconds: round_ms(pass.took.as_secs_f64()),
            writes: pass.writes.clone(),
            stale_cache_wait_seconds: pass
                .stale_cache_wait
                .as_ref()
                .map(|w| round_ms(w.waited.as_secs_f64())),
            stale_cache_wait_timed_out: pass.stale_cache_wait.as_ref().is_some_and(|w| w.timed_out),
            hot_loop: pass.hot_loop,
        }
    }
}

/// The `/debug/cache` document.
#[derive(Debug, Clone, Serialize)]
pub struct CacheReport {
    /// One entry per registered informer.
    pub informers: Vec<InformerReport>,
}

/// One informer in `/debug/cache`.
#[derive(Debug, Clone, Serialize)]
pub struct InformerReport {
    /// The name it was registered under.
    pub informer: String,
    /// Objects in its cache.
    pub objects: usize,
    /// Whether its first list has been applied.
    pub synced: bool,
    /// The last resourceVersion seen.
    pub last_resource_version: Option<String>,
    /// `streaming` or `paginated`, once known.
    pub initial_list: Option<&'static str>,
    /// Full lists started, the first included.
    pub relists: u64,
    /// Watches resumed after the previous one ended.
    pub watch_restarts: u64,
    /// `410 Gone` answers.
    pub gone: u64,
    /// Failed requests retried after a backoff delay.
    pub failures: u64,
    /// Changes handed to handlers, and bookmarks received.
    pub events: EventCounts,
    /// Objects that failed to decode and were skipped.
    pub malformed_skipped: u64,
    /// Handler calls that panicked.
    pub handler_panics: u64,
}

/// An informer's event counts in `/debug/cache`.
#[derive(Debug, Clone, Serialize)]
pub struct EventCounts {
    /// `Added` events.
    pub added: u64,
    /// `Updated` events.
    pub updated: u64,
    /// `Deleted` events.
    pub deleted: u64,
    /// Bookmarks.
    pub bookmarks: u64,
}

impl InformerReport {
    fn of(name: &str, stats: InformerStats) -> Self {
        Self {
            informer: name.to_string(),
            objects: stats.objects,
            synced: stats.synced,
            last_resource_version: stats.last_resource_version,
            initial_list: stats.initial_list,
            relists: stats.relists,
            watch_restarts: stats.watch_restarts,
            gone: stats.gone,
            failures: stats.failures,
            events: EventCounts {
                added: stats.added,
                updated: stats.updated,
                deleted: stats.deleted,
                bookmarks: stats.bookmarks,
            },
            malformed_skipped: stats.malformed_skipped,
            handler_panics: stats.handler_panics,
        }
    }
}

/// "Now" on both clocks, to turn the runtime's monotonic instants into wall-clock times.
struct Clock {
    instant: Instant,
    wall: jiff::Timestamp,
}

impl Clock {
    fn now() -> Self {
        Self { instant: Instant::now(), wall: jiff::Timestamp::now() }
    }

    /// The wall-clock time of `at` and its distance from now in seconds (negative: in the past).
    fn render(&self, at: Instant) -> (String, f64) {
        let offset = if at >= self.instant {
            (at - self.instant).as_secs_f64()
        } else {
            -(self.instant - at).as_secs_f64()
        };
        let wall = jiff::SignedDuration::try_from_secs_f64(offset)
            .ok()
            .and_then(|d| self.wall.checked_add(d).ok())
            .unwrap_or(self.wall);
        (wall.round(jiff::Unit::Millisecond).unwrap_or(wall).to_string(), round_ms(offset))
    }
}

fn round_ms(seconds: f64) -> f64 {
    (seconds * 1000.0).round() / 1000.0
}

/// A metric's name, help and how to read it from an informer's figures.
type Figure<T> = (&'static str, &'static str, fn(&InformerStats) -> T);

/// The informers' figures as Prometheus metrics: `informer_objects`, `informer_synced`,
/// `informer_events_total{type}`, `informer_relists_total`, `informer_watch_restarts_total`,
/// `informer_gone_total`, each labelled with `informer`; and, with leader election,
/// `leader_election_master_status{name}` (1 while this replica leads).
#[derive(Clone)]
pub struct InformerCollector {
    registered: Arc<Registered>,
}

impl std::fmt::Debug for InformerCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("InformerCollector")
    }
}

impl Collector for InformerCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let stats: Vec<(String, InformerStats)> =
            self.registered.informers.read().iter().map(|(name, i)| (name.clone(), i.stats())).collect();
        let gauges: [Figure<i64>; 2] = [
            ("informer_objects", "Objects in the informer's cache", |s| s.objects as i64),
            ("informer_synced", "Whether the informer applied its first list (1) or not (0)", |s| {
                i64::from(s.synced)
            }),
        ];
        for (name, help, value) in gauges {
            let gauge = ConstGauge::new(0i64);
            let mut metric = encoder.encode_descriptor(name, help, None, gauge.metric_type())?;
            for (informer, s) in &stats {
                ConstGauge::new(value(s))
                    .encode(metric.encode_family(&[("informer", informer.as_str())])?)?;
            }
        }
        let counters: [Figure<u64>; 3] = [
            ("informer_relists", "Full lists the informer started, the first included", |s| s.relists),
            ("informer_watch_restarts", "Watches resumed after the previous one ended", |s| s.watch_restarts),
            ("informer_gone", "410 Gone answers that forced a relist", |s| s.gone),
        ];
        for (name, help, value) in counters {
            let counter = ConstCounter::new(0u64);
            let mut metric = encoder.encode_descriptor(name, help, None, counter.metric_type())?;
            for (informer, s) in &stats {
                ConstCounter::new(value(s))
                    .encode(metric.encode_family(&[("informer", informer.as_str())])?)?;
            }
        }
        let counter = ConstCounter::new(0u64);
        let mut metric = encoder.encode_descriptor(
            "informer_events",
            "Changes the informer applied to its cache, by type",
            None,
            counter.metric_type(),
        )?;
        for (informer, s) in &stats {
            for (kind, value) in [("added", s.added), ("updated", s.updated), ("deleted", s.deleted)] {
                let labels = [("informer", informer.as_str()), ("type", kind)];
                ConstCounter::new(value).encode(metric.encode_family(&labels)?)?;
            }
        }
        if let Some((name, leading)) = self.registered.leading.read().as_ref() {
            let gauge = ConstGauge::new(i64::from(*leading.borrow()));
            let mut metric = encoder.encode_descriptor(
                "leader_election_master_status",
                "Whether this replica leads (1) or not (0), per lease",
                None,
                gauge.metric_type(),
            )?;
            gauge.encode(metric.encode_family(&[("name", name.as_str())])?)?;
        }
        Ok(())
    }
}
