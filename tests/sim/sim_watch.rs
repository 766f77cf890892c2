//! Watch semantics of the simulated API server through the `kube` client: events, resumption
//! from a resourceVersion, label-selector translation, bookmarks, streaming lists with the
//! initial-events-end bookmark, 410 for forgotten versions, and the server's timeout.
#![cfg(feature = "sim")]

use crate::common;

use std::time::Duration;

use dbcluster_operator::sim::{SimConfig, SimServer};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use serde_json::json;

fn config_map(name: &str, labels: serde_json::Value) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}, "data": {"k": "v"}})).unwrap()
}

fn describe(e: &WatchEvent<ConfigMap>) -> String {
    match e {
        WatchEvent::Added(o) => format!("ADDED {}", o.metadata.name.as_deref().unwrap()),
        WatchEvent::Modified(o) => format!("MODIFIED {}", o.metadata.name.as_deref().unwrap()),
        WatchEvent::Deleted(o) => format!("DELETED {}", o.metadata.name.as_deref().unwrap()),
        WatchEvent::Bookmark(b) => format!("BOOKMARK {}", b.metadata.resource_version),
        WatchEvent::Error(s) => format!("ERROR {}", s.code),
    }
}

#[tokio::test]
async fn watch_sees_added_modified_deleted_from_the_list_version() {
    let sim = SimServer::start().await.unwrap();
    let cms: Api<ConfigMap> = Api::default_namespaced(sim.client());
    let rv = cms.list(&ListParams::default()).await.unwrap().metadata.resource_version.unwrap();
    let mut stream = cms.watch(&WatchParams::default(), &rv).await.unwrap().boxed();
    cms.create(&PostParams::default(), &config_map("a", json!({}))).await.unwrap();
    cms.patch("a", &PatchParams::default(), &Patch::Merge(json!({"data": {"k": "w"}}))).await.unwrap();
    cms.delete("a", &DeleteParams::default()).await.unwrap();
    let mut seen = Vec::new();
    common::within("three watch events", async {
        while seen.len() < 3 {
            let e = stream.try_next().await.unwrap().unwrap();
            if !matches!(e, WatchEvent::Bookmark(_)) {
                seen.push(describe(&e));
            }
        }
    })
    .await;
    assert_eq!(seen, ["ADDED a", "MODIFIED a", "DELETED a"]);
}

#[tokio::test]
async fn watch_resumes_from_a_resource_version_with_the_changes_since() {
    let sim = SimServer::start().await.unwrap();
    let cms: Api<ConfigMap> = Api::default_namespaced(sim.client());
    let a = cms.create(&PostParams::default(), &config_map("a", json!({}))).await.unwrap();
    cms.create(&PostParams::default(), &config_map("b", json!({}))).await.unwrap();
    cms.delete("a", &DeleteParams::default()).await.unwrap();
    let from = a.metadata.resource_version.unwrap();
    let mut stream = cms.watch(&WatchParams::default().disable_bookmarks(), &from).await.unwrap().boxed();
    let mut seen = Vec::new();
    for _ in 0..2 {
        seen.push(describe(&stream.try_next().await.unwrap().unwrap()));
    }
    assert_eq!(seen, ["ADDED b", "DELETED a"]);
}

#[tokio::test]
async fn label_selected_watch_sees_objects_enter_and_leave_the_selection() {
    let sim = SimServer::start().await.unwrap();
    let cms: Api<ConfigMap> = Api::default_namespaced(sim.client());
    let rv = cms.list(&ListParams::default()).await.unwrap().metadata.resource_version.unwrap();
    let wp = WatchParams::default().labels("app=db").disable_bookmarks();
    let mut stream = cms.watch(&wp, &rv).await.unwrap().boxed();
    cms.create(&PostParams::default(), &config_map("other", json!({"app": "web"}))).await.unwrap();
    cms.create(&PostParams::default(), &config_map("x", json!({}))).await.unwrap();
    cms.patch("x", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {"app": "db"}}})))
        .await
        .unwrap();
    cms.patch("x", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {"app": null}}})))
        .await
        .unwrap();
    let mut seen = Vec::new();
    for _ in 0..2 {
        seen.push(describe(&stream.try_next().await.unwrap().unwrap()));
    }
    assert_eq!(seen, ["ADDED x", "DELETED x"]);
}

#[tokio::test]
async fn watch_without_a_version_starts_with_the_current_objects() {
    let sim = SimServer::start().await.unwrap();
    let cms: Api<ConfigMap> = Api::default_namespaced(sim.client());
    cms.create(&PostParams::default(), &config_map("a", json!({}))).await.unwrap();
    let mut stream = cms.watch(&WatchParams::default().disable_bookmarks(), "0").await.unwrap().boxed();
    assert_eq!(describe(&stream.try_next().await.unwrap().unwrap()), "ADDED a");
}

#[tokio::test(start_paused = true)]
async fn bookmarks_advance_to_the_latest_version() {
    let config = SimConfig { bookmark_interval: Duration::from_secs(5), ..SimConfig::default() };
    let sim = SimServer::start_with(config).await.unwrap();
    let cms: Api<ConfigMap> = Api::default_namespaced(sim.client());
    let rv = cms.list(&ListParams::default()).await.unwrap().metadata.resource_version.unwrap();
    let mut stream = cms.watch(&WatchParams::default(), &rv).await.unwrap().boxed();
    // A write to another resource moves the global resourceVersion; the bookmark reports it.
    let pods: Api<k8s_openapi::api::core::v1::Secret> = Api::default_namespaced(sim.client());
    let secret: k8s_openapi::api::core::v1::Secret =
        serde_json::from_value(json!({"metadata": {"name": "s"}})).unwrap();
    let written =
        pods.create(&PostParams::default(), &secret).await.unwrap().metadata.resource_version.unwrap();
    common::within("a bookmark at the written resourceVersion", async {
        loop {
            if let WatchEvent::Bookmark(b) = stream.try_next().await.unwrap().unwrap()
                && b.metadata.resource_version == written
            {
                break;
            }
        }
    })
    .await;
}

#[tokio::test]
async fn streaming_list_ends_initial_events_with_the_annotated_bookmark() {
    let sim = SimServer::start().await.unwrap();
    let cms: Api<ConfigMap> = Api::default_namespaced(sim.client());
    cms.create(&PostParams::default(), &config_map("a", json!({}))).await.unwrap();
    cms.create(&PostParams::default(), &config_map("b", json!({}))).await.unwrap();
    let mut stream = cms.watch(&WatchParams::default().initial_events(), "").await.unwrap().boxed();
    assert_eq!(describe(&stream.try_next().await.unwrap().unwrap()), "ADDED a");
    assert_eq!(describe(&stream.try_next().await.unwrap().unwrap()), "ADDED b");
    match stream.try_next().await.unwrap().unwrap() {
        WatchEvent::Bookmark(b) => {
            assert_eq!(
                b.metadata.annotations.get("k8s.io/initial-events-end").map(String::as_str),
                Some("true")
            )
        }
        other => panic!("expected the initial-events-end bookmark, got {}", describe(&other)),
    }
    cms.create(&PostParams::default(), &config_map("c", json!({}))).await.unwrap();
    assert_eq!(describe(&stream.try_next().await.unwrap().unwrap()), "ADDED c");
}

#[tokio::test]
async fn a_version_older_than_the_kept_history_is_gone() {
    let config = SimConfig { history_limit: 2, ..SimConfig::default() };
    let sim = SimServer::start_with(config).await.unwrap();
    let cms: Api<ConfigMap> = Api::default_namespaced(sim.client());
    let first = cms.create(&PostParams::default(), &config_map("a", json!({}))).await.unwrap();
    for name in ["b", "c", "d"] {
        cms.create(&PostParams::default(), &config_map(name, json!({}))).await.unwrap();
    }
    let old = first.metadata.resource_version.unwrap();
    let mut stream = cms.watch(&WatchParams::default(), &old).await.unwrap().boxed();
    assert_eq!(describe(&stream.try_next().await.unwrap().unwrap()), "ERROR 410");
    assert!(stream.try_next().await.unwrap().is_none(), "the stream ends after the error");
}

#[tokio::test(start_paused = true)]
async fn the_server_ends_a_watch_at_its_timeout() {
    let sim = SimServer::start().await.unwrap();
    let cms: Api<ConfigMap> = Api::default_namespaced(sim.client());
    let rv = cms.list(&ListParams::default()).await.unwrap().metadata.resource_version.unwrap();
    let mut stream =
        cms.watch(&WatchParams::default().timeout(1).disable_bookmarks(), &rv).await.unwrap().boxed();
    let started = tokio::time::Instant::now();
    assert!(stream.try_next().await.unwrap().is_none());
    assert!(started.elapsed() >= Duration::from_secs(1));
}

#[tokio::test]
async fn without_streaming_lists_send_initial_events_is_ignored_as_by_old_servers() {
    let config = SimConfig { streaming_lists: false, ..SimConfig::default() };
    let sim = SimServer::start_with(config).await.unwrap();
    let cms: Api<ConfigMap> = Api::default_namespaced(sim.client());
    cms.create(&PostParams::default(), &config_map("a", json!({}))).await.unwrap();
    let mut stream = cms.watch(&WatchParams::default().initial_events(), "").await.unwrap().boxed();
    assert_eq!(describe(&stream.try_next().await.unwrap().unwrap()), "ADDED a");
    cms.create(&PostParams::default(), &config_map("b", json!({}))).await.unwrap();
    assert_eq!(
        describe(&stream.try_next().await.unwrap().unwrap()),
        "ADDED b",
        "no initial-events-end bookmark"
    );
}

#[tokio::test]
async fn a_field_selected_watch_follows_one_object() {
    let sim = SimServer::start().await.unwrap();
    let cms: Api<ConfigMap> = Api::default_namespaced(sim.client());
    let rv = cms.list(&ListParams::default()).await.unwrap().metadata.resource_version.unwrap();
    let wp = WatchParams::default().fields("metadata.name=b").disable_bookmarks();
    let mut stream = cms.watch(&wp, &rv).await.unwrap().boxed();
    cms.create(&PostParams::default(), &config_map("a", json!({}))).await.unwrap();
    cms.create(&PostParams::default(), &config_map("b", json!({}))).await.unwrap();
    assert_eq!(describe(&stream.try_next().await.unwrap().unwrap()), "ADDED b");
}
