//! Why a pass ran: every enqueue records its [`Cause`] in the key's own entry of the work queue
//! ([`CauseNotes`], the queue's per-key notes), and the worker that claims the key takes the
//! causes gathered since the previous pass.
//!
//! The rules (one test each, in this module and in `tests/causes.rs`):
//!
//! 1. Every enqueue the controller makes records a cause: a watch event of the key's own object,
//!    a watch event of another object mapped to the key (a child to its owner), a list (the
//!    initial list, a relist), the replay of the caches when a replica became leader, a
//!    `RequeueAfter`, a retry (with the error), or an explicit call ([`Enqueuer::add_explicit`]).
//! 2. A key that is already queued accumulates its causes: the first [`KEPT_CAUSES`] are kept,
//!    and the ones after them are counted ([`CauseLog::more`]); nothing is lost silently. The
//!    first ones are the ones kept because the first is what queued the key (the pass's
//!    trigger); the rest were folded into it by the dedup, and a burst of them costs a count
//!    each (their causes are never built).
//! 3. A pass takes the causes recorded up to the moment its worker claimed the key; a cause
//!    recorded later belongs to the next pass. A timer's cause (a `RequeueAfter`, a retry) waits
//!    for the key's timer to fire: a watch event's pass before that does not take it. The queue
//!    keeps only a key's earliest timer, so a timer cause recorded while an earlier one is
//!    pending is due with it: the pass that timer starts takes them all.
//! 4. The trigger of a pass is its oldest kept cause and the count of the others
//!    ([`CauseLog::trigger`]): `"StatefulSet default/pg modified rv=4312" (+2)`.
//! 5. Switched off ([`Enqueuer::new`] with `record` false), recording costs a branch: no cause
//!    is built, nothing is stored, and passes have no trigger.
//!
//! The causes live in the queue's entry for the key, so recording one costs no second hash, map
//! or lock: it is written under the lock the add takes anyway, and the queue drops it with the
//! entry.
//! A cause is built under that lock only while the key's log has room (one that is not built is
//! dropped after the lock, since it holds a shared key), and the first one of a pass is held
//! inline in the entry ([`KeptCauses`]): a pass with a single cause (the usual case) allocates
//! nothing to record it or to hand it to its worker. The `work-queue` benchmarks measure the
//! enqueue with causes on beside off.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::runtime::ObjectKey;
use crate::runtime::controller::writes::KindName;
use crate::runtime::workqueue::{KeyNotes, NoteKey, Priority, When, WorkQueue};
use serde::Serialize;
use serde::ser::SerializeStruct;
use smallvec::SmallVec;

/// How many causes a key keeps per pass; later ones are only counted.
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

/// One informer event, as a cause names it. Cheap to build, move and drop, since every add of
/// the controller builds one and the queue moves it to the claim: the kind name is an interned
/// pointer, a numeric resourceVersion is held inline, and the object key shares its text with
/// the caller's (56 bytes in all).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectEvent {
    /// The informer's kind, `group/Kind` (`Kind` for the core group), interned.
    pub informer: KindName,
    /// Added, modified or deleted.
    pub event: EventType,
    /// The object the event is about.
    pub object: ObjectKey,
    /// Its resourceVersion in the event, if it had one.
    pub resource_version: Option<ResourceVersion>,
}

/// A resourceVersion as an event carried it: opaque text, held inline when it is the decimal
/// number the API server usually sends (no allocation per cause), shown exactly as received.
/// Two words, and an `Option` of it too (the text's pointer is thin).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResourceVersion {
    /// A canonical decimal (no sign, no leading zero) that fits 64 bits.
    Number(u64),
    /// Anything else, as received.
    Text(Arc<String>),
}

impl From<&str> for ResourceVersion {
    fn from(text: &str) -> Self {
        let canonical = !text.is_empty()
            && text.bytes().all(|b| b.is_ascii_digit())
            && (text.len() == 1 || !text.starts_with('0'));
        match text.parse() {
            Ok(number) if canonical => Self::Number(number),
            _ => Self::Text(Arc::new(text.to_owned())),
        }
    }
}

/// Serialized as the text it was received as.
impl Serialize for ResourceVersion {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl fmt::Display for ResourceVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Number(number) => write!(f, "{number}"),
            Self::Text(text) => f.write_str(text),
        }
    }
}

impl ObjectEvent {
    /// The kind without its group: `StatefulSet`.
    pub fn kind(&self) -> &str {
        let informer = self.informer.as_str();
        informer.rsplit_once('/').map_or(informer, |(_, kind)| kind)
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
            s.serialize_field("informer", event.informer.as_str())?;
            s.serialize_field("event", &event.event)?;
            s.serialize_field("kind", event.kind())?;
            s.serialize_field("namespace", &event.object.namespace())?;
            s.serialize_field("name", event.object.name())?;
            s.serialize_field("resource_version", &event.resource_version.as_ref().map(ToString::to_string))?;
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

/// Kept causes, oldest first: the first one inline (most passes have one cause, so recording
/// and handing it over allocates nothing), more on the heap.
pub type KeptCauses = SmallVec<[Cause; 1]>;

/// The causes of one pass (or the ones pending for the next): the first [`KEPT_CAUSES`], oldest
/// first, and how many came after them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CauseLog {
    /// The kept causes, oldest first.
    #[serde(serialize_with = "serialize_causes")]
    pub kept: KeptCauses,
    /// Causes dropped before the kept ones.
    pub more: u64,
}

/// Kept causes serialize as a list.
fn serialize_causes<S: serde::Serializer>(kept: &KeptCauses, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.collect_seq(kept.iter())
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

/// The causes of one line (due now, or waiting for the key's timer): the first [`KEPT_CAUSES`]
/// and a count of the ones after them.
#[derive(Debug, Default)]
struct Bounded {
    kept: KeptCauses,
    more: u64,
}

impl Bounded {
    /// Whether one more cause is kept; if not, it is counted among the rest.
    #[inline]
    fn make_room(&mut self) -> bool {
        if self.kept.len() == KEPT_CAUSES {
            self.more += 1;
            return false;
        }
        if self.kept.len() == 1 {
            // The first spill to the heap takes room for all the others at once: one
            // allocation under the queue's lock, not one per doubling.
            self.kept.reserve_exact(KEPT_CAUSES - 1);
        }
        true
    }

    /// Appends `later`'s causes after these (and its count of the ones not kept), still bounded.
    fn append(&mut self, later: Bounded) {
        self.more += later.more;
        for cause in later.kept {
            if self.make_room() {
                self.kept.push(cause);
            }
        }
    }

    fn log(&self) -> impl Iterator<Item = &Cause> {
        self.kept.iter()
    }
}

/// Where a recorded cause waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Due {
    /// For the key's next pass.
    Now,
    /// For the pass the key's timer starts (the queue keeps a key's earliest timer only, so a
    /// cause recorded while an earlier timer is pending is due with that one).
    OnTimer,
}

/// A key's pending causes, kept by the controller's queue in the key's own entry
/// ([`KeyNotes`]): recorded by the add under the lock it takes anyway, handed to the claim
/// when a worker takes the key, dropped with the entry. The due line lives in the entry (its first
/// cause inline, the others from the second on in a buffer of their own, both handed to the
/// claim); only causes that wait for a timer take a box of their own. With recording off,
/// nothing is ever allocated.
#[derive(Debug, Default)]
pub struct CauseNotes {
    /// Due at the key's next pass.
    due: Bounded,
    /// Due when the key's timer fires (a `RequeueAfter`, a retry).
    on_timer: Option<Box<Bounded>>,
}

impl CauseNotes {
    /// Records `cause(key)`, due at the next pass or with the key's timer; once the line holds
    /// [`KEPT_CAUSES`], a cause is only counted and never built (`cause` then comes back, to be
    /// dropped outside the queue's lock). `key` is the queue's: a cause that names the key's own
    /// object takes it ([`NoteKey::into_owned`]: the adder's copy the queue did not need, or a
    /// clone) instead of the adder cloning its own first (a shared key's clone and drop write its
    /// count).
    #[must_use = "an unbuilt cause is handed back to be dropped outside the queue's lock"]
    #[inline]
    pub fn record<F: FnOnce(NoteKey<'_, ObjectKey>) -> Cause>(
        &mut self,
        key: NoteKey<'_, ObjectKey>,
        cause: F,
        due: Due,
    ) -> Option<F> {
        let line = match due {
            Due::Now => &mut self.due,
            Due::OnTimer => &mut **self.on_timer.get_or_insert_with(Box::default),
        };
        if !line.make_room() {
            return Some(cause);
        }
        line.kept.push(cause(key));
        None
    }

    /// Puts a pass's causes back to wait for the key's timer, before any cause already waiting
    /// there (a held-back pass that is queued again: its causes are still unanswered).
    pub fn restore(&mut self, log: CauseLog) {
        if log.total() == 0 {
            return;
        }
        let mut restored = Bounded { kept: log.kept, more: log.more };
        if let Some(waiting) = self.on_timer.take() {
            restored.append(*waiting);
        }
        self.on_timer = Some(Box::new(restored));
    }

    /// Every pending cause, due or waiting for the timer, for `/debug/queue`.
    pub fn pending(&self) -> CauseLog {
        let waiting = self.on_timer.as_deref();
        CauseLog {
            kept: self.due.log().chain(waiting.into_iter().flat_map(Bounded::log)).cloned().collect(),
            more: self.due.more + waiting.map_or(0, |w| w.more),
        }
    }
}

impl KeyNotes for CauseNotes {
    type Taken = CauseLog;

    /// The causes that waited for the timer join the due ones (after them: in the order they
    /// became due).
    fn timer_fired(&mut self) {
        if let Some(fired) = self.on_timer.take() {
            self.due.append(*fired);
        }
    }

    /// The timer's causes go with it: the pass that settled the key ran after them.
    fn timer_cancelled(&mut self) {
        self.on_timer = None;
    }

    /// Rule 3: a pass takes what is due when its worker claims the key; what waits for the
    /// timer stays.
    fn take(&mut self) -> CauseLog {
        CauseLog { kept: std::mem::take(&mut self.due.kept), more: std::mem::take(&mut self.due.more) }
    }
}

/// The controller's work queue: keys with their pending causes.
pub type ControllerQueue = WorkQueue<ObjectKey, CauseNotes>;

/// The controller's way into its queue: each add records its cause in the key's entry (built
/// before the lock is taken, and only when recording is on). Cloning gives another handle to
/// the same queue.
#[derive(Debug, Clone)]
pub struct Enqueuer {
    queue: ControllerQueue,
    record: bool,
}

impl Enqueuer {
    /// Adds to `queue`, recording causes when `record` is true (rule 5: off, no cause is built
    /// and nothing is stored).
    pub fn new(queue: ControllerQueue, record: bool) -> Self {
        Self { queue, record }
    }

    /// The queue.
    pub fn queue(&self) -> &ControllerQueue {
        &self.queue
    }

    /// Whether causes are recorded.
    pub fn records(&self) -> bool {
        self.record
    }

    /// Queues `key` at `priority` because of `cause(key)`: the cause is built only when it is
    /// kept, and a cause about the key's own object keeps the key it is given
    /// ([`NoteKey::into_owned`]), which costs no clone when the queue already had the key.
    pub fn add(
        &self,
        key: ObjectKey,
        priority: Priority,
        cause: impl FnOnce(NoteKey<'_, ObjectKey>) -> Cause,
    ) {
        if !self.record {
            return self.queue.add_with_priority(key, priority);
        }
        self.queue.add_with_note(key, When::Now(priority), |key, notes| notes.record(key, cause, Due::Now));
    }

    /// Queues `key` at once, for `reason`: an explicit call (rule 1).
    pub fn add_explicit(&self, key: ObjectKey, reason: &str) {
        self.add(key, Priority::Normal, |_| Cause::Explicit(reason.into()));
    }

    /// Queues `key` after `delay`: a `RequeueAfter`, due with the key's timer.
    pub fn requeue_after(&self, key: ObjectKey, delay: Duration) {
        if !self.record {
            return self.queue.add_after(key, delay);
        }
        let due = if delay.is_zero() { Due::Now } else { Due::OnTimer };
        self.queue.add_with_note(key, When::After(delay), |key, notes| {
            notes.record(key, |_| Cause::RequeueAfter(delay), due)
        });
    }

    /// Puts a claimed key back for `delay` without running it, its causes still pending (they
    /// are due with the timer).
    pub fn hold_back(&self, key: ObjectKey, delay: Duration, causes: CauseLog) {
        self.queue.add_with_note(key, When::After(delay), |_, notes| notes.restore(causes));
    }

    /// Retries `key` with its backoff, no earlier than `at_least`, after `error`: the cause is
    /// due with the retry's timer.
    pub fn retry(&self, key: ObjectKey, at_least: Duration, error: &str) {
        if !self.record {
            return self.queue.add_rate_limited_after(key, at_least);
        }
        let cause = |_: NoteKey<'_, ObjectKey>| Cause::Retry(error.into());
        self.queue
            .add_with_note(key, When::Retry(at_least), |key, notes| notes.record(key, cause, Due::OnTimer));
    }
}

/// The causes pending for `key` in `queue`, due or not, for `/debug/queue`.
pub fn pending(queue: &ControllerQueue, key: &ObjectKey) -> CauseLog {
    queue.notes_of(key, CauseNotes::pending).unwrap_or_default()
}

#[cfg(test)]
mod tests;
