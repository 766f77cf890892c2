//! Why each pass ran (`runtime::controller::causes`), against the simulated API server over real HTTP: every
//! enqueue records its cause (a list, a watch event of the object, a child mapped to its owner, a
//! `RequeueAfter`, a retry with its error, a leader change, an explicit call); a queued key
//! accumulates its causes (the first 8 and a count); the reconcile span carries the trigger
//! (`causes_log`, which captures the line); each key keeps its last passes for `/debug/queue/<namespace>/<name>`; all of it can be switched off.
#![cfg(feature = "sim")]

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use dbcluster_operator::runtime::ObjectKey;
use dbcluster_operator::runtime::controller::{Action, Controller, ControllerConfig, ReconcileError};
use dbcluster_operator::runtime::informer::Informer;
use dbcluster_operator::runtime::observe::introspection::{Introspection, KeyHistoryReport};
use dbcluster_operator::sim::SimServer;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, Patch, PatchParams, PostParams};
use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio::sync::Semaphore;

#[derive(Debug, thiserror::Error)]
#[error("the database refused the connection")]
struct Refused;
impl ReconcileError for Refused {}

/// What the test's reconcile does: blocks on `gate` while it is closed, and answers by name.
#[derive(Default)]
struct Script {
    gate: Option<Arc<Semaphore>>,
    /// Passes so far, by name.
    passes: Mutex<std::collections::HashMap<String, u32>>,
}

async fn reconcile(key: ObjectKey, script: Arc<Script>) -> Result<Action, Refused> {
    if let Some(gate) = &script.gate {
        let _permit = gate.acquire().await;
    }
    tracing::info!("reconciling");
    let pass = {
        let mut passes = script.passes.lock();
        let count = passes.entry(key.name().to_owned()).or_default();
        *count += 1;
        *count
    };
    match (key.name(), pass) {
        ("later", 1) => Ok(Action::RequeueAfter(Duration::from_secs(30))),
        ("failing", 1) => Err(Refused),
        _ => Ok(Action::Done),
    }
}

struct Setup {
    sim: SimServer,
    config_maps: Arc<Informer<ConfigMap>>,
    secrets: Arc<Informer<Secret>>,
}

impl Setup {
    async fn start(names: &[&str]) -> Self {
        let sim = SimServer::start().await.unwrap();
        for name in names {
            let cm = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
            Api::<ConfigMap>::default_namespaced(sim.client())
                .create(&PostParams::default(), &cm)
                .await
                .unwrap();
        }
        let config_maps = Arc::new(Informer::new(Api::default_namespaced(sim.client())));
        let secrets = Arc::new(Informer::new(Api::default_namespaced(sim.client())));
        config_maps.start();
        secrets.start();
        Self { sim, config_maps, secrets }
    }

    /// Runs a controller configured by `configure`, with `script`; returns its debug view.
    fn run(
        &self,
        configure: impl FnOnce(&mut ControllerConfig),
        script: Script,
    ) -> (Introspection, Controls) {
        let mut config = ControllerConfig::named("causes");
        config.workers = 1;
        configure(&mut config);
        let controller = Controller::new(&self.config_maps, config).owns(&self.secrets);
        let view = Introspection::new();
        view.add_controller(controller.probe());
        let enqueuer = controller.enqueuer();
        let stop = tokio_util::sync::CancellationToken::new();
        let stopped = stop.clone();
        tokio::spawn(controller.run(reconcile, Arc::new(script), async move { stopped.cancelled().await }));
        (view, Controls { enqueuer, _stop: stop.drop_guard() })
    }

    async fn patch(&self, name: &str, n: usize) -> String {
        let api = Api::<ConfigMap>::default_namespaced(self.sim.client());
        let patch = Patch::Merge(json!({"data": {"n": n.to_string()}}));
        let patched = api.patch(name, &PatchParams::default(), &patch).await.unwrap();
        patched.metadata.resource_version.unwrap()
    }
}

struct Controls {
    enqueuer: dbcluster_operator::runtime::controller::causes::Enqueuer,
    _stop: tokio_util::sync::DropGuard,
}

fn key(name: &str) -> ObjectKey {
    ObjectKey::namespaced("default", name)
}

/// The key's history as `/debug/queue/default/<name>` serves it.
fn history(view: &Introspection, name: &str) -> Value {
    view.key_history(&key(name)).map_or(Value::Null, |h: KeyHistoryReport| serde_json::to_value(h).unwrap())
}

/// Waits until the key has `n` passes; returns them, newest first.
async fn passes(view: &Introspection, name: &str, n: usize) -> Vec<Value> {
    common::eventually(&format!("{n} passes of {name}"), Duration::from_secs(60), || async {
        let history = history(view, name);
        match history["controllers"][0]["passes"].as_array() {
            Some(passes) if passes.len() >= n => Ok(passes.clone()),
            _ => Err(history),
        }
    })
    .await
}

fn cause_types(pass: &Value) -> Vec<String> {
    pass["causes"]["kept"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["type"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn rule1_each_pass_names_the_event_that_queued_it() {
    let setup = Setup::start(&["pg"]).await;
    let (view, controls) = setup.run(|_| {}, Script::default());
    let first = passes(&view, "pg", 1).await;
    assert_eq!(cause_types(&first[0]), ["list"], "{}", first[0]);
    assert!(first[0]["trigger"].as_str().unwrap().starts_with("\"listed ConfigMap default/pg added rv="));

    // A watch event of the object itself: its kind, name, event type and resourceVersion.
    let rv = setup.patch("pg", 1).await;
    let second = passes(&view, "pg", 2).await;
    let cause = &second[0]["causes"]["kept"][0];
    assert_eq!((cause["type"].as_str(), cause["event"].as_str()), (Some("watch"), Some("modified")));
    assert_eq!((cause["kind"].as_str(), cause["name"].as_str()), (Some("ConfigMap"), Some("pg")));
    assert_eq!(cause["resource_version"].as_str(), Some(rv.as_str()));
    assert_eq!(second[0]["trigger"], format!("\"ConfigMap default/pg modified rv={rv}\""));

    // A child's event, mapped to its controller owner.
    let owner = setup.config_maps.cache().get(&key("pg")).unwrap();
    let child: Secret = serde_json::from_value(json!({"metadata": {"name": "pg-app", "ownerReferences": [{
        "apiVersion": "v1", "kind": "ConfigMap", "name": "pg", "uid": owner.metadata.uid,
        "controller": true}]}}))
    .unwrap();
    Api::<Secret>::default_namespaced(setup.sim.client())
        .create(&PostParams::default(), &child)
        .await
        .unwrap();
    let third = passes(&view, "pg", 3).await;
    let cause = &third[0]["causes"]["kept"][0];
    assert_eq!((cause["type"].as_str(), cause["kind"].as_str()), (Some("mapped"), Some("Secret")));
    assert_eq!((cause["name"].as_str(), cause["event"].as_str()), (Some("pg-app"), Some("added")));

    // An explicit call, with its reason.
    controls.enqueuer.add_explicit(key("pg"), "asked by a test");
    let fourth = passes(&view, "pg", 4).await;
    assert_eq!(fourth[0]["trigger"], "\"explicit: asked by a test\"");
}

#[tokio::test(start_paused = true)]
async fn rule1_a_requeue_and_a_retry_are_causes_and_wait_for_their_timers() {
    let setup = Setup::start(&["later", "failing"]).await;
    let (view, _controls) =
        setup.run(|config| config.queue.backoff.base = Duration::from_secs(10), Script::default());
    passes(&view, "later", 1).await;
    passes(&view, "failing", 1).await;
    // While the timers run, the timer causes are pending on the keys.
    let pending = &history(&view, "failing")["controllers"][0]["key"]["pending_causes"]["kept"][0];
    assert_eq!(pending["type"], "retry");
    assert_eq!(pending["error"], "the database refused the connection");
    let later = passes(&view, "later", 2).await;
    assert_eq!(later[0]["trigger"], "\"requeue after 30s\"");
    let failing = passes(&view, "failing", 2).await;
    assert_eq!(failing[0]["trigger"], "\"retry after error: the database refused the connection\"");
    assert_eq!(failing[1]["result"], "error");
}

#[tokio::test]
async fn rule2_a_queued_key_accumulates_its_causes_the_first_eight_and_a_count() {
    let setup = Setup::start(&["pg"]).await;
    let gate = Arc::new(Semaphore::new(0));
    let (view, _controls) = setup.run(|_| {}, Script { gate: Some(Arc::clone(&gate)), ..Script::default() });
    // The first pass is held: every patch meanwhile is deduplicated into one more pass.
    common::eventually("the first pass to start", Duration::from_secs(60), || async {
        let state = history(&view, "pg")["controllers"][0]["key"]["state"].clone();
        if state == "processing" { Ok(()) } else { Err(state) }
    })
    .await;
    let mut rvs = Vec::new();
    for n in 0..11 {
        rvs.push(setup.patch("pg", n).await);
    }
    common::eventually("11 pending causes", Duration::from_secs(60), || async {
        let pending = history(&view, "pg")["controllers"][0]["key"]["pending_causes"].clone();
        let total =
            pending["kept"].as_array().map_or(0, Vec::len) as u64 + pending["more"].as_u64().unwrap_or(0);
        if total == 11 { Ok(()) } else { Err(pending) }
    })
    .await;
    gate.add_permits(100);
    let passes = passes(&view, "pg", 2).await;
    let causes = &passes[0]["causes"];
    assert_eq!((causes["kept"].as_array().unwrap().len(), causes["more"].as_u64()), (8, Some(3)));
    assert_eq!(causes["kept"][0]["resource_version"].as_str(), Some(rvs[0].as_str()), "the first is kept");
    assert_eq!(causes["kept"][7]["resource_version"].as_str(), Some(rvs[7].as_str()), "then the next seven");
    assert!(passes[0]["trigger"].as_str().unwrap().ends_with("(+10)"), "{}", passes[0]["trigger"]);
}

#[tokio::test]
async fn each_key_keeps_its_last_passes_and_recording_can_be_switched_off() {
    let setup = Setup::start(&["pg"]).await;
    let (view, _controls) = setup.run(|config| config.pass_history = 3, Script::default());
    passes(&view, "pg", 1).await;
    for n in 0..4 {
        setup.patch("pg", n).await;
        passes(&view, "pg", (n + 2).min(3)).await;
        common::eventually("the patch's pass", Duration::from_secs(60), || async {
            let h = history(&view, "pg");
            let newest = h["controllers"][0]["passes"][0]["causes"]["kept"][0]["resource_version"].clone();
            let cached = setup.config_maps.cache().get(&key("pg")).unwrap().metadata.resource_version.clone();
            if newest.as_str() == cached.as_deref() { Ok(()) } else { Err(h) }
        })
        .await;
    }
    let kept = passes(&view, "pg", 3).await;
    assert_eq!(kept.len(), 3, "only the last three passes are kept");
    assert!(kept.iter().all(|p| cause_types(p) == ["watch"]), "the initial list's pass was dropped");

    let quiet = Setup::start(&["pg"]).await;
    let (view, _controls) = quiet.run(|config| config.record_causes = false, Script::default());
    let first = passes(&view, "pg", 1).await;
    assert_eq!(first[0]["trigger"], "none recorded");
    assert_eq!(first[0]["causes"]["kept"], json!([]));
}

#[tokio::test]
async fn a_controller_started_on_leadership_records_a_leader_change() {
    let setup = Setup::start(&["pg"]).await;
    let (view, _controls) = setup.run(|config| config.starts_on_leadership = true, Script::default());
    let first = passes(&view, "pg", 1).await;
    assert_eq!(cause_types(&first[0]), ["leader_change"]);
    assert!(first[0]["trigger"].as_str().unwrap().starts_with("\"became leader: ConfigMap default/pg added"));
}
