//! `run`'s real code path with the DatabaseCluster operator as its workload, against the
//! simulated API server: the sample reaches Running 3/3, the endpoints show the operator's
//! informers and controller, and a signal stops it cleanly.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::*;
use dbcluster_operator::cli::Settings;
use dbcluster_operator::cli::run::{self, database_cluster_workload};
use kube::api::PostParams;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

/// A plain HTTP/1.1 GET: (status, body).
async fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut raw = String::new();
    stream.read_to_string(&mut raw).await.unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap();
    (head.split(' ').nth(1).unwrap().parse().unwrap(), body.to_string())
}

#[tokio::test(start_paused = true)]
async fn run_reconciles_the_sample_to_running_and_shows_it_on_the_endpoints() {
    let cluster = TestCluster::start().await;
    let local: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let settings = Settings {
        namespace: None,
        workers: 2,
        metrics_addr: local,
        health_addr: local,
        leader_election: None,
        shutdown_timeout: Duration::from_secs(10),
    };
    let started = run::start(cluster.sim.client(), &cluster.sim.base_url(), settings).await.unwrap();
    let addr = started.metrics_addr;
    let (signal, signals) = mpsc::channel(1);
    let running = tokio::spawn(started.run(database_cluster_workload, signals));

    let api = cluster.clusters();
    api.create(&PostParams::default(), &sample()).await.unwrap();
    await_object(&api, "production-postgres", "Running 3/3", |c| {
        phase(c) == Some("Running") && ready(c) == 3
    })
    .await;

    assert_eq!(get(addr, "/readyz").await.0, 200);
    let (status, queue) = get(addr, "/debug/queue").await;
    assert_eq!(status, 200);
    assert!(queue.contains("databasecluster") && queue.contains("default/production-postgres"), "{queue}");
    let (_, cache) = get(addr, "/debug/cache").await;
    for informer in ["databaseclusters", "statefulsets", "services", "secrets"] {
        assert!(cache.contains(informer), "{informer} in {cache}");
    }
    let (_, metrics) = get(addr, "/metrics").await;
    assert!(
        metrics.contains("controller_runtime_reconcile_total{controller=\"databasecluster\""),
        "{metrics}"
    );

    signal.send(()).await.unwrap();
    within("run to stop", running).await.unwrap().unwrap();
}
