//! The HTTP endpoints over real sockets on 127.0.0.1:0: content and content type of `/metrics`,
//! `/healthz`, `/readyz`, `/debug/queue` and `/debug/cache` after a scripted scenario (a controller
//! over ConfigMaps whose keys succeed, fail, requeue and hang), on the paused clock.
#![cfg(feature = "sim")]

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::{eventually, http_get as get};
use dbcluster_operator::databasecluster::api::types::DatabaseCluster;
use dbcluster_operator::runtime::ObjectKey;
use dbcluster_operator::runtime::controller::{Action, Controller, ControllerConfig, ReconcileError};
use dbcluster_operator::runtime::informer::Informer;
use dbcluster_operator::runtime::observe::introspection::{ControllerProbe, Introspection, KeyReport};
use dbcluster_operator::runtime::observe::metrics::Metrics;
use dbcluster_operator::runtime::observe::process_metrics::ProcessCollector;
use dbcluster_operator::runtime::observe::server::{self, Endpoints, METRICS_CONTENT_TYPE, ServerState};
use dbcluster_operator::sim::SimServer;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::PostParams;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

#[derive(Debug, thiserror::Error)]
#[error("the database refused the connection")]
struct Refused;
impl ReconcileError for Refused {}

async fn reconcile(key: ObjectKey, _: Arc<()>) -> Result<Action, Refused> {
    match key.name() {
        "good" => Ok(Action::Done),
        "slow" => Ok(Action::RequeueAfter(Duration::from_secs(30))),
        "busy" => std::future::pending().await,
        _ => Err(Refused),
    }
}

/// Polls `probe` until `done` holds for its keys, for at most ten (paused-clock) seconds.
async fn until(what: &str, probe: &ControllerProbe, done: impl Fn(&[KeyReport]) -> bool) {
    eventually(what, Duration::from_secs(10), || async {
        let keys = probe.keys();
        if done(&keys) { Ok(()) } else { Err(keys) }
    })
    .await
}

fn key<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["controllers"][0]["keys"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["key"] == format!("default/{name}"))
        .unwrap_or_else(|| panic!("no key {name} in {report:#}"))
}

#[tokio::test(start_paused = true)]
async fn endpoints_show_metrics_health_queue_and_cache() {
    let sim = SimServer::start().await.unwrap();
    let client = sim.client();
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    for name in ["good", "bad", "slow", "busy"] {
        let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
        config_maps.create(&PostParams::default(), &cm).await.unwrap();
    }

    let metrics = Arc::new(Metrics::new());
    let view = Introspection::new();
    metrics.with_registry(|registry| {
        registry.register_collector(Box::new(view.informer_collector()));
        registry.register_collector(Box::new(ProcessCollector::new(jiff::Timestamp::now())));
    });
    let informer = Arc::new(Informer::new(config_maps));
    informer.start();
    view.add_informer("configmaps", informer.clone());
    // No CRD is installed: this informer never syncs, so the process is not ready.
    let clusters = Arc::new(Informer::new(Api::<DatabaseCluster>::all(client.clone())));
    clusters.start();
    view.add_informer("databaseclusters", clusters.clone());

    let mut config = ControllerConfig::named("configmap");
    config.queue = config.queue.with_metrics(metrics.queue("configmap"));
    // A long first retry delay keeps the failing key waiting while we look.
    config.queue.backoff.base = Duration::from_secs(60);
    config.metrics = Some(metrics.controller("configmap"));
    let controller = Controller::new(&informer, config);
    let probe = controller.probe();
    view.add_controller(probe.clone());
    let stop = CancellationToken::new();
    let stopped = stop.clone();
    tokio::spawn(controller.run(reconcile, Arc::new(()), async move { stopped.cancelled().await }));

    let state = ServerState { metrics: Arc::clone(&metrics), view: view.clone(), access: None, tls: None };
    let metrics_listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let health_listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let (metrics_addr, health_addr) =
        (metrics_listener.local_addr().unwrap(), health_listener.local_addr().unwrap());
    tokio::spawn(server::serve(
        metrics_listener,
        Endpoints::METRICS.union(Endpoints::DEBUG),
        state.clone(),
        stop.clone(),
    ));
    tokio::spawn(server::serve(health_listener, Endpoints::HEALTH, state, stop.clone()));

    until("passes of good, bad and slow, busy in the queue", &probe, |keys| {
        let has_pass = |name: &str| keys.iter().any(|k| k.key.name() == name && k.last.is_some());
        let busy = keys.iter().any(|k| k.key.name() == "busy" && k.queue.is_some());
        has_pass("good") && has_pass("bad") && has_pass("slow") && busy
    })
    .await;

    // /healthz and /readyz on the health address only.
    assert_eq!(get(health_addr, "/healthz").await.0, 200);
    let (status, content_type, body) = get(health_addr, "/readyz").await;
    assert_eq!((status, content_type.as_str()), (503, "text/plain; charset=utf-8"));
    assert!(body.contains("databaseclusters") && !body.contains("configmaps"), "{body}");
    assert_eq!(get(health_addr, "/metrics").await.0, 404);
    assert_eq!(get(metrics_addr, "/healthz").await.0, 404);

    // /metrics: controller-runtime names with the scripted values, informers, process.
    let (status, content_type, text) = get(metrics_addr, "/metrics").await;
    assert_eq!((status, content_type.as_str()), (200, METRICS_CONTENT_TYPE));
    assert_metrics(&text);
    // /debug/queue: each key's state, requeues and last pass.
    let (status, content_type, body) = get(metrics_addr, "/debug/queue").await;
    assert_eq!((status, content_type.as_str()), (200, "application/json"));
    assert_queue_report(&body);
    // /debug/cache: each informer's figures.
    let (status, content_type, body) = get(metrics_addr, "/debug/cache").await;
    assert_eq!((status, content_type.as_str()), (200, "application/json"));
    assert_cache_report(&body);
    assert_eq!(get(metrics_addr, "/nothing").await.0, 404);

    // /debug/queue/<namespace>/<name>: one key's passes, why each ran, and what is pending.
    let (status, content_type, body) = get(metrics_addr, "/debug/queue/default/bad").await;
    assert_eq!((status, content_type.as_str()), (200, "application/json"));
    assert_key_history(&body);
    assert_eq!(get(metrics_addr, "/debug/queue/default/nothing").await.0, 404);
    assert_eq!(get(health_addr, "/debug/queue/default/bad").await.0, 404);

    // A deleted object that reconciled cleanly leaves no record; a failing one keeps its record.
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    config_maps.delete("good", &Default::default()).await.unwrap();
    until("good to leave the report", &probe, |keys| !keys.iter().any(|k| k.key.name() == "good")).await;
    assert!(probe.keys().iter().any(|k| k.key.name() == "bad" && k.last.is_some()));
    stop.cancel();
}

/// controller-runtime's names with the scripted values, the informers' and the process's.
fn assert_metrics(text: &str) {
    for line in [
        "controller_runtime_reconcile_total{controller=\"configmap\",result=\"success\"} 1",
        "controller_runtime_reconcile_total{controller=\"configmap\",result=\"requeue_after\"} 1",
        "controller_runtime_reconcile_total{controller=\"configmap\",result=\"error\"} 1",
        "controller_runtime_reconcile_errors_total{controller=\"configmap\"} 1",
        "controller_runtime_active_workers{controller=\"configmap\"} 1",
        "workqueue_adds_total{name=\"configmap\",controller=\"configmap\"} 4",
        "workqueue_retries_total{name=\"configmap\",controller=\"configmap\"} 1",
        "informer_objects{informer=\"configmaps\"} 4",
        "informer_synced{informer=\"configmaps\"} 1",
        "informer_synced{informer=\"databaseclusters\"} 0",
        "informer_events_total{informer=\"configmaps\",type=\"added\"} 4",
        "informer_relists_total{informer=\"configmaps\"} 1",
    ] {
        assert!(text.lines().any(|l| l == line), "missing {line:?} in\n{text}");
    }
    for family in ["process_cpu_seconds_total", "process_resident_memory_bytes", "process_start_time_seconds"]
    {
        assert!(text.lines().any(|l| l.starts_with(family)), "missing {family} in\n{text}");
    }
    assert!(text.ends_with("# EOF\n"));
}

/// `/debug/queue`: each key's state, requeues and last pass.
fn assert_queue_report(body: &str) {
    let report: Value = serde_json::from_str(body).unwrap();
    assert_eq!(report["controllers"][0]["controller"], "configmap");
    let good = key(&report, "good");
    assert_eq!((good["state"].as_str(), good["requeues"].as_u64()), (Some("idle"), Some(0)));
    assert_eq!(good["last_pass"]["result"], "success");
    assert_eq!(good["last_pass"]["error"], Value::Null);
    let bad = key(&report, "bad");
    assert_eq!((bad["state"].as_str(), bad["requeues"].as_u64()), (Some("waiting"), Some(1)));
    assert_eq!(bad["last_pass"]["result"], "error");
    assert_eq!(bad["last_pass"]["error"], "the database refused the connection");
    let left = bad["waiting_seconds_left"].as_f64().unwrap();
    assert!(left > 59.0 && left <= 60.0, "{bad}");
    assert!(bad["waiting_until"].as_str().unwrap().ends_with('Z'));
    let slow = key(&report, "slow");
    assert_eq!(
        (slow["state"].as_str(), slow["last_pass"]["result"].as_str()),
        (Some("waiting"), Some("requeue_after"))
    );
    let busy = key(&report, "busy");
    assert_eq!(busy["state"], "processing");
    assert!(
        busy["processing_since"].is_string() && busy["processing_since_seconds_ago"].as_f64().unwrap() >= 0.0
    );
    assert!(busy.get("last_pass").is_none());
}

/// `/debug/cache`: each informer's figures.
fn assert_cache_report(body: &str) {
    let report: Value = serde_json::from_str(body).unwrap();
    let informers = report["informers"].as_array().unwrap();
    let cms = informers.iter().find(|i| i["informer"] == "configmaps").unwrap();
    assert_eq!((cms["objects"].as_u64(), cms["synced"].as_bool()), (Some(4), Some(true)));
    assert_eq!(cms["events"]["added"], 4);
    assert_eq!((cms["relists"].as_u64(), cms["watch_restarts"].as_u64()), (Some(1), Some(0)));
    assert!(cms["last_resource_version"].is_string());
    let dbcs = informers.iter().find(|i| i["informer"] == "databaseclusters").unwrap();
    assert_eq!(dbcs["synced"], false);
}

/// `/debug/queue/default/bad`: the key's passes, why each ran, and what is pending.
fn assert_key_history(body: &str) {
    let history: Value = serde_json::from_str(body).unwrap();
    let bad = &history["controllers"][0];
    assert_eq!(bad["key"]["key"], "default/bad");
    assert_eq!(bad["passes"][0]["result"], "error");
    assert_eq!(bad["passes"][0]["causes"]["kept"][0]["type"], "list");
    assert!(bad["passes"][0]["started"].as_str().unwrap().ends_with('Z'));
    assert_eq!(bad["key"]["pending_causes"]["kept"][0]["type"], "retry", "{bad}");
}

#[tokio::test]
async fn ready_when_every_informer_synced_and_on_a_standby_with_none() {
    let view = Introspection::new();
    assert_eq!(view.readiness(), Ok(()));
    let sim = SimServer::start().await.unwrap();
    let informer = Arc::new(Informer::new(Api::<ConfigMap>::namespaced(sim.client(), "default")));
    view.add_informer("configmaps", informer.clone());
    assert_eq!(view.readiness(), Err(vec!["configmaps".to_string()]));
    informer.start();
    informer.synced().await;
    assert_eq!(view.readiness(), Ok(()));
}

#[tokio::test]
async fn healthz_fails_once_an_informer_watch_loop_has_died() {
    let sim = SimServer::start().await.unwrap();
    let config_maps = Api::<ConfigMap>::namespaced(sim.client(), "default");
    let healthy = Arc::new(Informer::new(config_maps.clone()));
    // A transform with a bug panics on the reflector's task, which ends it for good.
    let doomed = Arc::new(Informer::with_config(
        config_maps.clone(),
        Default::default(),
        Arc::new(|_: &mut ConfigMap| panic!("a transform bug")),
    ));
    let view = Introspection::new();
    view.add_informer("configmaps", healthy.clone());
    view.add_informer("doomed", doomed.clone());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let state =
        ServerState { metrics: Arc::new(Metrics::new()), view: view.clone(), access: None, tls: None };
    let stop = CancellationToken::new();
    tokio::spawn(server::serve(listener, Endpoints::HEALTH, state, stop.clone()));

    healthy.start();
    doomed.start();
    healthy.synced().await;
    assert_eq!(get(addr, "/healthz").await.0, 200, "both loops are running");
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "trigger"}})).unwrap();
    config_maps.create(&PostParams::default(), &cm).await.unwrap();
    eventually("the doomed loop to end", Duration::from_secs(30), || async {
        if doomed.has_stopped() { Ok(()) } else { Err("still running") }
    })
    .await;
    let (status, _, body) = get(addr, "/healthz").await;
    assert_eq!((status, body.as_str()), (500, "watch loops stopped: doomed\n"));
    assert!(!healthy.has_stopped());
    stop.cancel();
}
