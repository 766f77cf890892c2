//! The controller's rules, against the simulated API server over real HTTP: workers start after
//! every informer is synced; `For`, `Owns` and `Watches` map events to keys; the four ways a pass
//! can end tell the queue the right thing; panics and timeouts are caught; shutdown lets the pass in
//! flight finish and starts no new one.
#![cfg(feature = "sim")]

use crate::common;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use dbcluster_operator::runtime::ObjectKey;
use dbcluster_operator::runtime::controller::writes::recorded;
use dbcluster_operator::runtime::controller::{Action, Controller, ControllerConfig, ReconcileError};
use dbcluster_operator::runtime::informer::Informer;
use dbcluster_operator::runtime::observe::introspection::Introspection;
use dbcluster_operator::runtime::observe::metrics::Metrics;
use dbcluster_operator::runtime::reflector::ReflectorConfig;
use dbcluster_operator::sim::SimServer;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, Patch, PatchParams, PostParams};
use parking_lot::Mutex;
use serde_json::json;
use tokio::sync::oneshot;
use tokio::time::Instant;

mod events;
mod outcomes;
mod own_writes;
mod shutdown;

/// What the test reconcile does for an object, by name.
#[derive(Clone, Copy)]
enum Behaviour {
    Done,
    RequeueAfter(Duration),
    Fail,
    FailTerminally,
    Panic,
    Hang,
    /// Fails with a server hint to retry after this long.
    FailRetryAfter(Duration),
    /// Writes a child Secret on every pass (a flapping field), recording the write.
    Flap,
    /// Writes its own object on every pass (a label that counts the passes), recording the
    /// write, and ends `Done`, or `RequeueAfter` the given time.
    WriteSelf(Option<Duration>),
    /// Reads `data.n` from the cache and writes `n + 1` with the cached resourceVersion as a
    /// precondition, until it is 3 (a pass acting on what it read from the cache).
    CountToThree,
    /// The same on the label `n` of the Secret of the key's name, read from the informer in
    /// `Recorder::picked` (the second Secret informer of its controller).
    CountLabelToThree,
    /// Takes the Secret of the key's name out of the picked informer's selector (removes its
    /// `picked` label); a later pass that still finds it in that informer's cache counts a
    /// conflict (it read a cache one write behind).
    LeavePicked,
}

#[derive(Debug, thiserror::Error)]
#[error("{message}")]
struct TestError {
    message: &'static str,
    terminal: bool,
    retry_after: Option<Duration>,
}

impl TestError {
    fn new(message: &'static str, terminal: bool) -> Self {
        Self { message, terminal, retry_after: None }
    }
}

impl ReconcileError for TestError {
    fn is_terminal(&self) -> bool {
        self.terminal
    }

    fn retry_after(&self) -> Option<Duration> {
        self.retry_after
    }
}

/// Records every pass, and lets a test wait for a condition on the record.
#[derive(Default)]
struct Recorder {
    passes: Mutex<Vec<(ObjectKey, Instant)>>,
    behaviour: Mutex<HashMap<String, Behaviour>>,
    synced_at_first_pass: Mutex<Option<bool>>,
    caches: Mutex<Vec<Box<dyn Fn() -> bool + Send>>>,
    gate: Mutex<Option<oneshot::Receiver<()>>>,
    /// The client for the writing behaviours, and the ConfigMap cache they read.
    client: Mutex<Option<(kube::Client, Arc<Informer<ConfigMap>>)>>,
    conflicts: Mutex<usize>,
    /// Writes made by `Flap` so far.
    flaps: Mutex<u64>,
    /// The informer `CountLabelToThree` reads.
    picked: Mutex<Option<Arc<Informer<Secret>>>>,
}

impl Recorder {
    fn passes_of(&self, name: &str) -> Vec<Instant> {
        self.passes.lock().iter().filter(|(k, _)| k.name() == name).map(|(_, t)| *t).collect()
    }

    fn keys(&self) -> Vec<String> {
        self.passes.lock().iter().map(|(k, _)| k.to_string()).collect()
    }

    /// Waits (at most a minute of the test's clock) until `condition` holds.
    async fn wait_until(&self, condition: impl Fn(&Self) -> bool) {
        common::eventually(
            "the recorded passes to satisfy the condition",
            Duration::from_secs(60),
            || async { if condition(self) { Ok(()) } else { Err(self.keys()) } },
        )
        .await
    }
}

async fn reconcile(key: ObjectKey, rec: Arc<Recorder>) -> Result<Action, TestError> {
    {
        let mut first = rec.synced_at_first_pass.lock();
        if first.is_none() {
            *first = Some(rec.caches.lock().iter().all(|synced| synced()));
        }
    }
    rec.passes.lock().push((key.clone(), Instant::now()));
    let behaviour = rec.behaviour.lock().get(key.name()).copied().unwrap_or(Behaviour::Done);
    match behaviour {
        Behaviour::Done => Ok(Action::Done),
        Behaviour::RequeueAfter(d) => Ok(Action::RequeueAfter(d)),
        Behaviour::Fail => Err(TestError::new("boom", false)),
        Behaviour::FailTerminally => Err(TestError::new("invalid", true)),
        Behaviour::FailRetryAfter(after) => {
            Err(TestError { message: "throttled", terminal: false, retry_after: Some(after) })
        }
        Behaviour::Flap => flap_pass(&key, &rec).await,
        Behaviour::WriteSelf(requeue) => {
            let (client, _) = rec.client.lock().clone().expect("the test set a client");
            let n = rec.passes_of(key.name()).len().to_string();
            let api: Api<ConfigMap> = Api::default_namespaced(client);
            patch_recorded(&api, key.name(), &json!({"metadata": {"labels": {"passes": n}}}), &rec).await?;
            Ok(requeue.map_or(Action::Done, Action::RequeueAfter))
        }
        Behaviour::CountToThree => write_pass(&key, &rec, behaviour).await,
        Behaviour::CountLabelToThree => label_pass(&key, &rec).await,
        Behaviour::LeavePicked => leave_pass(&key, &rec).await,
        Behaviour::Panic => panic!("reconcile bug"),
        Behaviour::Hang => {
            let gate = rec.gate.lock().take();
            if let Some(gate) = gate {
                let _ = gate.await;
            } else {
                std::future::pending::<()>().await;
            }
            Ok(Action::Done)
        }
    }
}

/// The flapping behaviour: a label of the key's child Secret changed on every pass, each write
/// recorded. A loop through a child: the child's event queues its owner again (the echo of a
/// settled pass's write to its own object would not).
async fn flap_pass(key: &ObjectKey, rec: &Recorder) -> Result<Action, TestError> {
    let (client, informer) = rec.client.lock().clone().expect("the test set a client");
    let Some(owner) = informer.cache().get(key) else { return Ok(Action::Done) };
    let api: Api<Secret> = Api::default_namespaced(client);
    let name = format!("{}-child", key.name());
    let n = {
        let mut flaps = rec.flaps.lock();
        *flaps += 1;
        flaps.to_string()
    };
    match api.create(&PostParams::default(), &secret(&name, &owner, true, json!({"n": n}))).await {
        Ok(created) => {
            recorded(created);
            Ok(Action::Done)
        }
        Err(kube::Error::Api(status)) if status.code == 409 => {
            patch_recorded(&api, &name, &json!({"metadata": {"labels": {"n": n}}}), rec).await?;
            Ok(Action::Done)
        }
        Err(_) => Err(TestError::new("write failed", false)),
    }
}

/// The writing behaviours: one write through the API, recorded for the controller.
async fn write_pass(key: &ObjectKey, rec: &Recorder, behaviour: Behaviour) -> Result<Action, TestError> {
    let (client, informer) = rec.client.lock().clone().expect("the test set a client");
    let api: Api<ConfigMap> = Api::default_namespaced(client);
    let Some(cached) = informer.cache().get(key) else { return Ok(Action::Done) };
    let n: u64 = cached.data.as_ref().and_then(|d| d.get("n")).and_then(|n| n.parse().ok()).unwrap_or(0);
    if matches!(behaviour, Behaviour::CountToThree) && n >= 3 {
        return Ok(Action::Done);
    }
    let patch = json!({"metadata": {"resourceVersion": cached.metadata.resource_version}, "data": {"n": (n + 1).to_string()}});
    patch_recorded(&api, key.name(), &patch, rec).await?;
    match behaviour {
        // Back soon, before the watch has brought the write: the next pass must wait for it.
        Behaviour::CountToThree => Ok(Action::RequeueAfter(Duration::from_millis(10))),
        _ => Ok(Action::Done),
    }
}

/// `CountLabelToThree`: one labelled Secret's counter, read from the picked informer.
async fn label_pass(key: &ObjectKey, rec: &Recorder) -> Result<Action, TestError> {
    let (client, _) = rec.client.lock().clone().expect("the test set a client");
    let informer = rec.picked.lock().clone().expect("the test set the picked informer");
    let Some(cached) = informer.cache().get(key) else { return Ok(Action::Done) };
    let n: u64 =
        cached.metadata.labels.as_ref().and_then(|l| l.get("n")).and_then(|n| n.parse().ok()).unwrap_or(0);
    if n >= 3 {
        return Ok(Action::Done);
    }
    let patch = json!({"metadata": {"resourceVersion": cached.metadata.resource_version, "labels": {"n": (n + 1).to_string()}}});
    patch_recorded(&Api::<Secret>::default_namespaced(client), key.name(), &patch, rec).await?;
    Ok(Action::RequeueAfter(Duration::from_millis(10)))
}

/// `LeavePicked`: one write that takes the Secret out of the picked informer, then checks.
async fn leave_pass(key: &ObjectKey, rec: &Recorder) -> Result<Action, TestError> {
    let (client, _) = rec.client.lock().clone().expect("the test set a client");
    let informer = rec.picked.lock().clone().expect("the test set the picked informer");
    if informer.cache().get(key).is_none() {
        return Ok(Action::Done);
    }
    if rec.passes_of(key.name()).len() > 1 {
        *rec.conflicts.lock() += 1;
        return Ok(Action::Done);
    }
    let patch = json!({"metadata": {"labels": {"picked": null}}});
    patch_recorded(&Api::<Secret>::default_namespaced(client), key.name(), &patch, rec).await?;
    Ok(Action::RequeueAfter(Duration::from_millis(10)))
}

/// The writing behaviours' one write: a merge patch of `name`, recorded for the controller; a
/// 409 (a precondition read from a stale cache) is counted in `rec.conflicts`.
async fn patch_recorded<K>(
    api: &Api<K>,
    name: &str,
    patch: &serde_json::Value,
    rec: &Recorder,
) -> Result<(), TestError>
where
    K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.patch(name, &PatchParams::default(), &Patch::Merge(patch)).await {
        Ok(written) => {
            recorded(written);
            Ok(())
        }
        Err(kube::Error::Api(status)) if status.code == 409 => {
            *rec.conflicts.lock() += 1;
            Err(TestError::new("conflict: the cache was stale", false))
        }
        Err(_) => Err(TestError::new("write failed", false)),
    }
}

fn config_map(name: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}})).unwrap()
}

fn secret(name: &str, owner: &ConfigMap, controller: bool, labels: serde_json::Value) -> Secret {
    serde_json::from_value(json!({
        "metadata": {
            "name": name,
            "labels": labels,
            "ownerReferences": [{
                "apiVersion": "v1", "kind": "ConfigMap",
                "name": owner.metadata.name, "uid": owner.metadata.uid,
                "controller": controller, "blockOwnerDeletion": true,
            }],
        },
    }))
    .unwrap()
}

struct Harness {
    sim: SimServer,
    config_maps: Arc<Informer<ConfigMap>>,
    secrets: Arc<Informer<Secret>>,
    recorder: Arc<Recorder>,
    metrics: Arc<Metrics>,
}

impl Harness {
    async fn start() -> Self {
        let sim = SimServer::start().await.unwrap();
        let config_maps = Arc::new(Informer::new(Api::<ConfigMap>::default_namespaced(sim.client())));
        let secrets = Arc::new(Informer::new(Api::<Secret>::default_namespaced(sim.client())));
        let recorder = Arc::new(Recorder::default());
        let (a, b) = (Arc::clone(config_maps.cache()), Arc::clone(secrets.cache()));
        recorder.caches.lock().push(Box::new(move || a.is_synced()));
        recorder.caches.lock().push(Box::new(move || b.is_synced()));
        Self { sim, config_maps, secrets, recorder, metrics: Arc::new(Metrics::new()) }
    }

    fn api<K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>>(&self) -> Api<K>
    where
        K::DynamicType: Default,
    {
        Api::default_namespaced(self.sim.client())
    }

    /// Creates the ConfigMap `name`, whose passes do `behaviour` (none: as `run_writer` sets
    /// it, else `Done`), and starts both informers.
    async fn start_with(&self, name: &str, behaviour: Option<Behaviour>) {
        if let Some(behaviour) = behaviour {
            self.recorder.behaviour.lock().insert(name.into(), behaviour);
        }
        self.api::<ConfigMap>().create(&PostParams::default(), &config_map(name)).await.unwrap();
        self.start_informers();
    }

    /// Starts the ConfigMap and Secret informers.
    fn start_informers(&self) {
        self.config_maps.start();
        self.secrets.start();
    }

    fn controller(&self) -> Controller<ConfigMap> {
        let mut config = ControllerConfig::named("test");
        config.queue = config.queue.with_metrics(self.metrics.queue("test"));
        config.metrics = Some(self.metrics.controller("test"));
        Controller::new(&self.config_maps, config).owns(&self.secrets).workers(2)
    }

    /// Starts `controller` on a task; the returned sender stops it.
    fn run(&self, controller: Controller<ConfigMap>) -> (oneshot::Sender<()>, tokio::task::JoinHandle<()>) {
        let (stop, stopped) = oneshot::channel::<()>();
        let recorder = Arc::clone(&self.recorder);
        let task = tokio::spawn(async move {
            let shutdown = async move {
                let _ = stopped.await;
            };
            controller.run(reconcile, recorder, shutdown).await.unwrap();
        });
        (stop, task)
    }
    /// Starts a controller whose reconcile writes ConfigMap `name` with `behaviour`, with its
    /// `/debug/queue` view; the returned sender stops it.
    fn run_writer(
        &self,
        name: &str,
        behaviour: Behaviour,
    ) -> (Introspection, oneshot::Sender<()>, tokio::task::JoinHandle<()>) {
        self.recorder.behaviour.lock().insert(name.into(), behaviour);
        *self.recorder.client.lock() = Some((self.sim.client(), Arc::clone(&self.config_maps)));
        let controller = self.controller();
        let debug = Introspection::new();
        debug.add_controller(controller.probe());
        let (stop, task) = self.run(controller);
        (debug, stop, task)
    }
}

/// The field `field` of `key`'s last pass in the `/debug/queue` document, if present.
fn last_pass_field(debug: &Introspection, key: &str, field: &str) -> Option<serde_json::Value> {
    let report = serde_json::to_value(debug.queue_report()).unwrap();
    let keys = report["controllers"][0]["keys"].as_array()?.clone();
    let entry = keys.into_iter().find(|k| k["key"] == key)?;
    entry["last_pass"].get(field).cloned()
}

/// The value of the series `series` (name and labels), if present.
fn metric(metrics: &Metrics, series: &str) -> Option<f64> {
    metrics.encode().lines().find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
}
