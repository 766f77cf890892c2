//! The queue's per-key slots and the hash index into them, shared between the queue's lock and
//! the one operation that runs without it: an add of a key that is already queued (or already
//! marked dirty) at a priority that changes nothing, [`SlotArena::absorb_duplicate`].
//!
//! Why: with many busy workers the queue's lock is held a third of the time (each pass takes it
//! three times and misses memory under it), and an add waiting for it is the add's tail. A
//! duplicate add decides only from the key's flags, so it needs neither the lock nor a change.
//! The queue takes this path when its lock is busy, and tries it first while the adding thread's
//! last try found the lock busy (under contention the lock's cache line moving between cores
//! costs more than this path); otherwise a free lock costs no more.
//!
//! How the two sides share the slots:
//! - The slots never move: they live in segments of doubling size (`segments.rs`), allocated
//!   once and kept until the queue is dropped. A slot is 40 bytes, as before, so a queued key
//!   costs what it did.
//! - The index is split into [`SHARDS`] hash tables, each behind a lock of its own kind
//!   ([`Shard`]): the queue's lock holder reads the tables freely and changes one once the
//!   duplicate adds inside it have left; a duplicate add counts itself into a shard, or gives
//!   up (and takes the queue's lock) while the shard is being changed.
//! - A slot's flags are atomic. The duplicate add confirms what it read with a compare-and-swap
//!   that writes the same flags back (or, when it is counted, the same flags and a count of
//!   such adds one higher, in the same word: see [`Slot::claim`]); every change the lock holder
//!   makes while the key is queued or dirty (above all the claim that takes it out of the line,
//!   and takes the count) is a read-modify-write that reads from that write-back, so the worker
//!   that claims the key sees everything the adder wrote before its add: the claim's pass starts
//!   after the add, which is rule 9. Other changes are plain stores (no write-back can happen
//!   then).
//! - A slot's key is written only by the queue's lock holder while it keeps readers out of the
//!   shard that indexes the slot: when the slot is set up for a key, and when a free slot is
//!   reused for another key (an idle slot keeps its key and its index entry until then, so a key
//!   that comes back costs no change of the index). It is read under the queue's lock, by a
//!   duplicate add counted into the shard whose table yielded the slot, or through the claim on
//!   the slot (a claimed slot is not idle, so it is not reused). See [`Slot::key`].
//!
//! The other fields (due time, failures, hash) are touched under the queue's lock only; they are
//! atomics with relaxed ordering so that a slot can be shared, and cost nothing more on x86.

use std::cell::UnsafeCell;
use std::sync::Arc;
use std::sync::atomic::{AtomicU16, AtomicU32, AtomicU64, Ordering};

use hashbrown::HashTable;

use super::segments::Segments;

/// A due time meaning "no timer".
pub(crate) const NEVER: u64 = u64::MAX;

/// The key is in a ready line (normal, or low when `LOW` is also set).
pub(crate) const QUEUED: u8 = 1;
/// A claim on the key is outstanding.
pub(crate) const PROCESSING: u8 = 1 << 1;
/// Added while processing: goes back to a ready line when the claim is dropped.
pub(crate) const DIRTY: u8 = 1 << 2;
/// The pending timer is a retry after a failure (its release spends a token of the bucket).
pub(crate) const BACKOFF: u8 = 1 << 3;
/// The key's retry is due and waits in line for a token of the bucket.
pub(crate) const IN_RETRY_LINE: u8 = 1 << 4;
/// With `QUEUED`: the key waits in the low line. With `DIRTY`: it goes back there.
pub(crate) const LOW: u8 = 1 << 5;
/// The low line still holds an entry for this slot that no longer counts (the key was promoted
/// to normal); the slot is kept until that entry is skipped, so the entry never names another key.
pub(crate) const STALE_LOW: u8 = 1 << 6;
/// The slot is in the queue's free list (see `state.rs`): idle when it went there, it still
/// tracks its key until it is reused, and an add of that key in the meantime takes it back.
/// Not part of what makes a slot busy ([`Slot::is_idle`] ignores it).
pub(crate) const FREE_LISTED: u8 = 1 << 7;

/// How many locks the index is split into: enough that the queue's lock holder, inserting and
/// removing keys, rarely holds the shard a duplicate add needs.
pub(crate) const SHARDS: usize = 64;

/// Everything the queue knows about one key, in 40 bytes beside a 24-byte key. Slots are reused;
/// a slot is free when it tracks nothing (no flag, no timer, no failures).
pub(crate) struct Slot<K> {
    /// See [`Slot::key`] for who may read and write it.
    key: UnsafeCell<Option<K>>,
    /// When the pending timer fires, or `NEVER`.
    due: AtomicU64,
    /// The key's hash folded to 32 bits, kept so the index can grow and the slot be unlinked
    /// without re-hashing the key (the index hashes are derived from it, see [`index_hash`]).
    hash: AtomicU32,
    /// Consecutive failures since the last `forget`, saturating at `u16::MAX` (the backoff
    /// reaches its cap after 19).
    failures: AtomicU16,
    /// The flags (the low byte), and the duplicate adds counted without the lock since the key
    /// was last claimed (the high byte, [`COUNTED`]; see [`SlotArena::absorb_duplicate`]).
    flags: AtomicU16,
}

/// One counted duplicate add, in a slot's flags word.
const COUNTED: u16 = 1 << 8;

impl<K> Default for Slot<K> {
    fn default() -> Self {
        Self {
            key: UnsafeCell::new(None),
            due: AtomicU64::new(NEVER),
            hash: AtomicU32::new(0),
            failures: AtomicU16::new(0),
            flags: AtomicU16::new(0),
        }
    }
}

impl<K> Slot<K> {
    /// The tracked key. Reachable only under the queue's lock (through [`SlotOwner`]), in a
    /// duplicate add under the read of the shard whose table gave this slot's id, or through
    /// the outstanding claim on the slot ([`SlotArena::claimed_key`]): the key is written only
    /// by the queue's lock holder while it keeps readers out of the shard indexing the slot, and
    /// only in a slot that is set up or reused, never in a claimed one, so no reader meets a
    /// write (a slot reused for a key of another shard is no longer reachable from the first
    /// shard's table).
    pub(crate) fn key(&self) -> Option<&K> {
        // SAFETY: see above; `&Slot` is handed out only by `SlotOwner`, `absorb_duplicate` and
        // `claimed_key`.
        unsafe { (*self.key.get()).as_ref() }
    }

    pub(crate) fn flags(&self) -> u8 {
        self.flags.load(Ordering::Relaxed) as u8
    }

    /// Sets `bits`; returns the flags before.
    pub(crate) fn set_flags(&self, bits: u8) -> u8 {
        self.update_flags(0, bits)
    }

    /// Clears `bits`; returns the flags before.
    pub(crate) fn clear_flags(&self, bits: u8) -> u8 {
        self.update_flags(bits, 0)
    }

    /// Clears `clear`, then sets `set`; returns the flags before. Only the queue's lock holder
    /// changes flags (a duplicate add only writes back what it read, its count one higher at
    /// most, and only while the key is queued or dirty), so a plain store does unless the key is
    /// queued or dirty: then the change is a read-modify-write that keeps the count, which reads
    /// from a duplicate add's write-back and keeps it ordered before whoever claims the key next
    /// (see the module docs).
    pub(crate) fn update_flags(&self, clear: u8, set: u8) -> u8 {
        self.rewrite_flags(|word| (word & !u16::from(clear)) | u16::from(set)) as u8
    }

    /// The claim that takes the key out of its ready line: clears `QUEUED`, sets `PROCESSING`,
    /// and takes the count of duplicate adds counted since the last claim (in the same
    /// read-modify-write, so each counted add is in exactly one claim's count).
    pub(crate) fn claim(&self) -> u32 {
        let before = self.rewrite_flags(|word| (word & 0xff & !u16::from(QUEUED)) | u16::from(PROCESSING));
        u32::from(before >> 8)
    }

    /// The duplicate adds counted since the key was last claimed (see [`Slot::claim`]).
    pub(crate) fn counted(&self) -> u32 {
        u32::from(self.flags.load(Ordering::Relaxed) >> 8)
    }

    /// Rewrites the flags word with `change`; returns the word before (see `update_flags`).
    fn rewrite_flags(&self, change: impl Fn(u16) -> u16) -> u16 {
        let before = self.flags.load(Ordering::Relaxed);
        if before & u16::from(QUEUED | DIRTY) == 0 {
            // No duplicate add writes the word now: it needs the key queued or dirty.
            self.flags.store(change(before), Ordering::Release);
            return before;
        }
        let mut seen = before;
        loop {
            match self.flags.compare_exchange_weak(seen, change(seen), Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => return seen,
                Err(now) => seen = now,
            }
        }
    }

    pub(crate) fn due(&self) -> u64 {
        self.due.load(Ordering::Relaxed)
    }

    pub(crate) fn set_due(&self, due: u64) {
        self.due.store(due, Ordering::Relaxed);
    }

    pub(crate) fn hash(&self) -> u32 {
        self.hash.load(Ordering::Relaxed)
    }

    pub(crate) fn failures(&self) -> u32 {
        u32::from(self.failures.load(Ordering::Relaxed))
    }

    pub(crate) fn set_failures(&self, failures: u16) {
        self.failures.store(failures, Ordering::Relaxed);
    }

    /// Tracks nothing for its key (no flag but [`FREE_LISTED`], no timer, no failures).
    pub(crate) fn is_idle(&self) -> bool {
        self.flags() & !FREE_LISTED == 0 && self.due() == NEVER && self.failures() == 0
    }

    pub(crate) fn is_queued(&self) -> bool {
        self.flags() & QUEUED != 0
    }

    pub(crate) fn is_processing(&self) -> bool {
        self.flags() & PROCESSING != 0
    }

    pub(crate) fn is_dirty(&self) -> bool {
        self.flags() & DIRTY != 0
    }

    pub(crate) fn is_in_retry_line(&self) -> bool {
        self.flags() & IN_RETRY_LINE != 0
    }

    /// Queued (or due back) at low priority.
    pub(crate) fn is_low(&self) -> bool {
        self.flags() & LOW != 0
    }

    /// A retry is pending: its timer has not fired, or it waits for a token.
    pub(crate) fn retry_pending(&self) -> bool {
        self.flags() & (BACKOFF | IN_RETRY_LINE) != 0
    }
}

/// Whether an add at `low` priority of a key with `flags` changes nothing: the key is queued or
/// dirty already, at a priority at least as high.
pub(crate) fn add_is_duplicate(flags: u8, low: bool) -> bool {
    flags & (QUEUED | DIRTY) != 0 && (low || flags & LOW == 0)
}

/// A key's 64-bit hash folded to the 32 bits a slot keeps.
pub(crate) fn fold_hash(hash: u64) -> u32 {
    (hash ^ (hash >> 32)) as u32
}

/// The index's hash of a slot, rebuilt from its 32 bits: the low half feeds hashbrown's bucket
/// choice, the high half (the same bits) its 7-bit tag, so both stay well spread.
fn index_hash(short: u32) -> u64 {
    (u64::from(short) << 32) | u64::from(short)
}

/// The shard of a folded hash: its bits remixed, so the shard does not repeat the bits that
/// pick the bucket or the tag within the shard's table.
fn shard_of(short: u32) -> usize {
    (short.wrapping_mul(0x9E37_79B9) >> (32 - SHARDS.trailing_zeros())) as usize
}

/// One shard of the index: a table that only the queue's lock holder changes, and that
/// duplicate adds read without the queue's lock. A lock of its own kind, because one side holds
/// the queue's lock and the other must never wait:
/// - the queue's lock holder reads the table with no atomic operation at all (no one else
///   changes it), and changes it after waiting for readers to leave, marking it `WRITING`;
///   while it waits, `WRITER_WAITS` turns new readers away, so it waits for one probe at most;
/// - a duplicate add counts itself in, unless the table is being changed or about to be: then
///   it gives up and takes the queue's lock (the slow way), so it never waits for the shard.
///
/// On cache lines of its own: every reader writes the count.
#[repr(align(128))]
struct Shard {
    /// Readers inside (the low bits), with `WRITER_WAITS`; or `WRITING`.
    state: AtomicU32,
    table: UnsafeCell<HashTable<u32>>,
}

/// The lock holder waits for the readers inside to leave; no new reader comes in.
const WRITER_WAITS: u32 = 1 << 31;
/// The lock holder is changing the table.
const WRITING: u32 = u32::MAX;

/// A duplicate add's read of a shard; leaving it counts the reader out.
struct ShardRead<'a>(&'a Shard);

impl std::ops::Deref for ShardRead<'_> {
    type Target = HashTable<u32>;

    fn deref(&self) -> &HashTable<u32> {
        // SAFETY: counted in, so no writer changes the table until this read is dropped.
        unsafe { &*self.0.table.get() }
    }
}

impl Drop for ShardRead<'_> {
    fn drop(&mut self) {
        self.0.state.fetch_sub(1, Ordering::Release);
    }
}

/// The queue's lock holder changing a shard; readers are kept out until it is dropped.
struct ShardWrite<'a>(&'a Shard);

impl ShardWrite<'_> {
    fn table(&mut self) -> &mut HashTable<u32> {
        // SAFETY: `WRITING` keeps readers out, and the queue's lock every other writer and the
        // lock holder's own unguarded reads.
        unsafe { &mut *self.0.table.get() }
    }
}

impl Drop for ShardWrite<'_> {
    fn drop(&mut self) {
        self.0.state.store(0, Ordering::Release);
    }
}

impl Shard {
    fn new() -> Self {
        Self { state: AtomicU32::new(0), table: UnsafeCell::new(HashTable::new()) }
    }

    /// For a duplicate add: the table, unless the queue's lock holder is changing it.
    fn try_read(&self) -> Option<ShardRead<'_>> {
        let mut seen = self.state.load(Ordering::Relaxed);
        loop {
            if seen & WRITER_WAITS != 0 {
                return None;
            }
            match self.state.compare_exchange_weak(seen, seen + 1, Ordering::Acquire, Ordering::Relaxed) {
                Ok(_) => return Some(ShardRead(self)),
                Err(now) => seen = now,
            }
        }
    }

    /// Under the queue's lock: the table, read with no atomic operation (only the lock holder
    /// changes it).
    ///
    /// # Safety
    /// The caller holds the queue's lock (it has the [`SlotOwner`]).
    unsafe fn read_owned(&self) -> &HashTable<u32> {
        // SAFETY: the caller is the only writer, and is not writing now.
        unsafe { &*self.table.get() }
    }

    /// Under the queue's lock: the table to change, once the readers inside have left (each
    /// stays for one probe of the table). Only the lock holder writes, so one writer at most.
    fn write(&self) -> ShardWrite<'_> {
        if self.state.compare_exchange(0, WRITING, Ordering::Acquire, Ordering::Relaxed).is_err() {
            self.state.fetch_or(WRITER_WAITS, Ordering::Relaxed);
            let mut spins = 0u32;
            // Acquire: the last reader's leaving (a release) comes before the change.
            while self.state.load(Ordering::Acquire) != WRITER_WAITS {
                spins += 1;
                if spins < 100 {
                    std::hint::spin_loop();
                } else {
                    // A reader was preempted inside: let it run.
                    std::thread::yield_now();
                }
            }
            self.state.store(WRITING, Ordering::Relaxed);
        }
        ShardWrite(self)
    }
}

/// The slots and the index (see the module docs), as duplicate adds see them: they can only
/// ask [`SlotArena::absorb_duplicate`]. Everything else goes through the one [`SlotOwner`].
pub(crate) struct SlotArena<K> {
    slots: Segments<Slot<K>>,
    shards: Box<[Shard]>,
}

// SAFETY: the fields that are not `Sync` by themselves, a slot's key and a shard's table, are
// read and written as `Slot::key` and `Shard` describe; keys cross threads, so they must be
// `Send + Sync`.
unsafe impl<K: Send + Sync> Sync for SlotArena<K> {}

/// The right to change the slots and the index, held by the queue's state, so only under the
/// queue's lock. There is one per arena: not `Clone`.
pub(crate) struct SlotOwner<K> {
    arena: Arc<SlotArena<K>>,
}

impl<K: Eq> SlotArena<K> {
    /// Slot `id`, which must have been allocated.
    #[inline(always)]
    fn slot(&self, id: u32) -> &Slot<K> {
        // Ids come from the owner's allocation or the index, both after the segment was made.
        self.slots.get(id)
    }

    #[inline(always)]
    fn shard(&self, short: u32) -> &Shard {
        &self.shards[shard_of(short)]
    }

    /// The slot `table` (the shard of `short`) indexes for `key`; the caller may read the table
    /// and the keys it names (see [`Slot::key`]).
    #[inline(always)]
    fn lookup(&self, table: &HashTable<u32>, short: u32, key: &K) -> Option<u32> {
        table.find(index_hash(short), |&id| self.slot(id).key() == Some(key)).copied()
    }

    /// The key of slot `id`, read by the claim on it without the queue's lock: the slot is not
    /// idle while the claim is outstanding, so its key is not replaced (see [`Slot::key`]).
    /// The caller holds that claim.
    #[inline(always)]
    pub(crate) fn claimed_key(&self, id: u32) -> &K {
        // Invariant: a claimed slot tracks a key (the claim was made from a ready slot, and a
        // slot loses its key only when it is reused, which a claimed slot is not).
        self.slot(id).key().expect("a claimed slot tracks its key")
    }

    /// Without the queue's lock: true when an add of `key` at `low` priority changes nothing
    /// (see the module docs). False (also while the key's shard is being changed) sends the
    /// add the slow way, under the lock. `count`: the add is counted in the slot, for the
    /// key's next claim ([`Slot::claim`]); false too once the count is full (255).
    pub(crate) fn absorb_duplicate(&self, hash: u64, key: &K, low: bool, count: bool) -> bool {
        let short = fold_hash(hash);
        let Some(shard) = self.shard(short).try_read() else { return false };
        let Some(id) = self.lookup(&shard, short, key) else { return false };
        let flags = &self.slot(id).flags;
        let mut seen = flags.load(Ordering::Relaxed);
        loop {
            if !add_is_duplicate(seen as u8, low) || (count && seen >> 8 == 0xff) {
                return false;
            }
            // Written back unchanged but for the count: the write orders this add before the
            // claim that clears `QUEUED` or `DIRTY` (a read-modify-write that reads from it, or
            // from a later one), and that claim takes the count.
            let written = if count { seen + COUNTED } else { seen };
            match flags.compare_exchange_weak(seen, written, Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => return true,
                Err(now) => seen = now,
            }
        }
    }
}

impl<K: Eq> SlotOwner<K> {
    /// An empty arena and its owner.
    pub(crate) fn new() -> Self {
        let arena = SlotArena { slots: Segments::new(), shards: (0..SHARDS).map(|_| Shard::new()).collect() };
        Self { arena: Arc::new(arena) }
    }

    /// The arena, for duplicate adds.
    pub(crate) fn arena(&self) -> Arc<SlotArena<K>> {
        Arc::clone(&self.arena)
    }

    /// Slot `id`, which must be allocated (an id this owner handed out).
    #[inline(always)]
    pub(crate) fn slot(&self, id: u32) -> &Slot<K> {
        self.arena.slot(id)
    }

    /// The slot tracking `key`.
    #[inline(always)]
    pub(crate) fn find(&self, hash: u64, key: &K) -> Option<u32> {
        let short = fold_hash(hash);
        // SAFETY: the owner is held under the queue's lock.
        let table = unsafe { self.arena.shard(short).read_owned() };
        self.arena.lookup(table, short, key)
    }

    /// Sets up slot `id`, new or unlinked ([`SlotOwner::remove`]), to track `key`, which no slot
    /// tracks.
    pub(crate) fn insert(&mut self, hash: u64, key: K, id: u32) {
        let short = fold_hash(hash);
        let arena = &*self.arena;
        let slot = arena.slots.get_or_alloc(id);
        let mut shard = arena.shard(short).write();
        // SAFETY: the owner is held under the queue's lock and readers are kept out of the
        // shard that will index the slot; the slot is free, so no other shard's table names it
        // (see `Slot::key`).
        unsafe { *slot.key.get() = Some(key) };
        slot.hash.store(short, Ordering::Relaxed);
        slot.set_due(NEVER);
        slot.set_failures(0);
        slot.flags.store(0, Ordering::Relaxed);
        shard.table().insert_unique(index_hash(short), id, |&other| index_hash(arena.slot(other).hash()));
    }

    /// Unlinks slot `id` from the index and takes its key: the free slot is about to be reused.
    pub(crate) fn remove(&mut self, id: u32) -> Option<K> {
        let arena = &*self.arena;
        let slot = arena.slot(id);
        let short = slot.hash();
        let mut shard = arena.shard(short).write();
        if let Ok(entry) = shard.table().find_entry(index_hash(short), |&other| other == id) {
            entry.remove();
        }
        // SAFETY: the owner is held under the queue's lock, and readers are kept out of the
        // shard that indexed the slot (see `Slot::key`).
        unsafe { (*slot.key.get()).take() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_beside_an_object_key_takes_40_bytes() {
        assert_eq!(std::mem::size_of::<crate::runtime::ObjectKey>(), 24);
        assert_eq!(std::mem::size_of::<Slot<crate::runtime::ObjectKey>>(), 40);
    }

    #[test]
    fn a_waiting_writer_turns_new_readers_away_and_writes_once_the_readers_inside_leave() {
        let owner = SlotOwner::<u32>::new();
        let arena = &*owner.arena;
        let shard = &arena.shards[0];
        let inside = shard.try_read().expect("no writer");
        let (wrote, written) = std::sync::mpsc::channel();
        std::thread::scope(|scope| {
            // Moves the arena's reference (a shard alone is not `Sync`: only the arena's
            // protocol makes it so).
            scope.spawn(move || {
                let arena: &SlotArena<u32> = arena;
                let mut write = arena.shards[0].write();
                write.table().insert_unique(7, 7, |&id| u64::from(id));
                drop(write);
                wrote.send(()).expect("the test waits");
            });
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            while shard.try_read().is_some() {
                assert!(std::time::Instant::now() < deadline, "the writer never said it waits");
                std::thread::yield_now();
            }
            assert!(written.try_recv().is_err(), "the writer changed the table under a reader");
            drop(inside);
            written.recv_timeout(std::time::Duration::from_secs(10)).expect("the writer never wrote");
        });
        let reader = shard.try_read().expect("the writer left");
        assert_eq!(reader.len(), 1);
    }

    #[test]
    fn only_an_add_that_changes_nothing_is_a_duplicate() {
        assert!(add_is_duplicate(QUEUED, false));
        assert!(add_is_duplicate(QUEUED | LOW, true));
        assert!(!add_is_duplicate(QUEUED | LOW, false), "a normal add promotes a low key");
        assert!(add_is_duplicate(PROCESSING | DIRTY, false));
        assert!(!add_is_duplicate(PROCESSING | DIRTY | LOW, false), "a normal add raises the re-run");
        assert!(!add_is_duplicate(PROCESSING, true), "an add while processing marks the key dirty");
        assert!(!add_is_duplicate(0, true));
        assert!(!add_is_duplicate(BACKOFF, false), "a key waiting for its timer is not queued");
    }
}
