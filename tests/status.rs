//! `dbcluster-operator status` against the simulated cluster: with the operator running it shows
//! the phase, the children the cluster controls (not look-alikes), the Events and the operator's
//! view of the key; with the operator down it still shows the cluster and says the operator is
//! unreachable. Real clock: the operator's endpoint is read over real HTTP with a timeout.
#![cfg(feature = "sim")]

mod common;

use common::*;
use dbcluster_operator::cli::run;
use dbcluster_operator::cli::snapshot::{StatusError, fetch};
use dbcluster_operator::cli::status::render;
use dbcluster_operator::databasecluster::operator;
use k8s_openapi::api::core::v1::Service;
use kube::api::PostParams;
use tokio::sync::mpsc;

const NAME: &str = "production-postgres";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_shows_the_cluster_its_children_events_and_the_operators_view() {
    let cluster = TestCluster::start().await;
    let config = local_manager_config();
    let manager = run::start(cluster.sim.client(), &cluster.sim.base_url(), config).await.unwrap();
    let operator_url = format!("http://{}", manager.debug_addr);
    let (signal, signals) = mpsc::channel(1);
    let running = tokio::spawn(manager.run(operator::workload, signals));

    // A Service with the cluster's label that the cluster does not control is not its child.
    let mut impostor = Service::default();
    impostor.metadata.name = Some("look-alike".into());
    impostor.metadata.labels = Some([("app.kubernetes.io/instance".to_string(), NAME.to_string())].into());
    cluster.api::<Service>().create(&PostParams::default(), &impostor).await.unwrap();

    cluster.clusters().create(&PostParams::default(), &sample()).await.unwrap();
    await_object(&cluster.clusters(), NAME, "Running 3/3", |c| phase(c) == Some("Running") && ready(c) == 3)
        .await;
    let snapshot = eventually("the operator's view of a settled key", WAIT_LIMIT, || async {
        let snapshot = fetch(&cluster.client, "default", NAME, &operator_url).await.unwrap();
        let text = render(&snapshot);
        let settled = text.contains("state: idle") || text.contains("state: waiting");
        if settled && text.contains("last pass: ") { Ok(snapshot) } else { Err(text) }
    })
    .await;
    let text = render(&snapshot);
    assert!(text.contains("Cluster:   default/production-postgres"), "{text}");
    assert!(text.contains("Phase:     Running") && text.contains("Ready:     3/3"), "{text}");
    assert!(text.contains("Ready                True"), "{text}");
    for child in [
        "StatefulSet  production-postgres              ready 3/3",
        "Pod          production-postgres-0            Running, ready",
        "Pod          production-postgres-2            Running, ready",
        "Service      production-postgres              headless",
        "Secret       production-postgres-app",
    ] {
        assert!(text.contains(child), "{child:?} in {text}");
    }
    assert!(!text.contains("look-alike"), "{text}");
    assert!(text.contains("CreatedStatefulSet"), "the Events about the cluster: {text}");
    assert!(text.contains("last pass: success") || text.contains("last pass: requeue_after"), "{text}");

    // The operator down: the rest is still shown, and the view says why it is missing.
    signal.send(()).await.unwrap();
    within("the manager to stop", running).await.unwrap().unwrap();
    let text = render(&fetch(&cluster.client, "default", NAME, &operator_url).await.unwrap());
    assert!(text.contains("Phase:     Running"), "{text}");
    assert!(text.contains("operator unreachable (") && text.contains("refused"), "{text}");
}

#[tokio::test]
async fn status_of_a_missing_cluster_says_so() {
    let cluster = TestCluster::start().await;
    let error = fetch(&cluster.client, "default", "nope", "http://127.0.0.1:9").await.unwrap_err();
    assert!(matches!(error, StatusError::NotFound { .. }), "{error}");
    assert_eq!(error.to_string(), "DatabaseCluster default/nope not found");
}
