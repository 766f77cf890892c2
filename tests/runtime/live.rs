//! The live page over real sockets (`runtime::observe::live`): `/debug/` is one self-contained HTML page
//! (nothing fetched from elsewhere), and `/debug/live` streams snapshots as server-sent events
//! that show a new key within a second of its object's creation, with its pass's trigger, and a
//! timeline of the latest passes of any key.
#![cfg(feature = "sim")]

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::{http_get, within_limit};
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
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

/// Reads server-sent events from an open `/debug/live` response, one snapshot at a time.
struct Events {
    stream: TcpStream,
    buffer: String,
}

impl Events {
    async fn open(addr: std::net::SocketAddr, query: &str) -> Self {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        let request = format!("GET /debug/live{query} HTTP/1.1\r\nHost: test\r\n\r\n");
        stream.write_all(request.as_bytes()).await.unwrap();
        Self { stream, buffer: String::new() }
    }

    /// The next snapshot (the chunked framing around each event is skipped).
    async fn next(&mut self) -> Value {
        loop {
            if let Some(start) = self.buffer.find("data: ")
                && let Some(length) = self.buffer[start..].find("\n\n")
            {
                let event = self.buffer[start + 6..start + length].to_string();
                self.buffer.drain(..start + length + 2);
                return serde_json::from_str(&event).unwrap();
            }
            let mut chunk = [0u8; 65536];
            let n = self.stream.read(&mut chunk).await.unwrap();
            assert!(n > 0, "the stream ended: {}", self.buffer);
            self.buffer.push_str(&String::from_utf8_lossy(&chunk[..n]));
        }
    }
}

#[tokio::test]
async fn the_page_is_self_contained_and_the_stream_shows_a_new_key_within_a_second() {
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
    assert!(page.contains("new EventSource(\"live?\""), "the page follows the stream");
    for outside in ["http://", "https://", "src=\"//", "<link"] {
        assert!(!page.contains(outside), "the page fetches nothing from elsewhere ({outside})");
    }

    let mut events = Events::open(addr, "").await;
    let snapshot = within_limit("the first snapshot", Duration::from_secs(10), async {
        loop {
            let snapshot = events.next().await;
            if snapshot["controllers"][0]["timeline"].as_array().is_some_and(|t| !t.is_empty()) {
                return snapshot;
            }
        }
    })
    .await;
    let controller = &snapshot["controllers"][0];
    assert_eq!(controller["controller"], "databasecluster");
    assert_eq!(controller["keys"][0]["key"], "default/production-postgres");
    assert_eq!(controller["by_state"]["idle"], 1);
    assert!(controller["timeline"][0]["trigger"].as_str().unwrap().contains("listed ConfigMap"));
    assert_eq!(snapshot["informers"][0]["informer"], "configmaps");
    assert_eq!(snapshot["informers"][0]["objects"], 1);

    let second: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "analytics"}})).unwrap();
    config_maps.create(&PostParams::default(), &second).await.unwrap();
    let shown = within_limit("the new key on the stream", Duration::from_secs(1), async {
        loop {
            let snapshot = events.next().await;
            let timeline = snapshot["controllers"][0]["timeline"].as_array().cloned().unwrap_or_default();
            if let Some(pass) = timeline.into_iter().find(|p| p["key"] == "default/analytics") {
                return pass;
            }
        }
    })
    .await;
    assert!(shown["trigger"].as_str().unwrap().starts_with("\"ConfigMap default/analytics added"), "{shown}");

    // The timeline holds the latest passes of any key, not only each key's last one.
    let changed: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "production-postgres"}, "data": {"a": "b"}}))
            .unwrap();
    let changed = config_maps.replace("production-postgres", &PostParams::default(), &changed).await.unwrap();
    let rv = changed.metadata.resource_version.unwrap();
    let timeline = within_limit("the change's pass on the stream", Duration::from_secs(1), async {
        loop {
            let snapshot = events.next().await;
            let timeline = snapshot["controllers"][0]["timeline"].as_array().cloned().unwrap_or_default();
            if timeline.iter().any(|p| p["trigger"].as_str().unwrap().contains(&format!("modified rv={rv}")))
            {
                return timeline;
            }
        }
    })
    .await;
    let keys: Vec<&str> = timeline.iter().map(|p| p["key"].as_str().unwrap()).collect();
    assert_eq!(keys, ["default/production-postgres", "default/analytics", "default/production-postgres"]);
    assert!(timeline[2]["trigger"].as_str().unwrap().contains("listed ConfigMap"), "{timeline:?}");

    // Paging and filtering by the query string.
    let mut filtered = Events::open(addr, "?filter=analytics").await;
    let snapshot = within_limit("a filtered snapshot", Duration::from_secs(10), filtered.next()).await;
    assert_eq!(snapshot["controllers"][0]["matching"], 1);
    assert_eq!(snapshot["controllers"][0]["keys"][0]["key"], "default/analytics");
    stop.cancel();
}
