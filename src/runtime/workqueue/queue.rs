//! The work queue handle, its configuration and the claim guard.

use std::fmt;
use std::hash::{BuildHasher, Hash};
use std::ops::Deref;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, TryLockError};
use std::time::Duration;

use hashbrown::DefaultHashBuilder;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::backoff::BackoffConfig;
use super::bucket::{BucketConfig, RetryBucket};
use super::claimed::ClaimCells;
use super::delay::{Epoch, Next, TimerTarget, run_timers};
use super::metrics::QueueMetrics;
use super::notes::{KeyNotes, NoteKey};
use super::slots::SlotArena;
use super::state::{Added, LazyNow, NEVER, Priority, State};

/// How often outstanding claims are sampled for the unfinished-work metrics (client-go's period).
const UNFINISHED_WORK_PERIOD: Duration = Duration::from_millis(500);

/// How a [`WorkQueue`] behaves: its name (for metrics), the per-key backoff, the overall retry
/// budget, how long a low-priority key may wait, and where metrics go.
#[derive(Clone)]
pub struct QueueConfig {
    /// The queue's name, the `name` label of its metrics.
    pub name: String,
    /// Per-key exponential backoff used by `add_rate_limited`.
    pub backoff: BackoffConfig,
    /// Overall budget for retries (`add_rate_limited`); `None` releases retries unthrottled.
    pub retry_bucket: Option<BucketConfig>,
    /// Where the workqueue metrics go; `None` also skips the clock reads they need.
    pub metrics: Option<Arc<dyn QueueMetrics>>,
    /// How long a [`Priority::Low`] key waits at most before it joins the normal line (ageing, so
    /// the initial backlog is never starved by a steady stream of live events). Millisecond
    /// resolution; at most 24 days.
    pub low_priority_max_wait: Duration,
}

/// The default [`QueueConfig::low_priority_max_wait`]: a minute, far longer than a restart's
/// backlog usually takes to drain, short enough that no key is put off for long.
pub const DEFAULT_LOW_PRIORITY_MAX_WAIT: Duration = Duration::from_secs(60);

impl Default for QueueConfig {
    fn default() -> Self {
        Self {
            name: "workqueue".to_string(),
            backoff: BackoffConfig::default(),
            retry_bucket: Some(BucketConfig::default()),
            metrics: None,
            low_priority_max_wait: DEFAULT_LOW_PRIORITY_MAX_WAIT,
        }
    }
}

impl QueueConfig {
    /// The default configuration under another name.
    pub fn named(name: impl Into<String>) -> Self {
        Self { name: name.into(), ..Self::default() }
    }

    /// This configuration, reporting to `metrics`.
    pub fn with_metrics(self, metrics: Arc<dyn QueueMetrics>) -> Self {
        Self { metrics: Some(metrics), ..self }
    }
}

impl fmt::Debug for QueueConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QueueConfig")
            .field("name", &self.name)
            .field("backoff", &self.backoff)
            .field("retry_bucket", &self.retry_bucket)
            .field("metrics", &self.metrics.is_some())
            .field("low_priority_max_wait", &self.low_priority_max_wait)
            .finish()
    }
}

/// Where a key stands, as `snapshot` reports it (for the `/debug/queue` endpoint).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeyPhase {
    /// Ready, waiting for a worker.
    Queued {
        /// When it was added (known when the queue reports metrics).
        since: Option<Instant>,
    },
    /// Handed out to a worker.
    Processing {
        /// When it was handed out (known when the queue reports metrics).
        since: Option<Instant>,
        /// Added meanwhile: it runs once more after the claim is dropped.
        again: bool,
    },
    /// Waiting for its timer.
    Waiting {
        /// When the timer fires.
        until: Instant,
    },
    /// Its retry is due and waits for a token of the overall retry budget.
    WaitingForRetryBudget,
    /// Nothing pending; only its failure count is kept (until `forget`).
    Idle,
}

/// One tracked key in a `snapshot`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyState<K> {
    /// The key.
    pub key: K,
    /// Where it stands.
    pub phase: KeyPhase,
    /// A pending timer, also when the key is queued or processing meanwhile.
    pub timer: Option<Instant>,
    /// Failures since the last `forget` (`num_requeues`).
    pub requeues: u32,
    /// Queued (or due back after its claim) at [`Priority::Low`].
    pub low_priority: bool,
}

/// A deduplicating, delaying, rate-limited queue of keys with client-go's guarantees: a key is
/// queued at most once, never handed to two workers at once, and re-run after its claim is
/// dropped if it was added meanwhile. Cloning gives another handle to the same queue.
///
/// Delayed keys need a tokio runtime: the queue spawns one timer task (on creation when inside a
/// runtime, otherwise on the first delayed add or wait) and lives within that runtime.
///
/// # Examples
///
/// ```
/// use dbcluster_operator::runtime::workqueue::{QueueConfig, WorkQueue};
///
/// #[tokio::main(flavor = "current_thread")]
/// async fn main() {
///     let queue = WorkQueue::new(QueueConfig::named("example"));
///     queue.add("a");
///     queue.add("a"); // already queued: still one entry
///     assert_eq!(queue.len(), 1);
///     let claim = queue.get().await.expect("the queue is running");
///     assert_eq!(*claim.key(), "a");
///     drop(claim); // the key is done; had it been added meanwhile, it would be queued again
///     queue.shutdown();
///     assert!(queue.get().await.is_none());
/// }
/// ```
pub struct WorkQueue<K: Clone + Eq + Hash + Send + Sync + 'static, N: KeyNotes = ()> {
    shared: Arc<Shared<K, N>>,
}

impl<K: Clone + Eq + Hash + Send + Sync + 'static, N: KeyNotes> Clone for WorkQueue<K, N> {
    fn clone(&self) -> Self {
        Self { shared: Arc::clone(&self.shared) }
    }
}

impl<K: Clone + Eq + Hash + Send + Sync + 'static, N: KeyNotes> fmt::Debug for WorkQueue<K, N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WorkQueue").field("name", &self.shared.name).field("len", &self.len()).finish()
    }
}

struct Shared<K, N: KeyNotes> {
    state: Mutex<State<K, N>>,
    /// The state's slots and index, read without the lock by duplicate adds.
    slots: Arc<SlotArena<K>>,
    /// What each claim carries besides its key (see `claimed.rs`).
    claimed: ClaimCells<N::Taken>,
    hasher: DefaultHashBuilder,
    /// Parked getters; woken one per ready key, all at shutdown.
    getters: Notify,
    /// `shutdown_with_drain` callers, woken when the last claim is dropped after shutdown.
    drained: Notify,
    /// Pokes the timer task (earlier timer, shutdown, queue dropped).
    timer_wake: Arc<Notify>,
    timer_started: AtomicBool,
    /// When the timer task next samples outstanding claims (queue nanoseconds, a 500 ms grid).
    next_sample: AtomicU64,
    epoch: Epoch,
    backoff: BackoffConfig,
    bucket: Option<RetryBucket>,
    metrics: Option<Arc<dyn QueueMetrics>>,
    name: String,
}

impl<K: Clone + Eq + Hash + Send + Sync + 'static> WorkQueue<K> {
    /// An empty queue without notes.
    pub fn new(config: QueueConfig) -> Self {
        Self::with_notes(config)
    }
}

impl<K: Clone + Eq + Hash + Send + Sync + 'static, N: KeyNotes> WorkQueue<K, N> {
    /// An empty queue that keeps notes of type `N` per key (see [`KeyNotes`]).
    pub fn with_notes(config: QueueConfig) -> Self {
        let state = State::new(
            config.metrics.is_some(),
            u32::try_from(config.low_priority_max_wait.as_millis()).unwrap_or(u32::MAX),
        );
        let shared = Arc::new(Shared {
            slots: state.shared_slots(),
            claimed: ClaimCells::new(),
            state: Mutex::new(state),
            hasher: DefaultHashBuilder::default(),
            getters: Notify::new(),
            drained: Notify::new(),
            timer_wake: Arc::new(Notify::new()),
            timer_started: AtomicBool::new(false),
            next_sample: AtomicU64::new(0),
            epoch: Epoch::now(),
            backoff: config.backoff,
            bucket: config.retry_bucket.as_ref().map(RetryBucket::new),
            metrics: config.metrics,
            name: config.name,
        });
        shared.ensure_timer_task();
        Self { shared }
    }

    /// The queue's name (its metrics label).
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// Queues `key` at normal priority unless it is already queued; if it is being processed,
    /// it runs once more after its claim is dropped. Ignored after shutdown. A duplicate (the key
    /// already queued, or already due to run again) allocates nothing and takes no lock but a
    /// read lock of one of the index's shards (see `slots.rs`).
    pub fn add(&self, key: K) {
        self.add_with_priority(key, Priority::Normal);
    }

    /// `add` at `priority`. A key queued at low priority that is added at normal priority moves
    /// to the back of the normal line; a low add of a key already queued changes nothing.
    pub fn add_with_priority(&self, key: K, priority: Priority) {
        let hash = self.shared.hasher.hash_one(&key);
        if let Some(state) = self.lock_unless_absorbed(hash, &key, priority, false) {
            self.add_locked(state, hash, key, priority, |_, _| {});
        }
    }

    /// The queue's lock, or `None` when the add of `key` at `priority` is a duplicate absorbed
    /// without it (and counted in its slot when `count`). The lock-free path is taken when the
    /// lock is busy, and first, before the lock is tried, while this thread's last try found it
    /// busy: under contention the lock's cache line moves between cores on every try, which
    /// costs more than the shard and flags the lock-free path touches. Without contention the
    /// lock comes first: a free lock costs one atomic operation, as counting into a shard does,
    /// and a key that is not a duplicate would be looked up twice.
    #[inline(always)]
    fn lock_unless_absorbed(
        &self,
        hash: u64,
        key: &K,
        priority: Priority,
        count: bool,
    ) -> Option<MutexGuard<'_, State<K, N>>> {
        let shared = &*self.shared;
        let low = priority == Priority::Low;
        let contended = LOCK_FOUND_BUSY.get();
        if contended && shared.slots.absorb_duplicate(hash, key, low, count) {
            return None;
        }
        match shared.state.try_lock() {
            Ok(state) => {
                if contended {
                    LOCK_FOUND_BUSY.set(false);
                }
                Some(state)
            }
            Err(TryLockError::Poisoned(poisoned)) => Some(poisoned.into_inner()),
            Err(TryLockError::WouldBlock) => {
                LOCK_FOUND_BUSY.set(true);
                (contended || !shared.slots.absorb_duplicate(hash, key, low, count))
                    .then(|| shared.lock_state())
            }
        }
    }

    /// `add_with_priority` that also writes the key's notes with `note`, under the lock the add
    /// takes anyway (after shutdown the add is ignored and `note` is not called). `note` gets the
    /// key ([`NoteKey`]) beside its notes, so a note that keeps the key takes the adder's copy
    /// when the queue already had the key, or else a clone of the queue's, instead of the adder
    /// cloning one for it. What `note` returns is dropped once the lock is released: whatever it
    /// did not keep (a cause it did not build may hold shared data, whose reference count other
    /// threads write too).
    pub fn add_with_note<L>(
        &self,
        key: K,
        priority: Priority,
        note: impl FnOnce(NoteKey<'_, K>, &mut N) -> L,
    ) {
        let shared = &*self.shared;
        self.add_locked(shared.lock_state(), shared.hasher.hash_one(&key), key, priority, note);
    }

    /// `add_with_note`, except that a duplicate add that finds the lock contended (see
    /// `lock_unless_absorbed`) does not wait for it: it is counted in the key's slot instead,
    /// without the lock, and the claim that takes the key hands the count to its notes
    /// ([`KeyNotes::counted`]); `note` is then not called. For notes that can stand for such an
    /// add by a count (the controller's causes).
    pub fn add_with_note_or_count<L>(
        &self,
        key: K,
        priority: Priority,
        note: impl FnOnce(NoteKey<'_, K>, &mut N) -> L,
    ) {
        let hash = self.shared.hasher.hash_one(&key);
        if let Some(state) = self.lock_unless_absorbed(hash, &key, priority, true) {
            self.add_locked(state, hash, key, priority, note);
        }
    }

    /// The add itself, with the lock taken and the key hashed: the key's notes written, the key
    /// enqueued, the outcome reported after the lock.
    fn add_locked<L>(
        &self,
        state: MutexGuard<'_, State<K, N>>,
        hash: u64,
        key: K,
        priority: Priority,
        note: impl FnOnce(NoteKey<'_, K>, &mut N) -> L,
    ) {
        let shared = &*self.shared;
        let added = self.on_slot_locked(state, hash, key, note, |state, id| {
            state.enqueue(id, priority, &mut LazyNow::new(|| shared.epoch.nanos_now()))
        });
        if let Some(added) = added {
            shared.report_added(added);
        }
    }

    /// Under the lock: finds or makes the slot of `key`, writes its notes with `note`, then runs
    /// `op` on it; what `note` left is dropped after the lock. `None` after shutdown (the key is
    /// ignored, `note` not called).
    fn on_slot<T, L>(
        &self,
        key: K,
        note: impl FnOnce(NoteKey<'_, K>, &mut N) -> L,
        op: impl FnOnce(&mut State<K, N>, u32) -> T,
    ) -> Option<T> {
        let shared = &*self.shared;
        self.on_slot_locked(shared.lock_state(), shared.hasher.hash_one(&key), key, note, op)
    }

    /// `on_slot` with the lock taken and the key hashed.
    fn on_slot_locked<T, L>(
        &self,
        mut state: MutexGuard<'_, State<K, N>>,
        hash: u64,
        key: K,
        note: impl FnOnce(NoteKey<'_, K>, &mut N) -> L,
        op: impl FnOnce(&mut State<K, N>, u32) -> T,
    ) -> Option<T> {
        if state.shut_down {
            return None;
        }
        let (id, mut spare, evicted) = state.find_or_insert(hash, key);
        let (tracked, notes) = state.key_and_notes_mut(id, spare.is_none());
        let leftover = note(NoteKey::new(tracked, &mut spare), notes);
        let outcome = op(&mut state, id);
        drop(state);
        drop((spare, evicted, leftover));
        Some(outcome)
    }

    /// Adds `key` after `delay`. If a timer is already pending for the key, the earlier due
    /// time wins. The key may also be added directly meanwhile; the timer then adds it once more.
    pub fn add_after(&self, key: K, delay: Duration) {
        self.add_after_with_note(key, delay, |_, _| {});
    }

    /// `add_after` that also writes the key's notes (see [`WorkQueue::add_with_note`]). With a
    /// zero delay it is an add at once; otherwise the notes meant for the timer can wait for it
    /// ([`KeyNotes::timer_fired`]).
    pub fn add_after_with_note<L>(
        &self,
        key: K,
        delay: Duration,
        note: impl FnOnce(NoteKey<'_, K>, &mut N) -> L,
    ) {
        if delay.is_zero() {
            return self.add_with_note(key, Priority::Normal, note);
        }
        let due = self.shared.epoch.nanos_now().saturating_add(nanos(delay)).min(NEVER - 1);
        if let Some(poke) = self.on_slot(key, note, |state, id| state.schedule(id, due)) {
            self.shared.after_scheduling(poke);
        }
    }

    /// Reports a failure of `key`: it is retried after its exponential backoff, and then only as
    /// the overall retry budget allows. A failure while the previous retry is still pending
    /// counts for nothing: the pending due time stands.
    pub fn add_rate_limited(&self, key: K) {
        self.add_rate_limited_after(key, Duration::ZERO);
    }

    /// `add_rate_limited`, retrying no earlier than `at_least` from now whatever the backoff
    /// says: the floor a server's `Retry-After` asks for (the backoff still grows as usual).
    pub fn add_rate_limited_after(&self, key: K, at_least: Duration) {
        self.add_rate_limited_after_with_note(key, at_least, |_, _| {});
    }

    /// `add_rate_limited_after` that also writes the key's notes (see
    /// [`WorkQueue::add_with_note`]); the retry's timer is the one they can wait for.
    pub fn add_rate_limited_after_with_note<L>(
        &self,
        key: K,
        at_least: Duration,
        note: impl FnOnce(NoteKey<'_, K>, &mut N) -> L,
    ) {
        let shared = &*self.shared;
        let now = shared.epoch.nanos_now();
        let floor = now.saturating_add(nanos(at_least));
        let Some(poke) = self.on_slot(key, note, |state, id| {
            state.fail(id, now, floor, |failures| nanos(shared.backoff.delay(failures)))
        }) else {
            return;
        };
        if let Some(metrics) = &shared.metrics {
            metrics.retried();
        }
        self.shared.after_scheduling(poke.unwrap_or(false));
    }

    /// Reads the notes of `key`, if the queue tracks it (for `/debug/queue`), with the count of
    /// duplicate adds counted in its slot since its last claim (see `add_with_note_or_count`).
    pub fn notes_of<R>(&self, key: &K, read: impl FnOnce(&N, u32) -> R) -> Option<R> {
        self.on_tracked(key, |state, id| read(state.notes(id), state.slot(id).counted()))
    }

    /// Under the lock: runs `op` on the slot of `key`, if the queue tracks it.
    fn on_tracked<R>(&self, key: &K, op: impl FnOnce(&mut State<K, N>, u32) -> R) -> Option<R> {
        let shared = &*self.shared;
        let hash = shared.hasher.hash_one(key);
        let mut state = shared.lock_state();
        let id = state.find(hash, key)?;
        Some(op(&mut state, id))
    }

    /// Waits for a ready key and claims it; dropping the claim marks the key done. Returns
    /// `None` once the queue is shut down and no key is ready. Cancel-safe.
    pub async fn get(&self) -> Option<Claim<K, N>> {
        let mut woken_up = false;
        loop {
            if let Some(outcome) = self.try_claim(false, woken_up) {
                return outcome;
            }
            let woken = self.shared.getters.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            if let Some(outcome) = self.try_claim(true, false) {
                return outcome;
            }
            self.shared.ensure_timer_task();
            woken.await;
            woken_up = true;
        }
    }

    /// `Some(claim)` or `Some(None)` (shut down) if decided; `None` if the caller must wait
    /// (and then, when `park`, it is counted as parked). `woken`: the caller was woken, so it
    /// passes wakes on to other parked getters if keys remain ready.
    fn try_claim(&self, park: bool, woken: bool) -> Option<Option<Claim<K, N>>> {
        let shared = &*self.shared;
        let mut now = shared.lazy_now();
        let mut state = shared.lock_state();
        if woken {
            state.wake_arrived();
        }
        let Some((id, queued_at)) = state.pop_ready(&mut now) else {
            if state.shut_down {
                return Some(None);
            }
            if park {
                state.parked_getters += 1;
            }
            return None;
        };
        let wakes = if woken { state.pass_wakes_on() } else { 0 };
        // The claim is made under the lock, its notes moved once, from the slot's notes to its
        // cell. Nothing fails between its making and the lock's release (a claim dropped under
        // the lock would wait for it: its drop takes the lock). Its key stays in the slot (see
        // `Claim::key`).
        // SAFETY: under the lock, making the claim on `id`.
        unsafe { shared.claimed.fill(id, state.take_notes(id)) };
        let claim = Claim { shared: Arc::clone(&self.shared), slot: id };
        drop(state);
        for _ in 0..wakes {
            shared.getters.notify_one();
        }
        if let Some(metrics) = &shared.metrics {
            metrics.depth(-1);
            metrics.queue_duration(Duration::from_nanos(now.get().saturating_sub(queued_at)));
        }
        Some(Some(claim))
    }

    /// Drops the failure history of `key` (`num_requeues` becomes 0). A key that is otherwise idle
    /// leaves nothing behind. Call it when a key succeeds or its object is deleted.
    pub fn forget(&self, key: &K) {
        self.on_tracked(key, State::forget);
    }

    /// `forget`, and also cancels `key`'s pending timer (a delayed add or a retry not yet in the
    /// retry line) with the notes that waited for it: no pass runs for the key until it is added
    /// again. For a key whose last pass found nothing left to do, so that a requeue an earlier
    /// pass asked for does not run one more pass for nothing (client-go and controller-runtime
    /// keep the timer: `Forget` leaves it).
    pub fn settle(&self, key: &K) {
        self.on_tracked(key, State::settle);
    }

    /// Failures of `key` since it was last forgotten.
    pub fn num_requeues(&self, key: &K) -> u32 {
        self.on_tracked(key, |state, id| state.slot(id).failures()).unwrap_or(0)
    }

    /// Ready keys: neither being processed nor waiting for a timer.
    pub fn len(&self) -> usize {
        self.shared.lock_state().ready_len()
    }

    /// No key is ready.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Stops intake: later adds are ignored and timers no longer fire. Getters still receive
    /// what is ready, then `None`.
    pub fn shutdown(&self) {
        self.shared.lock_state().shut_down = true;
        self.shared.getters.notify_waiters();
        self.shared.timer_wake.notify_one();
    }

    /// `shutdown`, then waits until every outstanding claim has been dropped. Put a deadline
    /// around it at the call site.
    pub async fn shutdown_with_drain(&self) {
        self.shutdown();
        loop {
            let drained = self.shared.drained.notified();
            tokio::pin!(drained);
            drained.as_mut().enable();
            if self.shared.lock_state().processing_len() == 0 {
                return;
            }
            drained.await;
        }
    }

    /// Whether `shutdown` was called.
    pub fn is_shut_down(&self) -> bool {
        self.shared.lock_state().shut_down
    }

    /// Every tracked key with its phase, pending timer and failure count (for `/debug/queue`).
    /// Takes the lock for a pass over all tracked keys.
    pub fn snapshot(&self) -> Vec<KeyState<K>> {
        let shared = &*self.shared;
        let timed = shared.metrics.is_some();
        let at = |nanos: u64| shared.epoch.instant(nanos);
        let since = |nanos: u64| timed.then(|| at(nanos));
        let state = shared.lock_state();
        state
            .tracked()
            .filter_map(|(slot, times)| {
                let timer = (slot.due() != NEVER).then(|| at(slot.due()));
                let phase = if slot.is_processing() {
                    KeyPhase::Processing { since: since(times.started_at), again: slot.is_dirty() }
                } else if slot.is_queued() {
                    KeyPhase::Queued { since: since(times.queued_at) }
                } else if slot.is_in_retry_line() {
                    KeyPhase::WaitingForRetryBudget
                } else if let Some(until) = timer {
                    KeyPhase::Waiting { until }
                } else {
                    KeyPhase::Idle
                };
                Some(KeyState {
                    key: slot.key().cloned()?,
                    phase,
                    timer,
                    requeues: slot.failures(),
                    low_priority: slot.is_low(),
                })
            })
            .collect()
    }

    /// Keys the queue holds any state for (queued, processing, waiting or with failures).
    pub fn tracked_keys(&self) -> usize {
        self.shared.lock_state().tracked().count()
    }

    /// Keys with a failure count (the state `forget` drops).
    pub fn failure_entries(&self) -> usize {
        self.shared.lock_state().tracked().filter(|(slot, _)| slot.failures() > 0).count()
    }

    /// Entries in the timer heap, including superseded ones not yet expired.
    pub fn timer_entries(&self) -> usize {
        self.shared.lock_state().timer_entries()
    }
}

impl<K: Clone + Eq + Hash + Send + Sync + 'static, N: KeyNotes> Shared<K, N> {
    /// The state, locked. A `std` mutex, not `parking_lot`'s: with more runnable threads than
    /// cores (a caller outside the runtime on 2 cores), `parking_lot` yields the CPU while it
    /// waits, and an add then waits for the scheduler; `std`'s spins briefly, then sleeps until
    /// woken. A panic under the lock (none of the queue's code panics there) leaves the state
    /// as it was at the panic, as `parking_lot` would: poisoning is ignored.
    fn lock_state(&self) -> MutexGuard<'_, State<K, N>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The clock for one operation, read on first use (timed queues and the low line read it).
    fn lazy_now(&self) -> LazyNow<impl FnMut() -> u64 + '_> {
        LazyNow::new(|| self.epoch.nanos_now())
    }

    fn report_added(&self, added: Added) {
        match added {
            Added::Duplicate => return,
            Added::Queued { wake: true } => self.getters.notify_one(),
            Added::Queued { wake: false } | Added::Dirty => {}
        }
        if let Some(metrics) = &self.metrics {
            metrics.added();
            if added != Added::Dirty {
                metrics.depth(1);
            }
        }
    }

    fn after_scheduling(self: &Arc<Self>, poke: bool) {
        if poke {
            self.timer_wake.notify_one();
        }
        self.ensure_timer_task();
    }

    /// Starts the timer task once, if a runtime is at hand.
    fn ensure_timer_task(self: &Arc<Self>) {
        if self.timer_started.load(Ordering::Acquire) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        if !self.timer_started.swap(true, Ordering::AcqRel) {
            runtime.spawn(run_timers(Arc::downgrade(self), Arc::clone(&self.timer_wake)));
        }
    }

    /// The claim on slot `id` was dropped.
    fn finish(&self, id: u32) {
        let mut now = self.lazy_now();
        let (finished, shut_down) = {
            let mut state = self.lock_state();
            (state.finish(id, &mut now), state.shut_down)
        };
        if finished.wake {
            self.getters.notify_one();
        }
        if finished.idle && shut_down {
            self.drained.notify_waiters();
        }
        if let Some(metrics) = &self.metrics {
            metrics.work_duration(Duration::from_nanos(now.get().saturating_sub(finished.started_at)));
            if finished.requeued {
                metrics.depth(1);
            }
        }
    }
}

impl<K: Clone + Eq + Hash + Send + Sync + 'static, N: KeyNotes> TimerTarget for Shared<K, N> {
    fn release_due(&self) -> Next {
        let now = self.epoch.nanos_now();
        let period = nanos(UNFINISHED_WORK_PERIOD);
        let sample_due = self.next_sample.load(Ordering::Relaxed);
        let sample = self.metrics.is_some() && now >= sample_due;
        if sample {
            let next = sample_due.saturating_add(period);
            self.next_sample.store(if next > now { next } else { now + period }, Ordering::Relaxed);
        }
        let mut unfinished = None;
        let (released, retry_at, next_due) = {
            let mut state = self.lock_state();
            if state.shut_down {
                return Next::Stop;
            }
            let take_token = self.bucket.as_ref().map(|bucket| || bucket.try_take());
            let (released, retry_at) = state.release_due(now, take_token);
            if sample {
                let ages = state.processing_since().map(|started_at| now.saturating_sub(started_at));
                let (total, longest) = ages.fold((0u64, 0u64), |(sum, max), age| (sum + age, max.max(age)));
                unfinished = Some((Duration::from_nanos(total), Duration::from_nanos(longest)));
            }
            (released, retry_at, state.next_due())
        };
        for _ in 0..released.wakes {
            self.getters.notify_one();
        }
        let mut next = [next_due.map(|due| self.epoch.instant(due)), retry_at];
        if let Some(metrics) = &self.metrics {
            for _ in 0..released.added {
                metrics.added();
            }
            metrics.depth(released.queued as i64);
            if let Some((total, longest)) = unfinished {
                metrics.unfinished_work(total, longest);
            }
            let sample_at = self.epoch.instant(self.next_sample.load(Ordering::Relaxed));
            next[0] = Some(next[0].map_or(sample_at, |due| due.min(sample_at)));
        }
        next.into_iter().flatten().min().map_or(Next::Idle, Next::At)
    }
}

impl<K, N: KeyNotes> Drop for Shared<K, N> {
    fn drop(&mut self) {
        self.timer_wake.notify_one();
    }
}

thread_local! {
    /// Whether this thread's last try of a queue's lock in an add found it busy (a hint for
    /// [`WorkQueue::lock_unless_absorbed`], shared by all queues).
    static LOCK_FOUND_BUSY: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// A key handed out by [`WorkQueue::get`]. While it lives, no other worker gets the key;
/// dropping it (or calling [`Claim::done`]) marks the key done, so `done` cannot be forgotten.
pub struct Claim<K: Clone + Eq + Hash + Send + Sync + 'static, N: KeyNotes = ()> {
    shared: Arc<Shared<K, N>>,
    /// The claimed slot, which holds the key; the notes due when the key was handed out wait in
    /// the slot's claim cell (`claimed.rs`).
    slot: u32,
}

impl<K: Clone + Eq + Hash + Send + Sync + 'static, N: KeyNotes> Claim<K, N> {
    /// The claimed key: the queue's own copy, read from the key's slot, which keeps it while
    /// the claim lives (so handing a key out costs no clone, and dropping the claim no drop).
    pub fn key(&self) -> &K {
        self.shared.slots.claimed_key(self.slot)
    }

    /// The notes that were due when the key was handed out (see [`KeyNotes::take`]).
    pub fn notes(&self) -> &N::Taken {
        // SAFETY: this is the slot's claim, borrowed shared.
        unsafe { self.shared.claimed.claimed(self.slot) }
    }

    /// Takes the claim's notes, leaving the empty value.
    pub fn take_notes(&mut self) -> N::Taken {
        // SAFETY: this is the slot's claim, borrowed exclusively.
        std::mem::take(unsafe { self.shared.claimed.claimed_mut(self.slot) })
    }

    /// Marks the key done (the same as dropping the claim).
    pub fn done(self) {}
}

impl<K: Clone + Eq + Hash + Send + Sync + 'static, N: KeyNotes> Deref for Claim<K, N> {
    type Target = K;

    fn deref(&self) -> &K {
        self.key()
    }
}

impl<K: Clone + Eq + Hash + Send + Sync + 'static + fmt::Debug, N: KeyNotes> fmt::Debug for Claim<K, N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Claim").field(self.key()).finish()
    }
}

impl<K: Clone + Eq + Hash + Send + Sync + 'static, N: KeyNotes> Drop for Claim<K, N> {
    fn drop(&mut self) {
        // The cell is emptied before the slot is given back (see `claimed.rs`).
        drop(self.take_notes());
        self.shared.finish(self.slot);
    }
}

/// A duration in nanoseconds, saturating.
fn nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;

    use super::*;
    use crate::runtime::ObjectKey;

    /// Runs `add` on another thread while this one holds the queue's lock; true if it returned
    /// before the lock was released (bounded: 10 s).
    fn returns_under_the_lock<N: KeyNotes>(
        queue: &WorkQueue<ObjectKey, N>,
        add: impl FnOnce(&WorkQueue<ObjectKey, N>) + Send + 'static,
    ) -> bool {
        let (done, returned) = mpsc::channel();
        let held = queue.shared.lock_state();
        let other = queue.clone();
        let adder = std::thread::spawn(move || {
            add(&other);
            let _ = done.send(());
        });
        let under_lock = returned.recv_timeout(Duration::from_secs(10)).is_ok();
        drop(held);
        adder.join().expect("the adder panicked");
        under_lock
    }

    #[tokio::test]
    async fn a_claim_hands_out_the_queues_own_copy_of_the_key_without_a_clone() {
        let queue = WorkQueue::new(QueueConfig::default());
        let key: Arc<str> = Arc::from("default/a");
        queue.add(Arc::clone(&key));
        assert_eq!(Arc::strong_count(&key), 2, "the caller's and the queue's");
        let claim = queue.get().await.expect("the queue runs");
        assert!(Arc::ptr_eq(claim.key(), &key));
        assert_eq!(Arc::strong_count(&key), 2, "handing the key out cloned nothing");
        drop(claim);
        assert_eq!(queue.tracked_keys(), 0, "done: the key tracks nothing");
    }

    /// Notes that keep the key of every add.
    #[derive(Default)]
    struct KeptKeys(Vec<Arc<str>>);

    impl KeyNotes for KeptKeys {
        type Taken = Vec<Arc<str>>;

        fn timer_fired(&mut self) {}

        fn timer_cancelled(&mut self) {}

        fn take(&mut self) -> Vec<Arc<str>> {
            std::mem::take(&mut self.0)
        }
    }

    #[test]
    fn a_claim_is_two_words_whatever_its_notes() {
        let two_words = 2 * std::mem::size_of::<usize>();
        assert_eq!(std::mem::size_of::<Claim<ObjectKey>>(), two_words);
        assert_eq!(std::mem::size_of::<Claim<ObjectKey, crate::runtime::causes::CauseNotes>>(), two_words);
    }

    #[tokio::test]
    async fn a_claim_dropped_without_taking_its_notes_drops_them_before_the_slot_is_given_back() {
        let queue: WorkQueue<Arc<str>, KeptKeys> = WorkQueue::with_notes(QueueConfig::default());
        let key: Arc<str> = Arc::from("default/a");
        queue.add_with_note(Arc::clone(&key), Priority::Normal, |key, notes| notes.0.push(key.into_owned()));
        let claim = queue.get().await.expect("the queue runs");
        assert_eq!(Arc::strong_count(&key), 3, "the caller's, the slot's and the claim's notes'");
        drop(claim);
        assert_eq!(Arc::strong_count(&key), 2, "the notes went with the claim");
    }

    #[tokio::test]
    async fn a_note_that_keeps_the_key_takes_the_adders_copy_when_the_queue_had_the_key() {
        let queue: WorkQueue<Arc<str>, KeptKeys> = WorkQueue::with_notes(QueueConfig::default());
        let (first, second): (Arc<str>, Arc<str>) = (Arc::from("default/a"), Arc::from("default/a"));
        for key in [&first, &second] {
            queue.add_with_note(Arc::clone(key), Priority::Normal, |key, notes| {
                notes.0.push(key.into_owned())
            });
        }
        let mut claim = queue.get().await.expect("the queue runs");
        let kept = claim.take_notes();
        assert!(Arc::ptr_eq(&kept[0], &first), "a new key: a clone of the queue's copy, the first");
        assert!(Arc::ptr_eq(&kept[1], &second), "the queue had the key: the adder's own copy");
        assert_eq!(Arc::strong_count(&second), 2, "kept, not cloned and dropped");
    }

    #[test]
    fn a_duplicate_add_returns_while_the_queue_lock_is_held() {
        let queue = WorkQueue::new(QueueConfig::default());
        let key = ObjectKey::namespaced("default", "a");
        queue.add(key.clone());
        let again = key.clone();
        assert!(returns_under_the_lock(&queue, move |q| q.add(again)), "a duplicate add waited for the lock");
        let low = key.clone();
        assert!(
            returns_under_the_lock(&queue, move |q| q.add_with_priority(low, Priority::Low)),
            "a low add of a normal key waited for the lock"
        );
        assert_eq!(queue.len(), 1, "the duplicates changed nothing");
        let snapshot = queue.snapshot();
        assert_eq!(snapshot.len(), 1);
        assert!(!snapshot[0].low_priority, "a low add did not lower a normal key");
    }

    #[tokio::test]
    async fn a_duplicate_add_with_a_note_is_counted_while_the_lock_is_held_and_joins_the_next_claim() {
        use crate::runtime::causes::{Cause, CauseNotes, Enqueuer};

        let queue: WorkQueue<ObjectKey, CauseNotes> = WorkQueue::with_notes(QueueConfig::default());
        let enqueuer = Enqueuer::new(queue.clone(), true);
        let key = ObjectKey::namespaced("default", "a");
        let explicit = |reason: &'static str| move |_: NoteKey<'_, ObjectKey>| Cause::Explicit(reason.into());
        enqueuer.add(key.clone(), Priority::Normal, explicit("first"));
        for _ in 0..2 {
            let (again, enqueuer) = (key.clone(), enqueuer.clone());
            let under_lock = returns_under_the_lock(&queue, move |_| {
                enqueuer.add(again, Priority::Normal, |_| unreachable!("a counted add builds no cause"))
            });
            assert!(under_lock, "a duplicate add with a cause waited for the lock");
        }
        // The lock is free: this one is kept as the second cause.
        enqueuer.add(key.clone(), Priority::Normal, explicit("second"));
        assert_eq!(queue.len(), 1, "the duplicates changed nothing");
        let pending = crate::runtime::causes::pending(&queue, &key);
        assert_eq!((pending.kept.len(), pending.more), (2, 2), "/debug/queue shows the counted adds");

        let mut claim = queue.get().await.expect("the key is queued");
        let log = claim.take_notes();
        let kept: Vec<String> = log.kept.iter().map(ToString::to_string).collect();
        assert_eq!(kept, ["explicit: first", "explicit: second"]);
        assert_eq!((log.more, log.total()), (2, 4), "the two counted adds are in the pass that covers them");

        // Added again during the pass (the key is dirty), then once more with the lock busy:
        // both belong to the next pass, not to this one.
        enqueuer.add(key.clone(), Priority::Normal, explicit("third"));
        let (again, other) = (key.clone(), enqueuer.clone());
        assert!(returns_under_the_lock(&queue, move |_| other.add(
            again,
            Priority::Normal,
            explicit("fourth")
        )));
        drop(claim);
        let log = queue.get().await.expect("the key was added during its pass").take_notes();
        let kept: Vec<String> = log.kept.iter().map(ToString::to_string).collect();
        assert_eq!((kept, log.more), (vec!["explicit: third".to_owned()], 1));
    }

    #[test]
    fn after_finding_the_lock_busy_a_thread_absorbs_duplicates_first_until_it_takes_the_lock_again() {
        use crate::runtime::causes::{self, Cause, CauseNotes, Enqueuer};

        let queue: WorkQueue<ObjectKey, CauseNotes> = WorkQueue::with_notes(QueueConfig::default());
        let enqueuer = Enqueuer::new(queue.clone(), true);
        let (a, b) = (ObjectKey::namespaced("default", "a"), ObjectKey::namespaced("default", "b"));
        enqueuer.add(a.clone(), Priority::Normal, |_| Cause::Explicit("first".into()));
        let (counted, added) = (mpsc::channel(), mpsc::channel());
        let held = queue.shared.lock_state();
        let adder = std::thread::spawn({
            let (enqueuer, a, b) = (enqueuer.clone(), a.clone(), b.clone());
            let unbuilt =
                |_: NoteKey<'_, ObjectKey>| -> Cause { unreachable!("a counted add builds no cause") };
            move || {
                enqueuer.add(a.clone(), Priority::Normal, unbuilt);
                counted.0.send(()).expect("the test waits");
                added.1.recv_timeout(Duration::from_secs(10)).expect("the lock is released in time");
                // The lock is free now, but this thread found it busy last: lock-free first.
                enqueuer.add(a.clone(), Priority::Normal, unbuilt);
                // Not a duplicate: it takes the free lock, and the thread goes back to the lock first.
                enqueuer.add(b, Priority::Normal, |_| Cause::Explicit("b".into()));
                enqueuer.add(a, Priority::Normal, |_| Cause::Explicit("kept".into()));
            }
        });
        counted.1.recv_timeout(Duration::from_secs(10)).expect("the add returned under the lock");
        drop(held);
        added.0.send(()).expect("the adder waits");
        adder.join().expect("the adder panicked");
        let pending = causes::pending(&queue, &a);
        let kept: Vec<String> = pending.kept.iter().map(ToString::to_string).collect();
        assert_eq!(
            (kept, pending.more),
            (vec!["explicit: first".to_owned(), "explicit: kept".to_owned()], 2)
        );
        assert_eq!(queue.len(), 2, "a and b");
    }
}
