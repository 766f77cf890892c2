//! The documents the debug endpoints serve: `/debug/queue` ([`QueueReport`]),
//! `/debug/queue/<namespace>/<name>` ([`KeyHistoryReport`]) and `/debug/cache` ([`CacheReport`]),
//! plain `Serialize` structs, with instants rendered on both clocks ([`Clock`]).

use serde::Serialize;
use tokio::time::Instant;

use super::*;
use crate::runtime::controller::PassResult;
use crate::runtime::controller::causes::CauseLog;
use crate::runtime::controller::writes::PassWrite;
use crate::runtime::informer::InformerStats;
use crate::runtime::workqueue::KeyPhase;
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

pub(super) fn is_empty_log(log: &CauseLog) -> bool {
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
    pub(super) fn of(report: &KeyReport, clock: &Clock) -> Self {
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
    pub(super) fn of(pass: &PassRecord, clock: &Clock) -> Self {
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
    pub(super) fn of(name: &str, stats: InformerStats) -> Self {
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
pub(super) struct Clock {
    instant: Instant,
    pub(super) wall: jiff::Timestamp,
}

impl Clock {
    pub(super) fn now() -> Self {
        Self { instant: Instant::now(), wall: jiff::Timestamp::now() }
    }

    /// The wall-clock time of `at` and its distance from now in seconds (negative: in the past).
    pub(super) fn render(&self, at: Instant) -> (String, f64) {
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

pub(super) fn round_ms(seconds: f64) -> f64 {
    (seconds * 1000.0).round() / 1000.0
}
