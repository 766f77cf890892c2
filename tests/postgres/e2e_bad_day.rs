//! A primary that hangs, with real PostgreSQL 15 through the process kubelet. Its processes are
//! stopped (SIGSTOP, as a frozen process or a stuck disk leaves them) while its instance manager
//! still answers, so its probes fail on their own query limits. With the defaults, writes through
//! `<name>-rw` succeed again within 15 s of the hang; with `failoverDelay: 0`, within 8 s. The
//! status says why the old primary is not observed, and the liveness probe restarts its
//! container within its bound. A primary that stalls for less than the readiness probe's window
//! under a write load (a slow fsync, a checkpoint) stays the primary and stays ready.
#![cfg(feature = "sim")]

use crate::common;

use std::time::{Duration, Instant};

use common::postgres::*;
use common::*;
use dbcluster_operator::databasecluster::api::types::DatabaseCluster;
use dbcluster_operator::databasecluster::specs::instance_pod::LIVENESS_GRACE_SECONDS;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Patch, PatchParams};

use super::e2e_failover::{NAME, POD_0, pod, service_uri, superuser_uri, writable_instances};

/// A two-instance cluster with `failover_delay` (`None`: the default).
async fn create(cluster: &TestCluster, failover_delay: Option<i32>) {
    let mut db = sample();
    db.spec.replicas = 2;
    db.spec.backup_schedule = None;
    db.spec.failover_delay = failover_delay;
    cluster.clusters().patch(NAME, &PatchParams::apply("kubectl"), &Patch::Apply(&db)).await.unwrap();
}

/// Stops every process of the primary's container but its first (the instance manager) from
/// inside: `kill -STOP -1` by the server's own user, from a program the server starts. The
/// shell that sends it is not stopped (kill(2) with -1 spares the caller), so it can resume
/// them after `stall` when given; the session that asked hangs with the rest meanwhile.
fn stop_primary_processes(uri: &str, stall: Option<Duration>) -> std::process::Child {
    let program = match stall {
        Some(stall) => format!("kill -STOP -1; sleep {:.1}; kill -CONT -1", stall.as_secs_f64()),
        None => "kill -STOP -1".to_owned(),
    };
    std::process::Command::new("psql")
        .args([uri, "-X", "-c", &format!("COPY (SELECT 1) TO PROGRAM $${program}$$")])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap()
}

/// One write through `uri` that gives up after 2 s (a connection to a stopped server would
/// otherwise wait for it), so that the time writes come back is seen to within about a second.
pub(crate) fn write_once(uri: &str, id: u64) -> bool {
    std::process::Command::new("timeout")
        .args(["-s", "KILL", "2", "psql", uri, "-X", "-tA", "-v", "ON_ERROR_STOP=1"])
        .args(["-c", &format!("INSERT INTO after_hang (id) VALUES ({id})")])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Hangs the primary of a streaming two-instance cluster with `failover_delay` and returns how
/// long after the hang a write through `-rw` succeeded again (writes are tried back to back).
async fn hang_and_time_the_outage(cluster: &TestCluster, failover_delay: Option<i32>) -> (Duration, Instant) {
    create(cluster, failover_delay).await;
    await_streaming(cluster, NAME, 2, Some(POD_0)).await;
    let rw = service_uri(cluster, "rw").await;
    psql(&rw, "CREATE TABLE after_hang (id bigint)").unwrap();
    let primary = superuser_uri(cluster, POD_0).await;
    let stopper = stop_primary_processes(&primary, None);
    let hung = within_limit("the primary to hang", Duration::from_secs(30), async {
        loop {
            let (uri, tried) = (primary.clone(), Instant::now());
            let answered = tokio::task::spawn_blocking(move || {
                let select = ["-s", "KILL", "1", "psql", &uri, "-X", "-tA", "-c", "SELECT 1"];
                std::process::Command::new("timeout").args(select).output().is_ok_and(|o| o.status.success())
            });
            if !answered.await.unwrap() {
                return tried;
            }
        }
    })
    .await;
    let timeline = tokio::spawn(timeline(cluster.clusters(), cluster.api::<Pod>(), hung));
    let back = within_limit("a write through -rw after the hang", Duration::from_secs(60), async {
        let mut id = 0;
        loop {
            id += 1;
            let uri = rw.clone();
            if tokio::task::spawn_blocking(move || write_once(&uri, id)).await.unwrap() {
                return hung.elapsed();
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    let mut stopper = stopper;
    let _ = stopper.kill();
    let _ = stopper.wait();
    timeline.abort();
    (back, hung)
}

/// Prints when, after `hung`, the old primary's pod turned unready, the record (status
/// `targetPrimary`) moved and the new primary was observed: the outage's parts.
async fn timeline(clusters: kube::Api<DatabaseCluster>, pods: kube::Api<Pod>, hung: Instant) {
    let (mut unready, mut recorded, mut observed) = (None, None, None);
    while observed.is_none() {
        let ready = pods
            .get(POD_0)
            .await
            .ok()
            .and_then(|p| p.status?.conditions)
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
        if !ready && unready.is_none() {
            unready = Some(hung.elapsed());
            eprintln!("hung primary: its pod unready after {unready:?}");
        }
        let status = clusters.get(NAME).await.ok().and_then(|c| c.status).unwrap_or_default();
        if status.target_primary.as_deref() != Some(POD_0) && recorded.is_none() {
            recorded = Some(hung.elapsed());
            eprintln!("hung primary: the record moved after {recorded:?}");
        }
        if status.current_primary.as_deref().is_some_and(|p| p != POD_0) {
            observed = Some(hung.elapsed());
            eprintln!("hung primary: the new primary observed after {observed:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_defaults_a_hung_primary_is_replaced_within_15_s_and_restarted_by_its_liveness_probe() {
    let cluster = process_cluster().await;
    let _operator = cluster.start_operator().await;
    let (outage, hung) = hang_and_time_the_outage(&cluster, None).await;
    eprintln!("hung primary, default failoverDelay: writes through -rw again {outage:?} after the hang");
    assert!(outage <= Duration::from_secs(15), "{outage:?}");
    let status = cluster.clusters().get(NAME).await.unwrap().status.unwrap();
    assert_eq!(status.current_primary.as_deref(), Some(format!("{NAME}-1").as_str()));
    // The status says why the old primary is not observed: its manager does not answer.
    let old = status.instances.iter().find(|i| i.name == POD_0).expect("the old primary is listed");
    assert_eq!(old.role, "unknown", "{old:?}");
    assert!(old.message.as_deref().is_some_and(|m| !m.is_empty()), "{old:?}");
    // Liveness: `/healthz` every 10 s, 5 s to answer, 6 failures, then a stop with the probe's
    // own grace (SIGTERM is not acted on by stopped processes; the SIGKILL after it ends them): the
    // container restarts within about 80 s of the hang.
    let grace = u64::try_from(LIVENESS_GRACE_SECONDS).unwrap();
    let liveness = Duration::from_secs(10 * 6 + 5 + grace);
    let limit = liveness + Duration::from_secs(30);
    eventually_every("the hung container restarted", limit, REAL_POLL_INTERVAL, || async {
        let status = pod(&cluster, POD_0).await.status.ok_or("no status")?;
        let containers = status.container_statuses.unwrap_or_default();
        if containers.iter().any(|c| c.restart_count > 0) { Ok(()) } else { Err("not restarted yet") }
    })
    .await;
    let restarted = hung.elapsed();
    eprintln!("hung primary: its container restarted {restarted:?} after the hang");
    assert!(restarted <= liveness + Duration::from_secs(15), "{restarted:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_failover_delay_zero_a_hung_primary_is_replaced_within_8_s() {
    let cluster = process_cluster().await;
    let _operator = cluster.start_operator().await;
    let (outage, _) = hang_and_time_the_outage(&cluster, Some(0)).await;
    eprintln!("hung primary, failoverDelay 0: writes through -rw again {outage:?} after the hang");
    assert!(outage <= Duration::from_secs(8), "{outage:?}");
    assert_eq!(writable_instances(&cluster, 1).await, Vec::<String>::new(), "the old primary stays stopped");
}

/// The `Ready` condition's last transition of `name`'s pod.
async fn ready_since(cluster: &TestCluster, name: &str) -> String {
    let pod: Pod = pod(cluster, name).await;
    let conditions = pod.status.and_then(|s| s.conditions).unwrap_or_default();
    let ready = conditions.into_iter().find(|c| c.type_ == "Ready" && c.status == "True").expect("ready");
    format!("{:?}", ready.last_transition_time)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_that_stalls_briefly_under_a_write_load_is_not_failed_over() {
    let cluster = process_cluster().await;
    let _operator = cluster.start_operator().await;
    create(&cluster, None).await;
    await_streaming(&cluster, NAME, 2, Some(POD_0)).await;
    let primary = superuser_uri(&cluster, POD_0).await;
    let before = ready_since(&cluster, POD_0).await;
    let pgbench = "/usr/lib/postgresql/15/bin/pgbench";
    let init = std::process::Command::new(pgbench).args(["-i", "-q", "-s", "2", &primary]).output().unwrap();
    assert!(init.status.success(), "{}", String::from_utf8_lossy(&init.stderr));
    // Eight clients writing for the whole test, and three stalls of 1.5 s a few seconds apart.
    let mut load = std::process::Command::new(pgbench)
        .args(["-c", "8", "-j", "2", "-T", "25", "-n", &primary])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    for _ in 0..3 {
        let mut stopper = stop_primary_processes(&primary, Some(Duration::from_millis(1500)));
        let finished = tokio::task::spawn_blocking(move || stopper.wait()).await.unwrap();
        assert!(finished.is_ok());
        tokio::time::sleep(Duration::from_secs(4)).await;
    }
    let _ = tokio::task::spawn_blocking(move || load.wait()).await.unwrap();
    // Long enough for a failover that the stalls had started to be decided and seen.
    let status = cluster.clusters().get(NAME).await.unwrap().status.unwrap();
    assert_eq!(status.current_primary.as_deref(), Some(POD_0));
    assert!(status.last_failover.is_none(), "{:?}", status.last_failover);
    assert_eq!(ready_since(&cluster, POD_0).await, before, "the primary never turned unready");
    let reasons: Vec<String> =
        cluster.events_about(NAME).await.into_iter().filter_map(|e| e.reason).collect();
    assert!(!reasons.iter().any(|r| r == "FailingOver"), "{reasons:?}");
}
