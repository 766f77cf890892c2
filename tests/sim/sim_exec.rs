//! `kubectl exec` against the timer kubelet, which runs no process: the answers a real cluster
//! gives when the kubelet has no such container (`kubelet::exec` rule 3), and the apiserver's own
//! refusals before that (a missing pod, a wrong container, a request that is not an upgrade).
//! Running commands is the process kubelet's (`tests/postgres/sim_process_kubelet/exec.rs`).
#![cfg(feature = "sim")]

use crate::common::*;

use dbcluster_operator::sim::SimConfig;
use dbcluster_operator::sim::version::KubernetesVersion;
use k8s_openapi::api::core::v1::Pod;
use kube::api::PostParams;
use serde_json::json;

async fn running_pod(cluster: &TestCluster) {
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web"},
                     "spec": {"containers": [{"name": "web", "image": "nginx:1.25"}]}});
    let pods: kube::Api<Pod> = cluster.api();
    pods.create(&PostParams::default(), &serde_json::from_value(pod).unwrap()).await.unwrap();
    await_object(&pods, "web", "web Running", |p| {
        p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
    })
    .await;
}

/// kubectl 1.28 (SPDY: the kubelet's 500 instead of the upgrade) and kubectl 1.32 (WebSocket: the
/// upgrade, then an `InternalError` status) both say the container is not found.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_on_the_timer_kubelet_finds_no_container() {
    for minor in [28, 32] {
        let config = SimConfig { kubernetes_version: KubernetesVersion::new(minor), ..SimConfig::default() };
        let cluster = TestCluster::start_with(config).await;
        running_pod(&cluster).await;
        let refused = kubectl(&cluster, &["exec", "web", "--", "true"]).unwrap_err();
        assert!(refused.contains("container not found (\"web\")"), "kubectl 1.{minor}: {refused}");
        let wrong = kubectl(&cluster, &["exec", "web", "-c", "db", "--", "true"]).unwrap_err();
        assert!(wrong.contains("container db is not valid for pod web"), "kubectl 1.{minor}: {wrong}");
    }
}

/// `sim::exec` rule 2: a plain GET is refused before anything, as the apiserver refuses it.
#[tokio::test]
async fn exec_without_an_upgrade_is_refused() {
    let cluster = TestCluster::start().await;
    running_pod(&cluster).await;
    let path = "/api/v1/namespaces/default/pods/web/exec?command=true&stdout=true";
    let (code, _, body) = http_get(cluster.sim.addr(), path).await;
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("Upgrade request required"), "{body}");
    let (code, _, body) =
        http_get(cluster.sim.addr(), "/api/v1/namespaces/default/pods/nope/exec?command=true&stdout=true")
            .await;
    assert_eq!(code, 404, "{body}");
    let (code, _, body) =
        http_get(cluster.sim.addr(), "/api/v1/namespaces/default/pods/web/exec?command=true").await;
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("you must specify at least 1 of stdin, stdout, stderr"), "{body}");
}
