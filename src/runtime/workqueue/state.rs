//! The queue's plain state, all behind the queue's one lock: the key index, one entry per key
//! (with the key's notes), the ready lines, the processing set, the timer heap and the retry
//! line. Nothing here wakes or reports: each operation says what it changed, and the handle
//! (`queue.rs`) wakes getters and reports metrics after the lock is released.
//!
//! The key index maps a key to its entry as a table of entry numbers into a `Vec` of entries
//! (hashbrown's `HashTable`): each key is stored once, and a ready line holds 4-byte numbers.
//! A queued key costs its 40-byte entry (beside a 24-byte key), about 10 bytes of index and
//! 4 of line, where a `HashMap<K, Entry>` and a line of keys would cost twice that. An entry
//! that no longer tracks anything is removed and its number reused.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::hash::{BuildHasher, Hash};

use hashbrown::{DefaultHashBuilder, HashTable};
use tokio::time::Instant;

use super::bucket::RetryBucket;
use super::delay::Clock;
use super::notes::KeyNotes;

/// A due time meaning "no timer".
pub(crate) const NEVER: u64 = u64::MAX;

/// How urgent an add is. Keys from the initial list and from resyncs are `Low`; keys from live
/// watch events, timers and explicit requeues are `Normal` (rules 10 to 12).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Priority {
    /// Background work: served after normal keys, until it has waited too long.
    Low,
    /// The default.
    #[default]
    Normal,
}

/// Where a key stands between its adds and its claims.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Neither ready nor handed out (it may still wait for a timer or keep failures).
    Idle,
    /// In the ready line of this priority.
    Queued(Priority),
    /// Handed out to a worker; `again`: added meanwhile, back to that line after the claim.
    Processing { again: Option<Priority> },
}

/// Whether the key's pending timer is a retry (rules 4 to 6).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Retry {
    None,
    /// The pending timer is a retry: when it fires, the retry waits for a token.
    Timer,
    /// The retry is due and waits in the retry line for a token.
    Line,
}

/// Everything the queue keeps for one key.
pub(crate) struct Entry<K, N> {
    pub(crate) key: K,
    pub(crate) notes: N,
    /// When the pending timer fires (queue nanoseconds), or [`NEVER`].
    pub(crate) due: u64,
    /// Names the key's current place in the low line (older places of the key are stale).
    /// Wrapping: a stale place that matches by chance only moves the key ahead in that line.
    low_ticket: u16,
    /// Failures since the last `forget`, saturating.
    pub(crate) failures: u16,
    pub(crate) phase: Phase,
    pub(crate) retry: Retry,
}

impl<K, N> Entry<K, N> {
    fn is_idle(&self) -> bool {
        self.phase == Phase::Idle && self.due == NEVER && self.retry == Retry::None && self.failures == 0
    }
}

/// The key of entry `id`, for the index to rehash.
fn key_of<K, N>(entries: &[Option<Entry<K, N>>], id: u32) -> &K {
    // Invariant: the index names live entries only (see `State::entry`).
    &entries[id as usize].as_ref().expect("an indexed entry is live").key
}

/// A place in the low line.
struct LowPlace {
    id: u32,
    ticket: u16,
    /// When the key joined the line (queue nanoseconds).
    since: u64,
}

/// What an add changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Added {
    /// Already queued or already due to run again (perhaps moved up to the normal line).
    Duplicate,
    /// Now in a ready line; `wake`: a parked getter must be woken.
    Queued { wake: bool },
    /// Being processed: it runs again after its claim.
    Dirty,
}

/// What dropping a claim changed.
pub(crate) struct Finished {
    /// When the claim was made (queues with metrics).
    pub(crate) started_at: u64,
    /// The key was added meanwhile and is ready again.
    pub(crate) requeued: bool,
    /// A parked getter must be woken.
    pub(crate) wake: bool,
}

/// What a timer round released.
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
    /// The entries; `None` for numbers in `free`.
    entries: Vec<Option<Entry<K, N>>>,
    free: Vec<u32>,
    /// The normal ready line.
    ready: VecDeque<u32>,
    /// The low ready line, stale places included; `low_len` counts the current ones.
    low: VecDeque<LowPlace>,
    low_len: usize,
    next_ticket: u16,
    /// Nanoseconds a low key waits at most before it joins the normal line (rule 11).
    low_max_wait: u64,
    /// The processing set: entry number → when its claim was made (0 without metrics).
    processing: HashMap<u32, u64, DefaultHashBuilder>,
    /// When each entry was last queued, for queues with metrics (empty otherwise).
    queued_at: Vec<u64>,
    timed: bool,
    /// Pending timers, earliest first; an entry whose due time no longer matches is stale.
    timers: BinaryHeap<Reverse<(u64, u32)>>,
    /// Due retries waiting for a token of the retry bucket, first in first out (rule 6).
    retry_line: VecDeque<u32>,
    /// Getters waiting for a key that no wake-up is on its way to yet.
    parked: usize,
    /// When the timer task next samples the outstanding claims (queues with metrics).
    pub(crate) next_sample: u64,
    pub(crate) shut_down: bool,
}

impl<K: Eq + Hash + Clone, N: KeyNotes> State<K, N> {
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
            queued_at: Vec::new(),
            timed,
            timers: BinaryHeap::new(),
            retry_line: VecDeque::new(),
            parked: 0,
            next_sample: 0,
            shut_down: false,
        }
    }

    pub(crate) fn entry(&self, id: u32) -> &Entry<K, N> {
        // Invariant: the index, the lines, the processing set and claims only name live entries
        // (an entry is removed only once it is idle, and then no line names it as current).
        self.entries[id as usize].as_ref().expect("a named entry is live")
    }

    pub(crate) fn entry_mut(&mut self, id: u32) -> &mut Entry<K, N> {
        // Invariant: as in `entry`.
        self.entries[id as usize].as_mut().expect("a named entry is live")
    }

    /// The entry number of `key`, if the queue tracks it.
    pub(crate) fn find(&self, key: &K) -> Option<u32> {
        let entries = &self.entries;
        let is_key = |id: &u32| entries[*id as usize].as_ref().is_some_and(|entry| entry.key == *key);
        self.index.find(self.hasher.hash_one(key), is_key).copied()
    }

    /// The entry of `key`, made if needed; `key` comes back when the entry existed already.
    pub(crate) fn entry_for(&mut self, key: K) -> (u32, Option<K>) {
        if let Some(id) = self.find(&key) {
            return (id, Some(key));
        }
        let hash = self.hasher.hash_one(&key);
        let entry = Entry {
            key,
            notes: N::default(),
            due: NEVER,
            low_ticket: 0,
            failures: 0,
            phase: Phase::Idle,
            retry: Retry::None,
        };
        let id = match self.free.pop() {
            Some(id) => id,
            None => {
                // Invariant: fewer than 2^32 keys at once (that would take hundreds of GB).
                let id = u32::try_from(self.entries.len()).expect("fewer than 2^32 keys");
                self.entries.push(None);
                if self.timed {
                    self.queued_at.push(0);
                }
                id
            }
        };
        self.entries[id as usize] = Some(entry);
        let (entries, hasher) = (&self.entries, &self.hasher);
        self.index.insert_unique(hash, id, |id| hasher.hash_one(key_of(entries, *id)));
        (id, None)
    }

    /// Removes the entry if it no longer tracks anything (its key and notes go with it).
    fn release_if_idle(&mut self, id: u32) {
        let entry = self.entry(id);
        if !entry.is_idle() {
            return;
        }
        let hash = self.hasher.hash_one(&entry.key);
        if let Ok(found) = self.index.find_entry(hash, |other| *other == id) {
            found.remove();
        }
        self.entries[id as usize] = None;
        self.free.push(id);
    }

    /// Rules 1, 2, 10 and 12: queues the key of `id` at `priority` unless that changes nothing.
    pub(crate) fn enqueue(&mut self, id: u32, priority: Priority, now: &mut Clock) -> Added {
        let entry = self.entry_mut(id);
        match entry.phase {
            Phase::Idle => {}
            Phase::Queued(Priority::Low) if priority == Priority::Normal => {
                // Rule 10: to the back of the normal line; its low place goes stale.
                self.low_len -= 1;
                self.push_ready(id, Priority::Normal, now);
                return Added::Duplicate;
            }
            Phase::Queued(_) => return Added::Duplicate,
            Phase::Processing { again: Some(was) } => {
                entry.phase = Phase::Processing { again: Some(was.max(priority)) };
                return Added::Duplicate;
            }
            Phase::Processing { again: None } => {
                entry.phase = Phase::Processing { again: Some(priority) };
                self.mark_queued(id, now);
                return Added::Dirty;
            }
        }
        self.mark_queued(id, now);
        Added::Queued { wake: self.push_ready(id, priority, now) }
    }

    fn mark_queued(&mut self, id: u32, now: &mut Clock) {
        if self.timed {
            self.queued_at[id as usize] = now.get();
        }
    }

    /// Puts the key of `id` in the line for `priority`; true if a parked getter must be woken.
    fn push_ready(&mut self, id: u32, priority: Priority, now: &mut Clock) -> bool {
        // The phase and ticket first: any older low place of the key is stale from here on, so
        // moving aged keys below cannot move this one too.
        self.next_ticket = self.next_ticket.wrapping_add(1);
        let ticket = self.next_ticket;
        let entry = self.entry_mut(id);
        entry.phase = Phase::Queued(priority);
        entry.low_ticket = ticket;
        if !self.low.is_empty() {
            self.promote_aged(now);
        }
        match priority {
            Priority::Normal => self.ready.push_back(id),
            Priority::Low => {
                self.low_len += 1;
                self.low.push_back(LowPlace { id, ticket, since: now.get() });
            }
        }
        self.take_parked()
    }

    /// Counts one parked getter as woken, if any is parked.
    fn take_parked(&mut self) -> bool {
        let wake = self.parked > 0;
        self.parked -= usize::from(wake);
        wake
    }

    /// A getter found nothing and waits to be woken.
    pub(crate) fn park(&mut self) {
        self.parked += 1;
    }

    fn is_current(&self, place: &LowPlace) -> bool {
        self.entries[place.id as usize].as_ref().is_some_and(|entry| {
            entry.phase == Phase::Queued(Priority::Low) && entry.low_ticket == place.ticket
        })
    }

    /// Rule 11: low keys that waited `low_max_wait` join the back of the normal line.
    fn promote_aged(&mut self, now: &mut Clock) {
        let now = now.get();
        while let Some(place) = self.low.front() {
            if self.is_current(place) {
                if now.saturating_sub(place.since) < self.low_max_wait {
                    return;
                }
                let id = place.id;
                self.low_len -= 1;
                self.entry_mut(id).phase = Phase::Queued(Priority::Normal);
                self.ready.push_back(id);
            }
            self.low.pop_front();
        }
    }

    /// Hands out the next ready key (the normal line first, rule 10): it becomes processing.
    pub(crate) fn pop_ready(&mut self, now: &mut Clock) -> Option<u32> {
        if !self.low.is_empty() {
            self.promote_aged(now);
        }
        let id = match self.ready.pop_front() {
            Some(id) => id,
            None => loop {
                let place = self.low.pop_front()?;
                if self.is_current(&place) {
                    self.low_len -= 1;
                    break place.id;
                }
            },
        };
        self.entry_mut(id).phase = Phase::Processing { again: None };
        let started_at = if self.timed { now.get() } else { 0 };
        self.processing.insert(id, started_at);
        Some(id)
    }

    /// When the key of `id` was last queued (0 without metrics).
    pub(crate) fn queued_at(&self, id: u32) -> u64 {
        self.queued_at.get(id as usize).copied().unwrap_or(0)
    }

    /// The claim on `id` was dropped (rule 2): the key is queued again if it was added meanwhile.
    pub(crate) fn finish(&mut self, id: u32, now: &mut Clock) -> Finished {
        let started_at = self.processing.remove(&id).unwrap_or(0);
        let entry = self.entry_mut(id);
        let again = match entry.phase {
            Phase::Processing { again } => again,
            Phase::Idle | Phase::Queued(_) => None,
        };
        entry.phase = Phase::Idle;
        let wake = match again {
            Some(priority) => self.push_ready(id, priority, now),
            None => {
                self.release_if_idle(id);
                false
            }
        };
        Finished { started_at, requeued: again.is_some(), wake }
    }

    /// Rule 3: a timer for `id` at `due` unless an earlier one is pending (or its retry is due
    /// already). True when it is the earliest timer (the timer task must look again).
    pub(crate) fn schedule(&mut self, id: u32, due: u64) -> bool {
        let entry = self.entry_mut(id);
        if entry.retry == Retry::Line || due >= entry.due {
            return false;
        }
        entry.due = due;
        let earliest = self.timers.peek().is_none_or(|Reverse((next, _))| due < *next);
        self.timers.push(Reverse((due, id)));
        earliest
    }

    /// Rules 4, 5 and 13: counts a failure and schedules the retry after `delay_for(failures)`,
    /// no earlier than `floor`; `None` (nothing counted) while a retry is still pending.
    pub(crate) fn fail(&mut self, id: u32, now: u64, floor: u64, delay_for: impl FnOnce(u32) -> u64) -> Option<bool> {
        let entry = self.entry_mut(id);
        if entry.retry != Retry::None {
            return None;
        }
        entry.failures = entry.failures.saturating_add(1);
        entry.retry = Retry::Timer;
        let due = now.saturating_add(delay_for(u32::from(entry.failures))).max(floor).min(NEVER - 1);
        Some(self.schedule(id, due))
    }

    /// Rule 7: drops the failure count (a pending timer still fires once, as a plain timer).
    pub(crate) fn forget(&mut self, id: u32) {
        let entry = self.entry_mut(id);
        entry.failures = 0;
        if entry.retry == Retry::Timer {
            entry.retry = Retry::None;
        }
        self.release_if_idle(id);
    }

    /// `forget`, and cancels the pending timer (unless its retry is in the retry line already)
    /// with the notes that waited for it.
    pub(crate) fn settle(&mut self, id: u32) {
        let entry = self.entry_mut(id);
        if entry.due != NEVER && entry.retry != Retry::Line {
            entry.due = NEVER;
            entry.notes.timer_cancelled();
        }
        self.forget(id);
    }

    /// Fires the timers due at `now`: plain ones add their key, retries join the retry line,
    /// which is served while the bucket grants tokens. Also returns when the next token comes.
    pub(crate) fn release_due(&mut self, now: u64, bucket: Option<&RetryBucket>) -> (Released, Option<Instant>) {
        let mut released = Released::default();
        let mut clock = Clock::at(now);
        while let Some(&Reverse((due, id))) = self.timers.peek() {
            if due > now {
                break;
            }
            self.timers.pop();
            let Some(entry) = self.entries[id as usize].as_mut().filter(|entry| entry.due == due) else {
                continue; // stale: superseded by an earlier timer, cancelled, or another key's now
            };
            entry.due = NEVER;
            if entry.retry == Retry::Timer && bucket.is_some() {
                entry.retry = Retry::Line;
                self.retry_line.push_back(id);
            } else {
                entry.retry = Retry::None;
                self.release(id, &mut clock, &mut released);
            }
        }
        let mut next_token = None;
        while let (Some(&id), Some(bucket)) = (self.retry_line.front(), bucket) {
            if let Err(at) = bucket.try_take() {
                next_token = Some(at);
                break;
            }
            self.retry_line.pop_front();
            self.entry_mut(id).retry = Retry::None;
            self.release(id, &mut clock, &mut released);
        }
        (released, next_token)
    }

    /// Rule 12: a timer's add is a requeue at normal priority; the notes that waited for the
    /// timer are due from now on.
    fn release(&mut self, id: u32, now: &mut Clock, released: &mut Released) {
        self.entry_mut(id).notes.timer_fired();
        match self.enqueue(id, Priority::Normal, now) {
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

    /// Outstanding claims with when each was made.
    pub(crate) fn processing(&self) -> &HashMap<u32, u64, DefaultHashBuilder> {
        &self.processing
    }

    /// Every tracked key's entry with its number.
    pub(crate) fn entries(&self) -> impl Iterator<Item = (u32, &Entry<K, N>)> {
        (0u32..).zip(&self.entries).filter_map(|(id, entry)| Some((id, entry.as_ref()?)))
    }

    pub(crate) fn tracked(&self) -> usize {
        self.entries.len() - self.free.len()
    }

    /// Timer heap entries, stale ones included.
    pub(crate) fn timer_entries(&self) -> usize {
        self.timers.len()
    }
}
