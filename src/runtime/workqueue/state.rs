//! The queue's state behind its one lock: a slab of per-key slots, a hash index into it, the
//! ready FIFO, the processing list, the timer heap and the retry line. Pure data; no locking,
//! no waking, no clock: callers pass the time and act on what each operation reports.

use std::collections::VecDeque;

use hashbrown::HashTable;

use super::delay::TimerHeap;

/// A due time meaning "no timer".
pub(crate) const NEVER: u64 = u64::MAX;

/// The key is in the ready FIFO.
const QUEUED: u8 = 1;
/// A claim on the key is outstanding.
const PROCESSING: u8 = 1 << 1;
/// Added while processing: goes back to the ready FIFO when the claim is dropped.
const DIRTY: u8 = 1 << 2;
/// The pending timer is a retry after a failure (its release spends a token of the bucket).
const BACKOFF: u8 = 1 << 3;
/// The key's retry is due and waits in line for a token of the bucket.
const IN_RETRY_LINE: u8 = 1 << 4;

/// Everything the queue knows about one key. Slots are reused; a slot is free when it tracks
/// nothing (not queued, not processing, no timer, no failures).
pub(crate) struct Slot<K> {
    pub(crate) key: Option<K>,
    /// The key's hash, kept so the index can be rebuilt and the slot unlinked without re-hashing.
    hash: u64,
    /// When the pending timer fires, or `NEVER`.
    pub(crate) due: u64,
    /// Consecutive failures since the last `forget`.
    pub(crate) failures: u32,
    /// Position in the processing list while processing.
    processing_pos: u32,
    flags: u8,
}

impl<K> Slot<K> {
    fn is_idle(&self) -> bool {
        self.flags == 0 && self.due == NEVER && self.failures == 0
    }

    pub(crate) fn is_queued(&self) -> bool {
        self.flags & QUEUED != 0
    }

    pub(crate) fn is_processing(&self) -> bool {
        self.flags & PROCESSING != 0
    }

    pub(crate) fn is_dirty(&self) -> bool {
        self.flags & DIRTY != 0
    }

    pub(crate) fn is_in_retry_line(&self) -> bool {
        self.flags & IN_RETRY_LINE != 0
    }

    /// A retry is pending: its timer has not fired, or it waits for a token.
    fn retry_pending(&self) -> bool {
        self.flags & (BACKOFF | IN_RETRY_LINE) != 0
    }
}

/// When a key was queued and handed out, kept beside the slots only for queues that report
/// metrics (so an untimed queue pays neither the clock reads nor the 16 bytes per key).
#[derive(Clone, Copy, Default)]
pub(crate) struct Times {
    /// When the key was last added to the ready FIFO (or marked dirty).
    pub(crate) queued_at: u64,
    /// When the current claim was handed out.
    pub(crate) started_at: u64,
}

/// What an add changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Added {
    /// Already queued or already marked dirty: nothing changed.
    Duplicate,
    /// Now in the ready FIFO; `wake` says a parked getter must be woken.
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

pub(crate) struct State<K> {
    index: HashTable<u32>,
    slots: Vec<Slot<K>>,
    free: Vec<u32>,
    ready: VecDeque<u32>,
    processing: Vec<u32>,
    timers: TimerHeap,
    retry_line: VecDeque<u32>,
    /// Per-slot times, for timed queues only.
    times: Option<Vec<Times>>,
    /// Getters that found nothing and wait to be woken; each ready key wakes at most one.
    pub(crate) parked_getters: usize,
    pub(crate) shut_down: bool,
}

impl<K: Eq> State<K> {
    /// Empty state; `timed` keeps queue and processing times per key.
    pub(crate) fn new(timed: bool) -> Self {
        Self {
            index: HashTable::new(),
            slots: Vec::new(),
            free: Vec::new(),
            ready: VecDeque::new(),
            processing: Vec::new(),
            timers: TimerHeap::default(),
            retry_line: VecDeque::new(),
            times: timed.then(Vec::new),
            parked_getters: 0,
            shut_down: false,
        }
    }

    pub(crate) fn slot(&self, id: u32) -> &Slot<K> {
        &self.slots[id as usize]
    }

    /// The slot tracking `key`, if any.
    pub(crate) fn find(&self, hash: u64, key: &K) -> Option<u32> {
        let slots = &self.slots;
        self.index.find(hash, |&id| slots[id as usize].key.as_ref() == Some(key)).copied()
    }

    /// The slot tracking `key`, created if needed.
    pub(crate) fn find_or_insert(&mut self, hash: u64, key: K) -> u32 {
        if let Some(id) = self.find(hash, &key) {
            return id;
        }
        let slot = Slot { key: Some(key), hash, due: NEVER, failures: 0, processing_pos: 0, flags: 0 };
        let id = match self.free.pop() {
            Some(id) => {
                self.slots[id as usize] = slot;
                id
            }
            None => {
                // Invariant: fewer than 2^32 keys are tracked at once (4 billion slots would
                // need hundreds of gigabytes).
                let id = u32::try_from(self.slots.len()).expect("more than u32::MAX keys tracked");
                self.slots.push(slot);
                id
            }
        };
        if let Some(times) = &mut self.times {
            match times.get_mut(id as usize) {
                Some(times) => *times = Times::default(),
                None => times.push(Times::default()),
            }
        }
        let slots = &self.slots;
        self.index.insert_unique(hash, id, |&other| slots[other as usize].hash);
        id
    }

    /// Releases the slot if it no longer tracks anything.
    pub(crate) fn release_if_idle(&mut self, id: u32) {
        let slot = &mut self.slots[id as usize];
        if !slot.is_idle() || slot.key.is_none() {
            return;
        }
        slot.key = None;
        if let Ok(entry) = self.index.find_entry(slot.hash, |&other| other == id) {
            entry.remove();
        }
        self.free.push(id);
    }

    /// Adds the key: queued unless already queued (dedup) or processing (then dirty). `now` is
    /// read only when a timed queue records the add (never for a duplicate).
    pub(crate) fn enqueue(&mut self, id: u32, now: impl FnOnce() -> u64) -> Added {
        let slot = &mut self.slots[id as usize];
        if slot.flags & (QUEUED | DIRTY) != 0 {
            return Added::Duplicate;
        }
        let processing = slot.flags & PROCESSING != 0;
        if let Some(times) = &mut self.times {
            times[id as usize].queued_at = now();
        }
        let slot = &mut self.slots[id as usize];
        if processing {
            slot.flags |= DIRTY;
            return Added::Dirty;
        }
        slot.flags |= QUEUED;
        Added::Queued { wake: self.push_ready(id) }
    }

    fn push_ready(&mut self, id: u32) -> bool {
        self.ready.push_back(id);
        let wake = self.parked_getters > 0;
        if wake {
            self.parked_getters -= 1;
        }
        wake
    }

    /// Hands out the oldest ready key: it becomes processing. Returns the slot and when it was queued.
    pub(crate) fn pop_ready(&mut self, now: u64) -> Option<(u32, u64)> {
        let id = self.ready.pop_front()?;
        let pos = self.processing.len() as u32;
        self.processing.push(id);
        let slot = &mut self.slots[id as usize];
        slot.flags = (slot.flags & !QUEUED) | PROCESSING;
        slot.processing_pos = pos;
        let queued_at = match &mut self.times {
            Some(times) => {
                times[id as usize].started_at = now;
                times[id as usize].queued_at
            }
            None => 0,
        };
        Some((id, queued_at))
    }

    /// The claim on `id` was dropped: requeue it if dirty, else release it if idle.
    pub(crate) fn finish(&mut self, id: u32) -> Finished {
        let started_at = self.times(id).started_at;
        let slot = &mut self.slots[id as usize];
        let pos = slot.processing_pos as usize;
        let dirty = slot.flags & DIRTY != 0;
        slot.flags &= !(PROCESSING | DIRTY);
        self.processing.swap_remove(pos);
        if let Some(&moved) = self.processing.get(pos) {
            self.slots[moved as usize].processing_pos = pos as u32;
        }
        let wake = if dirty {
            self.slots[id as usize].flags |= QUEUED;
            self.push_ready(id)
        } else {
            self.release_if_idle(id);
            false
        };
        Finished { started_at, requeued: dirty, wake, idle: self.processing.is_empty() }
    }

    /// Sets a timer for `id` at `due` unless an earlier one is pending (or its retry is already
    /// due). Returns true when the timer task must be poked (this is the new earliest timer).
    pub(crate) fn schedule(&mut self, id: u32, due: u64) -> bool {
        let slot = &mut self.slots[id as usize];
        if slot.is_in_retry_line() || due >= slot.due {
            return false;
        }
        slot.due = due;
        self.timers.push(due, id)
    }

    /// Records a failure of `id` and schedules its retry. A failure while a retry is still
    /// pending changes nothing: the pending due time stands and the count is not raised
    /// (kubernetes/kubernetes#132805). Returns `Some(poke)` when a failure was counted.
    pub(crate) fn fail(&mut self, id: u32, now: u64, delay_for: impl FnOnce(u32) -> u64) -> Option<bool> {
        let slot = &mut self.slots[id as usize];
        if slot.retry_pending() {
            return None;
        }
        slot.failures = slot.failures.saturating_add(1);
        slot.flags |= BACKOFF;
        let due = now.saturating_add(delay_for(slot.failures)).min(NEVER - 1);
        Some(self.schedule(id, due))
    }

    /// Drops the failure history of `id` (the pending timer, if any, still fires once).
    pub(crate) fn forget(&mut self, id: u32) {
        let slot = &mut self.slots[id as usize];
        slot.failures = 0;
        slot.flags &= !BACKOFF;
        self.release_if_idle(id);
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
        while let Some((due, id)) = self.timers.pop_due(now) {
            let slot = &mut self.slots[id as usize];
            if slot.key.is_none() || slot.due != due {
                continue; // stale: superseded by an earlier timer, or the slot was released
            }
            slot.due = NEVER;
            if slot.flags & BACKOFF != 0 && take_token.is_some() {
                slot.flags = (slot.flags & !BACKOFF) | IN_RETRY_LINE;
                self.retry_line.push_back(id);
            } else {
                slot.flags &= !BACKOFF;
                self.release(id, now, &mut released);
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
                self.slots[id as usize].flags &= !IN_RETRY_LINE;
                self.release(id, now, &mut released);
            }
        }
        (released, retry_at)
    }

    fn release(&mut self, id: u32, now: u64, released: &mut Released) {
        match self.enqueue(id, || now) {
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

    pub(crate) fn ready_len(&self) -> usize {
        self.ready.len()
    }

    /// When each outstanding claim was handed out (timed queues; zeros otherwise).
    pub(crate) fn processing_since(&self) -> impl Iterator<Item = u64> {
        self.processing.iter().map(|&id| self.times(id).started_at)
    }

    /// The times of slot `id` (zeros for untimed queues).
    pub(crate) fn times(&self, id: u32) -> Times {
        self.times.as_ref().map_or_else(Times::default, |times| times[id as usize])
    }

    pub(crate) fn processing_len(&self) -> usize {
        self.processing.len()
    }

    /// Every tracked key's slot, with its times.
    pub(crate) fn tracked(&self) -> impl Iterator<Item = (&Slot<K>, Times)> {
        (0..self.slots.len() as u32)
            .map(|id| (self.slot(id), self.times(id)))
            .filter(|(slot, _)| slot.key.is_some())
    }

    pub(crate) fn tracked_len(&self) -> usize {
        self.index.len()
    }

    /// Heap entries, stale ones included (for the bounded-state checks).
    pub(crate) fn timer_entries(&self) -> usize {
        self.timers.len()
    }
}
