//! The worker loop: [`Controller::run`] waits for the caches, registers the handlers and starts
//! the workers; each worker claims a key, waits for its previous writes to be seen, runs one
//! reconcile pass and tells the queue how it ended.
use std::collections::VecDeque;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use dashmap::DashMap;
use futures::FutureExt;
use kube::Resource;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::{Action, Controller, ControllerConfig, ControllerError, Exists, PassResult, ReconcileError};
use crate::runtime::ObjectKey;
use crate::runtime::controller::causes::{CauseLog, ControllerQueue, Enqueuer};
use crate::runtime::controller::echoes::OwnEchoes;
use crate::runtime::controller::freshness::{Freshness, PendingWrites, Waited};
use crate::runtime::controller::hotloop::{HotLoops, Verdict};
use crate::runtime::controller::writes::{KindName, Write, record_writes};
use crate::runtime::object::InformerObject;
use crate::runtime::observe::introspection::{PassHistories, PassRecord};
use crate::runtime::observe::metrics::ControllerMetrics;

impl<K> Controller<K>
where
    K: InformerObject<Resource: Resource<DynamicType = ()>>,
{
    /// Runs until `shutdown` resolves: waits for the caches, then reconciles with the configured
    /// number of workers. On shutdown no new pass starts; passes in flight get
    /// `shutdown_timeout` to finish and are then cancelled.
    pub async fn run<Ctx, F, Fut, E>(
        self,
        reconcile: F,
        context: Arc<Ctx>,
        shutdown: impl Future<Output = ()>,
    ) -> Result<(), ControllerError>
    where
        Ctx: Send + Sync + 'static,
        F: Fn(ObjectKey, Arc<Ctx>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Action, E>> + Send + 'static,
        E: ReconcileError,
    {
        let enqueuer = self.enqueuer();
        let Self {
            config, queue, synced, registrations, exists, passes, replaying, freshness, echoes, ..
        } = self;
        let stop = CancellationToken::new();
        tokio::pin!(shutdown);

        let all_synced = futures::future::join_all(synced);
        tokio::select! {
            _ = &mut shutdown => return Ok(()),
            res = tokio::time::timeout(config.cache_sync_timeout, all_synced) => if res.is_err() {
                return Err(ControllerError::CacheSyncTimeout {
                    controller: config.name.clone(),
                    timeout: config.cache_sync_timeout,
                });
            }
        }
        replaying.store(true, Ordering::Relaxed);
        for register in registrations {
            register(enqueuer.clone());
        }
        replaying.store(false, Ordering::Relaxed);
        if let Some(metrics) = &config.metrics {
            metrics.set_max_concurrent(config.workers);
        }
        tracing::info!(controller = %config.name, workers = config.workers, "caches synced, starting workers");

        let worker = Arc::new(Worker {
            config: config.clone(),
            queue: queue.clone(),
            enqueuer,
            reconcile,
            context,
            exists,
            passes,
            freshness,
            echoes,
            own_kind: KindName::of::<K::Resource>(),
            pending_writes: DashMap::new(),
            hot_loops: parking_lot::Mutex::new(HotLoops::new(
                config.hot_loop.clone(),
                config.queue.backoff.clone(),
            )),
        });
        let mut workers = JoinSet::new();
        for _ in 0..config.workers {
            workers.spawn(Arc::clone(&worker).run(stop.clone()));
        }

        shutdown.await;
        tracing::info!(controller = %config.name, "shutting down: no new passes; waiting for passes in flight");
        stop.cancel();
        queue.shutdown();
        let drained = tokio::time::timeout(config.shutdown_timeout, async {
            while workers.join_next().await.is_some() {}
        })
        .await;
        if drained.is_err() {
            tracing::warn!(controller = %config.name, timeout = ?config.shutdown_timeout,
                "passes still running at the shutdown deadline were cancelled");
            workers.abort_all();
            // Returns once the aborted passes are dropped (their guards released).
            while workers.join_next().await.is_some() {}
        }
        Ok(())
    }
}

/// What every worker task shares.
struct Worker<Ctx, F> {
    config: ControllerConfig,
    queue: ControllerQueue,
    enqueuer: Enqueuer,
    reconcile: F,
    context: Arc<Ctx>,
    exists: Exists,
    passes: PassHistories,
    /// The informers whose delivery of a pass's writes the next pass waits for.
    freshness: Freshness,
    /// What passes that chose their next step wrote to their keys' own objects, whose echoes
    /// queue nothing.
    echoes: Arc<OwnEchoes>,
    /// The kind of the keys' own objects.
    own_kind: KindName,
    /// What each key's next pass waits for: its last pass's writes, reduced when that pass
    /// ended to each informer's highest resourceVersion (no labels kept between passes).
    pending_writes: DashMap<ObjectKey, PendingWrites>,
    hot_loops: parking_lot::Mutex<HotLoops>,
}

/// Numbers each pass so that its log lines can be told apart from the next pass's.
static PASS_IDS: AtomicU64 = AtomicU64::new(1);

impl<Ctx, F, Fut, E> Worker<Ctx, F>
where
    Ctx: Send + Sync + 'static,
    F: Fn(ObjectKey, Arc<Ctx>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Action, E>> + Send + 'static,
    E: ReconcileError,
{
    async fn run(self: Arc<Self>, stop: CancellationToken) {
        loop {
            let mut claim = tokio::select! {
                biased;
                _ = stop.cancelled() => return,
                claim = self.queue.get() => match claim {
                    Some(claim) => claim,
                    None => return,
                },
            };
            let key = claim.key().clone();
            let causes = claim.take_notes();
            let Some(causes) = self.held_back(&key, causes) else {
                continue;
            };
            let id = PASS_IDS.fetch_add(1, Ordering::Relaxed);
            let span = tracing::info_span!("reconcile", controller = %self.config.name, key = %key,
                reconcile_id = id, trigger = tracing::field::Empty);
            if self.config.record_causes {
                span.record("trigger", tracing::field::display(causes.trigger()));
            }
            self.pass(key, causes).instrument(span).await;
            drop(claim);
        }
    }

    /// The causes back if the pass may run; `None` if `key` is in a hot loop whose backoff has
    /// not elapsed: it is then put back until it has, its causes kept for the pass that follows.
    fn held_back(&self, key: &ObjectKey, causes: CauseLog) -> Option<CauseLog> {
        let Some(not_before) = self.hot_loops.lock().not_before(key) else { return Some(causes) };
        let now = Instant::now();
        if not_before <= now {
            return Some(causes);
        }
        self.enqueuer.hold_back(key.clone(), not_before - now, causes);
        None
    }

    /// One pass for `key`, run for `causes`, and what the queue is told afterwards.
    async fn pass(&self, key: ObjectKey, causes: CauseLog) {
        let metrics = self.config.metrics.as_ref();
        // Dropped when the pass ends, is cancelled at shutdown or its worker is aborted.
        let _busy = metrics.map(ControllerMetrics::active_worker);
        let stale_wait = self.wait_for_own_writes(&key).await;
        let started = Instant::now();
        let pass = AssertUnwindSafe((self.reconcile)(key.clone(), Arc::clone(&self.context))).catch_unwind();
        let pass = record_writes(pass);
        let (outcome, writes) = match self.config.reconcile_timeout {
            Some(limit) => match tokio::time::timeout(limit, pass).await {
                Ok((outcome, writes)) => (Ok(outcome), writes),
                Err(_) => (Err(limit), Vec::new()),
            },
            None => {
                let (outcome, writes) = pass.await;
                (Ok(outcome), writes)
            }
        };
        let took = started.elapsed();
        let mut error_message = None;
        let result = match outcome {
            Ok(Ok(Ok(Action::Done))) => {
                self.queue.settle(&key);
                PassResult::Success
            }
            Ok(Ok(Ok(Action::RequeueAfter(delay)))) => {
                self.queue.forget(&key);
                self.enqueuer.requeue_after(key.clone(), delay);
                PassResult::RequeueAfter
            }
            Ok(Ok(Err(error))) if error.is_terminal() => {
                tracing::error!(error = %error, "reconcile failed; not retrying until the object changes");
                error_message = Some(error.to_string());
                self.queue.forget(&key);
                PassResult::TerminalError
            }
            Ok(Ok(Err(error))) => {
                let retries = self.queue.num_requeues(&key);
                let retry_after = error.retry_after();
                tracing::warn!(error = %error, retries, ?retry_after, "reconcile failed; retrying with backoff");
                let message = error.to_string();
                self.retry(&key, retry_after.unwrap_or_default(), &message);
                error_message = Some(message);
                PassResult::Error
            }
            Ok(Err(panic)) => {
                let message = panic_message(panic.as_ref());
                tracing::error!(panic = %message, "reconcile panicked; retrying with backoff");
                let message = format!("panicked: {message}");
                self.retry(&key, Duration::ZERO, &message);
                error_message = Some(message);
                PassResult::Panic
            }
            Err(limit) => {
                tracing::warn!(timeout = ?limit, "reconcile timed out; retrying with backoff");
                let message = format!("timed out after {limit:?}");
                self.retry(&key, Duration::ZERO, &message);
                error_message = Some(message);
                PassResult::Timeout
            }
        };
        if let Some(m) = metrics {
            m.pass(result, took);
        }
        let chose = matches!(result, PassResult::Success | PassResult::RequeueAfter);
        let echo_expected = self.echoes.after_pass(&key, self.own_kind, chose, &writes);
        // A write whose echo queues nothing cannot feed a loop (see `hotloop`).
        let hot = self.watch_for_hot_loop(&key, &writes, writes.len() > usize::from(echo_expected));
        let history = writes.iter().map(Write::for_history).collect();
        let pending = self.freshness.pending(&writes);
        drop(writes);
        if !pending.is_empty() {
            self.pending_writes.insert(key.clone(), pending);
        }
        let last = PassRecord {
            causes,
            started,
            result,
            error: error_message.map(String::into_boxed_str),
            took,
            writes: history,
            stale_cache_wait: stale_wait,
            hot_loop: hot,
        };
        self.remember(key, last);
    }

    /// Retries `key` with its backoff, no earlier than `at_least`, recording `error` as the cause.
    fn retry(&self, key: &ObjectKey, at_least: Duration, error: &str) {
        self.enqueuer.retry(key.clone(), at_least, error);
    }

    /// Waits (bounded) until the informers have delivered what the key's previous pass wrote.
    async fn wait_for_own_writes(&self, key: &ObjectKey) -> Option<Waited> {
        let (_, pending) = self.pending_writes.remove(key)?;
        let waited = self.freshness.wait_for(pending, self.config.stale_cache_wait).await;
        if waited.waited.is_zero() {
            return None;
        }
        if waited.timed_out {
            tracing::warn!(waited = ?waited.waited, "the caches did not deliver the previous pass's writes in time; reconciling anyway");
        } else {
            tracing::debug!(waited = ?waited.waited, "waited for the caches to deliver the previous pass's writes");
        }
        if let Some(m) = &self.config.metrics {
            m.stale_cache_wait(waited.waited, waited.timed_out);
        }
        Some(waited)
    }

    /// Feeds the pass to the hot-loop detector (`feeds_back`: it made a write that can queue the
    /// key again; `writes` are named in the report); true if the key is hot.
    fn watch_for_hot_loop(&self, key: &ObjectKey, writes: &[Write], feeds_back: bool) -> bool {
        let mut hot_loops = self.hot_loops.lock();
        let verdict = hot_loops.observe(key, Instant::now(), feeds_back);
        let hot_keys = hot_loops.hot_keys();
        drop(hot_loops);
        let changed = match &verdict {
            Verdict::Calm { settled } => *settled,
            Verdict::Hot { report, new, .. } => {
                if *report {
                    let written: Vec<String> = writes
                        .iter()
                        .map(|w| format!("{} {} (rv {})", w.kind, w.key, w.resource_version))
                        .collect();
                    tracing::warn!(
                        writes = self.config.hot_loop.writes,
                        window = ?self.config.hot_loop.window,
                        ?written,
                        "hot loop: every pass of this key writes; slowing it with the per-key backoff until a pass writes nothing"
                    );
                }
                *new
            }
        };
        if changed && let Some(m) = &self.config.metrics {
            m.set_hot_loop_keys(hot_keys);
        }
        matches!(verdict, Verdict::Hot { .. })
    }

    /// Keeps the pass in the key's history for the debug endpoint (the last `pass_history`); a
    /// deleted object that reconciled cleanly leaves no record behind, so the records stay as
    /// many as the objects.
    ///
    /// Held for every key at scale, so the history grows one record at a time up to its bound (a
    /// settled key's few passes leave no spare room). Each record is kept as it is: packing them
    /// saved about a tenth of the operator's memory at 5 000 clusters (docs/performance.md), less
    /// than the code it took.
    fn remember(&self, key: ObjectKey, last: PassRecord) {
        self.passes.totals.record(&last);
        if last.result == PassResult::Success && !(self.exists)(&key) {
            self.passes.histories.remove(&key);
            self.pending_writes.remove(&key);
            self.echoes.forget(&key);
            let mut hot_loops = self.hot_loops.lock();
            if hot_loops.remove(&key)
                && let Some(m) = &self.config.metrics
            {
                m.set_hot_loop_keys(hot_loops.hot_keys());
            }
            return;
        }
        keep_last(&mut self.passes.histories.entry(key).or_default(), last, self.config.pass_history);
    }
}

/// Appends `pass` to `history`, dropping the oldest records beyond `bound` (at least one is
/// kept), and growing the history one record at a time: no spare room.
pub(super) fn keep_last<T>(history: &mut VecDeque<T>, pass: T, bound: usize) {
    while history.len() >= bound.max(1) {
        history.pop_front();
    }
    history.reserve_exact(1);
    history.push_back(pass);
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a non-string panic payload".to_string())
}
