//! The live page over real sockets (`runtime::observe::live`): `/debug/` is one self-contained HTML page
//! (nothing fetched from elsewhere), and `/debug/live.json` answers snapshots that show a new key
//! within a second of its object's creation, with its pass's trigger, a timeline of the latest
//! passes of any key, and the loop's running totals.
#![cfg(feature = "sim")]

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::{eventually_every, http_get};
use dbcluster_operator::runtime::controller::{Controller, ControllerConfig};
use dbcluster_operator::runtime::informer::Informer;
use dbcluster_operator::runtime::observe::introspection::Introspection;
use dbcluster_operator::runtime::observe::metrics::Metrics;
use dbcluster_operator::runtime::observe::server::{self, Endpoints, ServerState};
use dbcluster_operator::sim::SimServer;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::PostParams;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// The live page's snapshot for `query`.
async fn snapshot(addr: std::net::SocketAddr, query: &str) -> Value {
    let (status, content_type, body) = http_get(addr, &format!("/debug/live.json{query}")).await;
    assert_eq!((status, content_type.as_str()), (200, "application/json"), "{body}");
    serde_json::from_str(&body).unwrap()
}

/// The first snapshot for `query` that `done` accepts, polled every 20 ms for at most `limit`.
async fn snapshot_until(
    addr: std::net::SocketAddr,
    query: &str,
    what: &str,
    limit: Duration,
    done: impl Fn(&Value) -> bool,
) -> Value {
    eventually_every(what, limit, Duration::from_millis(20), || async {
        let snapshot = snapshot(addr, query).await;
        if done(&snapshot) { Ok(snapshot) } else { Err(snapshot) }
    })
    .await
}

fn timeline(snapshot: &Value) -> Vec<Value> {
    snapshot["controllers"][0]["timeline"].as_array().cloned().unwrap_or_default()
}

#[tokio::test]
async fn the_page_is_self_contained_and_its_snapshots_show_a_new_key_within_a_second() {
    let sim = SimServer::start().await.unwrap();
    let config_maps: Api<ConfigMap> = Api::namespaced(sim.client(), "default");
    let first: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "production-postgres"}})).unwrap();
    config_maps.create(&PostParams::default(), &first).await.unwrap();
    let informer = Arc::new(Informer::new(config_maps.clone()));
    informer.start();
    let view = Introspection::new();
    view.add_informer("configmaps", informer.clone());
    let controller = Controller::new(&informer, ControllerConfig::named("databasecluster"));
    view.add_controller(controller.probe());
    let stop = CancellationToken::new();
    let stopped = stop.clone();
    tokio::spawn(controller.run(
        common::reconcile_done,
        Arc::new(()),
        async move { stopped.cancelled().await },
    ));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let state = ServerState { metrics: Arc::new(Metrics::new()), view, access: None, tls: None };
    tokio::spawn(server::serve(listener, Endpoints::DEBUG, state, stop.clone()));

    let (status, content_type, page) = http_get(addr, "/debug/").await;
    assert_eq!((status, content_type.as_str()), (200, "text/html; charset=utf-8"));
    assert!(page.contains("fetch(\"live.json?\""), "the page polls the snapshots");
    for outside in ["http://", "https://", "src=\"//", "<link"] {
        assert!(!page.contains(outside), "the page fetches nothing from elsewhere ({outside})");
    }

    let limit = Duration::from_secs(10);
    let first = snapshot_until(addr, "", "the first pass", limit, |s| !timeline(s).is_empty()).await;
    let controller = &first["controllers"][0];
    assert_eq!(controller["controller"], "databasecluster");
    assert_eq!(controller["keys"][0]["key"], "default/production-postgres");
    assert_eq!(controller["by_state"]["idle"], 1);
    assert!(controller["timeline"][0]["trigger"].as_str().unwrap().contains("listed ConfigMap"));
    assert_eq!(first["informers"][0]["informer"], "configmaps");
    assert_eq!(first["informers"][0]["objects"], 1);
    let stages = &first["stages"];
    assert_eq!((stages["watches"].as_u64(), stages["objects"].as_u64()), (Some(1), Some(1)), "{stages}");
    assert_eq!(stages["workers"], 4, "the controller's workers: {stages}");
    assert!(stages["totals"]["passes"].as_u64() >= Some(1), "{stages}");

    let second: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "analytics"}})).unwrap();
    config_maps.create(&PostParams::default(), &second).await.unwrap();
    let one_second = Duration::from_secs(1);
    let has = |key: &'static str| move |s: &Value| timeline(s).iter().any(|p| p["key"] == key);
    let shown = snapshot_until(addr, "", "the new key's pass", one_second, has("default/analytics")).await;
    let pass = timeline(&shown).into_iter().find(|p| p["key"] == "default/analytics").unwrap();
    assert!(pass["trigger"].as_str().unwrap().starts_with("\"ConfigMap default/analytics added"), "{pass}");
    assert!(
        shown["stages"]["totals"]["passes"].as_u64() > stages["totals"]["passes"].as_u64(),
        "the totals run"
    );

    // The timeline holds the latest passes of any key, not only each key's last one.
    let changed: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "production-postgres"}, "data": {"a": "b"}}))
            .unwrap();
    let changed = config_maps.replace("production-postgres", &PostParams::default(), &changed).await.unwrap();
    let rv = changed.metadata.resource_version.unwrap();
    let modified = format!("modified rv={rv}");
    let after_change = snapshot_until(addr, "", "the change's pass", one_second, |s| {
        timeline(s).iter().any(|p| p["trigger"].as_str().unwrap().contains(&modified))
    })
    .await;
    let timeline = timeline(&after_change);
    let keys: Vec<&str> = timeline.iter().map(|p| p["key"].as_str().unwrap()).collect();
    assert_eq!(keys, ["default/production-postgres", "default/analytics", "default/production-postgres"]);
    assert!(timeline[2]["trigger"].as_str().unwrap().contains("listed ConfigMap"), "{timeline:?}");

    // Paging and filtering by the query string.
    let filtered = snapshot(addr, "?filter=analytics").await;
    assert_eq!(filtered["controllers"][0]["matching"], 1);
    assert_eq!(filtered["controllers"][0]["keys"][0]["key"], "default/analytics");
    stop.cancel();
}
