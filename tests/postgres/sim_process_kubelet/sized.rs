//! Volumes with a real size (`SimConfig::sized_volumes`): a claim's volume holds no more than its
//! capacity (a writer gets `No space left on device`), growing the claim grows the mounted
//! filesystem while the pod runs, and deleting the claim removes the volume.

use super::*;

use dbcluster_operator::sim::{KubeletKind, SimConfig};
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::api::{Patch, PatchParams};

/// Total bytes of the filesystem at `dir`, as `df` sees it from the host.
fn filesystem_bytes(dir: &std::path::Path) -> u64 {
    let out = std::process::Command::new("df").args(["-B1", "--output=size"]).arg(dir).output().unwrap();
    String::from_utf8_lossy(&out.stdout).lines().nth(1).unwrap().trim().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sized_volume_fills_up_and_grows_online() {
    require_postgres();
    let config = SimConfig { kubelet: KubeletKind::Process, sized_volumes: true, ..SimConfig::default() };
    let cluster = TestCluster::start_with(config).await;
    let claims: Api<PersistentVolumeClaim> = cluster.api();
    let claim = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "small"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "16Mi"}}}});
    claims.create(&PostParams::default(), &serde_json::from_value(claim).unwrap()).await.unwrap();
    // Writes 64 MiB into a 16 MiB volume (the error goes to the log), then waits.
    let fill = "dd if=/dev/zero of=/data/fill bs=1M count=64; sleep 600";
    let pods = create_pod(
        &cluster,
        "filler",
        json!({"containers": [{"name": "w", "image": "postgres:15", "command": ["bash", "-c", fill],
            "volumeMounts": [{"name": "d", "mountPath": "/data"}]}],
            "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "small"}}]}),
    )
    .await;
    await_pod(&pods, "filler", "Running", phase_is("Running")).await;
    let volume_name = claims.get("small").await.unwrap().spec.unwrap().volume_name.unwrap();
    let volumes: Api<PersistentVolume> = Api::all(cluster.sim.client());
    let dir = std::path::PathBuf::from(
        volumes.get(&volume_name).await.unwrap().spec.unwrap().host_path.unwrap().path,
    );
    let log = eventually_some("the writer to run out of space", || async {
        let log = kubectl_logs(&cluster, &["filler"]).ok()?;
        log.contains("No space left on device").then_some(log)
    })
    .await;
    assert_eq!(filesystem_bytes(&dir), 16 << 20, "{log}");
    assert!(std::fs::metadata(dir.join("fill")).unwrap().len() <= 16 << 20);

    // Growing the claim grows the mounted filesystem; the pod keeps running.
    let grow = json!({"spec": {"resources": {"requests": {"storage": "32Mi"}}}});
    claims.patch("small", &PatchParams::default(), &Patch::Merge(&grow)).await.unwrap();
    eventually_some("the filesystem grown", || async { (filesystem_bytes(&dir) == 32 << 20).then_some(()) })
        .await;
    let pod = pods.get("filler").await.unwrap();
    let restarts = pod.status.unwrap().container_statuses.unwrap()[0].restart_count;
    assert_eq!(restarts, 0, "grown online");

    pods.delete("filler", &DeleteParams::default()).await.unwrap();
    eventually_some("the pod gone", || async { pods.get_opt("filler").await.ok()?.is_none().then_some(()) })
        .await;
    claims.delete("small", &DeleteParams::default()).await.unwrap();
    eventually_some("the volume removed", || async { (!dir.exists()).then_some(()) }).await;
}
