//! The kube-runtime anchor of `cargo bench --bench e2e`: the operator's own `reconcile` pass,
//! driven by kube-runtime's `Controller` (what a Rust user would pick instead of this project's
//! runtime), with the same 4 concurrent passes, the same label-selected child watches, the same
//! mapping of pods, Jobs, claims and users' Secrets to their cluster, and managedFields stripped
//! as the operator strips them.
//!
//! `reconcile` reads the operator's `Cache`s, so each watch stream also mirrors its events into
//! one through a `CacheWriter` (kube-runtime's own store of DatabaseClusters is kept as well, since
//! its `Controller` needs it: this anchor holds each cluster twice, which the figures include).
//! kube-runtime has no read-your-writes wait; the passes read whatever the caches hold.
//! It allocates with jemalloc, as the operator's image does (its `jemalloc` feature).
//!
//! kube-runtime watches and stores only `kube::Resource`s, and the operator's cached forms
//! (`Compact`, `CachedPod`) are not: they keep a lean identity instead of an `ObjectMeta`. So the
//! anchor watches each such kind as [`Watched`]: the same form, decoded the same way, with the
//! `ObjectMeta` kube-runtime reads (name, namespace, resourceVersion, generation, the controller
//! ownerReference) beside it.
//!
//! Usage, as the bench starts it: `kube-runtime-anchor run --kubeconfig PATH --metrics-addr ADDR`
//! (other flags are ignored). `/metrics` on ADDR answers `controller_runtime_reconcile_total` and
//! `controller_runtime_reconcile_errors_total`; SIGTERM exits.

use std::borrow::Cow;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use dbcluster_operator::databasecluster::app_secret::APP_SECRET_OF;
use dbcluster_operator::databasecluster::backup::jobs::CLUSTER_LABEL;
use dbcluster_operator::databasecluster::cached::{CachedPod, Compact};
use dbcluster_operator::databasecluster::operator::{
    CacheWriters, backup_volume_selector, cluster_of_pod, managed_selector,
};
use dbcluster_operator::databasecluster::reconcile::{Context, Error, reconcile};
use dbcluster_operator::databasecluster::types::DatabaseCluster;
use dbcluster_operator::runtime::cache::CacheWriter;
use dbcluster_operator::runtime::controller::{Action as PassResult, ReconcileError};
use dbcluster_operator::runtime::object::{InformerObject, shown_metadata};
use dbcluster_operator::runtime::reflector::ReflectorEvent;
use dbcluster_operator::runtime::{Object, ObjectKey};
use futures::{Stream, StreamExt};
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, Secret, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::controller::{self, Action};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{Controller, WatchStreamExt, reflector, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A DatabaseCluster as the operator's caches keep it, as kube-runtime's store holds it.
type Cluster = Watched<Compact<DatabaseCluster>>;

/// A cached form of the operator's (`F`) with the `ObjectMeta` that kube-runtime's watcher,
/// store and `Controller` read, made from the form's identity as it is decoded.
#[derive(Clone, Debug)]
struct Watched<F> {
    metadata: ObjectMeta,
    form: F,
}

impl<'de, F: Object + Deserialize<'de>> Deserialize<'de> for Watched<F> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let form = F::deserialize(deserializer)?;
        Ok(Watched { metadata: shown_metadata(&form), form })
    }
}

impl<F: Object<Resource: Resource<DynamicType = ()>>> Resource for Watched<F> {
    type DynamicType = ();
    type Scope = <F::Resource as Resource>::Scope;

    fn kind(dynamic: &()) -> Cow<'_, str> {
        F::Resource::kind(dynamic)
    }

    fn group(dynamic: &()) -> Cow<'_, str> {
        F::Resource::group(dynamic)
    }

    fn version(dynamic: &()) -> Cow<'_, str> {
        F::Resource::version(dynamic)
    }

    fn api_version(dynamic: &()) -> Cow<'_, str> {
        F::Resource::api_version(dynamic)
    }

    fn plural(dynamic: &()) -> Cow<'_, str> {
        F::Resource::plural(dynamic)
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// What a watched object puts in the operator's cache of its kind: itself for a kind the operator
/// keeps whole, the form for a [`Watched`] one.
trait Mirrored: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static {
    /// The operator's cached form.
    type Form: InformerObject;

    /// The cached form of this object.
    fn form(&self) -> Self::Form;
}

impl<F> Mirrored for Watched<F>
where
    F: InformerObject<Resource: Resource<DynamicType = ()>>,
{
    type Form = F;

    fn form(&self) -> F {
        self.form.clone()
    }
}

macro_rules! mirrored_whole {
    ($($kind:ty),*) => {$(
        impl Mirrored for $kind {
            type Form = $kind;

            fn form(&self) -> $kind {
                self.clone()
            }
        }
    )*};
}
mirrored_whole!(Secret, Job, CronJob, PersistentVolumeClaim);

/// The reconcile context plus the pass counters `/metrics` reports.
struct Anchor {
    context: Arc<Context>,
    passes: AtomicU64,
    errors: AtomicU64,
}

/// A watch of `api` (label-selected if asked), managedFields stripped, mirrored into the cache
/// `writer` keeps.
fn mirrored<K>(
    api: Api<K>,
    labels: Option<&str>,
    mut writer: CacheWriter<K::Form>,
) -> impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static
where
    K: Mirrored,
{
    let config = match labels {
        Some(selector) => watcher::Config::default().labels(selector),
        None => watcher::Config::default(),
    };
    watcher(api, config).default_backoff().modify(|obj| obj.managed_fields_mut().clear()).inspect(
        move |event| {
            let mirrored = match event {
                Ok(watcher::Event::Init) => ReflectorEvent::RelistStarted,
                Ok(watcher::Event::InitApply(obj)) => ReflectorEvent::Listed(obj.form()),
                Ok(watcher::Event::InitDone) => {
                    ReflectorEvent::RelistDone { resource_version: String::new() }
                }
                Ok(watcher::Event::Apply(obj)) => ReflectorEvent::Applied(obj.form()),
                Ok(watcher::Event::Delete(obj)) => ReflectorEvent::Deleted(obj.form()),
                Err(_) => return,
            };
            writer.apply(mirrored);
        },
    )
}

/// A mirrored, label-selected watch of every namespace's `K`, as a stream of touched objects.
fn children<K>(
    client: &Client,
    labels: &str,
    writer: CacheWriter<K::Form>,
) -> impl Stream<Item = Result<K, watcher::Error>> + Send + 'static
where
    K: Mirrored + Resource<DynamicType = (), Scope = NamespaceResourceScope>,
{
    mirrored(Api::<K>::all(client.clone()), Some(labels), writer).touched_objects()
}

/// The cluster an object names in label `key`, as the operator maps pods, Jobs and claims.
fn cluster_by_label<K: Resource>(obj: &K, keys: &[&str]) -> Option<ObjectRef<Cluster>> {
    let labels = obj.meta().labels.as_ref()?;
    let name = keys.iter().find_map(|key| labels.get(*key))?;
    let namespace = obj.meta().namespace.as_deref().unwrap_or("default");
    Some(ObjectRef::new(name).within(namespace))
}

async fn pass(cluster: Arc<Cluster>, anchor: Arc<Anchor>) -> Result<Action, Error> {
    let result = reconcile(ObjectKey::of(&cluster.form), Arc::clone(&anchor.context)).await;
    anchor.passes.fetch_add(1, Ordering::Relaxed);
    match result {
        Ok(PassResult::Done) => Ok(Action::await_change()),
        Ok(PassResult::RequeueAfter(after)) => Ok(Action::requeue(after)),
        Err(error) => {
            anchor.errors.fetch_add(1, Ordering::Relaxed);
            Err(error)
        }
    }
}

fn error_policy(_: Arc<Cluster>, error: &Error, _: Arc<Anchor>) -> Action {
    if error.is_terminal() { Action::await_change() } else { Action::requeue(Duration::from_secs(1)) }
}

async fn serve_metrics(addr: String, anchor: Arc<Anchor>) {
    let listener = tokio::net::TcpListener::bind(&addr).await.expect("bind the metrics address");
    loop {
        let Ok((mut stream, _)) = listener.accept().await else { continue };
        let anchor = Arc::clone(&anchor);
        tokio::spawn(async move {
            let mut request = [0u8; 1024];
            let _ = stream.read(&mut request).await;
            let body = format!(
                "controller_runtime_reconcile_total{{controller=\"databasecluster\"}} {}\ncontroller_runtime_reconcile_errors_total{{controller=\"databasecluster\"}} {}\n",
                anchor.passes.load(Ordering::Relaxed),
                anchor.errors.load(Ordering::Relaxed),
            );
            let response = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(response.as_bytes()).await;
        });
    }
}

fn flag(args: &[String], name: &str) -> Option<String> {
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1).cloned())
}

/// The allocator of the operator's image (its `jemalloc` feature), so that both sides of the
/// comparison allocate alike.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let kubeconfig = flag(&args, "--kubeconfig").expect("--kubeconfig PATH");
    let metrics_addr = flag(&args, "--metrics-addr").unwrap_or_else(|| "127.0.0.1:8080".into());
    let kubeconfig = Kubeconfig::read_from(kubeconfig).expect("a readable kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("a usable kubeconfig");
    let client = Client::try_from(config).expect("a client");

    let writers = CacheWriters::default();
    let context = Arc::new(writers.context(client.clone(), "kube-runtime-anchor"));
    let anchor = Arc::new(Anchor {
        context: Arc::clone(&context),
        passes: AtomicU64::new(0),
        errors: AtomicU64::new(0),
    });
    tokio::spawn(serve_metrics(metrics_addr, Arc::clone(&anchor)));

    let managed = managed_selector();
    let (reader, writer) = reflector::store();
    let clusters = reflector(writer, mirrored(Api::<Cluster>::all(client.clone()), None, writers.clusters))
        .touched_objects();
    let controller = Controller::for_stream(clusters, reader)
        .with_config(controller::Config::default().concurrency(4))
        .owns_stream(children::<Watched<Compact<StatefulSet>>>(&client, &managed, writers.statefulsets))
        .owns_stream(children::<Watched<Compact<Service>>>(&client, &managed, writers.services))
        .owns_stream(children::<Watched<Compact<Secret>>>(&client, &managed, writers.secrets))
        .owns_stream(children::<Watched<Compact<ConfigMap>>>(&client, &managed, writers.configmaps))
        .owns_stream(children::<Watched<Compact<PodDisruptionBudget>>>(&client, &managed, writers.pdbs))
        .owns_stream(children::<CronJob>(&client, &managed, writers.cronjobs))
        .watches_stream(children::<Watched<CachedPod>>(&client, &managed, writers.pods), |pod| {
            let cluster = cluster_of_pod(&pod.form)?;
            Some(ObjectRef::new(cluster.name()).within(cluster.namespace().unwrap_or("default")))
        })
        .watches_stream(children(&client, APP_SECRET_OF, writers.app_secrets), |secret: Secret| {
            cluster_by_label(&secret, &[APP_SECRET_OF])
        })
        .watches_stream(children(&client, &managed, writers.jobs), |job: Job| {
            cluster_by_label(&job, &[CLUSTER_LABEL])
        })
        .watches_stream(
            children(&client, &backup_volume_selector(), writers.volumes),
            |claim: PersistentVolumeClaim| cluster_by_label(&claim, &[CLUSTER_LABEL]),
        )
        .run(pass, error_policy, anchor)
        .for_each(|_| futures::future::ready(()));
    let mut terminate =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("a SIGTERM handler");
    tokio::select! {
        () = controller => {}
        _ = terminate.recv() => {}
    }
}
