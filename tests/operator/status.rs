//! `dbcluster-operator status` against the simulated cluster: with the operator running it shows
//! the phase, the children the cluster controls (not look-alikes), the Events and the operator's
//! view of the key; with the operator down it still shows the cluster and says the operator is
//! unreachable. Real clock: the operator's endpoint is read over real HTTP with a timeout.
//! From a `--metrics-secure` listener: over HTTPS verified against `--operator-ca-file`, with
//! `--operator-token-file`'s token (401 without one, 403 for a user RBAC does not let `get
//! /debug/*`), refused against a CA that did not sign the operator's certificate.
#![cfg(feature = "sim")]

use crate::common;

use common::https::TestCa;
use common::*;
use dbcluster_operator::cli::StatusArgs;
use dbcluster_operator::cli::run;
use dbcluster_operator::cli::snapshot::{Operator, StatusError, fetch};
use dbcluster_operator::cli::status::render;
use dbcluster_operator::databasecluster::controller::operator;
use dbcluster_operator::runtime::manager::ManagerConfig;
use k8s_openapi::api::core::v1::Service;
use kube::api::PostParams;
use tokio::sync::mpsc;

const NAME: &str = "production-postgres";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_shows_the_cluster_its_children_events_and_the_operators_view() {
    let cluster = TestCluster::start().await;
    let config = local_manager_config();
    let manager = run::start(cluster.sim.client(), &cluster.sim.base_url(), config).await.unwrap();
    let operator_url = Operator::at(format!("http://{}", manager.debug_addr));
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
    // Each field the view reads is in the operator's real report and the real status (a field
    // the view names wrongly shows as `-`).
    let line = |prefix: &str| text.lines().find(|l| l.trim_start().starts_with(prefix)).unwrap_or_default();
    assert!(text.contains("Version:   15.4"), "{text}");
    assert!(line("state:").ends_with("requeues: 0"), "{text}");
    let last = line("last pass:");
    assert!(last.contains("s ago, took ") && !last.contains("-s") && last.ends_with("error: -"), "{text}");
    assert!(line("last pass triggered by:").contains("\""), "{text}");

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
    let error =
        fetch(&cluster.client, "default", "nope", &Operator::at("http://127.0.0.1:9")).await.unwrap_err();
    assert!(matches!(error, StatusError::NotFound { .. }), "{error}");
    assert_eq!(error.to_string(), "DatabaseCluster default/nope not found");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_reads_a_secured_listener_with_a_token_and_a_ca() {
    let cluster = TestCluster::start().await;
    let ca = TestCa::new("operator CA");
    let files = tempfile::tempdir().unwrap();
    ca.issue_into(files.path(), &["localhost", "127.0.0.1"]);
    // /debug/* shares the metrics listener (on loopback), so it is reviewed and served over TLS.
    let config = ManagerConfig {
        metrics_secure: true,
        metrics_cert_dir: Some(files.path().to_owned()),
        ..local_manager_config()
    };
    let manager = run::start(cluster.sim.client(), &cluster.sim.base_url(), config).await.unwrap();
    let url = format!("https://127.0.0.1:{}", manager.debug_addr.port());
    let (signal, signals) = mpsc::channel(1);
    let running = tokio::spawn(manager.run(operator::workload, signals));
    create_all(
        &cluster.client,
        r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: debug-reader}
rules: [{nonResourceURLs: ["/debug/*"], verbs: [get]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: debug-reader-alice}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: debug-reader}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: alice}]
"#,
    )
    .await;
    cluster.clusters().create(&PostParams::default(), &sample()).await.unwrap();

    // As a user runs it: the flags name a token file and a CA file.
    let (token_file, ca_file) = (files.path().join("token"), files.path().join("ca.crt"));
    std::fs::write(&token_file, format!("{}\n", cluster.sim.issue_token("alice", &[]))).unwrap();
    std::fs::write(&ca_file, &ca.pem).unwrap();
    let args = StatusArgs {
        name: NAME.into(),
        namespace: None,
        kubeconfig: None,
        context: None,
        operator_url: url.clone(),
        operator_token_file: Some(token_file.clone()),
        operator_ca_file: Some(ca_file.clone()),
    };
    let alice = Operator::from_args(&args).unwrap();
    let text = eventually("the operator's view over HTTPS", WAIT_LIMIT, || async {
        let text = render(&fetch(&cluster.client, "default", NAME, &alice).await.unwrap());
        if text.contains("last pass: ") { Ok(text) } else { Err(text) }
    })
    .await;
    assert!(!text.contains("operator unreachable"), "{text}");

    let client = &cluster.client;
    let view =
        |operator: Operator| async move { render(&fetch(client, "default", NAME, &operator).await.unwrap()) };
    let bob = Operator { token: Some(cluster.sim.issue_token("bob", &[])), ..alice.clone() };
    let text = view(bob).await;
    assert!(text.contains("operator unreachable (/debug/queue answered 403 Forbidden)"), "{text}");
    let text = view(Operator { token: None, ..alice.clone() }).await;
    assert!(text.contains("operator unreachable (/debug/queue answered 401 Unauthorized)"), "{text}");
    let stranger = TestCa::new("not the operator's CA");
    let text = view(Operator { trusted: Some(vec![stranger.certificate.clone()]), ..alice.clone() }).await;
    assert!(text.contains("operator unreachable (") && text.contains("UnknownIssuer"), "{text}");
    let plain = url.replace("https://", "http://");
    let text = view(Operator::at(plain)).await;
    assert!(text.contains("operator unreachable (/debug/queue answered 400 Bad Request)"), "{text}");

    signal.send(()).await.unwrap();
    within("the manager to stop", running).await.unwrap().unwrap();
}

/// `kubectl get dbc` does not hide trouble: STATUS is the `Ready` condition's reason (a running
/// cluster whose configuration PostgreSQL refused says `InvalidConfiguration`), PRIMARY names the
/// instance that accepts writes, and `-o wide` adds the condition's message. (Two threads: the
/// blocking kubectl must not stop the simulator's runtime.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_get_shows_the_ready_reason_and_the_primary() {
    let cluster = common::TestCluster::start().await;
    cluster.clusters().create(&Default::default(), &common::sample()).await.unwrap();
    let status = serde_json::json!({"status": {
        "phase": "Running", "readyInstances": "3/3", "currentPrimary": "production-postgres-0", "currentVersion": "15.4",
        "conditions": [{"type": "Ready", "status": "False", "reason": "InvalidConfiguration",
            "message": "PostgreSQL refuses work_mem", "lastTransitionTime": "2026-12-07T12:00:00Z"}]}});
    let params = kube::api::PatchParams::default();
    cluster
        .clusters()
        .patch_status("production-postgres", &params, &kube::api::Patch::Merge(status))
        .await
        .unwrap();
    let table = common::kubectl(&cluster, &["get", "dbc"]).unwrap();
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["NAME", "PHASE", "READY", "STATUS", "PRIMARY", "VERSION", "AGE"]);
    let row: Vec<&str> = table.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(
        &row[..6],
        ["production-postgres", "Running", "3/3", "InvalidConfiguration", "production-postgres-0", "15.4"]
    );
    let wide = common::kubectl(&cluster, &["get", "dbc", "-o", "wide"]).unwrap();
    assert!(wide.lines().next().unwrap().ends_with("MESSAGE"), "{wide}");
    assert!(wide.contains("PostgreSQL refuses work_mem"), "{wide}");
}
