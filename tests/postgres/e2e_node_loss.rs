//! A node lost with the primary on it, with real PostgreSQL 15 through the process kubelet and
//! the simulator's defaults (three nodes, node-monitor grace period 40 s, pods tolerating the
//! unreachable taint for 300 s): the node's kubelet stops reporting and its processes freeze.
//! The instances were spread one per node by the operator's anti-affinity; the operator fails
//! over on the primary pod's `Ready=False` (what the node lifecycle controller's
//! `MarkPodsNotReady` writes once the node is `Unknown`) without waiting for the eviction, and
//! writes through `-rw` succeed again. When the node comes back the old primary, which the
//! record no longer names, is fenced and rejoins as a standby of the new primary: there is one
//! writable instance, and every write acknowledged through `-rw` after the failover is there;
//! with a synchronous standby, every write acknowledged before the loss too.
#![cfg(feature = "sim")]

use crate::common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::postgres::*;
use common::*;
use dbcluster_operator::databasecluster::api::types::DatabaseCluster;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, Patch, PatchParams};

use super::e2e_bad_day::write_once;
use super::e2e_failover::{NAME, POD_0, pod, service_uri, writable_instances};

/// The grace period and failover delay the outage is made of (the defaults).
const GRACE: Duration = Duration::from_secs(40);
const DELAY: Duration = Duration::from_secs(5);

fn node_of(pod: &Pod) -> String {
    pod.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap_or_default()
}

/// Prints, after `lost`, when the node turned `Ready=Unknown`, the old primary's pod unready,
/// the record moved and the new primary was observed: the outage's parts.
async fn timeline(
    cluster: Api<DatabaseCluster>,
    pods: Api<Pod>,
    nodes: Api<Node>,
    node: String,
    lost: Instant,
) {
    let mut seen = BTreeSet::new();
    let mut note = |what: &'static str| {
        if seen.insert(what) {
            eprintln!("lost node: {what} after {:?}", lost.elapsed());
        }
    };
    loop {
        let unknown = nodes
            .get(&node)
            .await
            .ok()
            .and_then(|n| n.status?.conditions)
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "Unknown"));
        if unknown {
            note("the node Ready=Unknown");
        }
        let ready = pods
            .get(POD_0)
            .await
            .ok()
            .and_then(|p| p.status?.conditions)
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
        if !ready {
            note("the old primary's pod unready");
        }
        let status = cluster.get(NAME).await.ok().and_then(|c| c.status).unwrap_or_default();
        if status.target_primary.as_deref().is_some_and(|p| p != POD_0) {
            note("the record moved");
        }
        if status.current_primary.as_deref().is_some_and(|p| p != POD_0) {
            note("the new primary observed");
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_node_holding_the_primary_fails_over_before_eviction_and_the_old_primary_rejoins() {
    lose_the_primarys_node(0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_synchronous_standby_no_write_acknowledged_before_the_node_was_lost_is_lost() {
    lose_the_primarys_node(1).await;
}

/// Loses the node of a three-instance cluster's primary (with `synchronous` synchronous
/// standbys) under writes, times the outage, brings the node back and checks the writes: every
/// one acknowledged after the failover survives, and with a synchronous standby every one
/// acknowledged before the loss too (without, the test prints how many were lost).
async fn lose_the_primarys_node(synchronous: i32) {
    let cluster = process_cluster().await;
    let _operator = cluster.start_operator().await;
    let mut db = sample();
    db.spec.replicas = 3;
    db.spec.backup_schedule = None;
    db.spec.synchronous_replicas = Some(synchronous);
    cluster.clusters().patch(NAME, &PatchParams::apply("kubectl"), &Patch::Apply(&db)).await.unwrap();
    await_streaming(&cluster, NAME, 3, Some(POD_0)).await;
    // The operator's preferred anti-affinity spread the instances one per node.
    let mut placed = BTreeSet::new();
    for ordinal in 0..3 {
        placed.insert(node_of(&pod(&cluster, &format!("{NAME}-{ordinal}")).await));
    }
    assert_eq!(placed.len(), 3, "one instance per node: {placed:?}");
    let rw = service_uri(&cluster, "rw").await;
    psql(&rw, "CREATE TABLE after_hang (id bigint)").unwrap();
    let before: Vec<u64> =
        (1..=20).filter(|id| write_once(&rw, 100_000 + id)).map(|id| 100_000 + id).collect();
    assert!(!before.is_empty(), "writes acknowledged before the loss");
    let node = node_of(&pod(&cluster, POD_0).await);
    let nodes: Api<Node> = Api::all(cluster.sim.client());
    let lost = Instant::now();
    assert_eq!(cluster.sim.faults().lose_node(&node), 1);
    let watch = tokio::spawn(timeline(cluster.clusters(), cluster.api(), nodes.clone(), node.clone(), lost));
    let mut acknowledged = Vec::new();
    let limit = GRACE + DELAY + Duration::from_secs(45);
    let outage = within_limit("a write through -rw after the node was lost", limit, async {
        let mut id = 0;
        loop {
            id += 1;
            let uri = rw.clone();
            if tokio::task::spawn_blocking(move || write_once(&uri, id)).await.unwrap() {
                acknowledged.push(id);
                return lost.elapsed();
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    let _ = tokio::time::timeout(Duration::from_secs(10), watch).await;
    eprintln!(
        "lost node (grace {GRACE:?}, failoverDelay {DELAY:?}): writes through -rw again {outage:?} after the loss"
    );
    // The grace period runs from the last heartbeat seen (Leases are renewed every 10 s).
    let earliest = GRACE - Duration::from_secs(10);
    assert!(
        outage > earliest,
        "a silent node is not told from a slow one before the grace period: {outage:?}"
    );
    assert!(outage <= GRACE + DELAY + Duration::from_secs(20), "{outage:?}");
    // No eviction: the old primary's pod is still there, bound to the lost node.
    let old = pod(&cluster, POD_0).await;
    assert!(old.metadata.deletion_timestamp.is_none(), "failed over before the eviction");
    let status = cluster.clusters().get(NAME).await.unwrap().status.unwrap();
    let promoted = status.current_primary.clone().unwrap();
    assert_ne!(promoted, POD_0);
    for id in 1000..1010 {
        let uri = rw.clone();
        if tokio::task::spawn_blocking(move || write_once(&uri, id)).await.unwrap() {
            acknowledged.push(id);
        }
    }
    // The node comes back: the old primary is fenced and rejoins as a standby of the new one.
    let back = Instant::now();
    cluster.sim.faults().restore_node(&node);
    await_streaming(&cluster, NAME, 3, Some(&promoted)).await;
    eprintln!(
        "lost node: the old primary streaming as a standby {:?} after the node came back",
        back.elapsed()
    );
    assert_eq!(writable_instances(&cluster, 3).await, vec![promoted.clone()], "one primary");
    let rw = service_uri(&cluster, "rw").await;
    let present: BTreeSet<u64> =
        psql(&rw, "SELECT id FROM after_hang").unwrap().lines().map(|l| l.parse().unwrap()).collect();
    let missing: Vec<&u64> = acknowledged.iter().filter(|id| !present.contains(id)).collect();
    assert!(missing.is_empty(), "acknowledged through -rw after the failover, then lost: {missing:?}");
    let lost_before: Vec<&u64> = before.iter().filter(|id| !present.contains(id)).collect();
    eprintln!(
        "lost node, synchronousReplicas {synchronous}: {} of {} writes acknowledged before the loss lost",
        lost_before.len(),
        before.len()
    );
    if synchronous > 0 {
        assert!(lost_before.is_empty(), "a synchronous standby held them: {lost_before:?}");
    }
}
