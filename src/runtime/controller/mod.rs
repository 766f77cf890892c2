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
//! [`record_writes`]: crate::runtime::controller::writes::record_writes
//! [`recorded`]: crate::runtime::controller::writes::recorded
//! [`WorkQueue`]: crate::runtime::workqueue::WorkQueue
//!
//! Reconcile receives only the key and the shared context; it reads objects from the caches.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use kube::Resource;

pub mod causes;
pub(crate) mod echoes;
pub mod freshness;
pub mod hotloop;
mod outcome;
#[cfg(test)]
mod tests;
mod worker;
pub mod writes;

pub use outcome::{Action, ControllerError, PassResult, ReconcileError};

use crate::runtime::cache::InformerEvent;
use crate::runtime::controller::causes::{
    Cause, ControllerQueue, Enqueuer, EventType, ObjectEvent, ResourceVersion,
};
use crate::runtime::controller::echoes::OwnEchoes;
use crate::runtime::controller::freshness::{DEFAULT_STALE_CACHE_WAIT, Freshness};
use crate::runtime::controller::hotloop::HotLoopConfig;
use crate::runtime::controller::writes::KindName;
use crate::runtime::informer::{EventOrigin, Informer};
use crate::runtime::object::InformerObject;
use crate::runtime::observe::introspection::{ControllerProbe, PassHistories};
use crate::runtime::observe::metrics::ControllerMetrics;
use crate::runtime::workqueue::{Priority, QueueConfig};
use crate::runtime::{Object, ObjectKey};
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
        ControllerProbe::new(
            &self.config.name,
            self.config.workers,
            self.queue.clone(),
            Arc::clone(&self.passes),
        )
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
