//! The whole operator wired on a `kube::Client`: one informer per kind (DatabaseCluster,
//! StatefulSet, Service, Secret, ConfigMap, PodDisruptionBudget, Pod, CronJob, Job,
//! PersistentVolumeClaim), a controller for DatabaseClusters that owns the child kinds and watches
//! the pods (mapped to their cluster by the `app.kubernetes.io/instance` label) and the backup
//! Jobs and volumes (by the `databases.madmmas.dev/cluster` label), and [`reconcile`] as its pass.
//! `run` (against a cluster) and `demo` (against the simulated one) both run it under the
//! runtime's manager as [`workload`].
//!
//! The child informers watch only objects labelled `app.kubernetes.io/managed-by=dbcluster-operator`,
//! so the operator never caches the cluster's other Secrets, and of the claims only the backup
//! volumes ([`backup_volume_selector`]: no pass reads an instance's data claim from the cache);
//! a user's own app Secret (`spec.appSecretName`) is watched through the label the operator puts
//! on it ([`crate::databasecluster::specs::app_secret`]), mapped to its cluster by that label. Build with [`Operator::new`],
//! [`Operator::register`] it with the endpoints' [`Introspection`] (or take [`OperatorHandles`]:
//! queue, caches, metrics), then [`Operator::run`] until shutdown; [`workload`] does all of it in
//! the manager's two stages.

use crate::databasecluster::tls::renew::Lifetimes;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, Secret, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::{Api, Client, Resource};
use thiserror::Error;
use tokio_util::sync::CancellationToken;

use crate::databasecluster::api::types::DatabaseCluster;
use crate::databasecluster::backup::jobs::CLUSTER_LABEL;
use crate::databasecluster::backup::reconcile::cluster_of_backup_object;
use crate::databasecluster::cache::cached::{CachedPod, Compact};
use crate::databasecluster::controller::context::Context;
use crate::databasecluster::controller::events::{EventFlusher, EventPublisher};
use crate::databasecluster::controller::failures::FailureCounts;
use crate::databasecluster::controller::reconcile::reconcile;
use crate::databasecluster::specs::app_secret::APP_SECRET_OF;
use crate::databasecluster::specs::names::{FIELD_MANAGER, label};
use crate::databasecluster::view::ClusterView;
use crate::runtime::cache::CacheWriter;
use crate::runtime::controller::causes::ControllerQueue;
use crate::runtime::controller::{Controller, ControllerConfig, ControllerError};
use crate::runtime::informer::Informer;
use crate::runtime::manager::WorkloadContext;
use crate::runtime::manager::leader;
use crate::runtime::object::InformerObject;
use crate::runtime::observe::introspection::{InformerProbe, Introspection};
use crate::runtime::observe::metrics::Metrics;
use crate::runtime::reflector::ReflectorConfig;
use crate::runtime::workqueue::QueueConfig;
use crate::runtime::{Object, ObjectKey};

/// The controller's name: its queue's and metrics' label.
pub const CONTROLLER_NAME: &str = "databasecluster";

/// How the operator runs.
#[derive(Clone)]
pub struct OperatorOptions {
    /// Watch and manage only this namespace; `None` for every namespace.
    pub namespace: Option<String>,
    /// Reconcile worker tasks (distinct clusters at once).
    pub workers: usize,
    /// A pass running longer than this is cancelled and retried; `None` for no limit.
    pub reconcile_timeout: Option<Duration>,
    /// How long passes in flight may take to finish once shutdown begins.
    pub shutdown_timeout: Duration,
    /// Who reports the Events (`reportingInstance`), e.g. the pod's name.
    pub instance: String,
    /// Where the queue and reconcile metrics go.
    pub metrics: Arc<Metrics>,
    /// The controller starts when this replica becomes leader (see `ControllerConfig`).
    pub starts_on_leadership: bool,
    /// How long the certificates it issues live ([`crate::databasecluster::tls::renew`]).
    pub certificates: Lifetimes,
}

impl Default for OperatorOptions {
    fn default() -> Self {
        OperatorOptions {
            namespace: None,
            workers: 4,
            reconcile_timeout: Some(Duration::from_secs(60)),
            shutdown_timeout: Duration::from_secs(30),
            instance: FIELD_MANAGER.to_owned(),
            metrics: Arc::new(Metrics::new()),
            starts_on_leadership: false,
            certificates: crate::databasecluster::tls::renew::lifetimes(),
        }
    }
}

/// Why the operator stopped with an error.
#[derive(Debug, Error)]
pub enum OperatorError {
    /// The controller could not start (its caches never synced: missing CRD or RBAC?).
    #[error(transparent)]
    Controller(#[from] ControllerError),
}

/// What the HTTP server and tests need from a running operator; cheap to clone. Holding handles
/// keeps the informers (and their watches) alive.
#[derive(Clone)]
pub struct OperatorHandles {
    /// The controller's work queue (for `/debug/queue`).
    pub queue: ControllerQueue,
    /// The metrics registry (for `/metrics`).
    pub metrics: Arc<Metrics>,
    /// The DatabaseCluster informer.
    pub clusters: Arc<Informer<Compact<DatabaseCluster>>>,
    /// The StatefulSet informer.
    pub statefulsets: Arc<Informer<Compact<StatefulSet>>>,
    /// The Service informer.
    pub services: Arc<Informer<Compact<Service>>>,
    /// The Secret informer.
    pub secrets: Arc<Informer<Compact<Secret>>>,
    /// The users' own app Secrets (`spec.appSecretName`), by the label the operator puts on them.
    pub app_secrets: Arc<Informer<Secret>>,
    /// The ConfigMap informer.
    pub configmaps: Arc<Informer<Compact<ConfigMap>>>,
    /// The PodDisruptionBudget informer.
    pub pdbs: Arc<Informer<Compact<PodDisruptionBudget>>>,
    /// The pod informer (the clusters' pods, mapped to their cluster by label).
    pub pods: Arc<Informer<CachedPod>>,
    /// The backup and restore Job informer (mapped to their cluster by the backup label).
    pub jobs: Arc<Informer<Job>>,
    /// The backup CronJob informer.
    pub cronjobs: Arc<Informer<CronJob>>,
    /// The PersistentVolumeClaim informer (the backup volumes, mapped by the backup label).
    pub volumes: Arc<Informer<PersistentVolumeClaim>>,
    /// Waits for the Events queued so far to be written (they are written off the passes).
    pub events: EventFlusher,
}

/// The writers of the caches a pass reads, one per watched kind, each keeping what the passes
/// read (`cached.rs`: a form as received, or a kind whole without `managedFields`).
/// [`Operator::new`] hands each to its informer. [`CacheWriters::context`] is where the
/// operator's reconcile [`Context`] is made (the kube-runtime anchor, `benches/anchors`, makes
/// one of its own over kube-runtime's stores: `forms::WholeForms`).
#[derive(Debug)]
pub struct CacheWriters {
    /// The DatabaseClusters.
    pub clusters: CacheWriter<Compact<DatabaseCluster>>,
    /// The operator's StatefulSets.
    pub statefulsets: CacheWriter<Compact<StatefulSet>>,
    /// The operator's Services.
    pub services: CacheWriter<Compact<Service>>,
    /// The operator's Secrets.
    pub secrets: CacheWriter<Compact<Secret>>,
    /// The users' own app Secrets, by the label the operator puts on them.
    pub app_secrets: CacheWriter<Secret>,
    /// The operator's ConfigMaps.
    pub configmaps: CacheWriter<Compact<ConfigMap>>,
    /// The operator's PodDisruptionBudgets.
    pub pdbs: CacheWriter<Compact<PodDisruptionBudget>>,
    /// The clusters' pods, indexed by their cluster's name (`app.kubernetes.io/instance`).
    pub pods: CacheWriter<CachedPod>,
    /// The backup and restore Jobs, indexed by their cluster's name (`databases.madmmas.dev/cluster`).
    pub jobs: CacheWriter<Job>,
    /// The backup CronJobs.
    pub cronjobs: CacheWriter<CronJob>,
    /// The backup volumes (see [`backup_volume_selector`]).
    pub volumes: CacheWriter<PersistentVolumeClaim>,
}

impl Default for CacheWriters {
    fn default() -> Self {
        CacheWriters {
            clusters: CacheWriter::as_received(),
            statefulsets: CacheWriter::as_received(),
            services: CacheWriter::as_received(),
            secrets: CacheWriter::as_received(),
            app_secrets: CacheWriter::default(),
            configmaps: CacheWriter::as_received(),
            pdbs: CacheWriter::as_received(),
            // A pass reads its own cluster's pods and Jobs by label, and a backup Job's pods by
            // their owner: indexed, not scanned. No other cache keeps an index.
            pods: CacheWriter::as_received().with_label_index(label::INSTANCE).with_owner_index(),
            jobs: CacheWriter::default().with_label_index(CLUSTER_LABEL),
            cronjobs: CacheWriter::default(),
            volumes: CacheWriter::default(),
        }
    }
}

impl CacheWriters {
    /// The reconcile context reading these caches, writing through `client`; its Events are
    /// reported by `instance`.
    pub fn context(&self, client: Client, instance: impl Into<String>, certificates: Lifetimes) -> Context {
        Context {
            certificates,
            events: EventPublisher::new(client.clone(), instance),
            client,
            clusters: self.clusters.cache().clone(),
            statefulsets: self.statefulsets.cache().clone(),
            services: self.services.cache().clone(),
            secrets: self.secrets.cache().clone(),
            app_secrets: self.app_secrets.cache().clone(),
            configmaps: self.configmaps.cache().clone(),
            pdbs: self.pdbs.cache().clone(),
            pods: self.pods.cache().clone(),
            jobs: self.jobs.cache().clone(),
            cronjobs: self.cronjobs.cache().clone(),
            volumes: self.volumes.cache().clone(),
            failures: FailureCounts::default(),
        }
    }
}

/// The operator, built but not yet running.
pub struct Operator {
    controller: Controller<Compact<DatabaseCluster>>,
    context: Arc<Context>,
    handles: OperatorHandles,
}

impl std::fmt::Debug for OperatorOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OperatorOptions")
            .field("namespace", &self.namespace)
            .field("workers", &self.workers)
            .field("reconcile_timeout", &self.reconcile_timeout)
            .field("shutdown_timeout", &self.shutdown_timeout)
            .field("instance", &self.instance)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for OperatorHandles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OperatorHandles").field("queue_len", &self.queue.len()).finish_non_exhaustive()
    }
}

impl std::fmt::Debug for Operator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Operator").field("handles", &self.handles).finish_non_exhaustive()
    }
}

impl Operator {
    /// Builds the informers, the controller and the reconcile context; nothing runs yet.
    pub fn new(client: Client, options: OperatorOptions) -> Operator {
        let namespace = options.namespace.as_deref();
        let writers = CacheWriters::default();
        let context = Arc::new(writers.context(client.clone(), options.instance, options.certificates));
        let clusters = Arc::new(Informer::with_writer(
            api::<Compact<DatabaseCluster>>(&client, namespace),
            ReflectorConfig::default(),
            writers.clusters,
        ));
        // The children: only what carries the operator's `managed-by` label.
        let managed = managed_selector();
        let statefulsets = labelled_informer(&client, namespace, &managed, writers.statefulsets);
        let services = labelled_informer(&client, namespace, &managed, writers.services);
        let secrets = labelled_informer(&client, namespace, &managed, writers.secrets);
        let app_secrets = labelled_informer(&client, namespace, APP_SECRET_OF, writers.app_secrets);
        let configmaps = labelled_informer(&client, namespace, &managed, writers.configmaps);
        let pdbs = labelled_informer(&client, namespace, &managed, writers.pdbs);
        let pods = labelled_informer(&client, namespace, &managed, writers.pods);
        let jobs = labelled_informer(&client, namespace, &managed, writers.jobs);
        let cronjobs = labelled_informer(&client, namespace, &managed, writers.cronjobs);
        // Of the claims, the backup volumes only: no pass reads an instance's data claim from the
        // cache (a storage growth reads the claims it grows from the server), and three of them
        // per cluster would be about a tenth of the operator's memory.
        let volumes = labelled_informer(&client, namespace, &backup_volume_selector(), writers.volumes);

        let metrics = Arc::clone(&options.metrics);
        let config = ControllerConfig {
            workers: options.workers.max(1),
            reconcile_timeout: options.reconcile_timeout,
            shutdown_timeout: options.shutdown_timeout,
            queue: QueueConfig::named(CONTROLLER_NAME).with_metrics(metrics.queue(CONTROLLER_NAME)),
            metrics: Some(metrics.controller(CONTROLLER_NAME)),
            starts_on_leadership: options.starts_on_leadership,
            ..ControllerConfig::named(CONTROLLER_NAME)
        };
        let controller = Controller::new(&clusters, config)
            .owns(&statefulsets)
            .owns(&services)
            .owns(&secrets)
            .owns(&configmaps)
            .owns(&pdbs)
            .watches(&pods, cluster_of_pod)
            .watches(&app_secrets, cluster_of_app_secret)
            .owns(&cronjobs)
            .watches(&jobs, cluster_of_backup_object::<Job>)
            .watches(&volumes, cluster_of_backup_object::<PersistentVolumeClaim>);
        let handles = OperatorHandles {
            queue: controller.queue().clone(),
            metrics,
            clusters,
            statefulsets,
            services,
            secrets,
            app_secrets,
            configmaps,
            pdbs,
            pods,
            jobs,
            cronjobs,
            volumes,
            events: context.events.flusher(),
        };
        Operator { controller, context, handles }
    }

    /// Handles on the operator's queue, caches and figures.
    pub fn handles(&self) -> OperatorHandles {
        self.handles.clone()
    }

    /// Registers the informers, the controller and the clusters' view with the endpoints'
    /// registry, so that `/readyz`, `/debug/queue`, `/debug/cache`, the informer metrics and the
    /// live page show them.
    pub fn register(&self, view: &Introspection) {
        let handles = &self.handles;
        view.add_informer("databaseclusters", Arc::clone(&handles.clusters) as Arc<dyn InformerProbe>);
        view.add_informer("statefulsets", Arc::clone(&handles.statefulsets) as Arc<dyn InformerProbe>);
        view.add_informer("services", Arc::clone(&handles.services) as Arc<dyn InformerProbe>);
        view.add_informer("secrets", Arc::clone(&handles.secrets) as Arc<dyn InformerProbe>);
        view.add_informer("app-secrets", Arc::clone(&handles.app_secrets) as Arc<dyn InformerProbe>);
        view.add_informer("configmaps", Arc::clone(&handles.configmaps) as Arc<dyn InformerProbe>);
        view.add_informer("poddisruptionbudgets", Arc::clone(&handles.pdbs) as Arc<dyn InformerProbe>);
        view.add_informer("pods", Arc::clone(&handles.pods) as Arc<dyn InformerProbe>);
        view.add_informer("jobs", Arc::clone(&handles.jobs) as Arc<dyn InformerProbe>);
        view.add_informer("cronjobs", Arc::clone(&handles.cronjobs) as Arc<dyn InformerProbe>);
        view.add_informer("persistentvolumeclaims", Arc::clone(&handles.volumes) as Arc<dyn InformerProbe>);
        view.add_controller(self.controller.probe());
        let clusters = Arc::clone(handles.clusters.cache());
        view.add_object_view(Arc::new(ClusterView::new(CONTROLLER_NAME, clusters)));
    }

    /// Starts the informers' list and watch without reconciling, e.g. to warm the caches of a
    /// standby replica before it wins the leader election. [`Operator::run`] calls it too; a
    /// second call does nothing.
    pub fn start_informers(&self) {
        self.handles.clusters.start();
        self.handles.statefulsets.start();
        self.handles.services.start();
        self.handles.secrets.start();
        self.handles.app_secrets.start();
        self.handles.configmaps.start();
        self.handles.pdbs.start();
        self.handles.pods.start();
        self.handles.jobs.start();
        self.handles.cronjobs.start();
        self.handles.volumes.start();
    }

    /// Starts the informers (if not yet started) and reconciles until `shutdown` resolves; passes
    /// in flight then get the controller's shutdown deadline to finish.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Result<(), OperatorError> {
        self.start_informers();
        let Operator { controller, context, .. } = self;
        controller.run(reconcile, context.clone(), shutdown).await?;
        // The passes' last Events are written before the operator exits (bounded by the writes'
        // own timeouts; an Event is best effort).
        context.events.flush().await;
        Ok(())
    }
}

/// The operator in the manager's two stages: on every replica its informers start and are
/// registered with the endpoints (`/readyz`, `/debug/*`, informer metrics), so standbys keep warm
/// caches; the returned stage runs its workers while leading, until `stop` is cancelled.
pub async fn workload(
    context: WorkloadContext,
) -> Result<impl FnOnce(CancellationToken) -> BoxFuture<'static, Result<(), OperatorError>>, OperatorError> {
    let options = OperatorOptions {
        namespace: context.namespace,
        workers: context.workers,
        shutdown_timeout: context.shutdown_timeout,
        instance: leader::default_identity(),
        metrics: context.metrics,
        starts_on_leadership: context.leader_election,
        ..OperatorOptions::default()
    };
    let operator = Operator::new(context.client, options);
    operator.register(&context.view);
    operator.start_informers();
    Ok(move |stop: CancellationToken| -> BoxFuture<'static, Result<(), OperatorError>> {
        Box::pin(operator.run(stop.cancelled_owned()))
    })
}

/// The DatabaseCluster a pod belongs to: its `app.kubernetes.io/instance` label (the pod's
/// controller is the StatefulSet, not the cluster), or a backup pod's cluster label (its
/// termination message is the backup's manifest).
pub fn cluster_of_pod(pod: &CachedPod) -> Option<ObjectKey> {
    let name = pod.label(label::INSTANCE).or_else(|| pod.label(CLUSTER_LABEL))?;
    Some(ObjectKey::new(pod.namespace(), name))
}

/// The DatabaseCluster whose `spec.appSecretName` names this Secret: the label the operator put
/// on it ([`APP_SECRET_OF`]).
fn cluster_of_app_secret(secret: &Secret) -> Option<ObjectKey> {
    let name = secret.metadata.labels.as_ref()?.get(APP_SECRET_OF)?;
    Some(ObjectKey::new(secret.metadata.namespace.as_deref(), name))
}

fn api<K>(client: &Client, namespace: Option<&str>) -> Api<K::Resource>
where
    K: Object<Resource: Resource<DynamicType = (), Scope = NamespaceResourceScope>>,
{
    match namespace {
        Some(namespace) => Api::namespaced(client.clone(), namespace),
        None => Api::all(client.clone()),
    }
}

/// The label selector of the child informers: what carries the operator's `managed-by` label.
pub fn managed_selector() -> String {
    format!("{}={FIELD_MANAGER}", label::MANAGED_BY)
}

/// The label selector of the claim informer: the operator's claims that carry a cluster's backup
/// label (the backup volumes), not the instances' data claims the StatefulSets make.
pub fn backup_volume_selector() -> String {
    format!("{},{CLUSTER_LABEL}", managed_selector())
}

/// An informer over the objects of kind `K` that match `selector` (a label selector), keeping
/// `writer`'s cache.
fn labelled_informer<K>(
    client: &Client,
    namespace: Option<&str>,
    selector: &str,
    writer: CacheWriter<K>,
) -> Arc<Informer<K>>
where
    K: InformerObject<Resource: Resource<DynamicType = (), Scope = NamespaceResourceScope>>,
{
    let config = ReflectorConfig { label_selector: Some(selector.to_owned()), ..ReflectorConfig::default() };
    Arc::new(Informer::with_writer(api::<K>(client, namespace), config, writer))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::databasecluster::backup::jobs::backup_labels;
    use crate::databasecluster::fixtures::owner;
    use crate::databasecluster::specs::names::standard_labels;
    use crate::runtime::selector::LabelSelector;

    #[test]
    fn the_claim_informer_selects_the_backup_volume_and_not_the_data_claims() {
        let selector = LabelSelector::parse(&backup_volume_selector()).unwrap();
        let owner = owner();
        assert!(selector.matches(&backup_labels(&owner)), "the backup volume");
        assert!(!selector.matches(&standard_labels(&owner)), "an instance's data claim");
    }
}
