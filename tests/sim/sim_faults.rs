//! Fault injection and the request log of the simulated API server, through the `kube` client.
#![cfg(feature = "sim")]

use std::time::Duration;

use dbcluster_operator::sim::{RequestRecord, SimServer};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, PostParams, WatchEvent, WatchParams};
use serde_json::json;

fn config_map(name: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}})).unwrap()
}

#[tokio::test]
async fn close_watches_ends_every_open_watch() {
    let sim = SimServer::start().await.unwrap();
    let cms: Api<ConfigMap> = Api::default_namespaced(sim.client());
    let rv = cms.list(&ListParams::default()).await.unwrap().metadata.resource_version.unwrap();
    let mut stream = cms.watch(&WatchParams::default().disable_bookmarks(), &rv).await.unwrap().boxed();
    // The watch is open once a write reaches it; then the fault ends it.
    cms.create(&PostParams::default(), &config_map("a")).await.unwrap();
    assert!(matches!(stream.try_next().await.unwrap(), Some(WatchEvent::Added(_))));
    sim.faults().close_watches();
    assert!(stream.try_next().await.unwrap().is_none());
    // A watch closed as soon as it is answered ends too.
    let mut fresh = cms.watch(&WatchParams::default().disable_bookmarks(), &rv).await.unwrap().boxed();
    sim.faults().close_watches();
    while let Some(event) = fresh.try_next().await.unwrap() {
        assert!(matches!(event, WatchEvent::Added(_)), "only the replayed creation may come first");
    }
}

#[tokio::test]
async fn fail_next_answers_internal_errors_then_recovers() {
    let sim = SimServer::start().await.unwrap();
    let cms: Api<ConfigMap> = Api::default_namespaced(sim.client());
    sim.faults().fail_next("configmaps", 2, 500);
    for _ in 0..2 {
        match cms.list(&ListParams::default()).await {
            Err(kube::Error::Api(s)) => assert_eq!((s.code, s.reason.as_str()), (500, "InternalError")),
            other => panic!("expected 500, got {other:?}"),
        }
    }
    cms.list(&ListParams::default()).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn too_many_requests_carry_retry_after_and_the_client_retries() {
    let sim = SimServer::start().await.unwrap();
    let cms: Api<ConfigMap> = Api::default_namespaced(sim.client());
    sim.faults().fail_next("configmaps", 2, 429);
    // kube's default retry policy honours Retry-After: the third attempt succeeds.
    cms.list(&ListParams::default()).await.unwrap();
    let lists = sim.request_log().iter().filter(|r| r.verb == "list" && r.resource == "configmaps").count();
    assert_eq!(lists, 3);

    let raw = reqwest_free_get(&sim, "/api/v1/namespaces/default/configmaps", 429).await;
    assert!(raw.contains("retry-after: 1"), "{raw}");
}

/// A raw HTTP/1.1 GET (so the 429's headers are visible without the client's retries).
async fn reqwest_free_get(sim: &SimServer, path: &str, inject: u16) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    sim.faults().fail_next("configmaps", 1, inject);
    let mut s = tokio::net::TcpStream::connect(sim.addr()).await.unwrap();
    s.write_all(format!("GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    out.to_lowercase()
}

#[tokio::test]
async fn gone_next_watch_answers_one_watch_with_410() {
    let sim = SimServer::start().await.unwrap();
    let cms: Api<ConfigMap> = Api::default_namespaced(sim.client());
    let rv = cms.list(&ListParams::default()).await.unwrap().metadata.resource_version.unwrap();
    sim.faults().gone_next_watch("configmaps");
    let mut gone = cms.watch(&WatchParams::default(), &rv).await.unwrap().boxed();
    match gone.try_next().await.unwrap() {
        Some(WatchEvent::Error(s)) => assert_eq!(s.code, 410),
        other => panic!("expected a 410 error event, got {other:?}"),
    }
    let mut next = cms.watch(&WatchParams::default().disable_bookmarks(), &rv).await.unwrap().boxed();
    cms.create(&PostParams::default(), &config_map("a")).await.unwrap();
    assert!(matches!(next.try_next().await.unwrap(), Some(WatchEvent::Added(_))));
}

#[tokio::test]
async fn compact_history_makes_every_earlier_version_gone() {
    let sim = SimServer::start().await.unwrap();
    let cms: Api<ConfigMap> = Api::default_namespaced(sim.client());
    let rv = cms.list(&ListParams::default()).await.unwrap().metadata.resource_version.unwrap();
    cms.create(&PostParams::default(), &config_map("a")).await.unwrap();
    sim.faults().compact_history();
    let mut stream = cms.watch(&WatchParams::default(), &rv).await.unwrap().boxed();
    match stream.try_next().await.unwrap() {
        Some(WatchEvent::Error(s)) => assert_eq!(s.code, 410),
        other => panic!("expected a 410 error event, got {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn latency_delays_every_request() {
    let sim = SimServer::start().await.unwrap();
    let cms: Api<ConfigMap> = Api::default_namespaced(sim.client());
    sim.faults().set_latency(Duration::from_secs(3));
    let started = tokio::time::Instant::now();
    cms.list(&ListParams::default()).await.unwrap();
    assert!(started.elapsed() >= Duration::from_secs(3));
}

#[tokio::test]
async fn the_request_log_records_verb_group_resource_subresource_namespace_and_name() {
    let sim = SimServer::start().await.unwrap();
    let client = sim.client();
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    cms.create(&PostParams::default(), &config_map("a")).await.unwrap();
    cms.get("a").await.unwrap();
    let all: Api<k8s_openapi::api::apps::v1::StatefulSet> = Api::all(client.clone());
    all.list(&ListParams::default()).await.unwrap();
    let sts: Api<k8s_openapi::api::apps::v1::StatefulSet> = Api::default_namespaced(client);
    let _ = sts.get_status("nope").await;
    let record =
        |verb: &str, group: &str, resource: &str, sub: Option<&str>, ns: Option<&str>, name: Option<&str>| {
            RequestRecord {
                verb: verb.into(),
                group: group.into(),
                version: "v1".into(),
                resource: resource.into(),
                subresource: sub.map(String::from),
                namespace: ns.map(String::from),
                name: name.map(String::from),
            }
        };
    assert_eq!(
        sim.request_log(),
        [
            record("create", "", "configmaps", None, Some("default"), None),
            record("get", "", "configmaps", None, Some("default"), Some("a")),
            record("list", "apps", "statefulsets", None, None, None),
            record("get", "apps", "statefulsets", Some("status"), Some("default"), Some("nope")),
        ]
    );
}
