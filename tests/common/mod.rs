//! The tests' harness: a simulated API server with the DatabaseCluster CRD installed, the
//! operator started exactly as `run` starts it, and the one bounded wait, [`eventually`], that
//! every test polls with (its timeout says what was expected and what was last seen).

// Each e2e test file uses a different part of the harness.
#![allow(dead_code)]

pub mod https;
pub mod plain_http;
pub mod postgres;
pub mod s3;

// Each test binary uses a different part of them.
#[allow(unused_imports)]
pub use plain_http::{http_exchange, http_get, http_get_as, try_http_get};

use std::fmt::Debug;
use std::future::Future;
use std::time::Duration;

use dbcluster_operator::databasecluster::api::types::{self, DatabaseCluster};
use dbcluster_operator::databasecluster::controller::events::EventFlusher;
use dbcluster_operator::databasecluster::controller::operator::{
    Operator, OperatorError, OperatorHandles, OperatorOptions,
};
use dbcluster_operator::runtime::ObjectKey;
use dbcluster_operator::runtime::cache::Cache;
use dbcluster_operator::runtime::observe::metrics::Metrics;
use dbcluster_operator::runtime::workqueue::KeyPhase;
use dbcluster_operator::sim::{RequestRecord, SimConfig, SimServer};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ListParams, PostParams};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// The longest any awaited condition may take (simulated time under a paused clock).
pub const WAIT_LIMIT: Duration = Duration::from_secs(120);

/// A simulated cluster with the DatabaseCluster CRD installed.
pub struct TestCluster {
    /// The server; dropped last.
    pub sim: SimServer,
    /// A client for the test's own requests.
    pub client: Client,
    /// The Event writers of the operators started on it, flushed before Events are read.
    events: parking_lot::Mutex<Vec<EventFlusher>>,
    /// Files the test writes beside the cluster (CA certificates for psql), removed with it.
    scratch: tempfile::TempDir,
}

impl TestCluster {
    /// Starts a server with `config` and installs the CRD the operator generates.
    pub async fn start_with(config: SimConfig) -> TestCluster {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .try_init();
        let sim = SimServer::start_with(config).await.expect("the simulated server starts");
        let client = sim.client();
        install_crd(&client, types::crd()).await;
        let scratch = tempfile::tempdir().expect("a scratch directory");
        // Readable by the programs a test runs as another user (a CA certificate is public).
        let readable = std::os::unix::fs::PermissionsExt::from_mode(0o755);
        std::fs::set_permissions(scratch.path(), readable).expect("a readable scratch directory");
        TestCluster { sim, client, events: Default::default(), scratch }
    }

    /// A directory for the test's files about this cluster, removed with it.
    pub fn scratch_dir(&self) -> &std::path::Path {
        self.scratch.path()
    }

    /// Starts a server with the default configuration.
    pub async fn start() -> TestCluster {
        Self::start_with(SimConfig::default()).await
    }

    /// The DatabaseClusters of the `default` namespace.
    pub fn clusters(&self) -> Api<DatabaseCluster> {
        Api::namespaced(self.client.clone(), "default")
    }

    /// Any namespaced kind in `default`.
    pub fn api<K>(&self) -> Api<K>
    where
        K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>,
    {
        Api::namespaced(self.client.clone(), "default")
    }

    /// Starts the operator on this cluster.
    pub async fn start_operator(&self) -> RunningOperator {
        self.start_operator_with(OperatorOptions::default()).await
    }

    /// Starts the operator on this cluster with `options` (its instance name and metrics are the
    /// tests').
    pub async fn start_operator_with(&self, options: OperatorOptions) -> RunningOperator {
        let operator = RunningOperator::start_with(self.sim.client(), options).await;
        self.track_events(&operator);
        operator
    }

    /// Makes [`TestCluster::events_about`] wait for `operator`'s queued Events (for operators
    /// not started by [`TestCluster::start_operator`]).
    pub fn track_events(&self, operator: &RunningOperator) {
        self.events.lock().push(operator.handles.events.clone());
    }

    /// The write requests (create, update, patch, delete) logged so far.
    pub fn writes(&self) -> Vec<RequestRecord> {
        self.sim.request_log().into_iter().filter(is_write).collect()
    }

    /// The Events about `name` in `default`, oldest first.
    ///
    /// Events are written off the operator's passes, so the Events queued so far are awaited
    /// first.
    pub async fn events_about(&self, name: &str) -> Vec<Event> {
        let flushers = self.events.lock().clone();
        for flusher in flushers {
            within("the operator's queued Events to be written", flusher.flush()).await;
        }
        let events: Api<Event> = self.api();
        let list = events.list(&ListParams::default()).await.expect("events list");
        list.items
            .into_iter()
            .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
            .collect()
    }

    /// [`TestCluster::events_about`] `name` with reason `reason`.
    pub async fn events_with_reason(&self, name: &str, reason: &str) -> Vec<Event> {
        let events = self.events_about(name).await;
        events.into_iter().filter(|e| e.reason.as_deref() == Some(reason)).collect()
    }
}

/// Waits until Events with each of `reasons` exist about `name` (an Event is published right
/// after the status write that implies it); returns every Event's reason.
pub async fn await_event_reasons(cluster: &TestCluster, name: &str, reasons: &[&str]) -> Vec<String> {
    eventually(&format!("events {reasons:?} about {name}"), WAIT_LIMIT, || async {
        let seen: Vec<String> =
            cluster.events_about(name).await.into_iter().filter_map(|e| e.reason).collect();
        if reasons.iter().all(|r| seen.iter().any(|s| s == r)) { Ok(seen) } else { Err(seen) }
    })
    .await
}

/// Whether a logged request changed something.
pub fn is_write(record: &RequestRecord) -> bool {
    matches!(record.verb.as_str(), "create" | "update" | "patch" | "delete" | "deletecollection")
}

/// The manager's configuration for a test: every endpoint on a free loopback port, 2 workers, no
/// leader election, 10 s to shut down, endpoints open (`metrics_secure` off).
pub fn local_manager_config() -> dbcluster_operator::runtime::manager::ManagerConfig {
    let local: std::net::SocketAddr = "127.0.0.1:0".parse().expect("a loopback address");
    dbcluster_operator::runtime::manager::ManagerConfig {
        namespace: None,
        workers: 2,
        metrics_addr: local,
        debug_addr: local,
        health_addr: local,
        leader_election: None,
        shutdown_timeout: Duration::from_secs(10),
        metrics_secure: false,
        metrics_cert_dir: None,
    }
}

/// Creates every object of a multi-document manifest (`manifests/rbac.yaml`).
pub async fn create_all(client: &Client, yaml: &str) {
    use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
    for document in serde_saphyr::from_multiple::<serde_json::Value>(yaml).unwrap() {
        let api_version = document["apiVersion"].as_str().unwrap();
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        let gvk = GroupVersionKind::gvk(group, version, document["kind"].as_str().unwrap());
        let resource = ApiResource::from_gvk(&gvk);
        let object: DynamicObject = serde_json::from_value(document).unwrap();
        let api: Api<DynamicObject> = match &object.metadata.namespace {
            Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
            None => Api::all_with(client.clone(), &resource),
        };
        api.create(&PostParams::default(), &object).await.unwrap();
    }
}

/// The CustomResourceDefinitions as untyped objects, for CRDs no typed object could hold (the
/// invalid ones a test sends).
pub fn crd_objects(client: Client) -> Api<kube::api::DynamicObject> {
    use kube::api::{ApiResource, GroupVersionKind};
    let gvk = GroupVersionKind::gvk("apiextensions.k8s.io", "v1", "CustomResourceDefinition");
    Api::all_with(client, &ApiResource::from_gvk_with_plural(&gvk, "customresourcedefinitions"))
}

/// Creates (or replaces) the CRD.
pub async fn install_crd(client: &Client, crd: CustomResourceDefinition) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let name = crd.metadata.name.clone().expect("the CRD has a name");
    match crds.get_opt(&name).await.expect("get CRD") {
        None => {
            crds.create(&PostParams::default(), &crd).await.expect("the CRD is accepted");
        }
        Some(live) => {
            let mut crd = crd;
            crd.metadata.resource_version = live.metadata.resource_version;
            crds.replace(&name, &PostParams::default(), &crd).await.expect("the CRD is replaced");
        }
    }
}

/// The operator running in a task, as `run` runs it.
pub struct RunningOperator {
    stop: oneshot::Sender<()>,
    task: JoinHandle<Result<(), OperatorError>>,
    /// Its queue, caches and metrics.
    pub handles: OperatorHandles,
}

impl RunningOperator {
    /// Builds and starts the operator (one worker per cluster key, as many as the default), and
    /// waits until its caches are synced.
    pub async fn start(client: Client) -> RunningOperator {
        Self::start_with(client, OperatorOptions::default()).await
    }

    /// [`RunningOperator::start`] with `options` (its instance name and metrics are the tests').
    pub async fn start_with(client: Client, options: OperatorOptions) -> RunningOperator {
        let options = OperatorOptions {
            instance: "e2e".into(),
            metrics: std::sync::Arc::new(Metrics::new()),
            ..options
        };
        let operator = Operator::new(client, options);
        let handles = operator.handles();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(operator.run(async {
            let _ = stopped.await;
        }));
        within("the operator's caches to sync", async {
            handles.clusters.synced().await;
            handles.statefulsets.synced().await;
            handles.services.synced().await;
            handles.secrets.synced().await;
        })
        .await;
        RunningOperator { stop, task, handles }
    }

    /// Reconcile passes finished so far, whatever their result.
    pub fn passes(&self) -> u64 {
        self.metric("controller_runtime_reconcile_total")
    }

    /// Passes that ended with an error (retried or terminal).
    pub fn errors(&self) -> u64 {
        self.metric("controller_runtime_reconcile_errors_total")
    }

    /// Passes that ended with a terminal error (not retried).
    pub fn terminal_errors(&self) -> u64 {
        self.metric("controller_runtime_terminal_reconcile_errors_total")
    }

    /// The sum of a counter of the databasecluster controller over all its label sets.
    fn metric(&self, name: &str) -> u64 {
        let prefix = format!("{name}{{");
        self.handles
            .metrics
            .encode()
            .lines()
            .filter(|line| line.starts_with(&prefix) && line.contains("controller=\"databasecluster\""))
            .filter_map(|line| line.rsplit(' ').next()?.parse::<u64>().ok())
            .sum()
    }

    /// Aborts the operator's task at once, wherever its passes are (a crash, for tests of what
    /// the next operator finishes).
    pub fn kill(self) {
        self.task.abort();
    }

    /// Stops the operator and waits for it to finish. Every e2e test that stops its operator so
    /// checks that the operator's own reconcile is no hot loop.
    pub async fn stop(self) {
        let hot = self.metric("controller_runtime_hot_loop_keys");
        assert_eq!(hot, 0, "keys of the operator's own reconcile in a hot loop");
        let _ = self.stop.send(());
        let result = within("the operator to stop", self.task).await;
        result.expect("the operator task did not panic").expect("the operator stopped cleanly");
    }
}

/// Polls `condition` every [`POLL_INTERVAL`] until it returns `Ok(value)`, for at most `limit`
/// (simulated time under a paused clock), and returns the value. `Err(seen)` means "not yet" and
/// carries what was seen: on timeout the test fails saying what it waited for and what it saw last.
pub async fn eventually<T, Seen, Fut>(what: &str, limit: Duration, condition: impl FnMut() -> Fut) -> T
where
    Fut: Future<Output = Result<T, Seen>>,
    Seen: Debug,
{
    eventually_every(what, limit, POLL_INTERVAL, condition).await
}

/// [`eventually`], polling every `interval`: for conditions that cost a process or a database
/// connection to check (real PostgreSQL), where polling every 10 ms would load the machine.
pub async fn eventually_every<T, Seen, Fut>(
    what: &str,
    limit: Duration,
    interval: Duration,
    mut condition: impl FnMut() -> Fut,
) -> T
where
    Fut: Future<Output = Result<T, Seen>>,
    Seen: Debug,
{
    let mut last_seen = None;
    let polling = async {
        loop {
            match condition().await {
                Ok(value) => return value,
                Err(seen) => last_seen = Some(seen),
            }
            tokio::time::sleep(interval).await;
        }
    };
    let result = tokio::time::timeout(limit, polling).await;
    match result {
        Ok(value) => value,
        Err(_) => match last_seen {
            Some(seen) => panic!("timed out after {limit:?} waiting for {what}; last seen: {seen:?}"),
            None => panic!("timed out after {limit:?} waiting for {what}; the condition never answered"),
        },
    }
}

/// Awaits `future` (a watch, a child process's output: something that is awaited, not polled),
/// failing the test if it takes longer than [`WAIT_LIMIT`].
pub async fn within<T>(what: &str, future: impl Future<Output = T>) -> T {
    within_limit(what, WAIT_LIMIT, future).await
}

/// Awaits `future`, failing the test if it takes longer than `limit`.
pub async fn within_limit<T>(what: &str, limit: Duration, future: impl Future<Output = T>) -> T {
    match tokio::time::timeout(limit, future).await {
        Ok(value) => value,
        Err(_) => panic!("timed out after {limit:?} waiting for {what}"),
    }
}

/// The seed's sample, `manifests/samples/databasecluster.yaml`, unchanged.
pub fn sample() -> DatabaseCluster {
    let yaml = include_str!("../../manifests/samples/databasecluster.yaml");
    serde_saphyr::from_str(yaml).expect("the sample parses as a DatabaseCluster")
}

/// How often awaited conditions are checked (simulated time under a paused clock).
pub const POLL_INTERVAL: Duration = Duration::from_millis(10);

/// Waits until the object `name` exists and satisfies `done`, reading it every
/// [`POLL_INTERVAL`]; returns it. (Plain GETs keep the helper independent of the watch paths,
/// which the sim's and the reflector's own tests cover.)
pub async fn await_object<K>(api: &Api<K>, name: &str, what: &str, done: impl Fn(&K) -> bool) -> K
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    eventually(what, WAIT_LIMIT, || async {
        match api.get_opt(name).await.expect("get") {
            Some(obj) if done(&obj) => Ok(obj),
            seen => Err(seen),
        }
    })
    .await
}

/// The names of the objects `api` lists, in the server's order.
pub async fn names<K>(api: &Api<K>) -> Vec<String>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    api.list(&ListParams::default())
        .await
        .expect("list")
        .items
        .into_iter()
        .filter_map(|o| o.meta().name.clone())
        .collect()
}

/// Waits until the object `name` is gone.
pub async fn await_absent<K>(api: &Api<K>, name: &str, what: &str)
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    eventually(what, WAIT_LIMIT, || async {
        match api.get_opt(name).await.expect("get") {
            None => Ok(()),
            Some(obj) => Err(obj),
        }
    })
    .await
}

/// Waits until the operator's cache holds `key` in a state satisfying `done`.
pub async fn await_cached<K>(cache: &Cache<K>, key: &ObjectKey, what: &str, done: impl Fn(&K) -> bool)
where
    K: dbcluster_operator::runtime::Object + Debug + Send + Sync + 'static,
{
    eventually(what, WAIT_LIMIT, || async {
        match cache.get(key) {
            Some(obj) if done(&obj) => Ok(()),
            seen => Err(seen),
        }
    })
    .await
}

/// Starts the operator on `cluster`, applies the seed's sample, and returns once the cluster is
/// Running 3/3 in the API and in the operator's cache and every pass that brought has finished.
pub async fn sample_running(cluster: &TestCluster) -> RunningOperator {
    let name = sample().metadata.name.expect("the sample is named");
    let operator = cluster.start_operator().await;
    let api = cluster.clusters();
    api.create(&PostParams::default(), &sample()).await.unwrap();
    await_object(&api, &name, "Running 3/3", |c| phase(c) == Some("Running") && ready(c) == 3).await;
    let cache = operator.handles.clusters.cache();
    await_cached(cache, &key(&name), "Running in the operator's cache", |c| {
        phase(&c.expand().unwrap()) == Some("Running")
    })
    .await;
    reconcile_now(&operator, &key(&name)).await;
    operator
}

/// Waits until the operator has finished at least `n` passes (polled on its metrics).
pub async fn await_passes(operator: &RunningOperator, n: u64) {
    eventually(&format!("{n} reconcile passes"), WAIT_LIMIT, || async {
        let passes = operator.passes();
        if passes >= n { Ok(()) } else { Err(format!("{passes} passes")) }
    })
    .await
}

/// Whether no key is queued or being reconciled (timers may be pending).
pub fn settled(operator: &RunningOperator) -> bool {
    operator
        .handles
        .queue
        .snapshot()
        .iter()
        .all(|k| !matches!(k.phase, KeyPhase::Queued { .. } | KeyPhase::Processing { .. }))
}

/// Enqueues `key` and waits until a pass that started after this call has finished and nothing
/// else is queued or running: afterwards, the operator has seen everything in its caches now.
pub async fn reconcile_now(operator: &RunningOperator, key: &ObjectKey) {
    let before = operator.passes();
    operator.handles.queue.add(key.clone());
    eventually("a pass of the enqueued key, then a settled queue", WAIT_LIMIT, || async {
        if operator.passes() > before && settled(operator) {
            Ok(())
        } else {
            Err(operator.handles.queue.snapshot())
        }
    })
    .await
}

/// The key of `name` in `default`.
pub fn key(name: &str) -> ObjectKey {
    ObjectKey::namespaced("default", name)
}

/// The phase of a cluster, as text.
pub fn phase(cluster: &DatabaseCluster) -> Option<&'static str> {
    cluster.status.as_ref()?.phase.map(|p| p.as_str())
}

/// The ready replicas a cluster's status reports.
pub fn ready(cluster: &DatabaseCluster) -> i32 {
    cluster.status.as_ref().map_or(0, |s| s.ready_replicas)
}

/// The status and reason of a cluster's condition.
pub fn condition(cluster: &DatabaseCluster, type_: &str) -> Option<(String, String)> {
    let status = cluster.status.as_ref()?;
    let c = status.conditions.iter().find(|c| c.type_ == type_)?;
    Some((c.status.clone(), c.reason.clone()))
}

/// The value of `key` in a Secret's data, as text.
pub fn secret_value(secret: &k8s_openapi::api::core::v1::Secret, key: &str) -> String {
    String::from_utf8(secret.data.as_ref().expect("data")[key].0.clone()).expect("utf-8")
}

/// A pod's IP, or nothing while it has none.
pub fn pod_ip(pod: &k8s_openapi::api::core::v1::Pod) -> String {
    pod.status.as_ref().and_then(|s| s.pod_ip.clone()).unwrap_or_default()
}

/// The real `kubectl` against the cluster, its own kubeconfig in `home`.
pub fn kubectl_command(cluster: &TestCluster, home: &std::path::Path) -> tokio::process::Command {
    std::fs::write(home.join("config"), cluster.sim.kubeconfig_yaml()).unwrap();
    let mut cmd = tokio::process::Command::new("kubectl");
    cmd.env("KUBECONFIG", home.join("config")).env("HOME", home).kill_on_drop(true);
    cmd
}

/// `kubectl <args>` against the cluster; stdout, or stderr on failure.
pub fn kubectl(cluster: &TestCluster, args: &[&str]) -> Result<String, String> {
    let dir = tempfile::tempdir().unwrap();
    let out = kubectl_command(cluster, dir.path()).args(args).as_std_mut().output().unwrap();
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// Log lines captured for a test, shared with the subscriber writing them.
#[derive(Clone, Default)]
pub struct Captured(std::sync::Arc<parking_lot::Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    /// Captures the log lines `filter` (an `EnvFilter` directive) selects, written on this
    /// thread (the whole test under tokio's current-thread runtime), while the guard lives.
    pub fn start(&self, filter: &str) -> tracing::subscriber::DefaultGuard {
        keep_callsite_interest_exact();
        let writer = self.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .finish();
        tracing::subscriber::set_default(subscriber)
    }

    /// The captured lines.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock()).into_owned()
    }

    /// How many times `needle` occurs in the captured lines.
    pub fn count(&self, needle: &str) -> usize {
        self.text().matches(needle).count()
    }
}

/// Makes tracing decide every callsite's interest over every registered subscriber, so that a
/// capture sees its lines even while other tests of the binary run. tracing caches, per callsite,
/// whether any subscriber may want it; while at most one subscriber is registered, a thread that
/// hits a new callsite asks only its own default (another test's thread: none, or the global one),
/// without a lock, and can store "never" over what a capture registered meanwhile wants. Two
/// subscribers that want nothing, kept for the whole process, make every later decision ask all of
/// them under the lock.
fn keep_callsite_interest_exact() {
    static KEPT: std::sync::OnceLock<[tracing::Dispatch; 2]> = std::sync::OnceLock::new();
    KEPT.get_or_init(|| {
        let none = || tracing::Dispatch::new(tracing::subscriber::NoSubscriber::default());
        [none(), none()]
    });
}

/// The error of a reconcile that never fails.
#[derive(Debug, thiserror::Error)]
#[error("never")]
pub struct Never;
impl dbcluster_operator::runtime::controller::ReconcileError for Never {}

/// A reconcile that logs `reconciling` (inside the controller's span) and is done.
pub async fn reconcile_done(
    _: ObjectKey,
    _: std::sync::Arc<()>,
) -> Result<dbcluster_operator::runtime::controller::Action, Never> {
    tracing::info!("reconciling");
    Ok(dbcluster_operator::runtime::controller::Action::Done)
}
