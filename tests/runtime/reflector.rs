//! The reflector's list/watch cycle against the simulated API server over HTTP: both initial-list
//! paths, pagination, bookmarks, watch timeouts, 410 recovery, backoff schedules and malformed
//! events. Each test drives an informer (the reflector's only user) and reads its figures.
//! Tests that depend on time run on tokio's paused clock with the real durations (watch timeout,
//! bookmark interval, backoff reset) and assert exact timings: with jitter off the schedule is
//! deterministic.
#![cfg(feature = "sim")]

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use dbcluster_operator::runtime::cache::strip_managed_fields;
use dbcluster_operator::runtime::client::client as runtime_client;
use dbcluster_operator::runtime::informer::{Informer, InformerEvent};
use dbcluster_operator::runtime::reflector::{InitialList, ReconnectBackoffConfig, ReflectorConfig};
use dbcluster_operator::sim::{SimConfig, SimServer};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::{Client, Resource};
use parking_lot::Mutex;
use serde_json::json;
use tokio::time::Instant;

fn config_map(name: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}, "data": {"v": "1"}})).unwrap()
}

/// Deterministic settings: no jitter, a short backoff schedule (100 ms → 1.6 s, reset after the
/// default 2 minutes without failures), and watches long enough not to end by themselves.
fn settings() -> ReflectorConfig {
    ReflectorConfig {
        watch_timeout: Duration::from_secs(3600),
        watch_timeout_jitter: 0.0,
        backoff: ReconnectBackoffConfig {
            initial: Duration::from_millis(100),
            max: Duration::from_millis(1600),
            factor: 2.0,
            jitter: 0.0,
            ..ReconnectBackoffConfig::default()
        },
        ..ReflectorConfig::default()
    }
}

/// How long a spell without failures must last before the backoff schedule starts over.
const RESET_AFTER: Duration = Duration::from_secs(120);

fn informer(client: Client, config: ReflectorConfig) -> Informer<ConfigMap> {
    Informer::with_config(
        Api::namespaced(client, "default"),
        config,
        Arc::new(strip_managed_fields::<ConfigMap>),
    )
}

/// Records every event as `ADDED name rv` / `UPDATED name old-rv->new-rv` / `DELETED name rv`.
fn record(informer: &Informer<ConfigMap>) -> Arc<Mutex<Vec<String>>> {
    let log = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&log);
    informer.add_handler(move |event: &InformerEvent<ConfigMap>| {
        let rv = |cm: &ConfigMap| cm.metadata.resource_version.clone().unwrap_or_default();
        let name = event.object().metadata.name.clone().unwrap_or_default();
        sink.lock().push(match event {
            InformerEvent::Added(cm) => format!("ADDED {name} {}", rv(cm)),
            InformerEvent::Updated { old, new } => format!("UPDATED {name} {}->{}", rv(old), rv(new)),
            InformerEvent::Deleted(cm) => format!("DELETED {name} {}", rv(cm)),
        });
    });
    log
}

fn requests(sim: &SimServer, verb: &str) -> usize {
    sim.request_log().iter().filter(|r| r.resource == "configmaps" && r.verb == verb).count()
}

fn rv_of(obj: &impl Resource) -> String {
    obj.meta().resource_version.clone().unwrap()
}

/// The last backoff delay the informer's reflector chose.
fn informer_backoff_ms(informer: &Informer<ConfigMap>) -> u64 {
    informer.stats().last_backoff_ms
}

async fn synced_to(informer: &Informer<ConfigMap>, rv: &str) {
    informer.wait_for(|s| s.synced && s.last_resource_version.as_deref() == Some(rv)).await;
}

#[tokio::test]
async fn streaming_list_then_watch_keeps_the_cache_in_sync() {
    let sim = SimServer::start().await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(sim.client(), "default");
    for name in ["a", "b"] {
        api.create(&PostParams::default(), &config_map(name)).await.unwrap();
    }
    let informer = informer(sim.client(), settings());
    let events = record(&informer);
    informer.start();
    informer.synced().await;
    assert_eq!(informer.cache().len(), 2);
    assert_eq!(informer.stats().initial_list, Some("streaming"));
    assert_eq!((requests(&sim, "list"), requests(&sim, "watch")), (0, 1), "one streaming watch, no LIST");

    let c = api.create(&PostParams::default(), &config_map("c")).await.unwrap();
    let a =
        api.patch("a", &PatchParams::default(), &Patch::Merge(json!({"data": {"v": "2"}}))).await.unwrap();
    api.delete("b", &DeleteParams::default()).await.unwrap();
    let last = api.create(&PostParams::default(), &config_map("d")).await.unwrap();
    synced_to(&informer, &rv_of(&last)).await;

    let mut names: Vec<String> =
        informer.cache().list().iter().map(|cm| cm.metadata.name.clone().unwrap()).collect();
    names.sort();
    assert_eq!(names, ["a", "c", "d"]);
    let events = events.lock().clone();
    assert_eq!(events.len(), 6, "{events:?}");
    assert!(events.contains(&format!("ADDED c {}", rv_of(&c))));
    assert!(events.iter().any(|e| e.starts_with("UPDATED a ") && e.ends_with(&format!("->{}", rv_of(&a)))));
    assert!(events.iter().any(|e| e.starts_with("DELETED b ")));
    let stats = informer.stats();
    assert_eq!((stats.added, stats.updated, stats.deleted, stats.relists), (4, 1, 1, 1));
}

#[tokio::test]
async fn paginated_list_reads_1200_objects_in_pages_of_500() {
    let sim = SimServer::start().await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(sim.client(), "default");
    for i in 0..1200 {
        api.create(&PostParams::default(), &config_map(&format!("cm-{i:04}"))).await.unwrap();
    }
    let informer =
        informer(sim.client(), ReflectorConfig { initial_list: InitialList::Paginated, ..settings() });
    informer.start();
    informer.synced().await;
    assert_eq!(informer.cache().len(), 1200);
    assert_eq!(requests(&sim, "list"), 3, "500 + 500 + 200");
    let stats = informer.stats();
    assert_eq!((stats.added, stats.relists, stats.initial_list), (1200, 1, Some("paginated")));
}

#[tokio::test(start_paused = true)]
async fn a_server_without_streaming_lists_gets_a_paginated_list_instead() {
    let sim =
        SimServer::start_with(SimConfig { streaming_lists: false, ..SimConfig::default() }).await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(sim.client(), "default");
    api.create(&PostParams::default(), &config_map("a")).await.unwrap();
    let informer = informer(sim.client(), settings());
    let events = record(&informer);
    let started = Instant::now();
    informer.start();
    informer.synced().await;
    // The server ignored sendInitialEvents; its first plain bookmark (after 10 s) gave it away.
    assert_eq!(started.elapsed(), Duration::from_secs(10));
    assert_eq!(informer.stats().initial_list, Some("paginated"));
    assert_eq!(requests(&sim, "list"), 1);
    assert_eq!(informer.cache().len(), 1);
    assert_eq!(events.lock().len(), 1, "the object is announced once: {:?}", events.lock());

    // And from then on it watches from the list's version.
    let b = api.create(&PostParams::default(), &config_map("b")).await.unwrap();
    synced_to(&informer, &rv_of(&b)).await;
    assert_eq!(informer.cache().len(), 2);
    assert_eq!(informer.stats().relists, 2, "the ignored streaming attempt, then the LIST; no more");
}

#[tokio::test(start_paused = true)]
async fn bookmarks_advance_the_resource_version() {
    let sim = SimServer::start().await.unwrap();
    let informer = informer(sim.client(), settings());
    let started = Instant::now();
    informer.start();
    informer.synced().await;
    // A write to another kind moves the server's resourceVersion; only a bookmark can tell us.
    let secrets: Api<Secret> = Api::namespaced(sim.client(), "default");
    let secret = secrets
        .create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "s"}})).unwrap())
        .await
        .unwrap();
    synced_to(&informer, &rv_of(&secret)).await;
    assert_eq!(started.elapsed(), Duration::from_secs(10), "the server's first periodic bookmark");
    let stats = informer.stats();
    assert!(stats.bookmarks >= 1);
    assert_eq!((stats.added, stats.objects), (0, 0));
}

#[tokio::test(start_paused = true)]
async fn a_watch_ended_by_its_timeout_is_resumed_without_a_relist() {
    let sim = SimServer::start().await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(sim.client(), "default");
    api.create(&PostParams::default(), &config_map("a")).await.unwrap();
    let watch_timeout = ReflectorConfig::default().watch_timeout;
    let informer = informer(sim.client(), ReflectorConfig { watch_timeout, ..settings() });
    let started = Instant::now();
    informer.start();
    informer.synced().await;
    informer.wait_for(|s| s.watch_restarts == 1).await;
    assert_eq!(started.elapsed(), watch_timeout);
    assert_eq!(informer.stats().relists, 1);

    let b = api.create(&PostParams::default(), &config_map("b")).await.unwrap();
    synced_to(&informer, &rv_of(&b)).await;
    assert_eq!((requests(&sim, "list"), requests(&sim, "watch")), (0, 2));
    let stats = informer.stats();
    assert_eq!((stats.relists, stats.added, stats.failures), (1, 2, 0));
}

#[tokio::test(start_paused = true)]
async fn a_410_relists_and_reports_exactly_what_changed_while_disconnected() {
    let sim = SimServer::start().await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(sim.client(), "default");
    for name in ["kept", "changed", "removed"] {
        api.create(&PostParams::default(), &config_map(name)).await.unwrap();
    }
    let informer = informer(sim.client(), settings());
    let events = record(&informer);
    informer.start();
    informer.synced().await;
    let removed_before =
        informer.cache().list().into_iter().find(|cm| cm.metadata.name.as_deref() == Some("removed"));
    events.lock().clear();

    // Disconnect: the watch ends, the next attempt fails (backoff 100 ms, in which the writes below
    // take no time on the paused clock), the one after is 410.
    sim.faults().fail_next("configmaps", 1, 500);
    sim.faults().gone_next_watch("configmaps");
    sim.faults().close_watches();
    informer.wait_for(|s| s.failures == 1).await;
    let changed = api
        .patch("changed", &PatchParams::default(), &Patch::Merge(json!({"data": {"v": "2"}})))
        .await
        .unwrap();
    api.delete("removed", &DeleteParams::default()).await.unwrap();
    let server_rv = api.list(&Default::default()).await.unwrap().metadata.resource_version.unwrap();

    informer
        .wait_for(|s| s.gone == 1 && s.relists == 2 && s.last_resource_version.as_deref() == Some(&server_rv))
        .await;
    let mut events = events.lock().clone();
    events.sort();
    let removed_rv = rv_of(removed_before.as_deref().unwrap());
    assert_eq!(
        events,
        [
            format!("DELETED removed {removed_rv}"),
            format!("UPDATED changed {}->{}", removed_rv.parse::<u64>().unwrap() - 1, rv_of(&changed)),
        ]
    );
    let stats = informer.stats();
    assert_eq!((stats.objects, stats.watch_restarts), (2, 1));
}

#[tokio::test(start_paused = true)]
async fn a_410_on_a_continue_token_restarts_the_list() {
    let sim = Arc::new(SimServer::start().await.unwrap());
    let api: Api<ConfigMap> = Api::namespaced(sim.client(), "default");
    for i in 0..700 {
        api.create(&PostParams::default(), &config_map(&format!("cm-{i:04}"))).await.unwrap();
    }
    let informer =
        informer(sim.client(), ReflectorConfig { initial_list: InitialList::Paginated, ..settings() });
    // When the first page has been read, hold the next request in the server for a second...
    let seen = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    informer.add_handler({
        let sim = Arc::clone(&sim);
        move |_: &InformerEvent<ConfigMap>| {
            if seen.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1 == 500 {
                sim.faults().set_latency(Duration::from_secs(1));
            }
        }
    });
    informer.start();
    informer.wait_for(|s| s.added == 500).await;
    common::eventually("the second page's list request", Duration::from_secs(1), || async {
        let lists = requests(&sim, "list");
        if lists >= 2 { Ok(()) } else { Err(format!("{lists} list requests")) }
    })
    .await;
    // ...and meanwhile move the server on and forget the history: page 2's token has expired.
    sim.faults().set_latency(Duration::ZERO);
    let secrets: Api<Secret> = Api::namespaced(sim.client(), "default");
    secrets
        .create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "s"}})).unwrap())
        .await
        .unwrap();
    sim.faults().compact_history();
    informer.synced().await;
    let stats = informer.stats();
    assert_eq!((stats.gone, stats.relists, stats.objects, stats.added, stats.deleted), (1, 2, 700, 700, 0));
    assert_eq!(requests(&sim, "list"), 4, "page 1, page 2 (410), then pages 1 and 2 again");
}

#[tokio::test(start_paused = true)]
async fn a_500_burst_backs_off_exponentially_and_the_schedule_resets_after_a_healthy_spell() {
    let sim = SimServer::start().await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(sim.client(), "default");
    sim.faults().fail_next("configmaps", 4, 500);
    let informer = informer(sim.client(), settings());
    let started = Instant::now();
    informer.start();
    informer.synced().await;
    assert_eq!(started.elapsed(), Duration::from_millis(100 + 200 + 400 + 800));
    let stats = informer.stats();
    assert_eq!((stats.failures, stats.relists), (4, 1));
    assert_eq!(informer_backoff_ms(&informer), 800);

    // A failure and the re-watch after it; returns the time from the failure to the re-sync.
    let fail_once = async |name: &str, failures: u64| {
        sim.faults().fail_next("configmaps", 1, 500);
        let failed_at = Instant::now();
        sim.faults().close_watches();
        informer.wait_for(|s| s.failures == failures).await;
        let created = api.create(&PostParams::default(), &config_map(name)).await.unwrap();
        synced_to(&informer, &rv_of(&created)).await;
        failed_at.elapsed()
    };

    // Healthy for a millisecond less than the reset: the schedule goes on (1.6 s).
    tokio::time::sleep(RESET_AFTER - Duration::from_millis(1)).await;
    assert_eq!(fail_once("a", 5).await, Duration::from_millis(1600));
    assert_eq!(informer_backoff_ms(&informer), 1600);

    // Healthy for the whole spell: it starts over (100 ms).
    tokio::time::sleep(RESET_AFTER).await;
    assert_eq!(fail_once("b", 6).await, Duration::from_millis(100));
    assert_eq!(informer_backoff_ms(&informer), 100);
    let stats = informer.stats();
    assert_eq!((stats.relists, stats.watch_restarts), (1, 2), "a failed re-watch does not relist");
}

#[tokio::test(start_paused = true)]
async fn a_429_burst_backs_off_honouring_retry_after_as_a_floor() {
    let sim = SimServer::start().await.unwrap();
    // kube's default client retries 429s itself; the runtime's client leaves them to the reflector.
    let client = runtime_client(kube::Config::new(sim.base_url().parse().unwrap())).unwrap();
    sim.faults().fail_next("configmaps", 2, 429);
    let informer = informer(client, settings());
    let started = Instant::now();
    informer.start();
    informer.synced().await;
    // max(100 ms, Retry-After 1 s) + max(200 ms, 1 s)
    assert_eq!(started.elapsed(), Duration::from_secs(2));
    assert_eq!(informer.stats().failures, 2);
    assert_eq!(informer_backoff_ms(&informer), 1000);
    // Exactly the requests the reflector's policy sends: two refused (streaming) lists and the one
    // that worked, whose watch goes on (kube's retry layer would have sent retries of its own).
    let requests = sim.request_log().iter().filter(|r| r.resource == "configmaps").count();
    assert_eq!(requests, 3);
}

/// A stricter view of ConfigMaps: `data.port` must be a number. The server stores any string, so
/// a ConfigMap with `port: "eighty"` is a valid object on the wire and a malformed one for us.
#[derive(kube::Resource, Clone, Debug, serde::Deserialize)]
#[resource(inherit = "ConfigMap")]
struct PortMap {
    metadata: kube::api::ObjectMeta,
    data: PortData,
}

#[derive(Clone, Debug, serde::Deserialize)]
struct PortData {
    #[serde(deserialize_with = "port_number")]
    port: u16,
}

fn port_number<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u16, D::Error> {
    let text = <String as serde::Deserialize>::deserialize(d)?;
    text.parse().map_err(serde::de::Error::custom)
}

#[tokio::test]
async fn a_malformed_object_in_the_stream_is_counted_and_skipped() {
    let sim = SimServer::start().await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(sim.client(), "default");
    let port = |name: &str, port: &str| -> ConfigMap {
        serde_json::from_value(json!({"metadata": {"name": name}, "data": {"port": port}})).unwrap()
    };
    api.create(&PostParams::default(), &port("listed-bad", "http")).await.unwrap();
    api.create(&PostParams::default(), &port("listed-good", "5432")).await.unwrap();
    let informer: Informer<PortMap> = Informer::with_config(
        Api::namespaced(sim.client(), "default"),
        settings(),
        Arc::new(strip_managed_fields::<PortMap>),
    );
    informer.start();
    informer.synced().await;
    api.create(&PostParams::default(), &port("watched-bad", "eighty")).await.unwrap();
    let good = api.create(&PostParams::default(), &port("watched-good", "80")).await.unwrap();
    let rv = rv_of(&good);
    informer.wait_for(|s| s.last_resource_version.as_deref() == Some(rv.as_str())).await;

    let stats = informer.stats();
    assert_eq!((stats.malformed_skipped, stats.added, stats.objects, stats.failures), (2, 2, 2, 0));
    let cached = informer.cache().get(&"default/watched-good".parse().unwrap()).unwrap();
    assert_eq!(cached.data.port, 80);
}

#[tokio::test(start_paused = true)]
async fn a_server_that_goes_away_is_retried_with_growing_delays() {
    let sim = SimServer::start().await.unwrap();
    let informer = informer(sim.client(), settings());
    informer.start();
    informer.synced().await;
    // The open watch ends; every attempt after that finds the port closed.
    let gone_at = Instant::now();
    sim.shutdown().await;
    informer.wait_for(|s| s.failures == 3).await;
    assert_eq!(gone_at.elapsed(), Duration::from_millis(100 + 200), "the third failure chose 400 ms");
    let stats = informer.stats();
    assert_eq!((stats.last_backoff_ms, stats.relists, stats.synced), (400, 1, true));
}
