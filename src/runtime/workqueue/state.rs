//! The queue's state behind its one lock: the right to change the per-key slots and their
//! index (`slots.rs`, shared with duplicate adds, which only read them), the ready lines
//! (normal and low priority), the processing list, the timer heap and the retry line. No
//! waking: callers pass the clock (read only when an operation needs it) and act on what each
//! operation reports.
//!
//! Memory per queued key (untimed queue): the 40-byte slot (for a 24-byte key), an index entry
//! (4 bytes and a control byte per bucket) and a 4-byte place in the ready line; nothing else.
//! A queue with notes (see `notes.rs`) also keeps one `N` per slot, beside the slots.
//!
//! A slot whose key goes idle (nothing queued, processing, timed or failed) joins the free list
//! but keeps its key and its index entry until it is reused for another key, oldest first. A key
//! that comes back before then (the usual case: a controller's keys are added again and again)
//! takes its slot back with no change of the index, which is two locked changes of an index
//! shard per pass saved. The slots are as many as before (a new key takes a free slot whenever
//! there is one), and an idle key is invisible to every query (`find`, `tracked`); what it
//! costs is its key, kept alive until its slot is reused.

use std::collections::VecDeque;
use std::sync::Arc;

use super::delay::TimerHeap;
use super::notes::KeyNotes;
pub(crate) use super::slots::NEVER;
use super::slots::{
    BACKOFF, DIRTY, FREE_LISTED, IN_RETRY_LINE, LOW, PROCESSING, QUEUED, STALE_LOW, Slot, SlotArena,
    SlotOwner, add_is_duplicate,
};

/// How urgent an add is. Keys from the initial list and from resyncs are `Low`; keys from live
/// watch events, timers and explicit requeues are `Normal`. A low key waits only while normal
/// keys are ready, and at most the queue's `low_priority_max_wait` before it joins the normal
/// line itself (so it is never starved).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Priority {
    /// Background work: served after normal keys, until it has waited too long.
    Low,
    /// The default.
    #[default]
    Normal,
}

/// When a key was queued and handed out, and its place in the processing list, kept beside the
/// slots only for queues that report metrics (untimed queues pay neither the clock reads nor the
/// bytes).
#[derive(Clone, Copy, Default)]
pub(crate) struct Times {
    /// When the key was last added to a ready line (or marked dirty).
    pub(crate) queued_at: u64,
    /// When the current claim was handed out.
    pub(crate) started_at: u64,
    /// Position in the processing list while processing.
    processing_pos: u32,
}

/// What an add changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Added {
    /// Already queued or already marked dirty (perhaps promoted from low to normal): no new add.
    Duplicate,
    /// Now in a ready line; `wake` says a parked getter must be woken.
    Queued { wake: bool },
    /// Processing: marked dirty, to be queued again when its claim is dropped.
    Dirty,
}

/// What dropping a claim changed.
pub(crate) struct Finished {
    /// When the claim was handed out (timed queues).
    pub(crate) started_at: u64,
    /// The key was dirty and is queued again.
    pub(crate) requeued: bool,
    /// A parked getter must be woken.
    pub(crate) wake: bool,
    /// No claim is outstanding any more.
    pub(crate) idle: bool,
}

/// Counts of what a timer round released.
#[derive(Default)]
pub(crate) struct Released {
    pub(crate) added: usize,
    pub(crate) queued: usize,
    pub(crate) wakes: usize,
}

/// A clock read at most once per operation, only if the operation needs it.
pub(crate) struct LazyNow<F> {
    read: F,
    value: Option<u64>,
}

impl<F: FnMut() -> u64> LazyNow<F> {
    /// Reads nothing yet.
    pub(crate) fn new(read: F) -> Self {
        Self { read, value: None }
    }

    /// The time in queue nanoseconds, read on first use.
    pub(crate) fn get(&mut self) -> u64 {
        *self.value.get_or_insert_with(&mut self.read)
    }

    /// The time in whole milliseconds, wrapping every 49.7 days (the low line's timestamps:
    /// its ages are compared with wrapping arithmetic, so only ages below 24 days are exact).
    fn millis(&mut self) -> u32 {
        (self.get() / 1_000_000) as u32
    }
}

/// A low-line entry: the slot in the low 32 bits, when it joined (wrapping milliseconds) above.
fn low_entry(id: u32, at_ms: u32) -> u64 {
    (u64::from(at_ms) << 32) | u64::from(id)
}

fn low_entry_parts(entry: u64) -> (u32, u32) {
    (entry as u32, (entry >> 32) as u32)
}

pub(crate) struct State<K, N> {
    /// The slots and their index; changed only by this state's holder.
    slots: SlotOwner<K>,
    /// Slot ids handed out so far (the next fresh id).
    slot_count: u32,
    /// Each slot's notes (zero-sized for a queue without notes); reset when the slot goes idle.
    notes: Vec<N>,
    /// Slots that went idle, oldest first, each still tracking its key until it is reused (see
    /// the module docs); a slot taken back by its key meanwhile stays listed ([`FREE_LISTED`])
    /// and is skipped when its turn comes.
    free: VecDeque<u32>,
    /// The normal ready line.
    ready: VecDeque<u32>,
    /// The low ready line ([`low_entry`]s), stale entries included.
    low: VecDeque<u64>,
    /// Entries of `low` that still count.
    low_len: usize,
    /// How long a low key waits before it joins the normal line, in milliseconds.
    low_max_wait_ms: u32,
    /// Outstanding claims.
    processing_len: usize,
    /// The slots with outstanding claims (timed queues only: the unfinished-work sample).
    processing: Vec<u32>,
    timers: TimerHeap,
    retry_line: VecDeque<u32>,
    /// Per-slot times, for timed queues only.
    times: Option<Vec<Times>>,
    /// Getters that found nothing and wait to be woken.
    pub(crate) parked_getters: usize,
    /// Getters woken that have not yet looked for a key (a stored `Notify` permit counts too).
    wakes_in_flight: usize,
    pub(crate) shut_down: bool,
}

impl<K: Eq, N: KeyNotes> State<K, N> {
    /// Empty state; `timed` keeps queue and processing times per key; a low key joins the normal
    /// line after `low_max_wait_ms`.
    pub(crate) fn new(timed: bool, low_max_wait_ms: u32) -> Self {
        Self {
            slots: SlotOwner::new(),
            slot_count: 0,
            notes: Vec::new(),
            free: VecDeque::new(),
            ready: VecDeque::new(),
            low: VecDeque::new(),
            low_len: 0,
            low_max_wait_ms: low_max_wait_ms.min(u32::MAX / 2),
            processing_len: 0,
            processing: Vec::new(),
            timers: TimerHeap::default(),
            retry_line: VecDeque::new(),
            times: timed.then(Vec::new),
            parked_getters: 0,
            wakes_in_flight: 0,
            shut_down: false,
        }
    }

    /// The slots and their index, for duplicate adds made without the lock.
    pub(crate) fn shared_slots(&self) -> Arc<SlotArena<K>> {
        self.slots.arena()
    }

    pub(crate) fn slot(&self, id: u32) -> &Slot<K> {
        self.slots.slot(id)
    }

    /// The notes of slot `id`.
    pub(crate) fn notes(&self, id: u32) -> &N {
        &self.notes[id as usize]
    }

    /// The notes of slot `id`, to write, and (when `with_key`) the key the slot tracks: an add's
    /// note reads the key from the slot instead of the adder cloning it (a shared key's clone and
    /// drop write its count). An add that brought a spare copy needs no other.
    #[inline(always)]
    pub(crate) fn key_and_notes_mut(&mut self, id: u32, with_key: bool) -> (Option<&K>, &mut N) {
        let key = with_key.then(|| self.slots.slot(id).key().expect("an add's slot tracks its key"));
        (key, &mut self.notes[id as usize])
    }

    /// The slot tracking `key`, if any (an idle slot that still holds the key tracks nothing).
    pub(crate) fn find(&self, hash: u64, key: &K) -> Option<u32> {
        self.slots.find(hash, key).filter(|&id| !self.slots.slot(id).is_idle())
    }

    /// The slot of `key`, taken back if idle, created if needed; also `key` itself when a slot
    /// holds it already, and the key a reused slot held, for the caller to use or drop once it
    /// has released the lock (dropping a shared key writes its reference count, a cache line
    /// other threads may hold).
    #[inline(always)]
    pub(crate) fn find_or_insert(&mut self, hash: u64, key: K) -> (u32, Option<K>, Option<K>) {
        match self.slots.find(hash, &key) {
            Some(id) => (id, Some(key), None),
            None => {
                let (id, evicted) = self.insert(hash, key);
                (id, None, evicted)
            }
        }
    }

    /// Tracks `key`, which no slot holds, in the oldest free slot (or a new one); returns the
    /// slot and the key it held before.
    fn insert(&mut self, hash: u64, key: K) -> (u32, Option<K>) {
        let mut evicted = None;
        let id = loop {
            let Some(id) = self.free.pop_front() else {
                let id = self.slot_count;
                // Invariant: fewer than 2^32 keys are tracked at once (4 billion slots would
                // need hundreds of gigabytes).
                self.slot_count = id.checked_add(1).expect("more than u32::MAX keys tracked");
                self.notes.push(N::default());
                break id;
            };
            let slot = self.slots.slot(id);
            slot.clear_flags(FREE_LISTED);
            if slot.is_idle() {
                evicted = self.slots.remove(id);
                break id;
            }
            // Taken back by its key since it was listed: it is in use, not free.
        };
        self.slots.insert(hash, key, id);
        if let Some(times) = &mut self.times {
            match times.get_mut(id as usize) {
                Some(times) => *times = Times::default(),
                None => times.push(Times::default()),
            }
        }
        (id, evicted)
    }

    /// Frees the slot if it no longer tracks anything: its notes are reset, and it joins the
    /// free list (unless it is listed already), its key kept until it is reused.
    pub(crate) fn release_if_idle(&mut self, id: u32) {
        let slot = self.slots.slot(id);
        if !slot.is_idle() {
            return;
        }
        self.notes[id as usize].reset();
        if slot.set_flags(FREE_LISTED) & FREE_LISTED == 0 {
            self.free.push_back(id);
        }
    }

    /// Adds the key at `priority`: queued unless already queued (dedup; a normal add promotes a
    /// low key to the normal line) or processing (then dirty). The clock is read only when a
    /// timed queue records the add or the low line needs it (never for a duplicate).
    pub(crate) fn enqueue(
        &mut self,
        id: u32,
        priority: Priority,
        now: &mut LazyNow<impl FnMut() -> u64>,
    ) -> Added {
        let low = priority == Priority::Low;
        let slot = self.slots.slot(id);
        let flags = slot.flags();
        if flags & (QUEUED | DIRTY) != 0 {
            if !add_is_duplicate(flags, low) {
                let promoted = if flags & QUEUED != 0 { STALE_LOW } else { 0 };
                slot.update_flags(LOW, promoted);
                if flags & QUEUED != 0 {
                    self.low_len -= 1;
                    self.promote_aged(now);
                    self.ready.push_back(id);
                }
            }
            return Added::Duplicate;
        }
        if let Some(times) = &mut self.times {
            times[id as usize].queued_at = now.get();
        }
        if flags & PROCESSING != 0 {
            self.slots.slot(id).set_flags(DIRTY | if low { LOW } else { 0 });
            return Added::Dirty;
        }
        Added::Queued { wake: self.push_ready(id, priority, now) }
    }

    /// Puts the (not queued) key into the line for `priority`; true if a parked getter must be woken.
    fn push_ready(&mut self, id: u32, priority: Priority, now: &mut LazyNow<impl FnMut() -> u64>) -> bool {
        // Queued first: moving aged low keys may drop this slot's own stale low entry, which
        // releases a slot that tracks nothing else (a slot released here would be queued
        // without its key).
        self.slots.slot(id).set_flags(if priority == Priority::Low { QUEUED | LOW } else { QUEUED });
        if !self.low.is_empty() {
            self.promote_aged(now);
        }
        match priority {
            Priority::Normal => self.ready.push_back(id),
            Priority::Low => {
                let revive = self.slots.slot(id).clear_flags(STALE_LOW) & STALE_LOW != 0;
                self.low_len += 1;
                if !revive {
                    // A stale entry still in line takes the key back at its earlier place.
                    self.low.push_back(low_entry(id, now.millis()));
                }
            }
        }
        // A wake already on its way is enough: that getter passes wakes on (`wake_arrived`).
        let wake = self.parked_getters > 0 && self.wakes_in_flight == 0;
        if wake {
            self.parked_getters -= 1;
            self.wakes_in_flight += 1;
        }
        wake
    }

    /// A woken getter is looking for a key (call before `pop_ready`).
    pub(crate) fn wake_arrived(&mut self) {
        self.wakes_in_flight = self.wakes_in_flight.saturating_sub(1);
    }

    /// After a woken getter claimed a key: how many more parked getters to wake (up to two,
    /// never more than the ready keys no wake is on its way for), so a burst reaches every
    /// worker in a logarithmic number of hops while the adds themselves wake at most one.
    pub(crate) fn pass_wakes_on(&mut self) -> usize {
        const FAN_OUT: usize = 2;
        let uncovered = self.ready_len().saturating_sub(self.wakes_in_flight);
        let wakes = FAN_OUT.min(self.parked_getters).min(uncovered);
        self.parked_getters -= wakes;
        self.wakes_in_flight += wakes;
        wakes
    }

    /// Moves low keys that have waited `low_max_wait_ms` to the back of the normal line (where
    /// they now count as normal keys), dropping stale entries met on the way.
    fn promote_aged(&mut self, now: &mut LazyNow<impl FnMut() -> u64>) {
        let now_ms = now.millis();
        while let Some(&entry) = self.low.front() {
            let (id, at_ms) = low_entry_parts(entry);
            let flags = self.slots.slot(id).flags();
            if flags & STALE_LOW != 0 {
                self.low.pop_front();
                self.drop_stale_low(id);
            } else if now_ms.wrapping_sub(at_ms) >= self.low_max_wait_ms {
                self.low.pop_front();
                self.low_len -= 1;
                self.slots.slot(id).clear_flags(LOW);
                self.ready.push_back(id);
            } else {
                return;
            }
        }
    }

    fn drop_stale_low(&mut self, id: u32) {
        self.slots.slot(id).clear_flags(STALE_LOW);
        self.release_if_idle(id);
    }

    /// The oldest counting entry of the low line.
    fn pop_low(&mut self) -> Option<u32> {
        while let Some(entry) = self.low.pop_front() {
            let (id, _) = low_entry_parts(entry);
            if self.slots.slot(id).flags() & STALE_LOW != 0 {
                self.drop_stale_low(id);
                continue;
            }
            self.low_len -= 1;
            self.slots.slot(id).clear_flags(LOW);
            return Some(id);
        }
        None
    }

    /// Hands out the next ready key (aged low keys first join the normal line; the normal line
    /// goes before the low one): it becomes processing. Returns the slot and when it was queued;
    /// the claim then takes its notes ([`State::take_notes`]).
    pub(crate) fn pop_ready(&mut self, now: &mut LazyNow<impl FnMut() -> u64>) -> Option<(u32, u64)> {
        if !self.low.is_empty() {
            self.promote_aged(now);
        }
        let id = match self.ready.pop_front() {
            Some(id) => id,
            None => self.pop_low()?,
        };
        self.processing_len += 1;
        // A read-modify-write: it reads from any duplicate add's write-back (see `slots.rs`),
        // and takes the count of the ones counted without the lock.
        let counted = self.slots.slot(id).claim();
        if counted > 0 {
            self.notes[id as usize].counted(counted);
        }
        let queued_at = match &mut self.times {
            Some(times) => {
                let times = &mut times[id as usize];
                times.started_at = now.get();
                times.processing_pos = self.processing.len() as u32;
                self.processing.push(id);
                times.queued_at
            }
            None => 0,
        };
        Some((id, queued_at))
    }

    /// The notes due for the claim on `id` (see [`KeyNotes::take`]).
    pub(crate) fn take_notes(&mut self, id: u32) -> N::Taken {
        self.notes[id as usize].take()
    }

    /// The claim on `id` was dropped: requeue it if dirty, else release it if idle.
    pub(crate) fn finish(&mut self, id: u32, now: &mut LazyNow<impl FnMut() -> u64>) -> Finished {
        let started_at = self.times(id).started_at;
        if let Some(times) = &mut self.times {
            let pos = times[id as usize].processing_pos as usize;
            self.processing.swap_remove(pos);
            if let Some(&moved) = self.processing.get(pos) {
                times[moved as usize].processing_pos = pos as u32;
            }
        }
        self.processing_len -= 1;
        let flags = self.slots.slot(id).clear_flags(PROCESSING | DIRTY | LOW);
        let dirty = flags & DIRTY != 0;
        let wake = if dirty {
            let priority = if flags & LOW != 0 { Priority::Low } else { Priority::Normal };
            self.push_ready(id, priority, now)
        } else {
            self.release_if_idle(id);
            false
        };
        Finished { started_at, requeued: dirty, wake, idle: self.processing_len == 0 }
    }

    /// Sets a timer for `id` at `due` unless an earlier one is pending (or its retry is already
    /// due). Returns true when the timer task must be poked (this is the new earliest timer).
    pub(crate) fn schedule(&mut self, id: u32, due: u64) -> bool {
        let slot = self.slots.slot(id);
        if slot.is_in_retry_line() || due >= slot.due() {
            return false;
        }
        slot.set_due(due);
        self.timers.push(due, id)
    }

    /// Records a failure of `id` and schedules its retry after `delay_for(failures)`, but not
    /// before `floor` (a due time the server asked for). A failure while a retry is still pending
    /// changes nothing: the pending due time stands and the count is not raised
    /// (kubernetes/kubernetes#132805). Returns `Some(poke)` when a failure was counted.
    pub(crate) fn fail(
        &mut self,
        id: u32,
        now: u64,
        floor: u64,
        delay_for: impl FnOnce(u32) -> u64,
    ) -> Option<bool> {
        let slot = self.slots.slot(id);
        if slot.retry_pending() {
            return None;
        }
        let failures = u16::try_from(slot.failures()).unwrap_or(u16::MAX).saturating_add(1);
        slot.set_failures(failures);
        slot.set_flags(BACKOFF);
        let due = now.saturating_add(delay_for(u32::from(failures))).max(floor).min(NEVER - 1);
        Some(self.schedule(id, due))
    }

    /// Drops the failure history of `id` (the pending timer, if any, still fires once).
    pub(crate) fn forget(&mut self, id: u32) {
        let slot = self.slots.slot(id);
        slot.set_failures(0);
        slot.clear_flags(BACKOFF);
        self.release_if_idle(id);
    }

    /// `forget`, and cancels the pending timer of `id` (its heap entry goes stale) unless its
    /// retry already waits in the retry line; the notes that waited for it are dropped.
    pub(crate) fn settle(&mut self, id: u32) {
        let slot = self.slots.slot(id);
        if slot.due() != NEVER && !slot.is_in_retry_line() {
            slot.set_due(NEVER);
            self.notes[id as usize].timer_cancelled();
        }
        self.forget(id);
    }

    /// Fires every timer due at `now`: plain timers add their key, retries join the retry line,
    /// which is then served while `take_token` grants tokens (`Err(at)`: next token at `at`).
    /// Returns what was released and when the retry line needs another look.
    pub(crate) fn release_due<T>(
        &mut self,
        now: u64,
        mut take_token: Option<impl FnMut() -> Result<(), T>>,
    ) -> (Released, Option<T>) {
        let mut released = Released::default();
        let mut clock = LazyNow::new(|| now);
        while let Some((due, id)) = self.timers.pop_due(now) {
            let slot = self.slots.slot(id);
            if slot.due() != due {
                continue; // stale: superseded by an earlier timer, cancelled, or the slot reused
            }
            slot.set_due(NEVER);
            if slot.flags() & BACKOFF != 0 && take_token.is_some() {
                slot.update_flags(BACKOFF, IN_RETRY_LINE);
                self.retry_line.push_back(id);
            } else {
                slot.clear_flags(BACKOFF);
                self.release(id, &mut clock, &mut released);
            }
        }
        let mut retry_at = None;
        if let Some(take_token) = take_token.as_mut() {
            while let Some(&id) = self.retry_line.front() {
                if let Err(at) = take_token() {
                    retry_at = Some(at);
                    break;
                }
                self.retry_line.pop_front();
                self.slots.slot(id).clear_flags(IN_RETRY_LINE);
                self.release(id, &mut clock, &mut released);
            }
        }
        (released, retry_at)
    }

    /// A timer's or retry's add: an explicit requeue, so normal priority. The notes that waited
    /// for the timer are due from now on.
    fn release(&mut self, id: u32, now: &mut LazyNow<impl FnMut() -> u64>, released: &mut Released) {
        self.notes[id as usize].timer_fired();
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

    /// The earliest pending timer (possibly stale, which only costs an early look).
    pub(crate) fn next_due(&self) -> Option<u64> {
        self.timers.next_due()
    }

    /// Ready keys, both lines.
    pub(crate) fn ready_len(&self) -> usize {
        self.ready.len() + self.low_len
    }

    /// When each outstanding claim was handed out (timed queues; empty otherwise).
    pub(crate) fn processing_since(&self) -> impl Iterator<Item = u64> {
        self.processing.iter().map(|&id| self.times(id).started_at)
    }

    /// The times of slot `id` (zeros for untimed queues).
    pub(crate) fn times(&self, id: u32) -> Times {
        self.times.as_ref().map_or_else(Times::default, |times| times[id as usize])
    }

    pub(crate) fn processing_len(&self) -> usize {
        self.processing_len
    }

    /// Every tracked key's slot (not idle), with its times.
    pub(crate) fn tracked(&self) -> impl Iterator<Item = (&Slot<K>, Times)> {
        (0..self.slot_count).map(|id| (self.slot(id), self.times(id))).filter(|(slot, _)| !slot.is_idle())
    }

    /// Heap entries, stale ones included (for the bounded-state checks).
    pub(crate) fn timer_entries(&self) -> usize {
        self.timers.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state() -> State<String, ()> {
        State::new(false, 0)
    }

    fn hash(key: &str) -> u64 {
        key.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3))
    }

    fn clock() -> LazyNow<impl FnMut() -> u64> {
        LazyNow::new(|| 0)
    }

    /// Adds `keys`, claims them all, then drops the claims in order: the keys go idle. Returns
    /// what each add returned: its slot, its own key back (when a slot held the key already),
    /// and the key a reused slot held.
    fn run_once(state: &mut State<String, ()>, keys: &[&str]) -> Vec<(u32, Option<String>, Option<String>)> {
        let added: Vec<_> =
            keys.iter().map(|key| state.find_or_insert(hash(key), (*key).to_owned())).collect();
        for &(id, ..) in &added {
            assert_eq!(state.enqueue(id, Priority::Normal, &mut clock()), Added::Queued { wake: false });
        }
        for &(id, ..) in &added {
            assert_eq!(state.pop_ready(&mut clock()).map(|(id, _)| id), Some(id));
        }
        for &(id, ..) in &added {
            state.finish(id, &mut clock());
        }
        added
    }

    #[test]
    fn an_idle_key_keeps_its_slot_unseen_and_takes_it_back_when_added_again() {
        let mut state = state();
        let [(id, back, evicted)] = run_once(&mut state, &["a"]).try_into().unwrap();
        assert_eq!((back, evicted), (None, None), "a new slot");
        assert_eq!(state.find(hash("a"), &"a".to_owned()), None, "idle: not tracked");
        assert_eq!(state.tracked().count(), 0);
        let [(again, back, evicted)] = run_once(&mut state, &["a"]).try_into().unwrap();
        assert_eq!(again, id, "the same slot, found in the index");
        assert_eq!((back.as_deref(), evicted), (Some("a"), None), "the add's own key back: nothing inserted");
        assert_eq!(state.slot_count, 1);
    }

    #[test]
    fn a_new_key_takes_the_oldest_free_slot_and_hands_back_the_key_it_kept() {
        let mut state = state();
        let [(a, ..), (b, ..)] = run_once(&mut state, &["a", "b"]).try_into().unwrap();
        // `a` comes back and stays queued: its slot is still listed, but in use.
        assert_eq!(state.find_or_insert(hash("a"), "a".to_owned()).0, a);
        state.enqueue(a, Priority::Normal, &mut clock());
        let (c, back, evicted) = state.find_or_insert(hash("c"), "c".to_owned());
        assert_eq!(
            (c, back, evicted.as_deref()),
            (b, None, Some("b")),
            "a's slot in use is skipped; b's is reused"
        );
        assert_eq!(state.slots.find(hash("b"), &"b".to_owned()), None, "b is gone from the index");
        let (d, _, evicted) = state.find_or_insert(hash("d"), "d".to_owned());
        assert_eq!((d, evicted), (2, None), "no free slot left: a new one");
        // `a` goes idle again: listed anew, so the next new key reuses its slot.
        assert_eq!(state.pop_ready(&mut clock()).map(|(id, _)| id), Some(a));
        state.finish(a, &mut clock());
        let (e, _, evicted) = state.find_or_insert(hash("e"), "e".to_owned());
        assert_eq!((e, evicted.as_deref()), (a, Some("a")));
        assert_eq!(state.slot_count, 3, "slots as many as keys in use at once");
        assert!(state.free.is_empty());
    }
}
