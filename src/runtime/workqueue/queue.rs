//! The [`WorkQueue`] handle, the [`Claim`] guard and the timer task. Each operation takes the
//! lock, changes the state (`state.rs`), lets go, then wakes and reports as the state says.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::{cmp::Reverse, fmt, hash::Hash, ops::Deref, time::Duration};

use parking_lot::{Mutex, MutexGuard};
use tokio::{sync::Notify, time::Instant};

use super::config::{BackoffConfig, QueueConfig, QueueMetrics, RetryBucket};
use super::notes::{KeyNotes, NoteKey};
use super::state::{Clock, Entry, NEVER, Phase, Priority, Retry, State, nanos};
use super::{KeyPhase, KeyState};

/// How often the claims are sampled for metrics (client-go's 500 ms), in nanoseconds.
const SAMPLE_EVERY: u64 = 500_000_000;

/// When an add takes effect.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum When {
    /// Now, at this priority (rules 1, 2 and 10).
    Now(Priority),
    /// After this delay (rule 3); zero is `Now(Priority::Normal)`.
    After(Duration),
    /// As a retry: after the key's backoff and a token of the retry budget, and no earlier than
    /// this (rules 4 to 6 and 13).
    Retry(Duration),
}

/// A deduplicating, delaying, rate-limited queue of keys (the rules are in the module docs);
/// clones are handles to the same queue. Timers need a tokio runtime: the queue spawns its timer
/// task on creation inside one, else on the first delayed add or wait.
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
    getters: Notify, // parked getters: one woken per key that becomes ready, all at shutdown
    drained: Notify, // `shutdown_with_drain` callers, woken when the last claim is dropped
    timer_wake: Arc<Notify>, // an earlier timer, shutdown, or the queue dropped
    timer_started: AtomicBool,
    epoch: Instant, // the queue's times are nanoseconds since
    backoff: BackoffConfig,
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
        let bucket = config.retry_bucket.as_ref().map(RetryBucket::new);
        let state = State::new(config.metrics.is_some(), nanos(config.low_priority_max_wait), bucket);
        let shared = Arc::new(Shared {
            state: Mutex::new(state),
            getters: Notify::new(),
            drained: Notify::new(),
            timer_wake: Arc::new(Notify::new()),
            timer_started: AtomicBool::new(false),
            epoch: Instant::now(),
            backoff: config.backoff,
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

    /// Queues `key` (rules 1 and 2); ignored after shutdown.
    pub fn add(&self, key: K) {
        self.add_with_note(key, When::Now(Priority::Normal), |_, _| {});
    }

    /// `add` at `priority` (rule 10).
    pub fn add_with_priority(&self, key: K, priority: Priority) {
        self.add_with_note(key, When::Now(priority), |_, _| {});
    }

    /// Adds `key` after `delay` (rule 3); a direct add meanwhile does not cancel the timer.
    pub fn add_after(&self, key: K, delay: Duration) {
        self.add_with_note(key, When::After(delay), |_, _| {});
    }

    /// Reports a failure of `key`: it is retried after its backoff and a token (rules 4 to 6).
    pub fn add_rate_limited(&self, key: K) {
        self.add_with_note(key, When::Retry(Duration::ZERO), |_, _| {});
    }

    /// `add_rate_limited`, retrying no earlier than `at_least` from now (rule 13).
    pub fn add_rate_limited_after(&self, key: K, at_least: Duration) {
        self.add_with_note(key, When::Retry(at_least), |_, _| {});
    }

    /// Adds `key` as `when` says, and writes its notes with `note` under the lock (see
    /// [`KeyNotes`]; notes can wait for a timer). What `note` returns is dropped after the lock.
    pub fn add_with_note<L>(&self, key: K, when: When, note: impl FnOnce(NoteKey<'_, K>, &mut N) -> L) {
        let shared = &*self.shared;
        let mut now = Clock(shared.epoch, None);
        let mut state = shared.state.lock();
        if state.shut_down {
            return;
        }
        let (id, mut spare) = state.entry_for(key);
        let entry = state.entry_mut(id);
        let leftover = note(NoteKey::new(&entry.key, &mut spare), &mut entry.notes);
        match when {
            When::Now(priority) => state.enqueue(id, priority, &mut now),
            When::After(Duration::ZERO) => state.enqueue(id, Priority::Normal, &mut now),
            When::After(delay) => state.schedule(id, now.get().saturating_add(nanos(delay)).min(NEVER - 1)),
            When::Retry(at_least) => {
                let (now, delay) = (now.get(), |failures| nanos(shared.backoff.delay(failures)));
                state.fail(id, now, now.saturating_add(nanos(at_least)), delay);
            }
        }
        Shared::unlock(&self.shared, state);
        drop((spare, leftover));
    }

    /// Reads the notes of `key`, if the queue tracks it (for `/debug/queue`).
    pub fn notes_of<R>(&self, key: &K, read: impl FnOnce(&N) -> R) -> Option<R> {
        self.on_tracked(key, |state, id| read(&state.entry(id).notes))
    }

    fn on_tracked<R>(&self, key: &K, op: impl FnOnce(&mut State<K, N>, u32) -> R) -> Option<R> {
        let mut state = self.shared.state.lock();
        let id = state.find(key)?;
        Some(op(&mut state, id))
    }

    /// Waits for a ready key and claims it; `None` once shut down and drained. Cancel-safe: a
    /// cancelled getter's wake-up passes on to another (tokio's `Notify`).
    pub async fn get(&self) -> Option<Claim<K, N>> {
        loop {
            if let Some(outcome) = self.try_claim(false) {
                return outcome;
            }
            let woken = self.shared.getters.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            if let Some(outcome) = self.try_claim(true) {
                return outcome;
            }
            self.shared.ensure_timer_task();
            woken.await;
        }
    }

    /// `Some(claim)`, `Some(None)` once shut down and drained, `None`: wait (parked if `park`).
    fn try_claim(&self, park: bool) -> Option<Option<Claim<K, N>>> {
        let shared = &*self.shared;
        let mut now = Clock(shared.epoch, None);
        let mut state = shared.state.lock();
        let Some(id) = state.pop_ready(&mut now) else {
            state.parked += usize::from(park && !state.shut_down);
            return state.shut_down.then_some(None);
        };
        let queued_at = state.queued_at(id);
        let entry = state.entry_mut(id);
        let (key, notes) = (entry.key.clone(), entry.notes.take());
        drop(state);
        if let Some(metrics) = &shared.metrics {
            metrics.depth(-1);
            metrics.queue_duration(Duration::from_nanos(now.get().saturating_sub(queued_at)));
        }
        Some(Some(Claim { shared: Arc::clone(&self.shared), id, key, notes }))
    }

    /// Drops the failure history of `key` (rule 7): when it succeeds or its object is deleted.
    pub fn forget(&self, key: &K) {
        self.on_tracked(key, State::forget);
    }

    /// `forget`, and cancels the pending timer (not a retry due already) and the notes that
    /// waited for it: for a key whose last pass found nothing to do.
    pub fn settle(&self, key: &K) {
        self.on_tracked(key, State::settle);
    }

    /// Failures of `key` since it was last forgotten.
    pub fn num_requeues(&self, key: &K) -> u32 {
        self.on_tracked(key, |state, id| u32::from(state.entry(id).failures)).unwrap_or(0)
    }

    /// Ready keys: neither being processed nor waiting for a timer.
    pub fn len(&self) -> usize {
        self.shared.state.lock().queued
    }

    /// No key is ready.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Stops intake and timers (rule 8). Getters still receive what is ready, then `None`.
    pub fn shutdown(&self) {
        self.shared.state.lock().shut_down = true;
        self.shared.getters.notify_waiters();
        self.shared.timer_wake.notify_one();
    }

    /// `shutdown`, then waits until every claim has been dropped (put a deadline around it).
    pub async fn shutdown_with_drain(&self) {
        self.shutdown();
        loop {
            let drained = self.shared.drained.notified();
            tokio::pin!(drained);
            drained.as_mut().enable();
            if self.shared.state.lock().processing.is_empty() {
                return;
            }
            drained.await;
        }
    }

    /// Whether `shutdown` was called.
    pub fn is_shut_down(&self) -> bool {
        self.shared.state.lock().shut_down
    }

    /// Every key the queue holds any state for (queued, processing, waiting or with failures),
    /// with its phase, pending timer and failure count.
    pub fn snapshot(&self) -> Vec<KeyState<K>> {
        let at = |nanos: u64| self.shared.epoch + Duration::from_nanos(nanos);
        let since = |nanos: u64| self.shared.metrics.is_some().then(|| at(nanos));
        let state = self.shared.state.lock();
        let key_state = |(id, entry): (u32, &Entry<K, N>)| {
            let timer = (entry.due != NEVER).then(|| at(entry.due));
            let (phase, low_priority) = match (entry.phase, entry.retry, timer) {
                (Phase::Processing { again }, ..) => {
                    let started_at = state.processing.get(&id).copied().unwrap_or(0);
                    (KeyPhase::Processing { since: since(started_at), again: again.is_some() }, again)
                }
                (Phase::Queued(p), ..) => (KeyPhase::Queued { since: since(state.queued_at(id)) }, Some(p)),
                (Phase::Idle, Retry::Line, _) => (KeyPhase::WaitingForRetryBudget, None),
                (Phase::Idle, _, Some(until)) => (KeyPhase::Waiting { until }, None),
                (Phase::Idle, _, None) => (KeyPhase::Idle, None),
            };
            let (key, requeues, low_priority) =
                (entry.key.clone(), entry.failures.into(), low_priority == Some(Priority::Low));
            KeyState { key, phase, timer, requeues, low_priority }
        };
        state.entries().map(key_state).collect()
    }

    /// Entries in the timer heap, including superseded ones not yet expired.
    pub fn timer_entries(&self) -> usize {
        self.shared.state.lock().timers.len()
    }
}

impl<K: Clone + Eq + Hash + Send + Sync + 'static, N: KeyNotes> Shared<K, N> {
    /// Releases the lock, then acts on what the state left to do (its [`Effects`](super::state::Effects)).
    fn unlock(self: &Arc<Self>, mut state: MutexGuard<'_, State<K, N>>) {
        let effects = std::mem::take(&mut state.effects);
        drop(state);
        for _ in 0..effects.wakes {
            self.getters.notify_one();
        }
        if effects.poke {
            self.timer_wake.notify_one();
        }
        if effects.timed || effects.retried {
            self.ensure_timer_task();
        }
        let Some(metrics) = &self.metrics else { return };
        (0..effects.added).for_each(|_| metrics.added());
        if effects.depth != 0 {
            metrics.depth(effects.depth);
        }
        if effects.retried {
            metrics.retried();
        }
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

    /// The claim on entry `id` was dropped.
    fn finish(self: &Arc<Self>, id: u32) {
        let mut now = Clock(self.epoch, None);
        let mut state = self.state.lock();
        let started_at = state.finish(id, &mut now);
        let drained = state.shut_down && state.processing.is_empty();
        self.unlock(state);
        if drained {
            self.drained.notify_waiters();
        }
        if let Some(metrics) = &self.metrics {
            metrics.work_duration(Duration::from_nanos(now.get().saturating_sub(started_at)));
        }
    }

    /// Fires due timers and samples the claims when due; when to look again (`None`: stop).
    fn release_due(self: &Arc<Self>, next_sample: &mut u64) -> Option<Option<Instant>> {
        let mut clock = Clock(self.epoch, None);
        let now = clock.get();
        let mut state = self.state.lock();
        if state.shut_down {
            return None;
        }
        let next_token = state.release_due(&mut clock);
        let next_timer = state.timers.peek().map(|Reverse((due, _))| *due);
        let sample = self.metrics.is_some() && now >= *next_sample;
        let unfinished = sample.then(|| {
            *next_sample = (now / SAMPLE_EVERY + 1) * SAMPLE_EVERY;
            let ages = state.processing.values().map(|started_at| now.saturating_sub(*started_at));
            ages.fold((0, 0), |(sum, max), age| (sum + age, max.max(age)))
        });
        self.unlock(state);
        if let (Some(metrics), Some((total, longest))) = (&self.metrics, unfinished) {
            metrics.unfinished_work(Duration::from_nanos(total), Duration::from_nanos(longest));
        }
        let next_sample = self.metrics.is_some().then_some(*next_sample);
        let next = [next_timer, next_token, next_sample].into_iter().flatten().min();
        Some(next.map(|at| self.epoch + Duration::from_nanos(at)))
    }
}

/// The one task that fires timers; it holds the queue weakly, so dropping the queue ends it.
async fn run_timers<K: Clone + Eq + Hash + Send + Sync + 'static, N: KeyNotes>(
    queue: Weak<Shared<K, N>>,
    wake: Arc<Notify>,
) {
    let mut next_sample = 0;
    loop {
        let poked = wake.notified();
        tokio::pin!(poked);
        poked.as_mut().enable();
        match queue.upgrade().and_then(|queue| queue.release_due(&mut next_sample)) {
            None => return,
            Some(None) => poked.await,
            Some(Some(at)) => {
                tokio::select! {
                    () = tokio::time::sleep_until(at) => {}
                    () = &mut poked => {}
                }
            }
        }
    }
}

impl<K, N: KeyNotes> Drop for Shared<K, N> {
    fn drop(&mut self) {
        self.timer_wake.notify_one();
    }
}

/// A key handed out by [`WorkQueue::get`], held by no other worker until this is dropped.
pub struct Claim<K: Clone + Eq + Hash + Send + Sync + 'static, N: KeyNotes = ()> {
    shared: Arc<Shared<K, N>>,
    id: u32, // the key's entry, kept while the claim lives
    key: K,
    notes: N::Taken,
}

impl<K: Clone + Eq + Hash + Send + Sync + 'static, N: KeyNotes> Claim<K, N> {
    /// The claimed key.
    pub fn key(&self) -> &K {
        &self.key
    }

    /// Takes the notes that were due when the key was handed out, leaving the empty value.
    pub fn take_notes(&mut self) -> N::Taken {
        std::mem::take(&mut self.notes)
    }

    /// Marks the key done (the same as dropping the claim).
    pub fn done(self) {}
}

impl<K: Clone + Eq + Hash + Send + Sync + 'static, N: KeyNotes> Deref for Claim<K, N> {
    type Target = K;

    fn deref(&self) -> &K {
        &self.key
    }
}

impl<K: Clone + Eq + Hash + Send + Sync + 'static + fmt::Debug, N: KeyNotes> fmt::Debug for Claim<K, N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Claim").field(&self.key).finish()
    }
}

impl<K: Clone + Eq + Hash + Send + Sync + 'static, N: KeyNotes> Drop for Claim<K, N> {
    fn drop(&mut self) {
        self.shared.finish(self.id);
    }
}
