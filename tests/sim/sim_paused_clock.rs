//! The simulated API server under tokio's paused clock: one kube client lists, then watches on
//! the same (reused keep-alive) connection, and the watch delivers an event created afterwards.
//! On a reused connection the client's TCP delays its ACKs, so without TCP_NODELAY on the
//! server's sockets Nagle held the first watch event for ~40 ms of real time, in which the paused
//! clock ran past every timeout.
#![cfg(feature = "sim")]

use std::time::Duration;

use dbcluster_operator::sim::SimServer;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, PostParams, WatchEvent, WatchParams};
use serde_json::json;

#[tokio::test(start_paused = true)]
async fn a_watch_after_a_list_on_one_client_delivers_events() {
    let sim = SimServer::start().await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(sim.client(), "default");
    let list = api.list(&ListParams::default()).await.unwrap();
    let rv = list.metadata.resource_version.unwrap();
    let watch = api.watch(&WatchParams::default(), &rv).await.unwrap();
    let mut watch = watch.boxed();
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "after"}})).unwrap();
    api.create(&PostParams::default(), &cm).await.unwrap();
    let event = tokio::time::timeout(Duration::from_secs(100), watch.try_next())
        .await
        .expect("the watch delivers the event within 100 s of virtual time")
        .unwrap();
    match event {
        Some(WatchEvent::Added(cm)) => assert_eq!(cm.metadata.name.as_deref(), Some("after")),
        other => panic!("expected ADDED after, got {other:?}"),
    }
}
