//! Full data volumes, with real PostgreSQL 15 on volumes with a real size (the process kubelet's
//! `sized_volumes`). A standby's full volume: the status says which instance (`Ready=False,
//! DiskFull` and one Warning Event), writes go on, nothing fails over. The primary's full volume:
//! the same, and still no failover, even with `failoverDelay: 0` (its standbys hold the same
//! data). Growing `storageSize` brings both back, and every acknowledged row is there.
#![cfg(feature = "sim")]

use crate::common;

use std::path::PathBuf;

use common::postgres::*;
use common::*;
use dbcluster_operator::databasecluster::api::types::DatabaseCluster;
use dbcluster_operator::sim::{KubeletKind, SimConfig};
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::api::{Api, Patch, PatchParams};

use super::e2e_failover::{NAME, POD_0, service_uri, superuser_uri};

const POD_1: &str = "production-postgres-1";

/// The directory of `pod`'s data volume, as the host sees it.
async fn volume_dir(cluster: &TestCluster, pod: &str) -> PathBuf {
    let claim = cluster.api::<PersistentVolumeClaim>().get(&format!("data-{pod}")).await.unwrap();
    let volume_name = claim.spec.and_then(|s| s.volume_name).expect("a bound claim");
    let volume = Api::<PersistentVolume>::all(cluster.client.clone()).get(&volume_name).await.unwrap();
    PathBuf::from(volume.spec.and_then(|s| s.host_path).expect("a hostPath volume").path)
}

/// Fills `pod`'s data volume from the host but for 8 MiB, as a runaway file would.
async fn fill(cluster: &TestCluster, pod: &str) {
    let dir = volume_dir(cluster, pod).await;
    let out = std::process::Command::new("df").args(["-B1", "--output=avail"]).arg(&dir).output().unwrap();
    let available: u64 = String::from_utf8_lossy(&out.stdout).lines().nth(1).unwrap().trim().parse().unwrap();
    let size = (available - (8 << 20)).to_string();
    let filled = std::process::Command::new("fallocate").args(["-l", &size]).arg(dir.join("filler")).status();
    assert!(filled.unwrap().success());
}

/// `Ready`'s reason and message.
fn ready(db: &DatabaseCluster) -> Option<(String, String)> {
    let c = db.status.as_ref()?.conditions.iter().find(|c| c.type_ == "Ready")?;
    Some((c.reason.clone(), c.message.clone()))
}

async fn await_disk_full(cluster: &TestCluster, pod: &str) {
    eventually_some(&format!("Ready=False, DiskFull naming {pod}"), || async {
        let (reason, message) = ready(&cluster.clusters().get(NAME).await.ok()?)?;
        (reason == "DiskFull"
            && message.contains(&format!("{pod}: "))
            && message.contains("data volume is full"))
        .then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_volumes_are_reported_never_failed_over_and_growing_them_brings_the_instances_back() {
    require_postgres();
    let config = SimConfig { kubelet: KubeletKind::Process, sized_volumes: true, ..SimConfig::default() };
    let cluster = TestCluster::start_with(config).await;
    let _operator = cluster.start_operator().await;
    let mut db = sample();
    db.spec.replicas = 2;
    db.spec.backup_schedule = None;
    db.spec.failover_delay = Some(0);
    db.spec.storage_size = "256Mi".into();
    let api = cluster.clusters();
    api.patch(NAME, &PatchParams::apply("kubectl"), &Patch::Apply(&db)).await.unwrap();
    await_streaming(&cluster, NAME, 2, Some(POD_0)).await;
    let rw = service_uri(&cluster, "rw").await;
    psql(&rw, "CREATE TABLE kept (id int)").unwrap();
    psql(&rw, "INSERT INTO kept SELECT generate_series(1, 100)").unwrap();

    // A standby's volume fills: it is named, writes go on, the primary stays.
    fill(&cluster, POD_1).await;
    await_disk_full(&cluster, POD_1).await;
    psql(&rw, "INSERT INTO kept SELECT generate_series(101, 200)").unwrap();
    let warnings = cluster.events_with_reason(NAME, "DiskFull").await;
    assert_eq!(warnings.len(), 1, "{warnings:?}");

    // The primary's volume fills: named, and not failed over although failoverDelay is 0.
    fill(&cluster, POD_0).await;
    await_disk_full(&cluster, POD_0).await;
    eventually_some("PrimaryAvailable=False, DiskFull", || async {
        let db = api.get(NAME).await.ok()?;
        let c = db.status?.conditions.into_iter().find(|c| c.type_ == "PrimaryAvailable")?;
        (c.reason == "DiskFull").then_some(())
    })
    .await;
    let status = api.get(NAME).await.unwrap().status.unwrap();
    assert_eq!(status.current_primary.as_deref(), Some(POD_0));
    assert!(status.last_failover.is_none(), "{:?}", status.last_failover);
    let standby = superuser_uri(&cluster, POD_1).await;
    assert_eq!(psql(&standby, "SELECT pg_is_in_recovery()").as_deref(), Ok("t"), "nothing promoted");

    // Growing storageSize brings both back with every row.
    let grow = serde_json::json!({"spec": {"storageSize": "512Mi"}});
    api.patch(NAME, &PatchParams::default(), &Patch::Merge(&grow)).await.unwrap();
    await_streaming(&cluster, NAME, 2, Some(POD_0)).await;
    eventually_some("writes through -rw again", || async {
        psql(&rw, "INSERT INTO kept SELECT generate_series(201, 300)").ok()
    })
    .await;
    assert_eq!(psql(&rw, "SELECT count(*) FROM kept").as_deref(), Ok("300"));
    eventually_some("Ready=True", || async {
        let (reason, _) = ready(&api.get(NAME).await.ok()?)?;
        (reason != "DiskFull").then_some(())
    })
    .await;
    assert!(api.get(NAME).await.unwrap().status.unwrap().last_failover.is_none());
}
