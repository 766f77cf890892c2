//! Failover, with real PostgreSQL 15 through the process kubelet: the primary's
//! processes die (and its data cannot start again) while a client writes a row every 100 ms
//! through `<name>-rw`; a standby is promoted after `failoverDelay`, the writes succeed again, the
//! other standby follows the new timeline, and the old primary, once it can start, rewinds and
//! rejoins as a standby that `<name>-ro` reaches. Without synchronous replication the status and
//! the Event say writes after an LSN may be lost (and the test prints how many were); with
//! `synchronousReplicas: 1` (set by a reload, no restart) every acknowledged write survives.
//! While the delay runs nothing is promoted and the status says the primary is down; an
//! operator stopped in the middle of a failover is finished by the next one, which reports it,
//! and there are never two primaries.
#![cfg(feature = "sim")]

use crate::common;

use std::time::{Duration, Instant};

use common::postgres::*;
use common::*;
use dbcluster_operator::databasecluster::api::types::{DatabaseCluster, FailoverRecord};
use dbcluster_operator::databasecluster::failover::PRIMARY_AVAILABLE;
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolume, PersistentVolumeClaim, Pod, Secret};
use kube::api::{Api, DeleteParams, Patch, PatchParams};

pub(crate) const NAME: &str = "production-postgres";
const NS: &str = "default";
pub(crate) const POD_0: &str = "production-postgres-0";
const ROLE_LABEL: &str = "databases.madmmas.dev/role";

pub(crate) async fn create(cluster: &TestCluster, replicas: i32, failover_delay: i32) {
    create_synchronous(cluster, replicas, failover_delay, 0).await;
}

async fn create_synchronous(cluster: &TestCluster, replicas: i32, failover_delay: i32, synchronous: i32) {
    let mut db = sample();
    db.spec.replicas = replicas;
    db.spec.backup_schedule = None;
    db.spec.failover_delay = Some(failover_delay);
    db.spec.synchronous_replicas = Some(synchronous);
    cluster.clusters().patch(NAME, &PatchParams::apply("kubectl"), &Patch::Apply(&db)).await.unwrap();
}

/// The app user's uri to a client Service (`-rw`, `-ro`), resolved as a pod resolves it.
pub(crate) async fn service_uri(cluster: &TestCluster, service: &str) -> String {
    let secrets: Api<Secret> = cluster.api();
    let secret = eventually_some("the app Secret", || async {
        secrets.get_opt(&format!("{NAME}-app")).await.ok().flatten()
    })
    .await;
    let uri = secret_value(&secret, "uri").replace(&format!("{NAME}-rw."), &format!("{NAME}-{service}."));
    host_uri(cluster, NS, &uri)
}

pub(crate) async fn pod(cluster: &TestCluster, name: &str) -> Pod {
    cluster.api::<Pod>().get(name).await.unwrap()
}

/// The superuser's uri to pod `name`.
pub(crate) async fn superuser_uri(cluster: &TestCluster, name: &str) -> String {
    let secret = cluster.api::<Secret>().get(&format!("{NAME}-superuser")).await.unwrap();
    let ip = pod_ip(&pod(cluster, name).await);
    format!("postgresql://postgres:{}@{ip}:5432/app", secret_value(&secret, "password"))
}

/// Kills the primary's postmaster (SIGKILL, from inside the instance) after hiding its
/// `pg_control`, so that it cannot start again until [`repair`] puts the file back: a crashed
/// server whose node stays broken.
async fn break_primary(cluster: &TestCluster, name: &str) {
    let uri = superuser_uri(cluster, name).await;
    let program = r#"mv "$PGDATA/global/pg_control" "$PGDATA/global/pg_control.broken"; kill -9 $(head -1 "$PGDATA/postmaster.pid")"#;
    let _ = psql(&uri, &format!("COPY (SELECT 1) TO PROGRAM $${program}$$"));
    eventually_some("the broken primary is not ready", || async {
        let status = pod(cluster, name).await.status?;
        let ready = status.conditions?.iter().any(|c| c.type_ == "Ready" && c.status == "True");
        (!ready).then_some(())
    })
    .await;
}

/// Puts back what [`break_primary`] hid (on the volume, as its host sees it) and deletes the pod,
/// so that its replacement starts at once instead of after the crash loop's back-off.
async fn repair(cluster: &TestCluster, name: &str) {
    let claim = cluster.api::<PersistentVolumeClaim>().get(&format!("data-{name}")).await.unwrap();
    let volume_name = claim.spec.and_then(|s| s.volume_name).expect("a bound claim");
    let volume = Api::<PersistentVolume>::all(cluster.client.clone()).get(&volume_name).await.unwrap();
    let host = volume.spec.and_then(|s| s.host_path).expect("a hostPath volume").path;
    let global = std::path::Path::new(&host).join("pgdata/global");
    std::fs::rename(global.join("pg_control.broken"), global.join("pg_control")).unwrap();
    cluster.api::<Pod>().delete(name, &DeleteParams::default()).await.unwrap();
}

pub(crate) fn primary_available(db: &DatabaseCluster) -> Option<(String, String, String)> {
    let c = db.status.as_ref()?.conditions.iter().find(|c| c.type_ == PRIMARY_AVAILABLE)?;
    Some((c.status.clone(), c.reason.clone(), c.message.clone()))
}

/// Every instance that says it accepts writes.
pub(crate) async fn writable_instances(cluster: &TestCluster, replicas: usize) -> Vec<String> {
    let mut writable = Vec::new();
    for ordinal in 0..replicas {
        let name = format!("{NAME}-{ordinal}");
        let uri = superuser_uri(cluster, &name).await;
        if psql(&uri, "SELECT pg_is_in_recovery()").as_deref() == Ok("f") {
            writable.push(name);
        }
    }
    writable
}

/// The failover test's first half, on a cluster streaming from [`POD_0`] with failover after
/// [`DELAY`]: a client writes every 100 ms through `-rw` while the primary breaks; a standby is
/// promoted and writes succeed again within the delay + 15 s. Returns the promoted pod, the
/// acknowledged writes missing on it, and how many were acknowledged.
async fn fail_over_under_writes(cluster: &TestCluster) -> (String, Vec<i64>, usize) {
    let rw = service_uri(cluster, "rw").await;
    psql(&rw, "CREATE TABLE ticks (id bigint PRIMARY KEY, at timestamptz DEFAULT clock_timestamp())")
        .unwrap();
    let writer = Writer::start(rw.clone());
    // Some writes to reach the standbys first.
    writer.await_acknowledged(10, Instant::now(), "before the primary breaks").await;
    break_primary(cluster, POD_0).await;
    let api = cluster.clusters();
    let (db, promoted) = eventually_some("a standby promoted", || async {
        let db = api.get(NAME).await.ok()?;
        let status = db.status.as_ref()?;
        let promoted = status.current_primary.as_deref().filter(|p| *p != POD_0)?.to_owned();
        (status.target_primary.as_deref() == Some(promoted.as_str())).then_some((db, promoted))
    })
    .await;
    assert!(
        db.status.as_ref().unwrap().current_primary_timestamp.is_some(),
        "the promotion time is recorded"
    );
    eventually_some("-rw accepts writes again", || async {
        (psql(&rw, "INSERT INTO ticks (id) VALUES (-1) ON CONFLICT DO NOTHING").ok()).map(drop)
    })
    .await;
    writer.await_acknowledged(3, Instant::now(), "on the new primary").await;
    let log = writer.finish().await;
    let outage = longest_outage(&log);
    eprintln!("failover: writes failed for {outage:?} around the primary's death (failoverDelay {DELAY:?})");
    assert!(outage <= DELAY + Duration::from_secs(15), "writes came back after {outage:?}");

    let lost = lost_writes(&superuser_uri(cluster, &promoted).await, &log);
    (promoted, lost, log.iter().filter(|w| w.acknowledged()).count())
}

/// The failover delay of the tests that fail over under writes.
const DELAY: Duration = Duration::from_secs(3);

/// The `FailedOver` Event's message and `status.lastFailover`.
async fn failover_report(cluster: &TestCluster) -> (String, FailoverRecord) {
    let reasons = await_event_reasons(cluster, NAME, &["FailingOver", "FailedOver"]).await;
    assert!(reasons.contains(&"FailedOver".to_owned()), "{reasons:?}");
    let events = cluster.events_about(NAME).await;
    let failed_over = events.iter().find(|e| e.reason.as_deref() == Some("FailedOver")).unwrap();
    let db = cluster.clusters().get(NAME).await.unwrap();
    let record = db.status.and_then(|s| s.last_failover).expect("status.lastFailover");
    (failed_over.note.clone().unwrap_or_default(), record)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_takes_over_the_writes_and_the_old_primary_rejoins_as_its_standby() {
    let cluster = process_cluster().await;
    let _operator = cluster.start_operator().await;
    create(&cluster, 3, 3).await;
    await_streaming(&cluster, NAME, 3, Some(POD_0)).await;
    let (promoted, lost, acknowledged) = fail_over_under_writes(&cluster).await;
    eprintln!(
        "failover without synchronous replication: {} of {acknowledged} acknowledged writes lost: {lost:?}",
        lost.len()
    );
    let (note, record) = failover_report(&cluster).await;
    let warning = format!("asynchronous: writes {POD_0} acknowledged after LSN ");
    assert!(note.contains(&warning) && note.contains("may be lost"), "{note}");
    assert_eq!(
        (record.from.as_str(), record.to.as_str(), record.possible_loss),
        (POD_0, promoted.as_str(), true)
    );
    assert_eq!(record.message, note);
    let new_primary = superuser_uri(&cluster, &promoted).await;
    let api = cluster.clusters();
    // The other standby follows the new timeline; the old primary, repaired, rewinds and rejoins.
    repair(&cluster, POD_0).await;
    await_streaming(&cluster, NAME, 3, Some(promoted.as_str())).await;
    assert_eq!(writable_instances(&cluster, 3).await, vec![promoted.clone()], "one primary");
    let old = superuser_uri(&cluster, POD_0).await;
    let rows = psql(&new_primary, "SELECT count(*) FROM ticks").unwrap();
    eventually_some("the old primary has every row of the new one", || async {
        (psql(&old, "SELECT count(*) FROM ticks").ok()? == rows).then_some(())
    })
    .await;
    let labels = pod(&cluster, POD_0).await.metadata.labels.unwrap();
    assert_eq!(labels.get(ROLE_LABEL).map(String::as_str), Some("replica"));
    let ro = service_uri(&cluster, "ro").await;
    let old_ip = pod_ip(&pod(&cluster, POD_0).await);
    eventually_some("-ro reaches the old primary", || async {
        (psql(&ro, "SELECT host(inet_server_addr())").ok()? == old_ip).then_some(())
    })
    .await;
    let status = api.get(NAME).await.unwrap();
    assert_eq!(primary_available(&status).map(|c| c.0), Some("True".into()));

    // Scaling down to one instance would remove the promoted primary: the operator switches over
    // to the instance that stays first, and no second failover happens.
    let rows = psql(&new_primary, "SELECT count(*) FROM ticks").unwrap();
    let patch = serde_json::json!({"spec": {"replicas": 1}});
    api.patch(NAME, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    eventually_some("one instance left, the primary", || async {
        let status = api.get(NAME).await.ok()?.status?;
        let alone = status.instances.len() == 1 && status.instances[0].role == "primary";
        (alone && status.current_primary.as_deref() == Some(POD_0)).then_some(())
    })
    .await;
    let old = superuser_uri(&cluster, POD_0).await;
    assert_eq!(psql(&old, "SELECT count(*) FROM ticks").unwrap(), rows, "every row kept");
    let reasons: Vec<String> =
        cluster.events_about(NAME).await.into_iter().filter_map(|e| e.reason).collect();
    assert_eq!(reasons.iter().filter(|r| *r == "FailingOver").count(), 1, "{reasons:?}");
    assert!(reasons.iter().any(|r| r == "SwitchedOver"), "{reasons:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn while_the_delay_runs_the_status_says_the_primary_is_down_and_a_stopped_operator_finishes_a_failover()
{
    let cluster = process_cluster().await;
    let operator = cluster.start_operator().await;
    create(&cluster, 2, 3600).await;
    await_streaming(&cluster, NAME, 2, Some(POD_0)).await;
    let rw = service_uri(&cluster, "rw").await;
    psql(&rw, "CREATE TABLE ticks (id bigint PRIMARY KEY, at timestamptz DEFAULT clock_timestamp())")
        .unwrap();
    psql(&rw, "INSERT INTO ticks (id) VALUES (1)").unwrap();

    break_primary(&cluster, POD_0).await;
    let api = cluster.clusters();
    let (_, reason, message) = eventually_some("the status says the primary is down", || async {
        let condition = primary_available(&api.get(NAME).await.ok()?)?;
        (condition.0 == "False" && condition.1 == "PrimaryNotReady").then_some(condition)
    })
    .await;
    assert!(
        message.contains(&format!("{POD_0} is not ready")) && message.contains("3600s"),
        "{reason}: {message}"
    );
    let standby = superuser_uri(&cluster, "production-postgres-1").await;
    assert_eq!(psql(&standby, "SELECT pg_is_in_recovery()").as_deref(), Ok("t"), "nothing promoted");
    let status = api.get(NAME).await.unwrap().status.unwrap();
    assert_eq!(status.target_primary.as_deref(), Some(POD_0));
    assert_eq!(status.current_primary_timestamp, None);

    // Allow failover, and stop the operator as soon as it has recorded the new primary.
    let configmaps: Api<ConfigMap> = cluster.api();
    let record = || async {
        let map = configmaps.get(&format!("{NAME}-scripts")).await.ok()?;
        map.data?.get("primary").cloned()
    };
    let patch = serde_json::json!({"spec": {"failoverDelay": 1}});
    api.patch(NAME, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    eventually_some("the record names the standby", || async {
        (record().await? == "production-postgres-1").then_some(())
    })
    .await;
    operator.kill();
    let writable = writable_instances(&cluster, 2).await;
    assert!(writable.len() <= 1, "never two primaries: {writable:?}");

    // The next operator finishes from what it observes: it promotes the recorded standby, or,
    // when the stopped one had already promoted it, moves the labels; either way it reports the
    // failover (which of the two happens varies from run to run).
    let _operator = cluster.start_operator().await;
    eventually_some("writes succeed on the promoted standby", || async {
        psql(&rw, "INSERT INTO ticks (id) VALUES (2)").ok()
    })
    .await;
    assert_eq!(psql(&standby, "SELECT count(*) FROM ticks").as_deref(), Ok("2"));
    eventually_some("the status names the new primary", || async {
        let db = api.get(NAME).await.ok()?;
        let status = db.status.as_ref()?;
        let done = status.current_primary.as_deref() == Some("production-postgres-1")
            && status.target_primary.as_deref() == Some("production-postgres-1")
            && primary_available(&db).is_some_and(|c| c.0 == "True");
        done.then_some(())
    })
    .await;
    let labels = pod(&cluster, "production-postgres-1").await.metadata.labels.unwrap();
    assert_eq!(labels.get(ROLE_LABEL).map(String::as_str), Some("primary"));
    assert_eq!(writable_instances(&cluster, 2).await, ["production-postgres-1"], "one primary");
    let (note, record) = failover_report(&cluster).await;
    assert_eq!((record.from.as_str(), record.to.as_str()), (POD_0, "production-postgres-1"));
    assert!(
        note.contains("production-postgres-1 is the primary in place of production-postgres-0"),
        "{note}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_synchronous_replication_a_failover_loses_no_acknowledged_write() {
    let cluster = process_cluster().await;
    let _operator = cluster.start_operator().await;
    create_synchronous(&cluster, 3, 3, 0).await;
    await_streaming(&cluster, NAME, 3, Some(POD_0)).await;
    let primary = superuser_uri(&cluster, POD_0).await;
    let started = psql(&primary, "SELECT pg_postmaster_start_time()").unwrap();
    assert_eq!(psql(&primary, "SHOW synchronous_standby_names").as_deref(), Ok(""));

    // Turned on by a reload: the same server, now waiting for one standby of the three names.
    let patch = serde_json::json!({"spec": {"synchronousReplicas": 1}});
    cluster.clusters().patch(NAME, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    let quorum = r#"ANY 1 ("production-postgres-0", "production-postgres-1", "production-postgres-2")"#;
    eventually_some("the primary waits for a quorum of one", || async {
        (psql(&primary, "SHOW synchronous_standby_names").ok()? == quorum).then_some(())
    })
    .await;
    assert_eq!(psql(&primary, "SELECT pg_postmaster_start_time()").unwrap(), started, "no restart");
    eventually_some("the status records both standbys in the quorum", || async {
        let status = cluster.clusters().get(NAME).await.ok()?.status?;
        let states: Vec<_> = status.instances.iter().map(|i| i.sync_state.clone()).collect();
        (states == [None, Some("quorum".into()), Some("quorum".into())]).then_some(())
    })
    .await;

    let (promoted, lost, acknowledged) = fail_over_under_writes(&cluster).await;
    eprintln!(
        "failover with synchronousReplicas 1: {} of {acknowledged} acknowledged writes lost: {lost:?}",
        lost.len()
    );
    assert!(lost.is_empty(), "acknowledged writes lost: {lost:?}");
    let (note, record) = failover_report(&cluster).await;
    assert!(!record.possible_loss, "{record:?}");
    assert!(note.contains("every acknowledged write"), "{note}");
    let new_primary = superuser_uri(&cluster, &promoted).await;
    assert_eq!(psql(&new_primary, "SHOW synchronous_standby_names").as_deref(), Ok(quorum));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_switchover_moves_the_primary_without_losing_a_write() {
    const NEW: &str = "production-postgres-1";
    let cluster = process_cluster().await;
    let _operator = cluster.start_operator().await;
    create(&cluster, 2, 30).await;
    await_streaming(&cluster, NAME, 2, Some(POD_0)).await;
    let api = cluster.clusters();
    let ask = |target: &str| {
        let patch = serde_json::json!({"spec": {"primary": target}});
        let api = api.clone();
        async move { api.patch(NAME, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap() }
    };

    // A target that is no instance: Ready=False with the reason, one Warning, nothing moves.
    ask("production-postgres-7").await;
    let message = eventually_some("Ready=False, InvalidPrimary", || async {
        let db = api.get(NAME).await.ok()?;
        let ready = db.status?.conditions.into_iter().find(|c| c.type_ == "Ready")?;
        (ready.status == "False" && ready.reason == "InvalidPrimary").then_some(ready.message)
    })
    .await;
    assert!(message.contains("not an instance"), "{message}");
    await_event_reasons(&cluster, NAME, &["InvalidPrimary"]).await;
    let configmaps: Api<ConfigMap> = cluster.api();
    let record = configmaps.get(&format!("{NAME}-scripts")).await.unwrap().data.unwrap();
    assert_eq!(record.get("primary").map(String::as_str), Some(POD_0));

    // A real one, under writes every 100 ms.
    let rw = service_uri(&cluster, "rw").await;
    psql(&rw, "CREATE TABLE ticks (id bigint PRIMARY KEY, at timestamptz DEFAULT clock_timestamp())")
        .unwrap();
    let writer = Writer::start(rw.clone());
    writer.await_acknowledged(4, Instant::now(), "before the switchover").await;
    ask(NEW).await;
    eventually_some("the switchover completed", || async {
        let status = api.get(NAME).await.ok()?.status?;
        let done = status.switchover.as_ref().is_some_and(|s| s.phase == "Completed" && s.requested == NEW);
        (done && status.current_primary.as_deref() == Some(NEW)).then_some(())
    })
    .await;
    eventually_some("-rw writes to the new primary", || async {
        (psql(&rw, "SELECT pg_is_in_recovery()").ok()? == "f").then_some(())
    })
    .await;
    writer.await_acknowledged(4, Instant::now(), "on the new primary").await;
    let log = writer.finish().await;
    let new_primary = superuser_uri(&cluster, NEW).await;
    let outage = no_write_lost(&new_primary, &log);
    eprintln!("switchover: writes failed for at most {outage:?} (2 instances)");

    // The old primary is a streaming standby of the new one; one primary; no failover happened.
    await_streaming(&cluster, NAME, 2, Some(NEW)).await;
    assert_eq!(writable_instances(&cluster, 2).await, [NEW], "one primary");
    let reasons = await_event_reasons(&cluster, NAME, &["SwitchingOver", "SwitchedOver"]).await;
    assert!(!reasons.iter().any(|r| r == "FailedOver" || r == "FailingOver"), "{reasons:?}");
    let old = superuser_uri(&cluster, POD_0).await;
    let rows = psql(&new_primary, "SELECT count(*) FROM ticks").unwrap();
    eventually_some("the old primary has every row of the new one", || async {
        (psql(&old, "SELECT count(*) FROM ticks").ok()? == rows).then_some(())
    })
    .await;
    let record = configmaps.get(&format!("{NAME}-scripts")).await.unwrap().data.unwrap();
    assert_eq!(record.get("primary").map(String::as_str), Some(NEW));
    assert_eq!(record.get("demoting"), None);

    // A rolling update (a parameter that needs a restart) reaches the primary by a switchover to
    // the updated standby, not a restart; `spec.primary`, handled already, does not undo it.
    let writer = Writer::start(rw.clone());
    writer.await_acknowledged(4, Instant::now(), "before the rolling update").await;
    let patch = serde_json::json!({"spec": {"postgresConfig": {"max_connections": "150"}}});
    api.patch(NAME, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    let old_uri = || async { superuser_uri(&cluster, POD_0).await };
    eventually_some("the updated old primary is the primary again", || async {
        let status = api.get(NAME).await.ok()?.status?;
        let done = status
            .switchover
            .as_ref()
            .is_some_and(|s| s.phase == "Completed" && s.to.as_deref() == Some(POD_0));
        if !(done && status.current_primary.as_deref() == Some(POD_0)) {
            return None;
        }
        (psql(&old_uri().await, "SHOW max_connections").ok()? == "150").then_some(())
    })
    .await;
    let streaming = await_streaming(&cluster, NAME, 2, Some(POD_0)).await;
    eventually_some("the other instance restarted as an updated standby", || async {
        (psql(&superuser_uri(&cluster, NEW).await, "SHOW max_connections").ok()? == "150").then_some(())
    })
    .await;
    writer.await_acknowledged(4, Instant::now(), "after the rolling update").await;
    let log = writer.finish().await;
    let outage = no_write_lost(&old_uri().await, &log);
    eprintln!("rolling update by switchover: writes failed for at most {outage:?}");
    assert_eq!(streaming.status.unwrap().switchover.unwrap().requested, NEW, "the request stays handled");
    let notes: Vec<String> = cluster.events_about(NAME).await.into_iter().filter_map(|e| e.note).collect();
    assert!(!notes.iter().any(|n| n.contains("Restarting the primary")), "{notes:?}");
    assert_eq!(notes.iter().filter(|n| n.contains("no transaction was lost")).count(), 2, "{notes:?}");
}

/// Asserts that every write `log` says was acknowledged is on the primary at `uri`; returns the
/// longest time between two acknowledged writes (the write outage).
fn no_write_lost(uri: &str, log: &[Write]) -> Duration {
    let lost = lost_writes(uri, log);
    assert!(lost.is_empty(), "acknowledged writes lost: {lost:?}; the writes:{}", timeline(log));
    let acknowledged = log.iter().filter(|w| w.acknowledged()).count();
    eprintln!("{acknowledged} of {} writes acknowledged, none lost", log.len());
    longest_outage(log)
}

/// A lost node's primary: its pod is evicted (deleted) and no node takes its replacement (the node
/// is cordoned). As on a real 1.28 cluster the replacement has `PodScheduled=False` and no `Ready`
/// condition at all, yet the failover delay runs (from when the operator first saw the primary
/// down) and a standby takes over; once a node takes the pod again, it rejoins as a standby.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_whose_pod_cannot_be_scheduled_again_is_replaced() {
    let cluster = process_cluster().await;
    let _operator = cluster.start_operator().await;
    create(&cluster, 2, 3).await;
    await_streaming(&cluster, NAME, 2, Some(POD_0)).await;
    let rw = service_uri(&cluster, "rw").await;
    cluster.sim.faults().cordon();
    let evicted = Instant::now();
    cluster.api::<Pod>().delete(POD_0, &DeleteParams::default()).await.unwrap();
    let replacement = eventually_some("the primary's pod recreated and unschedulable", || async {
        let pod = cluster.api::<Pod>().get_opt(POD_0).await.ok()??;
        let conditions = pod.status.as_ref()?.conditions.clone().unwrap_or_default();
        let unscheduled = conditions.iter().any(|c| {
            c.type_ == "PodScheduled" && c.status == "False" && c.reason.as_deref() == Some("Unschedulable")
        });
        (pod.metadata.deletion_timestamp.is_none() && unscheduled).then_some(pod)
    })
    .await;
    let status = replacement.status.unwrap();
    assert_eq!(status.phase.as_deref(), Some("Pending"));
    assert_eq!(status.pod_ip, None);
    assert!(status.conditions.unwrap().iter().all(|c| c.type_ != "Ready"), "never ready: no Ready condition");

    let standby = format!("{NAME}-1");
    let api = cluster.clusters();
    eventually_some("the standby promoted in place of the unschedulable primary", || async {
        let status = api.get(NAME).await.ok()?.status?;
        (status.current_primary.as_deref() == Some(standby.as_str())).then_some(())
    })
    .await;
    eventually_some("-rw accepts writes again", || async {
        psql(&rw, "CREATE TABLE IF NOT EXISTS after_eviction (id int)").ok().map(drop)
    })
    .await;
    let outage = evicted.elapsed();
    eprintln!(
        "unschedulable primary: writes through -rw again {outage:?} after its eviction (failoverDelay {DELAY:?})"
    );
    assert!(outage <= DELAY + Duration::from_secs(30), "{outage:?}");

    cluster.sim.faults().uncordon();
    await_streaming(&cluster, NAME, 2, Some(standby.as_str())).await;
    assert_eq!(writable_instances(&cluster, 2).await, vec![standby], "one primary");
}
