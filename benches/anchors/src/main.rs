//! The kube-runtime anchor of `cargo bench --bench e2e`: the operator's own `reconcile` pass,
//! driven by kube-runtime's `Controller` (what a Rust user would pick instead of this project's
//! runtime), with the same 4 concurrent passes, the same label-selected child watches, the same
//! mapping of pods, Jobs, claims and users' Secrets to their cluster, and managedFields stripped
//! (kube-runtime's own advice; the operator strips them too).
//!
//! Each kind is kept where a kube-runtime user keeps it: a `reflector` store of the objects as
//! decoded (`WholeForms`), which `reconcile` reads through the operator's `Lookup` and `Listing`
//! (`databasecluster::cache::forms`). The operator's own caches keep other forms (text, identities,
//! pods without spec): that difference is part of what the benchmark compares. kube-runtime's
//! store has no index, only scans (`Store::state_filter`); a pass lists its cluster's pods and
//! Jobs by label and a backup Job's pods by owner, so this anchor keeps the small index a careful
//! user would add ([`Indexed`]) instead of scanning every pod on every pass.
//! kube-runtime has no read-your-writes wait; the passes read whatever the stores hold.
//! It allocates with jemalloc, as the operator's image does (its `jemalloc` feature).
//!
//! Usage, as the bench starts it: `kube-runtime-anchor run --kubeconfig PATH --metrics-addr ADDR`
//! (other flags are ignored). `/metrics` on ADDR answers `controller_runtime_reconcile_total` and
//! `controller_runtime_reconcile_errors_total`; SIGTERM exits.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dbcluster_operator::databasecluster::specs::app_secret::APP_SECRET_OF;
use dbcluster_operator::databasecluster::backup::jobs::CLUSTER_LABEL;
use dbcluster_operator::databasecluster::controller::events::EventPublisher;
use dbcluster_operator::databasecluster::controller::failures::FailureCounts;
use dbcluster_operator::databasecluster::cache::forms::{Listing, Lookup, WholeForms};
use dbcluster_operator::databasecluster::controller::operator::{backup_volume_selector, managed_selector};
use dbcluster_operator::databasecluster::controller::context::{Context, Error};
use dbcluster_operator::databasecluster::controller::reconcile::reconcile;
use dbcluster_operator::databasecluster::specs::resources::label;
use dbcluster_operator::databasecluster::api::types::DatabaseCluster;
use dbcluster_operator::runtime::ObjectKey;
use dbcluster_operator::runtime::controller::{Action as PassResult, ReconcileError};
use dbcluster_operator::runtime::object::InformerObject;
use futures::{Stream, StreamExt};
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, Pod, Secret, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::controller::{self, Action};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{Controller, WatchStreamExt, reflector, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A kind the anchor watches and stores whole: a namespaced resource an informer can hold.
trait Kind: Resource<DynamicType = (), Scope = NamespaceResourceScope> + InformerObject {}

impl<K: Resource<DynamicType = (), Scope = NamespaceResourceScope> + InformerObject> Kind for K {}

/// kube-runtime's store of one kind, as `reconcile` reads it.
struct Stored<K: Kind>(Store<K>);

fn object_ref<K: Kind>(key: &ObjectKey) -> ObjectRef<K> {
    let reference = ObjectRef::new(key.name());
    match key.namespace() {
        Some(namespace) => reference.within(namespace),
        None => reference,
    }
}

impl<K: Kind> Lookup<K> for Stored<K> {
    fn get(&self, key: &ObjectKey) -> Option<Arc<K>> {
        self.0.get(&object_ref(key))
    }
}

/// The objects filed under each value of an index.
type References<V, K> = HashMap<V, HashSet<ObjectRef<K>>>;

/// The index a pass's lists need beside kube-runtime's store (which only scans): the objects by
/// the value of one label within their namespace, and by their controller owner's uid. Entries
/// are references into the store, checked against the stored object on every read, so one left
/// behind by a relabelled object is harmless; a relist prunes the ones whose object is gone.
struct Indexed<K: Kind> {
    store: Store<K>,
    label: &'static str,
    by_label: Mutex<References<(String, String), K>>,
    by_owner: Mutex<References<String, K>>,
}

fn owner_uid<K: Kind>(object: &K) -> Option<&str> {
    object
        .owner_references()
        .iter()
        .find(|owner| owner.controller == Some(true))
        .map(|owner| owner.uid.as_str())
}

impl<K: Kind> Indexed<K> {
    fn new(store: Store<K>, label: &'static str) -> Self {
        Indexed { store, label, by_label: Mutex::default(), by_owner: Mutex::default() }
    }

    fn label_key(&self, object: &K) -> Option<(String, String)> {
        let meta = object.meta();
        let value = meta.labels.as_ref()?.get(self.label)?;
        Some((meta.namespace.clone().unwrap_or_default(), value.clone()))
    }

    /// Follows the store: called with each watch event after the reflector applied it.
    fn observe(&self, event: &watcher::Event<K>) {
        let mut by_label = self.by_label.lock().expect("the index lock is never poisoned");
        let mut by_owner = self.by_owner.lock().expect("the index lock is never poisoned");
        match event {
            watcher::Event::Apply(object) | watcher::Event::InitApply(object) => {
                if let Some(key) = self.label_key(object) {
                    by_label.entry(key).or_default().insert(ObjectRef::from_obj(object));
                }
                if let Some(uid) = owner_uid(object) {
                    by_owner.entry(uid.to_owned()).or_default().insert(ObjectRef::from_obj(object));
                }
            }
            watcher::Event::Delete(object) => {
                let reference = ObjectRef::from_obj(object);
                if let Some(key) = self.label_key(object)
                    && let Some(set) = by_label.get_mut(&key)
                {
                    set.remove(&reference);
                    if set.is_empty() {
                        by_label.remove(&key);
                    }
                }
                if let Some(uid) = owner_uid(object)
                    && let Some(set) = by_owner.get_mut(uid)
                {
                    set.remove(&reference);
                    if set.is_empty() {
                        by_owner.remove(uid);
                    }
                }
            }
            watcher::Event::InitDone => {
                let present = |set: &mut HashSet<ObjectRef<K>>| {
                    set.retain(|reference| self.store.get(reference).is_some());
                    !set.is_empty()
                };
                by_label.retain(|_, set| present(set));
                by_owner.retain(|_, set| present(set));
            }
            watcher::Event::Init => {}
        }
    }

    fn stored(&self, references: Option<&HashSet<ObjectRef<K>>>) -> Vec<Arc<K>> {
        references.into_iter().flatten().filter_map(|reference| self.store.get(reference)).collect()
    }
}

impl<K: Kind> Lookup<K> for Indexed<K> {
    fn get(&self, key: &ObjectKey) -> Option<Arc<K>> {
        self.store.get(&object_ref(key))
    }
}

impl<K: Kind> Listing<K> for Indexed<K> {
    fn list_labelled(&self, namespace: &str, label: &str, value: &str) -> Vec<Arc<K>> {
        let matches = |object: &K| {
            let meta = object.meta();
            meta.namespace.as_deref() == Some(namespace)
                && meta.labels.as_ref().and_then(|labels| labels.get(label)).map(String::as_str)
                    == Some(value)
        };
        if label != self.label {
            return self.store.state_filter(matches);
        }
        let by_label = self.by_label.lock().expect("the index lock is never poisoned");
        let found = self.stored(by_label.get(&(namespace.to_owned(), value.to_owned())));
        found.into_iter().filter(|object| matches(object)).collect()
    }

    fn children_of(&self, owner: &str) -> Vec<Arc<K>> {
        let by_owner = self.by_owner.lock().expect("the index lock is never poisoned");
        let found = self.stored(by_owner.get(owner));
        found.into_iter().filter(|object| owner_uid(object.as_ref()) == Some(owner)).collect()
    }
}

/// The reconcile context plus the pass counters `/metrics` reports.
struct Anchor {
    context: Arc<Context<WholeForms>>,
    passes: AtomicU64,
    errors: AtomicU64,
}

/// A watch of every namespace's `K` (label-selected if asked), managedFields stripped, into
/// kube-runtime's store `writer`.
fn stored<K: Kind>(
    client: &Client,
    labels: Option<&str>,
    writer: reflector::store::Writer<K>,
) -> impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static {
    let config = match labels {
        Some(selector) => watcher::Config::default().labels(selector),
        None => watcher::Config::default(),
    };
    let events = watcher(Api::<K>::all(client.clone()), config)
        .default_backoff()
        .modify(|obj| obj.managed_fields_mut().clear());
    reflector(writer, events)
}

/// A stored, label-selected watch of `K`, as the stream of touched objects a `Controller`
/// takes, and the store.
fn children<K: Kind>(
    client: &Client,
    labels: &str,
) -> (impl Stream<Item = Result<K, watcher::Error>> + Send + 'static, Store<K>) {
    let (reader, writer) = reflector::store();
    (stored(client, Some(labels), writer).touched_objects(), reader)
}

/// Like [`children`], keeping an [`Indexed`] store by `index_label` and owner.
fn indexed_children<K: Kind>(
    client: &Client,
    labels: &str,
    index_label: &'static str,
) -> (impl Stream<Item = Result<K, watcher::Error>> + Send + 'static, Arc<Indexed<K>>) {
    let (reader, writer) = reflector::store();
    let index = Arc::new(Indexed::new(reader, index_label));
    let observer = Arc::clone(&index);
    let events = stored(client, Some(labels), writer).inspect(move |event| {
        if let Ok(event) = event {
            observer.observe(event);
        }
    });
    (events.touched_objects(), index)
}

/// The cluster an object names in one of the labels `keys`, as the operator maps pods, Jobs and
/// claims.
fn cluster_by_label<K: Resource>(obj: &K, keys: &[&str]) -> Option<ObjectRef<DatabaseCluster>> {
    let labels = obj.meta().labels.as_ref()?;
    let name = keys.iter().find_map(|key| labels.get(*key))?;
    let namespace = obj.meta().namespace.as_deref().unwrap_or("default");
    Some(ObjectRef::new(name).within(namespace))
}

async fn pass(cluster: Arc<DatabaseCluster>, anchor: Arc<Anchor>) -> Result<Action, Error> {
    let result = reconcile(ObjectKey::of(cluster.as_ref()), Arc::clone(&anchor.context)).await;
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

fn error_policy(_: Arc<DatabaseCluster>, error: &Error, _: Arc<Anchor>) -> Action {
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

    let managed = managed_selector();
    let (cluster_store, cluster_writer) = reflector::store();
    let clusters = stored::<DatabaseCluster>(&client, None, cluster_writer).touched_objects();
    let (statefulsets, statefulset_store) = children::<StatefulSet>(&client, &managed);
    let (services, service_store) = children::<Service>(&client, &managed);
    let (secrets, secret_store) = children::<Secret>(&client, &managed);
    let (configmaps, configmap_store) = children::<ConfigMap>(&client, &managed);
    let (pdbs, pdb_store) = children::<PodDisruptionBudget>(&client, &managed);
    let (cronjobs, cronjob_store) = children::<CronJob>(&client, &managed);
    let (pods, pod_index) = indexed_children::<Pod>(&client, &managed, label::INSTANCE);
    let (app_secrets, app_secret_store) = children::<Secret>(&client, APP_SECRET_OF);
    let (jobs, job_index) = indexed_children::<Job>(&client, &managed, CLUSTER_LABEL);
    let (volumes, volume_store) = children::<PersistentVolumeClaim>(&client, &backup_volume_selector());

    let context = Arc::new(Context::<WholeForms> {
        events: EventPublisher::new(client.clone(), "kube-runtime-anchor"),
        client: client.clone(),
        clusters: Arc::new(Stored(cluster_store.clone())),
        statefulsets: Arc::new(Stored(statefulset_store)),
        services: Arc::new(Stored(service_store)),
        secrets: Arc::new(Stored(secret_store)),
        app_secrets: Arc::new(Stored(app_secret_store)),
        configmaps: Arc::new(Stored(configmap_store)),
        pdbs: Arc::new(Stored(pdb_store)),
        pods: pod_index,
        jobs: job_index,
        cronjobs: Arc::new(Stored(cronjob_store)),
        volumes: Arc::new(Stored(volume_store)),
        failures: FailureCounts::default(),
        certificates: Default::default(),
    });
    let anchor = Arc::new(Anchor { context, passes: AtomicU64::new(0), errors: AtomicU64::new(0) });
    tokio::spawn(serve_metrics(metrics_addr, Arc::clone(&anchor)));

    let controller = Controller::for_stream(clusters, cluster_store)
        .with_config(controller::Config::default().concurrency(4))
        .owns_stream(statefulsets)
        .owns_stream(services)
        .owns_stream(secrets)
        .owns_stream(configmaps)
        .owns_stream(pdbs)
        .owns_stream(cronjobs)
        .watches_stream(pods, |pod: Pod| cluster_by_label(&pod, &[label::INSTANCE, CLUSTER_LABEL]))
        .watches_stream(app_secrets, |secret: Secret| cluster_by_label(&secret, &[APP_SECRET_OF]))
        .watches_stream(jobs, |job: Job| cluster_by_label(&job, &[CLUSTER_LABEL]))
        .watches_stream(volumes, |claim: PersistentVolumeClaim| cluster_by_label(&claim, &[CLUSTER_LABEL]))
        .run(pass, error_policy, anchor)
        .for_each(|_| futures::future::ready(()));
    let mut terminate =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("a SIGTERM handler");
    tokio::select! {
        () = controller => {}
        _ = terminate.recv() => {}
    }
}
