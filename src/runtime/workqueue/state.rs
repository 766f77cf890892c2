//! The queue's plain state, all behind its one lock: the key index, one entry per key (with the
//! key's notes), the ready lines, the processing set, the timer heap and the retry line. Nothing
//! here wakes or reports; each operation says what changed, and `queue.rs` acts on it after
//! the lock.
//!
//! The key index maps a key to its entry through entry numbers (a hashbrown `HashTable<u32>`
//! into a `Vec` of entries), so a key is stored once and the lines hold 4-byte numbers: a queued
//! key costs its 40-byte entry, about 10 bytes of index and 4 of line. An entry that tracks
//! nothing any more is removed, and its number reused.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::hash::{BuildHasher, Hash};

use hashbrown::{DefaultHashBuilder, HashTable};
use tokio::time::Instant;

use super::bucket::RetryBucket;
use super::clock::Clock;
use super::notes::KeyNotes;

/// A due time meaning "no timer".
pub(crate) const NEVER: u64 = u64::MAX;

/// How urgent an add is: keys from initial lists and resyncs are `Low`; watch events, timers
/// and explicit requeues are `Normal` (rules 10 to 12).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Priority {
    /// Served after normal keys, until it has waited too long.
    Low,
    /// The default.
    #[default]
    Normal,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Neither ready nor handed out (it may still have a timer or failures).
    Idle,
    /// In the ready line of this priority.
    Queued(Priority),
    /// Handed out; `again`: added meanwhile, back to that line when the claim is dropped.
    Processing { again: Option<Priority> },
}

/// Whether the key's pending timer is a retry (rules 4 to 6).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Retry {
    None,
    /// The pending timer is a retry: once it fires, the key waits for a token.
    Timer,
    /// Due, waiting in the retry line for a token.
    Line,
}

pub(crate) struct Entry<K, N> {
    pub(crate) key: K,
    pub(crate) notes: N,
    /// When the pending timer fires (queue nanoseconds), or [`NEVER`].
    pub(crate) due: u64,
    /// Names the key's current place in the low line; older places are stale. It wraps: a stale
    /// place that matches by chance only moves the key ahead in that line.
    ticket: u16,
    pub(crate) failures: u16,
    pub(crate) phase: Phase,
    pub(crate) retry: Retry,
}

/// What an add changed.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Added {
    /// Nothing new (perhaps moved up to the normal line).
    Duplicate,
    /// Now ready; `wake`: a parked getter is to be woken.
    Queued { wake: bool },
    /// Being processed: it runs again after its claim.
    Dirty,
}

/// What a timer round released: adds, of which newly ready keys, and getters to wake.
#[derive(Default)]
pub(crate) struct Released {
    pub(crate) added: usize,
    pub(crate) queued: usize,
    pub(crate) wakes: usize,
}

pub(crate) struct State<K, N> {
    hasher: DefaultHashBuilder,
    /// Key → entry number.
    index: HashTable<u32>,
    entries: Vec<Option<Entry<K, N>>>,
    free: Vec<u32>,
    ready: VecDeque<u32>,
    /// The low line: (entry, ticket, when it joined); stale places are skipped.
    low: VecDeque<(u32, u16, u64)>,
    low_len: usize,
    next_ticket: u16,
    low_max_wait: u64,
    /// The processing set: entry → when its claim was made (0 without metrics).
    processing: HashMap<u32, u64, DefaultHashBuilder>,
    /// When each entry was last queued; kept only by queues with metrics.
    queued_at: Option<Vec<u64>>,
    /// Pending timers, earliest first; one whose due time its entry no longer has is stale.
    timers: BinaryHeap<Reverse<(u64, u32)>>,
    retry_line: VecDeque<u32>,
    /// Getters waiting for a key that no wake-up is on its way to yet.
    parked: usize,
    /// When the timer task next samples the outstanding claims (queues with metrics).
    pub(crate) next_sample: u64,
    pub(crate) shut_down: bool,
}

impl<K: Eq + Hash, N: KeyNotes> State<K, N> {
    pub(crate) fn new(timed: bool, low_max_wait: u64) -> Self {
        Self {
            hasher: DefaultHashBuilder::default(),
            index: HashTable::new(),
            entries: Vec::new(),
            free: Vec::new(),
            ready: VecDeque::new(),
            low: VecDeque::new(),
            low_len: 0,
            next_ticket: 0,
            low_max_wait,
            processing: HashMap::default(),
            queued_at: timed.then(Vec::new),
            timers: BinaryHeap::new(),
            retry_line: VecDeque::new(),
            parked: 0,
            next_sample: 0,
            shut_down: false,
        }
    }

    pub(crate) fn entry(&self, id: u32) -> &Entry<K, N> {
        // Invariant: the index, lines, processing set and claims name live entries only (an
        // entry is removed once idle, when no line names it as current).
        self.entries[id as usize].as_ref().expect("a named entry is live")
    }

    pub(crate) fn entry_mut(&mut self, id: u32) -> &mut Entry<K, N> {
        // Invariant: as in `entry`.
        self.entries[id as usize].as_mut().expect("a named entry is live")
    }

    pub(crate) fn find(&self, key: &K) -> Option<u32> {
        let is_key = |id: &u32| self.entries[*id as usize].as_ref().is_some_and(|e| e.key == *key);
        self.index.find(self.hasher.hash_one(key), is_key).copied()
    }

    /// The entry of `key`, made if needed; `key` comes back when the entry existed.
    pub(crate) fn entry_for(&mut self, key: K) -> (u32, Option<K>) {
        if let Some(id) = self.find(&key) {
            return (id, Some(key));
        }
        let hash = self.hasher.hash_one(&key);
        let id = self.free.pop().unwrap_or_else(|| {
            self.entries.push(None);
            if let Some(times) = &mut self.queued_at {
                times.push(0);
            }
            // Invariant: fewer than 2^32 keys at once (that would take hundreds of gigabytes).
            u32::try_from(self.entries.len() - 1).expect("fewer than 2^32 keys")
        });
        let (notes, phase) = (N::default(), Phase::Idle);
        let entry = Entry { key, notes, due: NEVER, ticket: 0, failures: 0, phase, retry: Retry::None };
        self.entries[id as usize] = Some(entry);
        let (entries, hasher) = (&self.entries, &self.hasher);
        // Invariant: the index names live entries only.
        let key_of = |id: &u32| &entries[*id as usize].as_ref().expect("indexed entries are live").key;
        self.index.insert_unique(hash, id, |id| hasher.hash_one(key_of(id)));
        (id, None)
    }

    /// Removes the entry if it tracks nothing any more (its key and notes go with it).
    fn release_if_idle(&mut self, id: u32) {
        let e = self.entry(id);
        if e.phase == Phase::Idle && e.due == NEVER && e.retry == Retry::None && e.failures == 0 {
            if let Ok(found) = self.index.find_entry(self.hasher.hash_one(&e.key), |other| *other == id) {
                found.remove();
            }
            self.entries[id as usize] = None;
            self.free.push(id);
        }
    }

    /// Rules 1, 2, 10 and 12: queues the key of `id` at `priority` unless that changes nothing.
    pub(crate) fn enqueue(&mut self, id: u32, priority: Priority, now: &mut Clock) -> Added {
        let entry = self.entry_mut(id);
        match entry.phase {
            Phase::Queued(Priority::Low) if priority == Priority::Normal => {
                self.low_len -= 1; // rule 10: its low place goes stale
                self.push_ready(id, priority, now);
                Added::Duplicate
            }
            Phase::Queued(_) => Added::Duplicate,
            Phase::Processing { again: Some(was) } => {
                entry.phase = Phase::Processing { again: Some(was.max(priority)) };
                Added::Duplicate
            }
            Phase::Processing { again: None } => {
                entry.phase = Phase::Processing { again: Some(priority) };
                self.mark_queued(id, now);
                Added::Dirty
            }
            Phase::Idle => {
                self.mark_queued(id, now);
                Added::Queued { wake: self.push_ready(id, priority, now) }
            }
        }
    }

    fn mark_queued(&mut self, id: u32, now: &mut Clock) {
        if let Some(times) = &mut self.queued_at {
            times[id as usize] = now.get();
        }
    }

    /// Puts the key of `id` in the line for `priority`; true if a parked getter is to be woken.
    fn push_ready(&mut self, id: u32, priority: Priority, now: &mut Clock) -> bool {
        // Phase and ticket first: the key's older low places are stale before aged keys move.
        self.next_ticket = self.next_ticket.wrapping_add(1);
        let ticket = self.next_ticket;
        let entry = self.entry_mut(id);
        (entry.phase, entry.ticket) = (Phase::Queued(priority), ticket);
        self.promote_aged(now);
        match priority {
            Priority::Normal => self.ready.push_back(id),
            Priority::Low => {
                self.low_len += 1;
                self.low.push_back((id, ticket, now.get()));
            }
        }
        let wake = self.parked > 0;
        self.parked -= usize::from(wake);
        wake
    }

    /// A getter found nothing and waits to be woken.
    pub(crate) fn park(&mut self) {
        self.parked += 1;
    }

    fn is_current(&self, (id, ticket, _): (u32, u16, u64)) -> bool {
        let entry = self.entries[id as usize].as_ref();
        entry.is_some_and(|e| e.phase == Phase::Queued(Priority::Low) && e.ticket == ticket)
    }

    /// Rule 11: low keys that waited `low_max_wait` join the back of the normal line.
    fn promote_aged(&mut self, now: &mut Clock) {
        while let Some(&place) = self.low.front() {
            if self.is_current(place) {
                if now.get().saturating_sub(place.2) < self.low_max_wait {
                    return;
                }
                self.low_len -= 1;
                self.entry_mut(place.0).phase = Phase::Queued(Priority::Normal);
                self.ready.push_back(place.0);
            }
            self.low.pop_front();
        }
    }

    /// Hands out the next ready key, normal line first (rule 10): it becomes processing.
    pub(crate) fn pop_ready(&mut self, now: &mut Clock) -> Option<u32> {
        self.promote_aged(now);
        let id = match self.ready.pop_front() {
            Some(id) => id,
            None => loop {
                let place = self.low.pop_front()?;
                if self.is_current(place) {
                    self.low_len -= 1;
                    break place.0;
                }
            },
        };
        self.entry_mut(id).phase = Phase::Processing { again: None };
        let started_at = if self.queued_at.is_some() { now.get() } else { 0 };
        self.processing.insert(id, started_at);
        Some(id)
    }

    /// When the key of `id` was last queued (0 without metrics).
    pub(crate) fn queued_at(&self, id: u32) -> u64 {
        self.queued_at.as_ref().map_or(0, |times| times[id as usize])
    }

    /// Rule 2: the claim on `id` was dropped; the key is queued again if it was added meanwhile.
    /// Returns when the claim was made, whether it was requeued, and whether to wake a getter.
    pub(crate) fn finish(&mut self, id: u32, now: &mut Clock) -> (u64, bool, bool) {
        let started_at = self.processing.remove(&id).unwrap_or(0);
        let entry = self.entry_mut(id);
        let again = match entry.phase {
            Phase::Processing { again } => again,
            Phase::Idle | Phase::Queued(_) => None,
        };
        entry.phase = Phase::Idle;
        let Some(priority) = again else {
            self.release_if_idle(id);
            return (started_at, false, false);
        };
        (started_at, true, self.push_ready(id, priority, now))
    }

    /// Rule 3: a timer for `id` at `due` unless an earlier one is pending (or its retry is due
    /// already). True when it is now the earliest timer: the timer task must look again.
    pub(crate) fn schedule(&mut self, id: u32, due: u64) -> bool {
        let entry = self.entry_mut(id);
        if entry.retry == Retry::Line || due >= entry.due {
            return false;
        }
        entry.due = due;
        let earliest = self.next_due().is_none_or(|next| due < next);
        self.timers.push(Reverse((due, id)));
        earliest
    }

    /// Rules 4, 5 and 13: counts a failure and schedules the retry after `delay(failures)`, no
    /// earlier than `floor`; `None` (nothing counted) while a retry is pending.
    pub(crate) fn fail(
        &mut self,
        id: u32,
        now: u64,
        floor: u64,
        delay: impl FnOnce(u32) -> u64,
    ) -> Option<bool> {
        let entry = self.entry_mut(id);
        if entry.retry != Retry::None {
            return None;
        }
        entry.failures = entry.failures.saturating_add(1);
        entry.retry = Retry::Timer;
        let due = now.saturating_add(delay(u32::from(entry.failures))).max(floor).min(NEVER - 1);
        Some(self.schedule(id, due))
    }

    /// Rule 7: drops the failure count (a pending timer still fires once, as a plain one).
    pub(crate) fn forget(&mut self, id: u32) {
        let entry = self.entry_mut(id);
        entry.failures = 0;
        if entry.retry == Retry::Timer {
            entry.retry = Retry::None;
        }
        self.release_if_idle(id);
    }

    /// `forget`, and cancels the pending timer (unless its retry waits for a token already).
    pub(crate) fn settle(&mut self, id: u32) {
        let entry = self.entry_mut(id);
        if entry.due != NEVER && entry.retry != Retry::Line {
            entry.due = NEVER;
            entry.notes.timer_cancelled();
        }
        self.forget(id);
    }

    /// Fires the timers due at `now` (rule 3); due retries join the retry line, served while
    /// the bucket grants tokens (rule 6). Also returns when the bucket has the next token.
    pub(crate) fn release_due(
        &mut self,
        now: u64,
        bucket: Option<&RetryBucket>,
    ) -> (Released, Option<Instant>) {
        let mut released = Released::default();
        while let Some(&Reverse((due, id))) = self.timers.peek().filter(|Reverse((due, _))| *due <= now) {
            self.timers.pop();
            let Some(entry) = self.entries[id as usize].as_mut().filter(|e| e.due == due) else {
                continue; // stale: superseded, cancelled, or the number is another key's now
            };
            entry.due = NEVER;
            if entry.retry == Retry::Timer && bucket.is_some() {
                entry.retry = Retry::Line;
                self.retry_line.push_back(id);
            } else {
                entry.retry = Retry::None;
                self.release(id, now, &mut released);
            }
        }
        while let (Some(&id), Some(bucket)) = (self.retry_line.front(), bucket) {
            if let Err(next_token) = bucket.try_take() {
                return (released, Some(next_token));
            }
            self.retry_line.pop_front();
            self.entry_mut(id).retry = Retry::None;
            self.release(id, now, &mut released);
        }
        (released, None)
    }

    /// Rule 12: a timer adds at normal priority; the notes that waited for it are due now.
    fn release(&mut self, id: u32, now: u64, released: &mut Released) {
        self.entry_mut(id).notes.timer_fired();
        match self.enqueue(id, Priority::Normal, &mut Clock::at(now)) {
            Added::Duplicate => {}
            Added::Dirty => released.added += 1,
            Added::Queued { wake } => {
                released.added += 1;
                released.queued += 1;
                released.wakes += usize::from(wake);
            }
        }
    }

    /// The earliest pending timer (perhaps stale, which only costs an early look).
    pub(crate) fn next_due(&self) -> Option<u64> {
        self.timers.peek().map(|Reverse((due, _))| *due)
    }

    /// Ready keys, both lines.
    pub(crate) fn ready_len(&self) -> usize {
        self.ready.len() + self.low_len
    }

    /// Outstanding claims: entry → when it was made.
    pub(crate) fn processing(&self) -> &HashMap<u32, u64, DefaultHashBuilder> {
        &self.processing
    }

    /// Every tracked key's entry, with its number.
    pub(crate) fn entries(&self) -> impl Iterator<Item = (u32, &Entry<K, N>)> {
        (0u32..).zip(&self.entries).filter_map(|(id, entry)| Some((id, entry.as_ref()?)))
    }

    pub(crate) fn timer_entries(&self) -> usize {
        self.timers.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn add(state: &mut State<&'static str, ()>, key: &'static str, priority: Priority) -> u32 {
        let (id, _) = state.entry_for(key);
        state.enqueue(id, priority, &mut Clock::at(0));
        id
    }

    #[test]
    fn an_idle_entry_is_removed_and_its_number_reused_without_its_stale_low_place() {
        let mut state = State::new(false, u64::MAX);
        let a = add(&mut state, "a", Priority::Low);
        let z = add(&mut state, "z", Priority::Low);
        add(&mut state, "a", Priority::Normal); // promoted: its low place, before z's, goes stale
        assert_eq!(state.pop_ready(&mut Clock::at(0)), Some(a));
        assert_eq!(state.finish(a, &mut Clock::at(0)), (0, false, false));
        assert_eq!((state.find(&"a"), state.entries().count()), (None, 1), "nothing left of a");
        let b = add(&mut state, "b", Priority::Low);
        assert_eq!(b, a, "the number is reused");
        // a's stale place comes first in the low line, but it does not hand b out before z.
        let mut next = || state.pop_ready(&mut Clock::at(0));
        assert_eq!([next(), next(), next()], [Some(z), Some(b), None]);
    }
}
