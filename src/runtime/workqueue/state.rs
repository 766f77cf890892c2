//! The queue's plain state behind its one lock, every rule's bookkeeping, and its clock. Nothing
//! here wakes or reports: operations leave [`Effects`] for `queue.rs` to act on after the lock.
//! A key is stored once, in its entry, found through a hash table of 4-byte entry numbers; the
//! lines, processing set and timers hold numbers. An idle entry is removed, its number reused.

use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::{cmp::Reverse, hash::BuildHasher, hash::Hash, time::Duration};

use hashbrown::{DefaultHashBuilder, HashTable};
use tokio::time::Instant;

use super::config::RetryBucket;
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

/// `Idle`: neither ready nor handed out (it may have a timer or failures). `again`: added while
/// processing, back to that line when the claim is dropped.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    Idle,
    Queued(Priority),
    Processing { again: Option<Priority> },
}

/// Whether the pending timer is a retry (`Timer`), or the retry is due and waits for a token.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Retry {
    None,
    Timer,
    Line,
}

pub(crate) struct Entry<K, N> {
    pub(crate) key: K,
    pub(crate) notes: N,
    pub(crate) due: u64, // when the pending timer fires, or `NEVER`
    ticket: u16,         // its current low place (wrapping: a stale match only moves a key up)
    pub(crate) failures: u16,
    pub(crate) phase: Phase,
    pub(crate) retry: Retry,
}

/// What one hold of the lock leaves to do: getters to wake, the timer task to poke, and metrics.
#[derive(Default)]
pub(crate) struct Effects {
    pub(crate) wakes: usize,
    pub(crate) added: usize,
    pub(crate) depth: i64,
    pub(crate) retried: bool,
    pub(crate) timed: bool, // a timer was asked for: the timer task must run
    pub(crate) poke: bool,  // the earliest timer: the task must look again
}

pub(crate) struct State<K, N> {
    hasher: DefaultHashBuilder,
    index: HashTable<u32>, // key → entry number
    entries: Vec<Option<Entry<K, N>>>,
    free: Vec<u32>,
    ready: VecDeque<u32>,
    low: VecDeque<(u32, u16, u64)>, // (entry, ticket, when it joined); older tickets are stale
    pub(crate) queued: usize,       // ready keys, both lines
    next_ticket: u16,
    low_max_wait: u64,
    pub(crate) processing: HashMap<u32, u64, DefaultHashBuilder>, // claims: entry → since (metrics)
    queued_at: Option<Vec<u64>>, // when each entry was last queued (metrics only)
    pub(crate) timers: BinaryHeap<Reverse<(u64, u32)>>, // stale when its entry's `due` differs
    retry_line: VecDeque<u32>,
    bucket: Option<RetryBucket>,
    pub(crate) parked: usize, // getters waiting with no wake-up on its way to them yet
    pub(crate) effects: Effects,
    pub(crate) shut_down: bool,
}

impl<K: Eq + Hash, N: KeyNotes> State<K, N> {
    pub(crate) fn new(timed: bool, low_max_wait: u64, bucket: Option<RetryBucket>) -> Self {
        Self {
            hasher: DefaultHashBuilder::default(),
            index: HashTable::new(),
            entries: Vec::new(),
            free: Vec::new(),
            ready: VecDeque::new(),
            low: VecDeque::new(),
            queued: 0,
            next_ticket: 0,
            low_max_wait,
            processing: HashMap::default(),
            queued_at: timed.then(Vec::new),
            timers: BinaryHeap::new(),
            retry_line: VecDeque::new(),
            bucket,
            parked: 0,
            effects: Effects::default(),
            shut_down: false,
        }
    }

    // Invariant (the `expect`s below): the index, lines, processing set and claims name live
    // entries only, and fewer than 2^32 keys are tracked at once (hundreds of gigabytes).
    pub(crate) fn entry(&self, id: u32) -> &Entry<K, N> {
        self.entries[id as usize].as_ref().expect("a named entry is live")
    }

    pub(crate) fn entry_mut(&mut self, id: u32) -> &mut Entry<K, N> {
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
            u32::try_from(self.entries.len() - 1).expect("fewer than 2^32 keys")
        });
        let (notes, phase) = (N::default(), Phase::Idle);
        let entry = Entry { key, notes, due: NEVER, ticket: 0, failures: 0, phase, retry: Retry::None };
        self.entries[id as usize] = Some(entry);
        let (entries, hasher) = (&self.entries, &self.hasher);
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
    pub(crate) fn enqueue(&mut self, id: u32, priority: Priority, now: &mut Clock) {
        let entry = self.entry_mut(id);
        let dirty = match entry.phase {
            Phase::Queued(was) => {
                if was < priority {
                    self.queued -= 1; // its low place goes stale; `push_ready` counts it again
                    self.effects.depth -= 1;
                    self.push_ready(id, priority, now);
                }
                return;
            }
            Phase::Processing { again: Some(was) } => {
                entry.phase = Phase::Processing { again: Some(was.max(priority)) };
                return;
            }
            Phase::Processing { again: None } => {
                entry.phase = Phase::Processing { again: Some(priority) };
                true
            }
            Phase::Idle => false,
        };
        self.effects.added += 1;
        if let Some(times) = &mut self.queued_at {
            times[id as usize] = now.get();
        }
        if !dirty {
            self.push_ready(id, priority, now);
        }
    }

    /// Puts the key of `id` at the back of the line for `priority`; wakes a parked getter.
    fn push_ready(&mut self, id: u32, priority: Priority, now: &mut Clock) {
        // Phase and ticket first: the key's older low places are stale before aged keys move.
        self.next_ticket = self.next_ticket.wrapping_add(1);
        let ticket = self.next_ticket;
        let entry = self.entry_mut(id);
        (entry.phase, entry.ticket) = (Phase::Queued(priority), ticket);
        self.promote_aged(now);
        match priority {
            Priority::Normal => self.ready.push_back(id),
            Priority::Low => self.low.push_back((id, ticket, now.get())),
        }
        self.queued += 1;
        self.effects.depth += 1;
        if self.parked > 0 {
            self.parked -= 1;
            self.effects.wakes += 1;
        }
    }

    /// Rule 11: low keys that waited `low_max_wait` join the normal line; leaves the first low
    /// place current.
    fn promote_aged(&mut self, now: &mut Clock) {
        while let Some(&(id, ticket, joined)) = self.low.front() {
            let entry = self.entries[id as usize].as_mut();
            if let Some(e) = entry.filter(|e| e.phase == Phase::Queued(Priority::Low) && e.ticket == ticket) {
                if now.get().saturating_sub(joined) < self.low_max_wait {
                    return;
                }
                e.phase = Phase::Queued(Priority::Normal);
                self.ready.push_back(id);
            }
            self.low.pop_front();
        }
    }

    /// Hands out the next ready key, normal line first (rule 10): it becomes processing.
    pub(crate) fn pop_ready(&mut self, now: &mut Clock) -> Option<u32> {
        self.promote_aged(now);
        let id = self.ready.pop_front().or_else(|| Some(self.low.pop_front()?.0))?;
        self.queued -= 1;
        self.entry_mut(id).phase = Phase::Processing { again: None };
        let started_at = if self.queued_at.is_some() { now.get() } else { 0 };
        self.processing.insert(id, started_at);
        Some(id)
    }

    /// When the key of `id` was last queued (0 without metrics).
    pub(crate) fn queued_at(&self, id: u32) -> u64 {
        self.queued_at.as_ref().map_or(0, |times| times[id as usize])
    }

    /// Rule 2: the claim on `id` was dropped; requeues the key if it was added meanwhile.
    pub(crate) fn finish(&mut self, id: u32, now: &mut Clock) -> u64 {
        let started_at = self.processing.remove(&id).unwrap_or(0);
        match std::mem::replace(&mut self.entry_mut(id).phase, Phase::Idle) {
            Phase::Processing { again: Some(priority) } => self.push_ready(id, priority, now),
            _ => self.release_if_idle(id),
        }
        started_at
    }

    /// Rule 3: a timer for `id` at `due` unless an earlier one (or a due retry) is pending.
    pub(crate) fn schedule(&mut self, id: u32, due: u64) {
        self.effects.timed = true;
        let entry = self.entry_mut(id);
        if entry.retry != Retry::Line && due < entry.due {
            entry.due = due;
            self.effects.poke |= self.timers.peek().is_none_or(|Reverse((next, _))| due < *next);
            self.timers.push(Reverse((due, id)));
        }
    }

    /// Rules 4, 5 and 13: counts a failure and schedules its retry after `delay(failures)`, no
    /// earlier than `floor`, unless a retry is pending.
    pub(crate) fn fail(&mut self, id: u32, now: u64, floor: u64, delay: impl FnOnce(u32) -> u64) {
        (self.effects.retried, self.effects.timed) = (true, true);
        let entry = self.entry_mut(id);
        if entry.retry == Retry::None {
            entry.failures = entry.failures.saturating_add(1);
            entry.retry = Retry::Timer;
            let due = now.saturating_add(delay(u32::from(entry.failures))).max(floor).min(NEVER - 1);
            self.schedule(id, due);
        }
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

    /// Fires the timers due at `now`; due retries wait in line for tokens (rule 6). Returns when
    /// the next token comes, if one is awaited.
    pub(crate) fn release_due(&mut self, clock: &mut Clock) -> Option<u64> {
        let now = clock.get();
        while let Some(&Reverse((due, id))) = self.timers.peek().filter(|Reverse((due, _))| *due <= now) {
            self.timers.pop();
            let Some(entry) = self.entries[id as usize].as_mut().filter(|e| e.due == due) else {
                continue; // stale: superseded, cancelled, or the number is another key's now
            };
            entry.due = NEVER;
            if entry.retry == Retry::Timer && self.bucket.is_some() {
                entry.retry = Retry::Line;
                self.retry_line.push_back(id);
            } else {
                entry.retry = Retry::None;
                self.release(id, clock);
            }
        }
        while let (Some(&id), Some(bucket)) = (self.retry_line.front(), &mut self.bucket) {
            if let Err(next_token) = bucket.try_take(now) {
                return Some(next_token);
            }
            self.retry_line.pop_front();
            self.entry_mut(id).retry = Retry::None;
            self.release(id, clock);
        }
        None
    }

    /// Rule 12: a timer adds at normal priority; the notes that waited for it are due now.
    fn release(&mut self, id: u32, clock: &mut Clock) {
        self.entry_mut(id).notes.timer_fired();
        self.enqueue(id, Priority::Normal, clock);
    }

    /// Every tracked key's entry, with its number.
    pub(crate) fn entries(&self) -> impl Iterator<Item = (u32, &Entry<K, N>)> {
        (0u32..).zip(&self.entries).filter_map(|(id, entry)| Some((id, entry.as_ref()?)))
    }
}

/// The time of one operation, in nanoseconds since the queue's epoch on tokio's clock (which
/// paused-clock tests drive): read on first use, and only if needed.
pub(crate) struct Clock(pub(crate) Instant, pub(crate) Option<u64>);

impl Clock {
    pub(crate) fn get(&mut self) -> u64 {
        let epoch = self.0;
        *self.1.get_or_insert_with(|| nanos(epoch.elapsed()).min(NEVER - 1))
    }
}

/// A duration in nanoseconds, saturating.
pub(crate) fn nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}
