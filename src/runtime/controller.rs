//! The controller: informers' events become keys in a [`WorkQueue`], and worker tasks call
//! `reconcile` for each key, one worker per key at a time.
//!
//! Wiring follows controller-runtime's builder: [`Controller::new`] takes the primary kind's
//! informer (`For`), [`Controller::owns`] maps a child's *controller* ownerReference to its owner's
//! key, [`Controller::watches`] takes any mapper. [`Controller::run`] waits until every informer is
//! synced, registers the handlers (each is first told about every cached object, so nothing that
//! happened before is missed), then starts the workers.
//!
//! A pass ends one of four ways, and the queue is told accordingly:
//!
//! | reconcile returned | queue |
//! |---|---|
//! | `Ok(Action::Done)` | `settle`: `forget` (backoff reset), and the key's pending timer cancelled |
//! | `Ok(Action::RequeueAfter(d))` | `forget`, then `add_after(d)` |
//! | `Err(e)`, not terminal (or a panic, or a timeout) | `add_rate_limited` (per-key backoff), no earlier than `e.retry_after()` |
//! | `Err(e)` with `e.is_terminal()` | `forget`; no retry until the next event |
//!
//! `Done` cancels the timer an earlier pass's `RequeueAfter` (or retry) left pending (a design
//! beyond the anchors: client-go's `Forget` and kube-runtime's scheduler keep it, and it runs
//! one more pass for nothing). A pass that ends `Done` read a newer state than the pass that
//! asked to look again, and `reconcile` asks again whenever it still needs to: so a cluster
//! that became ready while an earlier pass's 10-second check was pending gets no pass 10 s later.
//! For a like reason the watch event that brings back a pass's own write to its key's object (its
//! status) queues no pass when the pass ended `Done` or `RequeueAfter`: it knew that state and
//! chose what comes next (see `echoes`; the anchors queue it).
//!
//! Each pass runs inside [`record_writes`]: what it wrote through [`recorded`] is kept for the
//! key. Before the key's next pass the worker waits (at most `stale_cache_wait`, then goes on and
//! counts it) until the informers that select the written objects have delivered those writes
//! (read-your-writes, KEP-5647; see `freshness`). A key whose passes keep writing is a hot loop (see
//! `hotloop`): reported once per window, and its passes held back by the per-key backoff until
//! a pass writes nothing.
//!
//! Every enqueue goes through an [`Enqueuer`], which records its cause in the key's slot of the
//! queue (see `causes`): each pass takes, with its claim, the causes gathered since the previous
//! one, its span carries
//! `trigger="<first cause>" (+N)`, and each key keeps its last
//! [`ControllerConfig::pass_history`] passes (causes, start, duration, result, writes) for
//! `/debug/queue/<namespace>/<name>`. [`ControllerConfig::record_causes`] turns the causes off.
//!
//! [`record_writes`]: crate::runtime::writes::record_writes
//! [`recorded`]: crate::runtime::writes::recorded
//! [`WorkQueue`]: crate::runtime::workqueue::WorkQueue
//!
//! Reconcile receives only the key and the shared context; it reads objects from the caches.

use std::collections::VecDeque;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use dashmap::DashMap;
use futures::FutureExt;
use futures::future::BoxFuture;
use kube::Resource;
use serde::Serialize;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::runtime::cache::InformerEvent;
use crate::runtime::causes::{
    Cause, CauseLog, ControllerQueue, Enqueuer, EventType, ObjectEvent, ResourceVersion,
};
use crate::runtime::echoes::OwnEchoes;
use crate::runtime::freshness::{DEFAULT_STALE_CACHE_WAIT, Freshness, PendingWrites, Waited};
use crate::runtime::hotloop::{HotLoopConfig, HotLoops, Verdict};
use crate::runtime::informer::{EventOrigin, Informer};
use crate::runtime::introspection::{ControllerProbe, PassHistories, PassRecord};
use crate::runtime::metrics::ControllerMetrics;
use crate::runtime::object::InformerObject;
use crate::runtime::packed_pass::PackedPass;
use crate::runtime::workqueue::{Priority, QueueConfig};
use crate::runtime::writes::{KindName, Write, record_writes};
use crate::runtime::{Object, ObjectKey};

/// What a successful reconcile pass asks for next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// The object is as it should be: nothing until the next event.
    Done,
    /// Run again after this long, even without an event (e.g. while waiting for pods).
    RequeueAfter(Duration),
}

/// An error a reconcile function can return. Errors are retried with per-key exponential backoff
/// unless they are terminal: a terminal error (say, an invalid spec) cannot be fixed by retrying,
/// only by a change to the object, which brings its own event.
pub trait ReconcileError: std::error::Error + Send + Sync + 'static {
    /// Whether retrying is pointless. Defaults to `false`.
    fn is_terminal(&self) -> bool {
        false
    }

    /// How long the server asked to wait before trying again (its `Retry-After`), if it did: the
    /// retry comes no earlier, whatever the backoff says. Defaults to `None`; see
    /// [`crate::runtime::client::retry_after`] for a `kube::Error`.
    fn retry_after(&self) -> Option<Duration> {
        None
    }
}

/// Why a controller could not run.
#[derive(Debug, thiserror::Error)]
pub enum ControllerError {
    /// An informer did not finish its first list in time: usually missing RBAC or a missing CRD.
    #[error("the caches of controller {controller} did not sync within {timeout:?}")]
    CacheSyncTimeout {
        /// The controller's name.
        controller: String,
        /// How long it waited.
        timeout: Duration,
    },
}

/// How a controller runs.
#[derive(Debug, Clone)]
pub struct ControllerConfig {
    /// The controller's name: the `controller` label of its metrics and the queue's name.
    pub name: String,
    /// Worker tasks reconciling at once (distinct keys only).
    pub workers: usize,
    /// A pass that runs longer than this is cancelled and counted as an error.
    pub reconcile_timeout: Option<Duration>,
    /// How long to wait for the informers' first lists.
    pub cache_sync_timeout: Duration,
    /// How long in-flight passes may take to finish once shutdown begins.
    pub shutdown_timeout: Duration,
    /// The work queue's settings (backoff, retry bucket, metrics).
    pub queue: QueueConfig,
    /// Where the reconcile metrics go.
    pub metrics: Option<ControllerMetrics>,
    /// How long a pass waits at most for the caches to hold its key's previous writes.
    pub stale_cache_wait: Duration,
    /// When a key's writing passes count as a hot loop.
    pub hot_loop: HotLoopConfig,
    /// Record why each key was queued (see `causes`); off, enqueues cost what the bare queue
    /// costs and passes carry no trigger.
    pub record_causes: bool,
    /// How many of its last passes each key keeps for `/debug/queue/<namespace>/<name>` (at
    /// least 1: the last pass is always kept).
    pub pass_history: usize,
    /// The controller starts because this replica became leader: the caches replayed to it are
    /// recorded as a leader change rather than as a list.
    pub starts_on_leadership: bool,
}

/// The default [`ControllerConfig::pass_history`].
pub const DEFAULT_PASS_HISTORY: usize = 10;

impl ControllerConfig {
    /// Defaults as in controller-runtime, except 4 workers: 2-minute cache sync timeout, 30 s for
    /// in-flight passes at shutdown, no per-pass timeout.
    pub fn named(name: &str) -> Self {
        Self {
            name: name.to_string(),
            workers: 4,
            reconcile_timeout: None,
            cache_sync_timeout: Duration::from_secs(120),
            shutdown_timeout: Duration::from_secs(30),
            queue: QueueConfig::named(name),
            metrics: None,
            stale_cache_wait: DEFAULT_STALE_CACHE_WAIT,
            hot_loop: HotLoopConfig::default(),
            record_causes: true,
            pass_history: DEFAULT_PASS_HISTORY,
            starts_on_leadership: false,
        }
    }
}

/// A registration of one informer's handler, run once the caches are synced.
type Registration = Box<dyn FnOnce(Enqueuer) + Send>;

/// Whether the primary cache still holds a key.
type Exists = Arc<dyn Fn(&ObjectKey) -> bool + Send + Sync>;

/// How one reconcile pass ended, for `controller_runtime_reconcile_total{result}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PassResult {
    /// `Ok(Action::Done)`.
    Success,
    /// `Ok(Action::RequeueAfter(_))`.
    RequeueAfter,
    /// An error, retried with backoff.
    Error,
    /// An error that is not retried.
    TerminalError,
    /// The pass panicked (counted as an error too).
    Panic,
    /// The pass outlived the reconcile timeout (counted as an error too, as controller-runtime
    /// counts the context's deadline error).
    Timeout,
}

impl PassResult {
    /// A lower-case name for logs and the debug endpoint.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Success => "success",
            Self::RequeueAfter => "requeue_after",
            Self::Error => "error",
            Self::TerminalError => "terminal_error",
            Self::Panic => "panic",
            Self::Timeout => "timeout",
        }
    }
}

/// A controller for the primary kind `K`; see the module docs.
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
///
/// use dbcluster_operator::runtime::ObjectKey;
/// use dbcluster_operator::runtime::controller::{Action, Controller, ControllerConfig, ReconcileError};
/// use dbcluster_operator::runtime::informer::Informer;
/// use dbcluster_operator::sim::SimServer;
/// use k8s_openapi::api::core::v1::ConfigMap;
/// use kube::api::{Api, PostParams};
/// use tokio::sync::{mpsc, oneshot};
///
/// #[derive(Debug, thiserror::Error)]
/// #[error("cannot happen")]
/// struct Never;
/// impl ReconcileError for Never {}
///
/// /// Reports each key it is asked to reconcile.
/// async fn reconcile(key: ObjectKey, seen: Arc<mpsc::UnboundedSender<ObjectKey>>) -> Result<Action, Never> {
///     let _ = seen.send(key);
///     Ok(Action::Done)
/// }
///
/// #[tokio::main]
/// async fn main() -> Result<(), Box<dyn std::error::Error>> {
///     let cluster = SimServer::start().await?;
///     let api: Api<ConfigMap> = Api::default_namespaced(cluster.client());
///     let config_map = serde_json::from_value(serde_json::json!({"metadata": {"name": "a"}}))?;
///     api.create(&PostParams::default(), &config_map).await?;
///     let informer = Arc::new(Informer::new(api));
///     informer.start();
///
///     let controller = Controller::new(&informer, ControllerConfig::named("example"));
///     let (seen, mut reconciled) = mpsc::unbounded_channel();
///     let (stop, stopped) = oneshot::channel::<()>();
///     let shutdown = async move {
///         let _ = stopped.await;
///     };
///     let running = tokio::spawn(controller.run(reconcile, Arc::new(seen), shutdown));
///     assert_eq!(reconciled.recv().await, Some(ObjectKey::namespaced("default", "a")));
///     let _ = stop.send(());
///     running.await??;
///     Ok(())
/// }
/// ```
pub struct Controller<K> {
    config: ControllerConfig,
    queue: ControllerQueue,
    synced: Vec<BoxFuture<'static, ()>>,
    registrations: Vec<Registration>,
    exists: Exists,
    passes: PassHistories,
    /// True while the caches are replayed to the handlers `run` registers.
    replaying: Arc<AtomicBool>,
    freshness: Freshness,
    /// The echoes of passes' own writes to their keys' objects, which queue nothing (see `echoes`).
    echoes: Arc<OwnEchoes>,
    _primary: std::marker::PhantomData<fn() -> K>,
}

impl<K> std::fmt::Debug for Controller<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Controller").field("config", &self.config).finish_non_exhaustive()
    }
}

impl<K> Controller<K>
where
    K: InformerObject<Resource: Resource<DynamicType = ()>>,
{
    /// A controller reconciling the objects of `primary`: each event enqueues the object's own key.
    pub fn new(primary: &Arc<Informer<K>>, config: ControllerConfig) -> Self {
        let queue = ControllerQueue::with_notes(config.queue.clone());
        let cache = Arc::clone(primary.cache());
        let controller = Self {
            config,
            queue,
            synced: Vec::new(),
            registrations: Vec::new(),
            exists: Arc::new(move |key| cache.get(key).is_some()),
            passes: Arc::default(),
            replaying: Arc::default(),
            freshness: Freshness::default(),
            echoes: Arc::default(),
            _primary: std::marker::PhantomData,
        };
        controller.watch_events(primary, |obj: &K| Some(ObjectKey::of(obj)), Via::Own)
    }

    /// Also reconcile the owner when a child of kind `C` changes: the child's controller
    /// ownerReference, if it names a `K`, gives the owner's key (same namespace as the child).
    pub fn owns<C>(self, children: &Arc<Informer<C>>) -> Self
    where
        C: InformerObject,
        <C::Resource as Resource>::DynamicType: Default,
    {
        self.watch_events(children, |child: &C| controller_owner_key::<K, C>(child), Via::Mapper)
    }

    /// Also reconcile whatever keys `mapper` returns for each changed object of kind `W`. Keys
    /// from list results are queued at low priority, keys from watch events at normal priority;
    /// writes of kind `W` that this informer selects are waited for on it before the writer's next
    /// pass (see [`Freshness::watch`]).
    pub fn watches<W, I>(
        self,
        informer: &Arc<Informer<W>>,
        mapper: impl Fn(&W) -> I + Send + Sync + 'static,
    ) -> Self
    where
        W: InformerObject,
        <W::Resource as Resource>::DynamicType: Default,
        I: IntoIterator<Item = ObjectKey> + 'static,
    {
        self.watch_events(informer, mapper, Via::Mapper)
    }

    /// `watches`, recording each event as a cause of the key's own object (`Via::Own`) or of
    /// another object mapped to the key.
    fn watch_events<W, I>(
        mut self,
        informer: &Arc<Informer<W>>,
        mapper: impl Fn(&W) -> I + Send + Sync + 'static,
        via: Via,
    ) -> Self
    where
        W: InformerObject,
        <W::Resource as Resource>::DynamicType: Default,
        I: IntoIterator<Item = ObjectKey> + 'static,
    {
        self.freshness.watch(informer);
        let for_sync = Arc::clone(informer);
        self.synced.push(async move { for_sync.synced().await }.boxed());
        let informer = Arc::clone(informer);
        let kind = KindName::of::<W::Resource>();
        let replaying = Arc::clone(&self.replaying);
        let leadership = self.config.starts_on_leadership;
        let echoes = Arc::clone(&self.echoes);
        self.registrations.push(Box::new(move |enqueuer: Enqueuer| {
            informer.add_key_mapper(mapper, move |key, origin, event: &InformerEvent<W>| {
                let echo = matches!(
                    (via, origin, event),
                    (Via::Own, EventOrigin::Watch, InformerEvent::Updated { .. })
                ) && echoes.is_echo(&key, event.object().resource_version());
                if echo {
                    tracing::debug!(%key, "the echo of the key's own write in its last pass: no pass");
                    return;
                }
                let priority = match origin {
                    EventOrigin::List => Priority::Low,
                    EventOrigin::Watch => Priority::Normal,
                };
                // The key's own object is the key: the cause keeps the queue's key (the
                // adder's copy, when the queue had one already), only when the cause is kept
                // (never when causes are off: rule 5).
                enqueuer.add(key, priority, |key| {
                    let own = matches!(via, Via::Own).then(|| key.into_owned());
                    let event = object_event(kind, own, event);
                    match (origin, via) {
                        (EventOrigin::List, _) if leadership && replaying.load(Ordering::Relaxed) => {
                            Cause::LeaderChange(event)
                        }
                        (EventOrigin::List, _) => Cause::Listed(event),
                        (EventOrigin::Watch, Via::Own) => Cause::Watch(event),
                        (EventOrigin::Watch, Via::Mapper) => Cause::Mapped(event),
                    }
                });
            });
        }));
        self
    }

    /// The number of worker tasks.
    pub fn workers(mut self, workers: usize) -> Self {
        self.config.workers = workers.max(1);
        self
    }

    /// The controller's queue, for the debug endpoint and for tests. Adds made on it directly
    /// record no cause: prefer [`Controller::enqueuer`].
    pub fn queue(&self) -> &ControllerQueue {
        &self.queue
    }

    /// The controller's queue with its causes: `add_explicit` queues a key for a stated reason.
    pub fn enqueuer(&self) -> Enqueuer {
        Enqueuer::new(self.queue.clone(), self.config.record_causes)
    }

    /// A view of the queue and of each key's last passes, for the debug endpoint.
    pub fn probe(&self) -> ControllerProbe {
        ControllerProbe::new(&self.config.name, self.queue.clone(), Arc::clone(&self.passes))
    }

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

/// The key of `child`'s controller owner, if its controller ownerReference names a `K` (matched by
/// API group and kind, as controller-runtime does, so a version bump does not orphan children).
pub fn controller_owner_key<K, C>(child: &C) -> Option<ObjectKey>
where
    K: Object<Resource: Resource<DynamicType = ()>> + ?Sized,
    C: Object + ?Sized,
{
    let kind = K::Resource::kind(&());
    let group = K::Resource::group(&());
    let owner = child.controller_owner()?;
    let owner_group = owner.api_version.rsplit_once('/').map_or("", |(group, _)| group);
    (owner.kind == kind && owner_group == group).then(|| ObjectKey::new(child.namespace(), owner.name))
}

/// Whether a watch's keys are its objects' own (the primary kind) or mapped from other objects.
#[derive(Debug, Clone, Copy)]
enum Via {
    Own,
    Mapper,
}

/// The cause-side description of an informer event on an object of `kind` (whose key is `own`
/// when it is the reconciled object itself).
fn object_event<W: Object>(kind: KindName, own: Option<ObjectKey>, event: &InformerEvent<W>) -> ObjectEvent {
    let object = event.object();
    ObjectEvent {
        informer: kind,
        event: match event {
            InformerEvent::Added(_) => EventType::Added,
            InformerEvent::Updated { .. } => EventType::Modified,
            InformerEvent::Deleted(_) => EventType::Deleted,
        },
        object: own.unwrap_or_else(|| ObjectKey::of(object.as_ref())),
        resource_version: object.resource_version().map(ResourceVersion::from),
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
    /// Held for every key at scale, so it is kept tight: each pass packed ([`PackedPass`]), and
    /// the history grown one record at a time up to its bound (a settled key's few passes leave
    /// no spare room).
    fn remember(&self, key: ObjectKey, last: PassRecord) {
        if last.result == PassResult::Success && !(self.exists)(&key) {
            self.passes.remove(&key);
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
        let packed = PackedPass::pack(&key, &last);
        keep_last(&mut self.passes.entry(key).or_default(), packed, self.config.pass_history);
    }
}

/// Appends `pass` to `history`, dropping the oldest records beyond `bound` (at least one is
/// kept), and growing the history one record at a time: no spare room.
fn keep_last<T>(history: &mut VecDeque<T>, pass: T, bound: usize) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::StatefulSet;
    use k8s_openapi::api::core::v1::Pod;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

    fn pass_of(took_ms: u64) -> PassRecord {
        PassRecord {
            causes: CauseLog::default(),
            started: Instant::now(),
            result: PassResult::Success,
            error: None,
            took: Duration::from_millis(took_ms),
            writes: Box::new([]),
            stale_cache_wait: None,
            hot_loop: false,
        }
    }

    #[test]
    fn a_history_keeps_its_last_passes_with_no_spare_room() {
        let mut history = VecDeque::new();
        for took in 0..3 {
            keep_last(&mut history, pass_of(took), 10);
            assert_eq!(history.capacity(), history.len(), "no room beyond the records");
        }
        for took in 3..12 {
            keep_last(&mut history, pass_of(took), 10);
        }
        let kept: Vec<u128> = history.iter().map(|pass| pass.took.as_millis()).collect();
        assert_eq!(kept, (2..12).collect::<Vec<_>>(), "the last ten, oldest first");
        assert_eq!(history.capacity(), 10);
        let pass = pass_of(5);
        assert_eq!(pass.finished(), pass.started + Duration::from_millis(5));
    }

    fn pod_owned_by(kind: &str, api_version: &str, controller: bool) -> Pod {
        Pod {
            metadata: ObjectMeta {
                namespace: Some("prod".into()),
                name: Some("pg-0".into()),
                owner_references: Some(vec![OwnerReference {
                    api_version: api_version.into(),
                    kind: kind.into(),
                    name: "pg".into(),
                    uid: "u1".into(),
                    controller: Some(controller),
                    block_owner_deletion: Some(true),
                }]),
                ..ObjectMeta::default()
            },
            ..Pod::default()
        }
    }

    #[test]
    fn owns_maps_only_a_controller_reference_of_the_owner_kind_and_group() {
        let key = ObjectKey::namespaced("prod", "pg");
        assert_eq!(
            controller_owner_key::<StatefulSet, _>(&pod_owned_by("StatefulSet", "apps/v1", true)),
            Some(key)
        );
        // Another version of the same group and kind still maps.
        assert!(
            controller_owner_key::<StatefulSet, _>(&pod_owned_by("StatefulSet", "apps/v2", true)).is_some()
        );
        assert_eq!(
            controller_owner_key::<StatefulSet, _>(&pod_owned_by("StatefulSet", "apps/v1", false)),
            None
        );
        assert_eq!(
            controller_owner_key::<StatefulSet, _>(&pod_owned_by("ReplicaSet", "apps/v1", true)),
            None
        );
        assert_eq!(
            controller_owner_key::<StatefulSet, _>(&pod_owned_by("StatefulSet", "other/v1", true)),
            None
        );
        assert_eq!(controller_owner_key::<StatefulSet, _>(&Pod::default()), None);
    }
}
