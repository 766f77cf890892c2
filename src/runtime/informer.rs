//! One kind's shared watch: a [`Reflector`] task feeding a [`Cache`] through the cache's one
//! [`CacheWriter`], and the event handlers (the controllers' key mappers) told about every change.
//!
//! The reflector task applies each event with [`CacheWriter::apply`] and then calls every
//! handler, in registration order, with each resulting [`InformerEvent`]: the new object and, for
//! an update, the old one, both as the `Arc`s the cache holds. Everyone else reads the cache
//! through [`Informer::cache`]. Handlers run on the informer's task, so they must be
//! quick and must not block: map the event to keys and hand those to a work queue. A handler that
//! panics is logged and the informer goes on. A handler registered after the informer started is
//! first told about every cached object as `Added` (as client-go does), so none is missed.

use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use kube::{Api, Resource};
use parking_lot::{Mutex, RwLock};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::task::JoinHandle;

use crate::runtime::cache::{Cache, CacheWriter, Transform};
use crate::runtime::object::InformerObject;
use crate::runtime::reflector::{InitialList, Reflector, ReflectorConfig, ReflectorEvent, ReflectorStats};
use crate::runtime::{Object, ObjectKey};

pub use crate::runtime::cache::InformerEvent;

/// Where a change came from: a list (the initial list, a relist, or the replay of the cache to a
/// handler registered late) or a live watch event. The controller queues list changes at low
/// priority, so a restart's backlog never delays a user's change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventOrigin {
    /// A list result, or the cache replayed to a new handler.
    List,
    /// A watch event.
    Watch,
}

/// Something told about every change an informer applies to its cache.
pub trait EventHandler<K>: Send + Sync + 'static {
    /// Called once per change, on the informer's task; must return quickly.
    fn on_event(&self, event: &InformerEvent<K>);

    /// `on_event`, told where the change came from. Defaults to `on_event`.
    fn on_event_from(&self, event: &InformerEvent<K>, origin: EventOrigin) {
        let _ = origin;
        self.on_event(event);
    }
}

impl<K, F> EventHandler<K> for F
where
    F: Fn(&InformerEvent<K>) + Send + Sync + 'static,
{
    fn on_event(&self, event: &InformerEvent<K>) {
        self(event)
    }
}

/// Counts of what the informer applied, updated on its task.
#[derive(Debug, Default)]
struct EventCounters {
    added: AtomicU64,
    updated: AtomicU64,
    deleted: AtomicU64,
    bookmarks: AtomicU64,
    handler_panics: AtomicU64,
}

/// A snapshot of an informer's figures, for metrics and the debug endpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct InformerStats {
    /// `Added` events handed to handlers.
    pub added: u64,
    /// `Updated` events handed to handlers.
    pub updated: u64,
    /// `Deleted` events handed to handlers (from watches and from relists).
    pub deleted: u64,
    /// Bookmarks received.
    pub bookmarks: u64,
    /// Full lists started, the first one included.
    pub relists: u64,
    /// Watches started again from a known resourceVersion after the previous one ended.
    pub watch_restarts: u64,
    /// `410 Gone` answers.
    pub gone: u64,
    /// Objects that failed to decode and were skipped.
    pub malformed_skipped: u64,
    /// Failed requests or streams retried after a backoff delay.
    pub failures: u64,
    /// The last backoff delay chosen after a failure, in milliseconds.
    pub last_backoff_ms: u64,
    /// Handler calls that panicked.
    pub handler_panics: u64,
    /// The last resourceVersion seen.
    pub last_resource_version: Option<String>,
    /// Objects in the cache.
    pub objects: usize,
    /// Whether the first list has been applied.
    pub synced: bool,
    /// `"streaming"` or `"paginated"` once the reflector has chosen.
    pub initial_list: Option<&'static str>,
}

type Handlers<K> = Arc<RwLock<Vec<Arc<dyn EventHandler<K>>>>>;

/// A kind's reflector, cache and handlers. Share one per kind (wrap it in an `Arc`); dropping it
/// stops the reflector task.
///
/// # Examples
///
/// ```
/// use dbcluster_operator::runtime::informer::{Informer, InformerEvent};
/// use dbcluster_operator::sim::SimServer;
/// use k8s_openapi::api::core::v1::ConfigMap;
/// use kube::api::{Api, PostParams};
///
/// #[tokio::main]
/// async fn main() -> Result<(), Box<dyn std::error::Error>> {
///     let cluster = SimServer::start().await?;
///     let api: Api<ConfigMap> = Api::default_namespaced(cluster.client());
///     let config_map = serde_json::from_value(serde_json::json!({"metadata": {"name": "a"}}))?;
///     api.create(&PostParams::default(), &config_map).await?;
///
///     let informer = Informer::new(api);
///     informer.add_handler(|event: &InformerEvent<ConfigMap>| {
///         println!("{:?} changed", event.object().metadata.name);
///     });
///     informer.start();
///     informer.synced().await;
///     assert_eq!(informer.cache().len(), 1);
///     Ok(())
/// }
/// ```
pub struct Informer<K> {
    cache: Arc<Cache<K>>,
    handlers: Handlers<K>,
    counters: Arc<EventCounters>,
    reflector_stats: Arc<ReflectorStats>,
    /// The reflector and the cache's writer, until `start` moves them into the informer's task.
    reflector: Mutex<Option<(Reflector<K>, CacheWriter<K>)>>,
    task: Mutex<Option<JoinHandle<()>>>,
    /// The reflector's label selector: which objects of the kind this informer holds.
    label_selector: Option<String>,
}

impl<K> fmt::Debug for Informer<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Informer")
            .field("cache", &self.cache)
            .field("handlers", &self.handlers.read().len())
            .finish()
    }
}

impl<K> Informer<K>
where
    K: Resource + Clone + DeserializeOwned + fmt::Debug + Send + Sync + 'static,
{
    /// An informer over the objects `api` addresses, with the default reflector settings and a
    /// cache that strips `managedFields`. Call [`Informer::start`] to begin.
    pub fn new(api: Api<K>) -> Self {
        Self::with_config(
            api,
            ReflectorConfig::default(),
            Arc::new(crate::runtime::cache::strip_managed_fields::<K>),
        )
    }
}

impl<K> Informer<K>
where
    K: InformerObject,
{
    /// An informer with explicit reflector settings and cache transform.
    pub fn with_config(api: Api<K::Resource>, config: ReflectorConfig, transform: Transform<K>) -> Self {
        Self::with_writer(api, config, CacheWriter::new(transform))
    }

    /// An informer that keeps the cache of `writer` (made beforehand, e.g. so that readers can be
    /// handed the cache before the informers exist), of `K`: the resource `api` addresses, or a
    /// cached form of it.
    pub fn with_writer(api: Api<K::Resource>, config: ReflectorConfig, writer: CacheWriter<K>) -> Self {
        let label_selector = config.label_selector.clone();
        let reflector = Reflector::new(api, config);
        Self {
            cache: Arc::clone(writer.cache()),
            handlers: Arc::default(),
            counters: Arc::default(),
            reflector_stats: reflector.stats(),
            reflector: Mutex::new(Some((reflector, writer))),
            task: Mutex::new(None),
            label_selector,
        }
    }

    /// The label selector its lists and watches send (`None`: every object of the kind).
    pub fn label_selector(&self) -> Option<&str> {
        self.label_selector.as_deref()
    }

    /// The cache this informer keeps current (reads hand out `Arc`s).
    pub fn cache(&self) -> &Arc<Cache<K>> {
        &self.cache
    }

    /// Registers a handler. If the informer already holds objects, the handler is first told
    /// about each of them as `Added`. Must not be called from inside a handler.
    pub fn add_handler(&self, handler: impl EventHandler<K>) {
        let mut handlers = self.handlers.write();
        for obj in self.cache.list() {
            call(&handler, &InformerEvent::Added(obj), EventOrigin::List, &self.counters);
        }
        handlers.push(Arc::new(handler));
    }

    /// Registers a key mapper: for every change, `sink` receives each key `mapper` returns for the
    /// object (for an update, for the old and the new state, without repeats — so a child whose
    /// controller owner changed wakes both owners). The controller's `For`/`Owns`/`Watches`
    /// wiring is built on this. `sink` is also told where the change came from and what it was
    /// (the causes of the enqueue, see `causes`).
    pub fn add_key_mapper<I>(
        &self,
        mapper: impl Fn(&K) -> I + Send + Sync + 'static,
        sink: impl Fn(ObjectKey, EventOrigin, &InformerEvent<K>) + Send + Sync + 'static,
    ) where
        I: IntoIterator<Item = ObjectKey> + 'static,
    {
        self.add_handler(KeyMapper { mapper, sink, _kind: std::marker::PhantomData });
    }

    /// Starts the reflector task (once; later calls do nothing). Needs a tokio runtime.
    pub fn start(&self) {
        let Some((reflector, mut writer)) = self.reflector.lock().take() else { return };
        let handlers = Arc::clone(&self.handlers);
        let counters = Arc::clone(&self.counters);
        let reflector_stats = Arc::clone(&self.reflector_stats);
        let sink = move |event: ReflectorEvent<K>| {
            if matches!(event, ReflectorEvent::Bookmark { .. }) {
                counters.bookmarks.fetch_add(1, Ordering::Relaxed);
            }
            // Held across the write, so `add_handler` sees each change either in the cache it
            // replays or as an event, never both.
            let handlers = handlers.read();
            let origin = match event {
                ReflectorEvent::Listed(_) => EventOrigin::List,
                _ => EventOrigin::Watch,
            };
            let changes = writer.apply(event);
            for change in &changes {
                let counter = match change {
                    InformerEvent::Added(_) => &counters.added,
                    InformerEvent::Updated { .. } => &counters.updated,
                    InformerEvent::Deleted(_) => &counters.deleted,
                };
                counter.fetch_add(1, Ordering::Relaxed);
                for handler in handlers.iter() {
                    call(handler.as_ref(), change, origin, &counters);
                }
            }
            reflector_stats.touch();
        };
        *self.task.lock() = Some(tokio::spawn(reflector.run(sink)));
    }

    /// True once the reflector task was started and has ended (it only ends by panicking, since
    /// it retries every error): the informer no longer follows the server, and `/healthz` says so
    /// so that the kubelet restarts the process.
    pub fn has_stopped(&self) -> bool {
        self.task.lock().as_ref().is_some_and(|task| task.is_finished())
    }

    /// Resolves once the first list has been applied.
    pub async fn synced(&self) {
        self.cache.synced().await
    }

    /// Resolves once `condition` holds for the informer's figures (checked now and after every
    /// change): for tests and for readiness checks that need more than `synced()`.
    pub async fn wait_for(&self, condition: impl Fn(&InformerStats) -> bool) {
        let mut changes = self.reflector_stats.subscribe();
        while !condition(&self.stats()) {
            // The sender lives in `reflector_stats`, which `self` keeps alive.
            if changes.changed().await.is_err() {
                return;
            }
        }
    }

    /// A snapshot of the informer's figures.
    pub fn stats(&self) -> InformerStats {
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        let (c, r) = (&self.counters, &self.reflector_stats);
        InformerStats {
            added: load(&c.added),
            updated: load(&c.updated),
            deleted: load(&c.deleted),
            bookmarks: load(&c.bookmarks),
            relists: load(&r.relists),
            watch_restarts: load(&r.watch_restarts),
            gone: load(&r.gone),
            malformed_skipped: load(&r.malformed_skipped),
            failures: load(&r.failures),
            last_backoff_ms: load(&r.last_backoff_ms),
            handler_panics: load(&c.handler_panics),
            last_resource_version: self.cache.resource_version().map(|rv| rv.to_string()),
            objects: self.cache.len(),
            synced: self.cache.is_synced(),
            initial_list: r.initial_list_mode().map(InitialList::as_str),
        }
    }
}

impl<K> Drop for Informer<K> {
    fn drop(&mut self) {
        if let Some(task) = self.task.lock().take() {
            task.abort();
        }
    }
}

/// The handler behind `add_key_mapper`.
struct KeyMapper<K, M, S> {
    mapper: M,
    sink: S,
    _kind: std::marker::PhantomData<fn(&K)>,
}

impl<K, M, S, I> EventHandler<K> for KeyMapper<K, M, S>
where
    K: Object + 'static,
    M: Fn(&K) -> I + Send + Sync + 'static,
    S: Fn(ObjectKey, EventOrigin, &InformerEvent<K>) + Send + Sync + 'static,
    I: IntoIterator<Item = ObjectKey> + 'static,
{
    fn on_event(&self, event: &InformerEvent<K>) {
        self.on_event_from(event, EventOrigin::Watch);
    }

    fn on_event_from(&self, event: &InformerEvent<K>, origin: EventOrigin) {
        let mut keys: Vec<ObjectKey> = (self.mapper)(event.object()).into_iter().collect();
        if let Some(old) = event.old() {
            for key in (self.mapper)(old) {
                if !keys.contains(&key) {
                    keys.push(key);
                }
            }
        }
        for key in keys {
            (self.sink)(key, origin, event);
        }
    }
}

fn call<K>(
    handler: &(impl EventHandler<K> + ?Sized),
    event: &InformerEvent<K>,
    origin: EventOrigin,
    counters: &EventCounters,
) {
    if catch_unwind(AssertUnwindSafe(|| handler.on_event_from(event, origin))).is_err() {
        counters.handler_panics.fetch_add(1, Ordering::Relaxed);
        tracing::error!("an informer event handler panicked; the informer goes on");
    }
}
