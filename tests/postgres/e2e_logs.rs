//! What `kubectl logs` shows of an instance on the process kubelet, with real PostgreSQL 15: JSON
//! lines only, the manager's and PostgreSQL's (`"logger":"postgres"`), without the start's noise
//! (`could not change directory`, a probe's `role … does not exist`), after the instances started,
//! their probes passed (and one more round of them) and a scrape read the metrics.
#![cfg(feature = "sim")]

use crate::common;

use common::https::https_get_as;
use common::postgres::*;
use common::*;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{Api, ListParams, LogParams, Patch, PatchParams};
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;

const NAME: &str = "logs";

/// Every line of `log` that is not a JSON object, and every line with start noise.
/// The CAs that verify the cluster's servers (its superuser Secret's `ca.crt`).
async fn ca_certificates(cluster: &TestCluster) -> Vec<CertificateDer<'static>> {
    let secret = cluster.api::<Secret>().get(&format!("{NAME}-superuser")).await.unwrap();
    let pem = secret.data.unwrap()["ca.crt"].0.clone();
    CertificateDer::pem_slice_iter(&pem).collect::<Result<Vec<_>, _>>().unwrap()
}

fn offending(log: &str) -> Vec<String> {
    let noise = ["could not change directory", "does not exist", "could not identify current directory"];
    log.lines()
        .filter(|line| !line.trim().is_empty())
        .filter(|line| {
            let object = serde_json::from_str::<serde_json::Value>(line).is_ok_and(|v| v.is_object());
            !object || noise.iter().any(|n| line.contains(n))
        })
        .map(str::to_owned)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instances_log_is_json_lines_without_start_noise() {
    let cluster = process_cluster().await;
    let _operator = cluster.start_operator().await;
    let mut db = sample();
    db.metadata.name = Some(NAME.into());
    db.spec.replicas = 2;
    db.spec.backup_schedule = None;
    cluster.clusters().patch(NAME, &PatchParams::apply("kubectl"), &Patch::Apply(&db)).await.unwrap();
    await_streaming(&cluster, NAME, 2, None).await;

    let pods: Api<Pod> = cluster.api();
    let list = pods
        .list(&ListParams::default().labels(&format!("app.kubernetes.io/instance={NAME}")))
        .await
        .unwrap();
    assert_eq!(list.items.len(), 2);
    let mut offenders = Vec::new();
    for pod in list.items {
        let name = pod.metadata.name.clone().unwrap();
        // Ready: the kubelet's probes passed. One more round of each, and a scrape.
        // The status port serves TLS with the cluster's server certificate, verified here under
        // the pod's name as the operator verifies it; the metrics port is plain HTTP.
        let trusted = ca_certificates(&cluster).await;
        let status: std::net::SocketAddr = format!("{}:8000", pod_ip(&pod)).parse().unwrap();
        let pod_name = format!("{name}.{NAME}.default.svc");
        for path in ["/healthz", "/readyz"] {
            let answer = https_get_as(status, &pod_name, &trusted, path, None).await;
            assert_eq!(answer.map(|a| a.0), Ok(200), "{name} {path}");
        }
        let (code, _, _) = http_get(format!("{}:9187", pod_ip(&pod)).parse().unwrap(), "/metrics").await;
        assert_eq!(code, 200, "{name} /metrics");
        let mut seen = 0;
        for container in ["install-manager", "bootstrap", "postgres"] {
            let params = LogParams { container: Some(container.into()), ..LogParams::default() };
            let log = pods.logs(&name, &params).await.unwrap();
            offenders.extend(offending(&log).into_iter().map(|line| format!("{name}/{container}: {line}")));
            seen += log.lines().count();
        }
        let params = LogParams { container: Some("postgres".into()), ..LogParams::default() };
        let postgres = pods.logs(&name, &params).await.unwrap();
        if !postgres.contains("\"logger\":\"postgres\"") {
            offenders.push(format!("{name}/postgres: no line of PostgreSQL's own"));
        }
        assert!(seen > 0);
    }
    assert_eq!(offenders, Vec::<String>::new());
}
