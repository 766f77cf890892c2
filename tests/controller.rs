//! The controller's rules, against the simulated API server over real HTTP: workers start after
//! every informer is synced; `For`, `Owns` and `Watches` map events to keys; the four ways a pass
//! can end tell the queue the right thing; panics and timeouts are caught; shutdown lets the pass in
//! flight finish and starts no new one.
#![cfg(feature = "sim")]

mod common;

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

#[tokio::test]
async fn workers_start_after_every_informer_synced_and_reconcile_every_existing_object() {
    let h = Harness::start().await;
    for name in ["a", "b", "c"] {
        h.api::<ConfigMap>().create(&PostParams::default(), &config_map(name)).await.unwrap();
    }
    let controller = h.controller();
    // Informers start after the controller is built: it must wait for both first lists.
    h.start_informers();
    let (_stop, _task) = h.run(controller);
    h.recorder.wait_until(|r| r.passes.lock().len() >= 3).await;
    assert_eq!(*h.recorder.synced_at_first_pass.lock(), Some(true));
    let mut keys = h.recorder.keys();
    keys.sort();
    assert_eq!(keys, ["default/a", "default/b", "default/c"]);
}

#[tokio::test]
async fn a_change_to_an_owned_child_reconciles_its_controller_owner_only() {
    let h = Harness::start().await;
    let owner = h.api::<ConfigMap>().create(&PostParams::default(), &config_map("pg")).await.unwrap();
    let other = h.api::<ConfigMap>().create(&PostParams::default(), &config_map("bystander")).await.unwrap();
    h.start_informers();
    let (_stop, _task) = h.run(h.controller());
    h.recorder.wait_until(|r| r.passes.lock().len() >= 2).await;

    // A child whose controller is `pg`: its creation and changes reconcile `pg`.
    let secrets = h.api::<Secret>();
    secrets.create(&PostParams::default(), &secret("pg-app", &owner, true, json!({}))).await.unwrap();
    h.recorder.wait_until(|r| r.passes_of("pg").len() >= 2).await;
    // A child that merely references `bystander` without being controlled by it: nothing.
    secrets.create(&PostParams::default(), &secret("loose", &other, false, json!({}))).await.unwrap();
    let patch = Patch::Merge(json!({"metadata": {"labels": {"touched": "yes"}}}));
    secrets.patch("pg-app", &PatchParams::default(), &patch).await.unwrap();
    h.recorder.wait_until(|r| r.passes_of("pg").len() >= 3).await;
    assert_eq!(h.recorder.passes_of("bystander").len(), 1, "a non-controller reference must not map");
    assert!(h.recorder.passes_of("pg-app").is_empty() && h.recorder.passes_of("loose").is_empty());
}

#[tokio::test]
async fn watches_maps_events_of_any_kind_through_its_mapper() {
    let h = Harness::start().await;
    h.start_informers();
    let mut config = ControllerConfig::named("mapper");
    config.workers = 1;
    let controller = Controller::new(&h.config_maps, config).watches(&h.secrets, |s: &Secret| {
        let target = s.metadata.labels.as_ref()?.get("wake")?.clone();
        Some(ObjectKey::namespaced("default", &target))
    });
    let (_stop, _task) = h.run(controller);
    let pointer: Secret =
        serde_json::from_value(json!({"metadata": {"name": "s", "labels": {"wake": "far-away"}}})).unwrap();
    h.api::<Secret>().create(&PostParams::default(), &pointer).await.unwrap();
    h.recorder.wait_until(|r| r.keys().contains(&"default/far-away".to_string())).await;
}

#[tokio::test(start_paused = true)]
async fn each_outcome_tells_the_queue_the_right_thing() {
    let h = Harness::start().await;
    {
        let mut b = h.recorder.behaviour.lock();
        b.insert("done".into(), Behaviour::Done);
        b.insert("later".into(), Behaviour::RequeueAfter(Duration::from_secs(30)));
        b.insert("fail".into(), Behaviour::Fail);
        b.insert("terminal".into(), Behaviour::FailTerminally);
    }
    for name in ["done", "later", "fail", "terminal"] {
        h.api::<ConfigMap>().create(&PostParams::default(), &config_map(name)).await.unwrap();
    }
    h.start_informers();
    let controller = h.controller();
    let queue = controller.queue().clone();
    let (_stop, _task) = h.run(controller);

    // An error retries with per-key exponential backoff: 5 ms, 10 ms, 20 ms, 40 ms …
    h.recorder.wait_until(|r| r.passes_of("fail").len() >= 5).await;
    let fail = h.recorder.passes_of("fail");
    let gaps: Vec<u128> = fail.windows(2).map(|w| (w[1] - w[0]).as_millis()).collect();
    assert_eq!(gaps, [5, 10, 20, 40]);
    assert!(queue.num_requeues(&ObjectKey::namespaced("default", "fail")) >= 4);

    // RequeueAfter runs the key again after the delay, with its backoff reset.
    h.recorder.wait_until(|r| r.passes_of("later").len() >= 2).await;
    let later = h.recorder.passes_of("later");
    assert_eq!((later[1] - later[0]).as_secs(), 30);
    assert_eq!(queue.num_requeues(&ObjectKey::namespaced("default", "later")), 0);

    // Done and a terminal error run once: no retry, no backoff state left.
    assert_eq!(h.recorder.passes_of("done").len(), 1);
    assert_eq!(h.recorder.passes_of("terminal").len(), 1);
    assert_eq!(queue.num_requeues(&ObjectKey::namespaced("default", "terminal")), 0);
    let text = h.metrics.encode();
    assert!(
        text.contains("controller_runtime_terminal_reconcile_errors_total{controller=\"test\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("controller_runtime_reconcile_total{controller=\"test\",result=\"requeue_after\"}")
    );
}

#[tokio::test(start_paused = true)]
async fn a_pass_that_ends_done_cancels_the_requeue_an_earlier_pass_asked_for() {
    let h = Harness::start().await;
    h.start_with("settles", Some(Behaviour::RequeueAfter(Duration::from_secs(30)))).await;
    let controller = h.controller();
    let queue = controller.queue().clone();
    let (_stop, _task) = h.run(controller);
    h.recorder.wait_until(|r| r.passes_of("settles").len() == 1).await;

    // Before the 30 s are up, a change brings a pass that finds nothing left to do.
    h.recorder.behaviour.lock().insert("settles".into(), Behaviour::Done);
    let change = json!({"data": {"changed": "yes"}});
    h.api::<ConfigMap>().patch("settles", &PatchParams::default(), &Patch::Merge(&change)).await.unwrap();
    h.recorder.wait_until(|r| r.passes_of("settles").len() == 2).await;
    let key = ObjectKey::namespaced("default", "settles");
    common::eventually("the settled key to leave the queue", Duration::from_secs(5), || async {
        let tracked: Vec<_> = queue.snapshot().into_iter().filter(|state| state.key == key).collect();
        if tracked.is_empty() { Ok(()) } else { Err(tracked) }
    })
    .await;

    // The requeue the first pass asked for is cancelled: no third pass, however long we wait.
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(h.recorder.passes_of("settles").len(), 2);
    assert_eq!(queue.timer_entries(), 0, "the cancelled timer's entry was dropped when it came due");
}

/// What [`Harness::run_writer`] returns: kept while the controller runs.
type Running = (Introspection, oneshot::Sender<()>, tokio::task::JoinHandle<()>);

/// Runs `Behaviour::WriteSelf(requeue)` on the ConfigMap `self`.
async fn write_self(requeue: Option<Duration>) -> (Harness, Running) {
    let h = Harness::start().await;
    h.start_with("self", None).await;
    let running = h.run_writer("self", Behaviour::WriteSelf(requeue));
    (h, running)
}

/// Whether the cache holds the `passes` label that pass `n` of [`write_self`] wrote.
fn labelled(h: &Harness, n: usize) -> impl Future<Output = Result<(), Option<String>>> {
    let cached = h.config_maps.cache().get(&ObjectKey::namespaced("default", "self"));
    let passes = cached.and_then(|c| c.metadata.labels.clone()).and_then(|l| l.get("passes").cloned());
    async move {
        match passes {
            Some(passes) if passes == n.to_string() => Ok(()),
            other => Err(other),
        }
    }
}

#[tokio::test(start_paused = true)]
async fn the_echo_of_a_settled_passs_own_write_queues_no_pass() {
    let (h, _running) = write_self(None).await;
    h.recorder.wait_until(|r| r.passes_of("self").len() == 1).await;
    common::eventually("the cache to hold the pass's write", Duration::from_secs(5), || labelled(&h, 1))
        .await;
    // Its watch event came back and queued nothing: the pass that wrote it had settled the key.
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(h.recorder.passes_of("self").len(), 1);

    // Someone else's write queues a pass as ever, and that pass's own echo again nothing.
    let change = json!({"data": {"changed": "yes"}});
    h.api::<ConfigMap>().patch("self", &PatchParams::default(), &Patch::Merge(&change)).await.unwrap();
    h.recorder.wait_until(|r| r.passes_of("self").len() == 2).await;
    common::eventually("the cache to hold the second write", Duration::from_secs(5), || labelled(&h, 2))
        .await;
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(h.recorder.passes_of("self").len(), 2);
    assert_eq!(metric(&h.metrics, "controller_runtime_hot_loop_keys{controller=\"test\"}"), Some(0.0));
}

#[tokio::test(start_paused = true)]
async fn passes_that_write_only_their_own_object_each_brought_by_another_change_are_no_hot_loop() {
    let (h, _running) = write_self(None).await;
    // 15 writing passes within a minute, more than the 10 that make a key hot, each queued by
    // someone else's change, none by its own echo.
    for n in 1..=15 {
        h.recorder.wait_until(|r| r.passes_of("self").len() == n).await;
        common::eventually("the cache to hold the pass's write", Duration::from_secs(5), || labelled(&h, n))
            .await;
        tokio::time::sleep(Duration::from_secs(1)).await;
        let change = json!({"data": {"changed": n.to_string()}});
        h.api::<ConfigMap>().patch("self", &PatchParams::default(), &Patch::Merge(&change)).await.unwrap();
    }
    h.recorder.wait_until(|r| r.passes_of("self").len() == 16).await;
    assert_eq!(metric(&h.metrics, "controller_runtime_hot_loop_keys{controller=\"test\"}"), Some(0.0));
}

#[tokio::test(start_paused = true)]
async fn the_echo_of_a_requeueing_passs_own_write_queues_no_pass_before_its_timer() {
    let (h, _running) = write_self(Some(Duration::from_secs(30))).await;
    h.recorder.wait_until(|r| r.passes_of("self").len() == 1).await;
    let first = Instant::now();
    common::eventually("the cache to hold the pass's write", Duration::from_secs(5), || labelled(&h, 1))
        .await;
    // The echo queued nothing: the next pass is the one the first asked for, 30 s on.
    tokio::time::sleep(Duration::from_secs(20)).await;
    assert_eq!(h.recorder.passes_of("self").len(), 1);
    h.recorder.wait_until(|r| r.passes_of("self").len() == 2).await;
    assert!(first.elapsed() >= Duration::from_secs(30), "{:?}", first.elapsed());
}

#[tokio::test(start_paused = true)]
async fn a_panic_or_a_timeout_is_an_error_retried_with_backoff() {
    let h = Harness::start().await;
    h.recorder.behaviour.lock().insert("buggy".into(), Behaviour::Panic);
    h.recorder.behaviour.lock().insert("stuck".into(), Behaviour::Hang);
    for name in ["buggy", "stuck", "fine"] {
        h.api::<ConfigMap>().create(&PostParams::default(), &config_map(name)).await.unwrap();
    }
    h.start_informers();
    let mut config = ControllerConfig::named("test");
    config.reconcile_timeout = Some(Duration::from_secs(1));
    config.metrics = Some(h.metrics.controller("test"));
    let (_stop, _task) = h.run(Controller::new(&h.config_maps, config).workers(1));

    h.recorder.wait_until(|r| r.passes_of("buggy").len() >= 3 && r.passes_of("stuck").len() >= 2).await;
    let stuck = h.recorder.passes_of("stuck");
    // The hung pass was cancelled at its 1 s timeout and retried after 5 ms of backoff.
    assert_eq!((stuck[1] - stuck[0]).as_millis(), 1005);
    // The worker survived the panics and went on with other keys.
    assert_eq!(h.recorder.passes_of("fine").len(), 1);
    let text = h.metrics.encode();
    assert!(
        text.lines()
            .any(|l| l.starts_with("controller_runtime_reconcile_panics_total{controller=\"test\"} "))
    );
    let timeouts = metric(&h.metrics, "controller_runtime_reconcile_timeouts_total{controller=\"test\"}");
    assert!(timeouts.is_some_and(|n| n >= 1.0), "timeouts counted: {timeouts:?}");
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

#[tokio::test(start_paused = true)]
async fn an_error_with_a_retry_after_hint_is_retried_no_earlier() {
    let h = Harness::start().await;
    h.start_with("throttled", Some(Behaviour::FailRetryAfter(Duration::from_secs(2)))).await;
    let (_stop, _task) = h.run(h.controller());
    h.recorder.wait_until(|r| r.passes_of("throttled").len() >= 3).await;
    let passes = h.recorder.passes_of("throttled");
    // The backoff alone would retry after 5 ms, then 10 ms.
    for pair in passes.windows(2) {
        assert!(
            pair[1] - pair[0] >= Duration::from_secs(2),
            "retried {:?} after a 2 s hint",
            pair[1] - pair[0]
        );
    }
}

#[tokio::test]
async fn a_pass_waits_for_the_cache_to_hold_the_previous_passs_write() {
    let h = Harness::start().await;
    // The watch lags 300 ms behind every write: a pass right after its own write would read the
    // old value, and its precondition would fail with 409.
    h.sim.faults().set_watch_event_latency(Duration::from_millis(300));
    h.start_with("counter", None).await;
    let (debug, _stop, _task) = h.run_writer("counter", Behaviour::CountToThree);
    // `/debug/queue` shows a pass's wait for the previous pass's writes (polled: it is the state
    // between two passes, bounded by the wait for the passes below).
    let waits_shown = std::cell::RefCell::new(Vec::new());
    let look = || {
        waits_shown.borrow_mut().extend(last_pass_field(
            &debug,
            "default/counter",
            "stale_cache_wait_seconds",
        ))
    };
    h.recorder
        .wait_until(|r| {
            look();
            r.passes_of("counter").len() >= 4
        })
        .await;
    look();
    let waits_shown = waits_shown.into_inner();
    assert!(
        waits_shown.iter().any(|w| w.as_f64().is_some_and(|s| s > 0.0)),
        "/debug/queue showed no wait: {waits_shown:?}"
    );
    // Each write's own event requeues the key at once; it still ran only on fresh data.
    assert_eq!(*h.recorder.conflicts.lock(), 0, "a pass acted on a stale cache");
    let live: ConfigMap = h.api().get("counter").await.unwrap();
    assert_eq!(live.data.unwrap()["n"], "3");
    let waits = metric(&h.metrics, "controller_runtime_stale_cache_waits_total{controller=\"test\"}");
    assert!(waits.is_some_and(|n| n >= 1.0), "stale cache waits: {waits:?}");
}

/// A harness whose controller has two Secret informers, `owned=yes` (registered first) and
/// `picked=yes`, with the watch 300 ms behind every write; runs `behaviour` on key `name` (a
/// ConfigMap, beside a Secret of that name labelled `picked=yes`).
async fn two_secret_informers(name: &str, behaviour: Behaviour) -> (Harness, oneshot::Sender<()>) {
    let h = Harness::start().await;
    h.sim.faults().set_watch_event_latency(Duration::from_millis(300));
    let selected = |selector: &str| {
        let config = ReflectorConfig { label_selector: Some(selector.into()), ..ReflectorConfig::default() };
        let transform = Arc::new(dbcluster_operator::runtime::cache::strip_managed_fields::<Secret>);
        Arc::new(Informer::with_config(h.api::<Secret>(), config, transform))
    };
    let (owned, picked) = (selected("owned=yes"), selected("picked=yes"));
    h.api::<ConfigMap>().create(&PostParams::default(), &config_map(name)).await.unwrap();
    let secret: Secret =
        serde_json::from_value(json!({"metadata": {"name": name, "labels": {"picked": "yes"}}})).unwrap();
    h.api::<Secret>().create(&PostParams::default(), &secret).await.unwrap();
    for informer in [&owned, &picked] {
        informer.start();
    }
    h.config_maps.start();
    h.recorder.behaviour.lock().insert(name.into(), behaviour);
    *h.recorder.client.lock() = Some((h.sim.client(), Arc::clone(&h.config_maps)));
    *h.recorder.picked.lock() = Some(Arc::clone(&picked));
    let mut config = ControllerConfig::named("test");
    config.metrics = Some(h.metrics.controller("test"));
    let controller = Controller::new(&h.config_maps, config)
        .owns(&owned)
        .watches(&picked, |s: &Secret| Some(ObjectKey::of(s)))
        .workers(1);
    let (stop, _task) = h.run(controller);
    (h, stop)
}

/// The stale cache waits that ran to their bound.
fn stale_wait_timeouts(h: &Harness) -> f64 {
    metric(&h.metrics, "controller_runtime_stale_cache_wait_timeouts_total{controller=\"test\"}")
        .unwrap_or(0.0)
}

#[tokio::test]
async fn a_write_is_waited_for_on_the_informer_whose_selector_matches_it() {
    let (h, _stop) = two_secret_informers("counter", Behaviour::CountLabelToThree).await;
    h.recorder.wait_until(|r| r.passes_of("counter").len() >= 4).await;
    let live: Secret = h.api().get("counter").await.unwrap();
    assert_eq!(live.metadata.labels.unwrap()["n"], "3");
    assert_eq!(*h.recorder.conflicts.lock(), 0, "a pass acted on a stale cache");
    // Each pass after a write waited, and on the informer that delivers the write (the second
    // Secret informer): waiting on the first would run every wait to its 5 s bound.
    let waits = metric(&h.metrics, "controller_runtime_stale_cache_waits_total{controller=\"test\"}");
    assert!(waits.is_some_and(|n| n >= 1.0), "stale cache waits: {waits:?}");
    assert_eq!(stale_wait_timeouts(&h), 0.0, "a wait ran to its bound");
}

#[tokio::test]
async fn a_write_that_leaves_an_informers_selector_is_waited_for_on_that_informer() {
    let (h, _stop) = two_secret_informers("leaver", Behaviour::LeavePicked).await;
    h.recorder.wait_until(|r| r.passes_of("leaver").len() >= 2).await;
    // The labels written match neither informer, but the picked one held the Secret, and its
    // watch delivers the write as a deletion: the second pass waited for it.
    assert_eq!(*h.recorder.conflicts.lock(), 0, "the second pass still found the Secret in the picked cache");
    assert_eq!(stale_wait_timeouts(&h), 0.0, "a wait ran to its bound");
}

#[tokio::test(start_paused = true)]
async fn a_key_whose_passes_keep_writing_is_reported_and_slowed() {
    let h = Harness::start().await;
    h.start_with("flapping", None).await;
    let (debug, _stop, _task) = h.run_writer("flapping", Behaviour::Flap);
    // Ten writing passes are tolerated; from the eleventh the backoff (5 ms, 10 ms, ...) holds it.
    h.recorder.wait_until(|r| r.passes_of("flapping").len() >= 16).await;
    let hot = metric(&h.metrics, "controller_runtime_hot_loop_keys{controller=\"test\"}");
    assert_eq!(hot, Some(1.0));
    assert_eq!(
        last_pass_field(&debug, "default/flapping", "hot_loop"),
        Some(json!(true)),
        "/debug/queue shows the hot loop"
    );
    let passes = h.recorder.passes_of("flapping");
    let gaps: Vec<Duration> = passes.windows(2).map(|p| p[1] - p[0]).collect();
    // Passes 12.. each wait at least the growing backoff: 5, 10, 20, 40 ms.
    for (n, gap) in gaps[11..15].iter().enumerate() {
        let floor = Duration::from_millis(5 << n);
        assert!(*gap >= floor, "pass {} came {gap:?} after the previous, backoff {floor:?}", n + 13);
    }
    // Settling: once a pass writes nothing the key is calm again.
    h.recorder.behaviour.lock().insert("flapping".into(), Behaviour::Done);
    // The gauge moves after a pass ends (no event to await).
    let hot_keys = || metric(&h.metrics, "controller_runtime_hot_loop_keys{controller=\"test\"}");
    common::eventually("the hot-loop gauge to drop to 0", Duration::from_secs(60), || async {
        match hot_keys() {
            Some(0.0) => Ok(()),
            other => Err(other),
        }
    })
    .await;
}

#[tokio::test]
async fn shutdown_lets_the_pass_in_flight_finish_and_starts_no_new_one() {
    let h = Harness::start().await;
    let (release, gate) = oneshot::channel();
    *h.recorder.gate.lock() = Some(gate);
    h.start_with("slow", Some(Behaviour::Hang)).await;
    let (stop, task) = h.run(h.controller());
    h.recorder.wait_until(|r| r.passes_of("slow").len() == 1).await;

    stop.send(()).unwrap();
    // Intake has stopped: an event for a new object after shutdown starts no pass.
    h.api::<ConfigMap>().create(&PostParams::default(), &config_map("too-late")).await.unwrap();
    tokio::task::yield_now().await;
    assert!(!task.is_finished(), "run must wait for the pass in flight");
    release.send(()).unwrap();
    task.await.unwrap();
    assert!(h.recorder.passes_of("too-late").is_empty());
}

/// The value of `controller_runtime_active_workers` for the test controller.
fn active_workers(metrics: &Metrics) -> Option<i64> {
    let prefix = "controller_runtime_active_workers{controller=\"test\"} ";
    metrics.encode().lines().find_map(|line| line.strip_prefix(prefix)?.parse().ok())
}

#[tokio::test]
async fn a_worker_aborted_mid_pass_does_not_leak_the_active_workers_gauge() {
    let h = Harness::start().await;
    h.start_with("stuck", Some(Behaviour::Hang)).await;
    let mut config = ControllerConfig::named("test");
    config.shutdown_timeout = Duration::from_millis(50);
    config.metrics = Some(h.metrics.controller("test"));
    let (stop, task) = h.run(Controller::new(&h.config_maps, config).workers(1));
    h.recorder.wait_until(|r| r.passes_of("stuck").len() == 1).await;
    assert_eq!(active_workers(&h.metrics), Some(1), "the hung pass counts as active");

    // The pass never ends: shutdown aborts its worker at the deadline.
    stop.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(30), task)
        .await
        .expect("run returns after the deadline")
        .unwrap();
    assert_eq!(active_workers(&h.metrics), Some(0));
}
