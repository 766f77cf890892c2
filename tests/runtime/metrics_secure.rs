//! `run --metrics-secure` against the simulated cluster, with manifests/rbac.yaml applied and the
//! operator running as its ServiceAccount: `/metrics` answers 401 without a bearer token or with
//! one the API server does not authenticate (TokenReview), 403 to a user RBAC does not let `get`
//! the path (SubjectAccessReview on a non-resource URL), and 200 to one it does (the
//! metrics-reader ClusterRole bound to a scraper's ServiceAccount). The probes stay open, and so
//! does `/debug/*` on loopback (`kubectl port-forward` is its protection; which paths are reviewed
//! on which listener is `server::reviewed`'s unit test). An authenticated, allowed answer is
//! remembered (a second scrape makes no review); a review the API server fails is a 500, never an
//! open door.
//!
//! TLS, every client verifying: with a certificate directory (the test's own CA signed the
//! server's certificate) `/metrics` is served over HTTPS only — a plain HTTP request gets a 400
//! and no metrics, a client trusting another CA is refused — and replacing the directory's files
//! makes new connections see the new certificate. Without a directory the operator serves a
//! self-signed certificate, read from a first (refused) handshake and then trusted exactly; a
//! missing directory at start is an error naming the file. The probes and `/debug/*` on
//! loopback, on listeners of their own, stay plain HTTP.
#![cfg(feature = "sim")]

use crate::common;

use std::net::SocketAddr;

use common::https::{TestCa, https_get_as, presented_certificate};
use common::{TestCluster, create_all, eventually, http_get_as, install_crd, local_manager_config, within};
use dbcluster_operator::cli::run;
use dbcluster_operator::databasecluster::api::types::crd;
use dbcluster_operator::databasecluster::controller::operator;
use dbcluster_operator::runtime::manager::{ManagerConfig, ManagerError};
use dbcluster_operator::runtime::observe::tls::RELOAD_PERIOD;
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

/// A simulator with the CRD, the operator's RBAC and, as docs/metrics-security.md says, the
/// scraper's ServiceAccount bound to the metrics reader.
async fn sim_with_rbac() -> SimServer {
    let sim = SimServer::start().await.unwrap();
    let client = sim.client();
    install_crd(&client, crd()).await;
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "dbcluster-system"}})).unwrap();
    Api::<Namespace>::all(client.clone()).create(&PostParams::default(), &ns).await.unwrap();
    create_all(&client, include_str!("../../manifests/rbac.yaml")).await;
    let prometheus = json!({"kind": "ServiceAccount", "name": "prometheus", "namespace": "monitoring"});
    bind(&client, "dbcluster-operator-metrics-reader", prometheus).await;
    sim
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_and_debug_answer_only_authenticated_authorized_requests() {
    let sim = sim_with_rbac().await;
    // As cert-manager would provide it: a Secret's tls.crt and tls.key, signed by a CA.
    let ca = TestCa::new("test CA");
    let cert_dir = tempfile::tempdir().unwrap();
    ca.issue_into(cert_dir.path(), &["localhost", "127.0.0.1"]);
    // Three listeners, as the Deployment has them: metrics, debug on loopback, probes.
    let config = ManagerConfig {
        metrics_secure: true,
        metrics_cert_dir: Some(cert_dir.path().to_owned()),
        metrics_addr: "127.0.0.1:0".parse().unwrap(),
        debug_addr: "127.0.0.2:0".parse().unwrap(),
        health_addr: "127.0.0.3:0".parse().unwrap(),
        ..local_manager_config()
    };
    let manager = run::start(sim.client_as(OPERATOR_USER), &sim.base_url(), config).await.unwrap();
    let (metrics, debug, health) = (manager.metrics_addr, manager.debug_addr, manager.health_addr);
    let (signal, signals) = mpsc::channel(1);
    let running = tokio::spawn(manager.run(operator::workload, signals));

    let scraper = sim.issue_token(PROMETHEUS, &[]);
    let alice = sim.issue_token("alice", &[]);
    let trusted = [ca.certificate.clone()];
    let get = |path: &'static str, token: Option<String>| {
        let trusted = trusted.clone();
        async move { https_get_as(metrics, "127.0.0.1", &trusted, path, token.as_deref()).await.unwrap() }
    };
    let status = |addr: SocketAddr, path: &'static str, token: Option<String>| async move {
        if addr == metrics {
            get(path, token).await.0
        } else {
            http_get_as(addr, path, token.as_deref()).await.0
        }
    };

    // Who may read /metrics.
    assert_eq!(status(metrics, "/metrics", None).await, 401, "no token");
    assert_eq!(status(metrics, "/metrics", Some("forged".into())).await, 401, "a token nobody issued");
    assert_eq!(status(metrics, "/metrics", Some(alice.clone())).await, 403, "a user without the role");
    let (code, _, body) = get("/metrics", Some(scraper.clone())).await;
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("controller_runtime_reconcile_total"), "{body}");
    let (_, _, denied) = get("/metrics", Some(alice.clone())).await;
    assert_eq!(denied, "Authorization denied for user alice to get /metrics\n");

    // Over TLS only: plain HTTP is told so and gets no metrics, even with an allowed token; a
    // client that does not trust the CA is refused at the handshake.
    let (code, _, body) = http_get_as(metrics, "/metrics", Some(&scraper)).await;
    assert_eq!((code, body.as_str()), (400, "Client sent an HTTP request to an HTTPS server.\n"));
    let stranger = TestCa::new("another CA");
    let refused =
        https_get_as(metrics, "127.0.0.1", std::slice::from_ref(&stranger.certificate), "/metrics", None)
            .await;
    assert!(refused.as_ref().is_err_and(|e| e.contains("UnknownIssuer")), "{refused:?}");

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
    let (code, _, body) = get("/metrics", Some(newcomer.clone())).await;
    assert_eq!(code, 500, "{body}");
    assert!(body.starts_with("TokenReview failed"), "{body}");
    assert_eq!(status(metrics, "/metrics", Some(newcomer)).await, 200, "the next one is reviewed again");

    // The directory's files replaced (a renewed Secret): new connections get the new certificate,
    // checked at most RELOAD_PERIOD later; here signed by a new CA, which the old one does not
    // vouch for.
    let renewed = TestCa::new("renewed CA");
    let leaf = renewed.issue_into(cert_dir.path(), &["localhost", "127.0.0.1"]);
    let new_trust = [renewed.certificate.clone()];
    let (code, _, _) = eventually("the renewed certificate served", RELOAD_PERIOD * 5, || async {
        https_get_as(metrics, "localhost", &new_trust, "/metrics", Some(&scraper)).await
    })
    .await;
    assert_eq!(code, 200);
    assert_eq!(presented_certificate(metrics).await, leaf);
    let old = https_get_as(metrics, "127.0.0.1", &trusted, "/metrics", None).await;
    assert!(old.as_ref().is_err_and(|e| e.contains("UnknownIssuer")), "{old:?}");

    signal.send(()).await.unwrap();
    within("the manager to stop", running).await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_directory_a_self_signed_certificate_is_served_and_a_bad_directory_is_named() {
    let cluster = TestCluster::start().await;
    let config = ManagerConfig { metrics_secure: true, ..local_manager_config() };
    let manager = run::start(cluster.sim.client(), &cluster.sim.base_url(), config.clone()).await.unwrap();
    let metrics = manager.metrics_addr;
    let served = manager.certificate().expect("--metrics-secure serves a certificate");
    let (signal, signals) = mpsc::channel(1);
    let running = tokio::spawn(manager.run(operator::workload, signals));

    // What a scraper given no CA would do: read the certificate, then trust exactly it.
    let presented = presented_certificate(metrics).await;
    assert_eq!(presented, served);
    for name in ["localhost", "127.0.0.1"] {
        let answer = https_get_as(metrics, name, std::slice::from_ref(&presented), "/metrics", None).await;
        assert_eq!(
            answer.map(|(code, _, body)| (code, body)),
            Ok((401, "Unauthorized\n".to_string())),
            "{name}"
        );
    }
    let other = TestCa::new("not the operator");
    let refused =
        https_get_as(metrics, "localhost", std::slice::from_ref(&other.certificate), "/metrics", None).await;
    assert!(refused.is_err(), "{refused:?}");
    signal.send(()).await.unwrap();
    within("the manager to stop", running).await.unwrap().unwrap();

    // A directory without the files: the start fails, naming the file.
    let empty = tempfile::tempdir().unwrap();
    let config = ManagerConfig { metrics_cert_dir: Some(empty.path().to_owned()), ..config };
    let error = run::start(cluster.sim.client(), &cluster.sim.base_url(), config).await.unwrap_err();
    assert!(matches!(error, ManagerError::Tls(_)), "{error}");
    let expected =
        format!("cannot serve TLS (--metrics-secure): cannot read {}/tls.crt: ", empty.path().display());
    assert!(error.to_string().starts_with(&expected), "{error}");
}
