//! Why a pass ran: every enqueue records its [`Cause`] beside the work queue, keyed by
//! [`ObjectKey`], and each pass takes the causes gathered since the previous one.
//!
//! The rules (one test each, in this module and in `tests/controller.rs`):
//!
//! 1. Every enqueue the controller makes records a cause: a watch event of the key's own object,
//!    a watch event of another object mapped to the key (a child to its owner), a list (the
//!    initial list, a relist), the replay of the caches when a replica became leader, a
//!    `RequeueAfter`, a retry (with the error), or an explicit call ([`Enqueuer::add_explicit`]).
//! 2. A key that is already queued accumulates its causes: the last [`KEPT_CAUSES`] are kept, and
//!    the ones dropped before them are counted ([`CauseLog::more`]); nothing is lost silently.
//! 3. A pass takes the causes recorded up to its start; a cause recorded during the pass belongs
//!    to the next one. A timer's cause (a `RequeueAfter`, a retry) stays pending until its timer
//!    can have fired: a watch event's pass before that does not take it. The queue keeps only a
//!    key's earliest timer, so a timer cause recorded while an earlier one is pending is due with
//!    it: the pass that timer starts takes them all.
//! 4. The trigger of a pass is its oldest kept cause and the count of the others
//!    ([`CauseLog::trigger`]): `"StatefulSet default/pg modified rv=4312" (+2)`.
//! 5. Switched off ([`Causes::disabled`]), recording costs a branch: no cause is built, nothing is
//!    stored, and passes have no trigger.
//!
//! The causes live beside the queue, not in it, so the queue's hot path is unchanged; the
//! `work-queue` benchmarks measure the enqueue with causes on beside off.

use std::collections::VecDeque;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use dashmap::DashMap;
use serde::Serialize;
use serde::ser::SerializeStruct;
use tokio::time::Instant;

use crate::runtime::ObjectKey;
use crate::runtime::workqueue::{Priority, WorkQueue};

/// How many causes a key keeps per pass; older ones are only counted.
pub const KEPT_CAUSES: usize = 8;

/// What happened to an object, as an informer delivered it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EventType {
    /// It appeared (or was listed).
    Added,
    /// It changed.
    Modified,
    /// It is gone.
    Deleted,
}

impl EventType {
    /// The lower-case word shown in triggers.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Added => "added",
            Self::Modified => "modified",
            Self::Deleted => "deleted",
        }
    }
}

/// One informer event, as a cause names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectEvent {
    /// The informer's kind, `group/Kind` (`Kind` for the core group).
    pub informer: Arc<str>,
    /// Added, modified or deleted.
    pub event: EventType,
    /// The object the event is about.
    pub object: ObjectKey,
    /// Its resourceVersion in the event, if it had one.
    pub resource_version: Option<Arc<str>>,
}

impl ObjectEvent {
    /// The kind without its group: `StatefulSet`.
    pub fn kind(&self) -> &str {
        self.informer.rsplit_once('/').map_or(&self.informer, |(_, kind)| kind)
    }
}

impl fmt::Display for ObjectEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} {}", self.kind(), self.object, self.event.as_str())?;
        match &self.resource_version {
            Some(rv) => write!(f, " rv={rv}"),
            None => Ok(()),
        }
    }
}

/// Why a key was queued.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cause {
    /// A watch event of the key's own object.
    Watch(ObjectEvent),
    /// A watch event of another object that a mapper turned into this key (a child to its owner).
    Mapped(ObjectEvent),
    /// The object (or an object mapped to the key) was in a list: the initial list or a relist.
    Listed(ObjectEvent),
    /// The caches were replayed to the controller when this replica became leader.
    LeaderChange(ObjectEvent),
    /// The previous pass asked to run again after this long.
    RequeueAfter(Duration),
    /// The previous pass failed with this error (or panicked, or timed out) and is retried.
    Retry(Arc<str>),
    /// Someone asked for it, for this reason.
    Explicit(Arc<str>),
}

impl Cause {
    /// The cause's type, as `/debug/queue` names it.
    pub fn type_name(&self) -> &'static str {
        match self {
            Self::Watch(_) => "watch",
            Self::Mapped(_) => "mapped",
            Self::Listed(_) => "list",
            Self::LeaderChange(_) => "leader_change",
            Self::RequeueAfter(_) => "requeue_after",
            Self::Retry(_) => "retry",
            Self::Explicit(_) => "explicit",
        }
    }

    /// The object event behind the cause, if it came from an informer.
    pub fn event(&self) -> Option<&ObjectEvent> {
        match self {
            Self::Watch(e) | Self::Mapped(e) | Self::Listed(e) | Self::LeaderChange(e) => Some(e),
            _ => None,
        }
    }
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Watch(event) => write!(f, "{event}"),
            Self::Mapped(event) => write!(f, "{event} (owned)"),
            Self::Listed(event) => write!(f, "listed {event}"),
            Self::LeaderChange(event) => write!(f, "became leader: {event}"),
            Self::RequeueAfter(after) => write!(f, "requeue after {after:?}"),
            Self::Retry(error) => write!(f, "retry after error: {error}"),
            Self::Explicit(reason) => write!(f, "explicit: {reason}"),
        }
    }
}

/// Serialized with its type, its text and, for an informer event, the event's fields.
impl Serialize for Cause {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut s = serializer.serialize_struct("Cause", 8)?;
        s.serialize_field("type", self.type_name())?;
        s.serialize_field("text", &self.to_string())?;
        if let Some(event) = self.event() {
            s.serialize_field("informer", &*event.informer)?;
            s.serialize_field("event", &event.event)?;
            s.serialize_field("kind", event.kind())?;
            s.serialize_field("namespace", &event.object.namespace())?;
            s.serialize_field("name", event.object.name())?;
            s.serialize_field("resource_version", &event.resource_version.as_deref())?;
        }
        if let Self::Retry(error) = self {
            s.serialize_field("error", &**error)?;
        }
        if let Self::RequeueAfter(after) = self {
            s.serialize_field("after_seconds", &after.as_secs_f64())?;
        }
        s.end()
    }
}

/// The causes of one pass (or the ones pending for the next): the last [`KEPT_CAUSES`], oldest
/// first, and how many came before them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CauseLog {
    /// The kept causes, oldest first.
    pub kept: Vec<Cause>,
    /// Causes dropped before the kept ones.
    pub more: u64,
}

impl CauseLog {
    /// Every cause, the dropped ones included.
    pub fn total(&self) -> u64 {
        self.kept.len() as u64 + self.more
    }

    /// The pass's trigger, for its span: the oldest kept cause and the count of the others.
    pub fn trigger(&self) -> Trigger<'_> {
        Trigger(self)
    }

    fn push(&mut self, cause: Cause) {
        if self.kept.len() == KEPT_CAUSES {
            self.kept.remove(0);
            self.more += 1;
        }
        self.kept.push(cause);
    }
}

/// `"<first cause>" (+N)`, or `none recorded`: see [`CauseLog::trigger`].
#[derive(Debug, Clone, Copy)]
pub struct Trigger<'a>(&'a CauseLog);

impl fmt::Display for Trigger<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Some(first) = self.0.kept.first() else {
            return f.write_str("none recorded");
        };
        write!(f, "\"{first}\"")?;
        match self.0.total() - 1 {
            0 => Ok(()),
            others => write!(f, " (+{others})"),
        }
    }
}

/// A cause waiting for its pass, with the earliest time its timer can fire (`None`: at once).
#[derive(Debug, Clone)]
struct PendingCause {
    cause: Cause,
    due: Option<Instant>,
}

#[derive(Debug, Default)]
struct Pending {
    causes: VecDeque<PendingCause>,
    more: u64,
}

/// The causes recorded for each key and not yet taken by a pass. Shared by the controller's
/// event handlers (which record) and its workers (which take); see the module docs.
#[derive(Debug)]
pub struct Causes {
    enabled: bool,
    pending: DashMap<ObjectKey, Pending>,
}

impl Default for Causes {
    fn default() -> Self {
        Self::enabled()
    }
}

impl Causes {
    /// A store that records.
    pub fn enabled() -> Self {
        Self { enabled: true, pending: DashMap::new() }
    }

    /// A store that records nothing (rule 5).
    pub fn disabled() -> Self {
        Self { enabled: false, pending: DashMap::new() }
    }

    /// Whether causes are recorded.
    pub fn is_enabled(&self) -> bool {
        self.enabled
    }

    /// Records `cause()` for `key`, due at once or, for a timer, no earlier than `due`. The cause
    /// is built only when recording is on.
    pub fn record(&self, key: &ObjectKey, due: Option<Instant>, cause: impl FnOnce() -> Cause) {
        if !self.enabled {
            return;
        }
        let mut pending = self.pending.entry(key.clone()).or_default();
        // The queue fires a key's earliest timer only (rule 3): a later one is due with it.
        let earliest = pending.causes.iter().filter_map(|c| c.due).min();
        let due = due.map(|due| earliest.map_or(due, |earliest| earliest.min(due)));
        let cause = PendingCause { cause: cause(), due };
        if pending.causes.len() == KEPT_CAUSES {
            pending.causes.pop_front();
            pending.more += 1;
        }
        pending.causes.push_back(cause);
    }

    /// Takes the causes of `key` that are due at `now` (rule 3); the rest stay pending.
    pub fn take(&self, key: &ObjectKey, now: Instant) -> CauseLog {
        if !self.enabled {
            return CauseLog::default();
        }
        let Some(mut pending) = self.pending.get_mut(key) else {
            return CauseLog::default();
        };
        let mut log = CauseLog { kept: Vec::new(), more: std::mem::take(&mut pending.more) };
        let mut later = VecDeque::new();
        for cause in pending.causes.drain(..) {
            match cause.due {
                Some(due) if due > now => later.push_back(cause),
                _ => log.push(cause.cause),
            }
        }
        let empty = later.is_empty();
        pending.causes = later;
        drop(pending);
        if empty {
            self.pending.remove_if(key, |_, pending| pending.causes.is_empty() && pending.more == 0);
        }
        log
    }

    /// The causes pending for `key`, due or not, for `/debug/queue`.
    pub fn pending(&self, key: &ObjectKey) -> CauseLog {
        let Some(pending) = self.pending.get(key) else { return CauseLog::default() };
        CauseLog { kept: pending.causes.iter().map(|c| c.cause.clone()).collect(), more: pending.more }
    }

    /// Forgets `key` (its object is gone and its last pass succeeded).
    pub fn forget(&self, key: &ObjectKey) {
        self.pending.remove(key);
    }

    /// How many keys have causes pending.
    pub fn len(&self) -> usize {
        self.pending.len()
    }

    /// Whether no key has a cause pending.
    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }
}

/// The controller's way into its queue: each add records its cause first (so a worker that
/// claims the key at once takes it). Cloning gives another handle to the same queue and causes.
#[derive(Debug, Clone)]
pub struct Enqueuer {
    queue: WorkQueue<ObjectKey>,
    causes: Arc<Causes>,
}

impl Enqueuer {
    /// Adds to `queue`, recording into `causes`.
    pub fn new(queue: WorkQueue<ObjectKey>, causes: Arc<Causes>) -> Self {
        Self { queue, causes }
    }

    /// The queue.
    pub fn queue(&self) -> &WorkQueue<ObjectKey> {
        &self.queue
    }

    /// The causes.
    pub fn causes(&self) -> &Arc<Causes> {
        &self.causes
    }

    /// Queues `key` at `priority` because of `cause()`.
    pub fn add(&self, key: ObjectKey, priority: Priority, cause: impl FnOnce() -> Cause) {
        self.causes.record(&key, None, cause);
        self.queue.add_with_priority(key, priority);
    }

    /// Queues `key` at once, for `reason`: an explicit call (rule 1).
    pub fn add_explicit(&self, key: ObjectKey, reason: &str) {
        self.add(key, Priority::Normal, || Cause::Explicit(reason.into()));
    }

    /// Queues `key` after `delay`: a `RequeueAfter`.
    pub fn requeue_after(&self, key: ObjectKey, delay: Duration) {
        self.causes.record(&key, Some(Instant::now() + delay), || Cause::RequeueAfter(delay));
        self.queue.add_after(key, delay);
    }

    /// Retries `key` with its backoff, no earlier than `at_least`, after `error`. The cause is due
    /// when the (jittered) backoff can first have elapsed.
    pub fn retry(
        &self,
        key: ObjectKey,
        at_least: Duration,
        backoff: &crate::runtime::workqueue::BackoffConfig,
        error: &str,
    ) {
        let nominal = backoff.nominal_delay(self.queue.num_requeues(&key).saturating_add(1));
        let earliest = if backoff.jitter { nominal / 2 } else { nominal };
        let due = Instant::now() + earliest.max(at_least);
        self.causes.record(&key, Some(due), || Cause::Retry(error.into()));
        self.queue.add_rate_limited_after(key, at_least);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(name: &str, rv: &str) -> ObjectEvent {
        ObjectEvent {
            informer: "apps/StatefulSet".into(),
            event: EventType::Modified,
            object: ObjectKey::namespaced("default", name),
            resource_version: Some(rv.into()),
        }
    }

    fn key() -> ObjectKey {
        ObjectKey::namespaced("default", "pg")
    }

    #[test]
    fn rule4_the_trigger_is_the_first_cause_and_the_count_of_the_others() {
        let causes = Causes::enabled();
        assert_eq!(causes.take(&key(), Instant::now()).trigger().to_string(), "none recorded");
        causes.record(&key(), None, || Cause::Mapped(event("pg", "4312")));
        causes.record(&key(), None, || Cause::Watch(event("pg", "4313")));
        causes.record(&key(), None, || Cause::Explicit("test".into()));
        let log = causes.take(&key(), Instant::now());
        assert_eq!(log.trigger().to_string(), "\"StatefulSet default/pg modified rv=4312 (owned)\" (+2)");
        let single = CauseLog { kept: vec![Cause::Watch(event("pg", "7"))], more: 0 };
        assert_eq!(single.trigger().to_string(), "\"StatefulSet default/pg modified rv=7\"");
    }

    #[test]
    fn rule2_an_already_queued_key_keeps_its_last_causes_and_counts_the_rest() {
        let causes = Causes::enabled();
        for rv in 0..20 {
            causes.record(&key(), None, || Cause::Watch(event("pg", &rv.to_string())));
        }
        assert_eq!(causes.pending(&key()).total(), 20);
        let log = causes.take(&key(), Instant::now());
        assert_eq!(log.kept.len(), KEPT_CAUSES);
        assert_eq!(log.more, 20 - KEPT_CAUSES as u64);
        let first = log.kept[0].event().and_then(|e| e.resource_version.clone());
        assert_eq!(first.as_deref(), Some("12"), "the oldest kept is the 13th");
        assert!(causes.is_empty(), "a take leaves nothing behind");
    }

    #[tokio::test(start_paused = true)]
    async fn rule3_a_timer_cause_waits_for_its_timer() {
        let causes = Causes::enabled();
        causes.record(&key(), Some(Instant::now() + Duration::from_secs(30)), || {
            Cause::RequeueAfter(Duration::from_secs(30))
        });
        causes.record(&key(), None, || Cause::Watch(event("pg", "1")));
        let now = causes.take(&key(), Instant::now());
        assert_eq!(now.kept, [Cause::Watch(event("pg", "1"))]);
        assert_eq!(causes.pending(&key()).total(), 1, "the timer's cause is still pending");
        tokio::time::advance(Duration::from_secs(30)).await;
        let later = causes.take(&key(), Instant::now());
        assert_eq!(later.kept, [Cause::RequeueAfter(Duration::from_secs(30))]);
        assert!(causes.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn rule3_timer_causes_are_due_with_the_earliest_pending_timer() {
        // Passes started by watch events, each asking to run again in 10 s: the queue keeps the
        // first timer only, so the pass it starts is the answer to all of them.
        let causes = Causes::enabled();
        let requeue = || Cause::RequeueAfter(Duration::from_secs(10));
        for rv in 0..KEPT_CAUSES + 2 {
            causes.record(&key(), Some(Instant::now() + Duration::from_secs(10)), requeue);
            causes.record(&key(), None, || Cause::Watch(event("pg", &rv.to_string())));
            let watch = causes.take(&key(), Instant::now());
            assert_eq!(watch.kept.last(), Some(&Cause::Watch(event("pg", &rv.to_string()))));
            assert!(!watch.kept.contains(&requeue()), "no timer is due yet");
            tokio::time::advance(Duration::from_millis(100)).await;
        }
        // The first timer fires: its pass says why, though the first request was dropped from
        // the bounded log long ago.
        tokio::time::advance(Duration::from_secs(10) - Duration::from_millis(100) * (KEPT_CAUSES as u32 + 2))
            .await;
        let timer = causes.take(&key(), Instant::now());
        // The last requests, as many as fit beside each watch event's cause.
        assert_eq!(timer.kept, vec![requeue(); KEPT_CAUSES - 1]);
        assert_eq!(timer.trigger().to_string(), format!("\"requeue after 10s\" (+{})", KEPT_CAUSES - 2));
        assert!(causes.is_empty());
    }

    #[test]
    fn rule5_switched_off_nothing_is_built_or_kept() {
        let causes = Causes::disabled();
        causes.record(&key(), None, || unreachable!("no cause is built while recording is off"));
        assert!(causes.is_empty());
        assert_eq!(causes.take(&key(), Instant::now()).total(), 0);
    }

    #[test]
    fn causes_serialize_with_their_fields() {
        let json = serde_json::to_value(Cause::Watch(event("pg", "9"))).unwrap();
        assert_eq!(json["type"], "watch");
        assert_eq!(json["kind"], "StatefulSet");
        assert_eq!(json["namespace"], "default");
        assert_eq!(json["name"], "pg");
        assert_eq!(json["event"], "modified");
        assert_eq!(json["resource_version"], "9");
        let retry = serde_json::to_value(Cause::Retry("boom".into())).unwrap();
        assert_eq!((retry["type"].as_str(), retry["error"].as_str()), (Some("retry"), Some("boom")));
    }
}
