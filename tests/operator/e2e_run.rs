//! `run`'s real code path with the DatabaseCluster operator as its workload, against the
//! simulated API server: the sample reaches Running 3/3, the endpoints show the operator's
//! informers and controller, and a signal stops it cleanly.
#![cfg(feature = "sim")]

use crate::common;

use common::*;
use dbcluster_operator::cli::run;
use dbcluster_operator::databasecluster::controller::operator;
use dbcluster_operator::runtime::manager::ManagerConfig;
use kube::api::PostParams;
use tokio::sync::mpsc;

#[tokio::test(start_paused = true)]
async fn run_reconciles_the_sample_to_running_and_shows_it_on_the_endpoints() {
    let cluster = TestCluster::start().await;
    // /debug/* on its own listener.
    let settings = ManagerConfig { debug_addr: "127.0.0.2:0".parse().unwrap(), ..local_manager_config() };
    let started = run::start(cluster.sim.client(), &cluster.sim.base_url(), settings).await.unwrap();
    let addr = started.metrics_addr;
    let started_debug_addr = started.debug_addr;
    let (signal, signals) = mpsc::channel(1);
    let running = tokio::spawn(started.run(operator::workload, signals));

    let api = cluster.clusters();
    api.create(&PostParams::default(), &sample()).await.unwrap();
    await_object(&api, "production-postgres", "Running 3/3", |c| {
        phase(c) == Some("Running") && ready(c) == 3
    })
    .await;

    assert_eq!(http_get(addr, "/readyz").await.0, 200);
    // /debug/* only on its own (loopback) address, not beside /metrics.
    assert_eq!(http_get(addr, "/debug/queue").await.0, 404);
    let debug = started_debug_addr;
    assert!(debug.ip().is_loopback() && debug != addr);
    let (status, _, queue) = http_get(debug, "/debug/queue").await;
    assert_eq!(status, 200);
    assert!(queue.contains("databasecluster") && queue.contains("default/production-postgres"), "{queue}");
    let (_, _, cache) = http_get(debug, "/debug/cache").await;
    for informer in ["databaseclusters", "statefulsets", "services", "secrets"] {
        assert!(cache.contains(informer), "{informer} in {cache}");
    }
    let (_, _, metrics) = http_get(addr, "/metrics").await;
    assert!(
        metrics.contains("controller_runtime_reconcile_total{controller=\"databasecluster\""),
        "{metrics}"
    );

    signal.send(()).await.unwrap();
    within("run to stop", running).await.unwrap().unwrap();
}
