//! `run --metrics-secure` against the simulated cluster, with manifests/rbac.yaml applied and the
//! operator running as its ServiceAccount: `/metrics` answers 401 without a bearer token or with
//! one the API server does not authenticate (TokenReview), 403 to a user RBAC does not let `get`
//! the path (SubjectAccessReview on a non-resource URL), and 200 to one it does (the
//! metrics-reader ClusterRole bound to a scraper's ServiceAccount). The probes stay open, and so
//! does `/debug/*` on loopback (`kubectl port-forward` is its protection; which paths are reviewed
//! on which listener is `server::reviewed`'s unit test). An authenticated, allowed answer is
//! remembered (a second scrape makes no review); a review the API server fails is a 500, never an
//! open door.
#![cfg(feature = "sim")]

mod common;

use std::net::SocketAddr;

use common::{create_all, http_get_as, install_crd, local_manager_config, within};
use dbcluster_operator::cli::run;
use dbcluster_operator::databasecluster::operator;
use dbcluster_operator::databasecluster::types::crd;
use dbcluster_operator::runtime::manager::ManagerConfig;
use dbcluster_operator::sim::SimServer;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::Api;
use kube::api::PostParams;
use serde_json::json;
use tokio::sync::mpsc;

const OPERATOR_USER: &str = "system:serviceaccount:dbcluster-system:dbcluster-operator";
const PROMETHEUS: &str = "system:serviceaccount:monitoring:prometheus";

/// Binds the ClusterRole `role` to `subject` (a `User` or `ServiceAccount` subject as JSON).
async fn bind(client: &kube::Client, role: &str, subject: serde_json::Value) {
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": format!("{role}-{}", subject["name"].as_str().unwrap())},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [subject],
    }))
    .unwrap();
    Api::<ClusterRoleBinding>::all(client.clone()).create(&PostParams::default(), &binding).await.unwrap();
}

fn reviews(sim: &SimServer) -> usize {
    let log = sim.request_log();
    log.iter().filter(|r| r.verb == "create" && r.resource.ends_with("reviews")).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_and_debug_answer_only_authenticated_authorized_requests() {
    let sim = SimServer::start().await.unwrap();
    let client = sim.client();
    install_crd(&client, crd()).await;
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "dbcluster-system"}})).unwrap();
    Api::<Namespace>::all(client.clone()).create(&PostParams::default(), &ns).await.unwrap();
    create_all(&client, include_str!("../manifests/rbac.yaml")).await;
    // As the README says: the scraper's ServiceAccount bound to the metrics reader.
    let prometheus = json!({"kind": "ServiceAccount", "name": "prometheus", "namespace": "monitoring"});
    bind(&client, "dbcluster-operator-metrics-reader", prometheus).await;
    let config = ManagerConfig { metrics_secure: true, ..local_manager_config() };
    let manager = run::start(sim.client_as(OPERATOR_USER), &sim.base_url(), config).await.unwrap();
    let (metrics, debug, health) = (manager.metrics_addr, manager.debug_addr, manager.health_addr);
    let (signal, signals) = mpsc::channel(1);
    let running = tokio::spawn(manager.run(operator::workload, signals));

    let scraper = sim.issue_token(PROMETHEUS, &[]);
    let alice = sim.issue_token("alice", &[]);
    let status = |addr: SocketAddr, path: &'static str, token: Option<String>| async move {
        http_get_as(addr, path, token.as_deref()).await.0
    };

    // Who may read /metrics.
    assert_eq!(status(metrics, "/metrics", None).await, 401, "no token");
    assert_eq!(status(metrics, "/metrics", Some("forged".into())).await, 401, "a token nobody issued");
    assert_eq!(status(metrics, "/metrics", Some(alice.clone())).await, 403, "a user without the role");
    let (code, _, body) = http_get_as(metrics, "/metrics", Some(&scraper)).await;
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("controller_runtime_reconcile_total"), "{body}");
    let (_, _, denied) = http_get_as(metrics, "/metrics", Some(&alice)).await;
    assert_eq!(denied, "Authorization denied for user alice to get /metrics\n");

    // /debug/* on loopback: open, as without --metrics-secure (the status command reads it there).
    assert_eq!(status(debug, "/debug/queue", None).await, 200);
    assert_eq!(status(debug, "/debug/", None).await, 200);

    // The probes are the kubelet's: open.
    assert_eq!(status(health, "/healthz", None).await, 200);
    assert_eq!(status(health, "/readyz", None).await, 200);

    // An allowed answer is remembered: the next scrape makes no review.
    let before = reviews(&sim);
    assert_eq!(status(metrics, "/metrics", Some(scraper.clone())).await, 200);
    assert_eq!(reviews(&sim), before, "the token and the decision were remembered");

    // The API server failing a review: 500, not an open door.
    let newcomer = sim.issue_token(PROMETHEUS, &[]);
    sim.faults().fail_next("tokenreviews", 1, 500);
    let (code, _, body) = http_get_as(metrics, "/metrics", Some(&newcomer)).await;
    assert_eq!(code, 500, "{body}");
    assert!(body.starts_with("TokenReview failed"), "{body}");
    assert_eq!(status(metrics, "/metrics", Some(newcomer)).await, 200, "the next one is reviewed again");

    signal.send(()).await.unwrap();
    within("the manager to stop", running).await.unwrap().unwrap();
}
