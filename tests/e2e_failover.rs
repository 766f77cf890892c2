//! Failover (issue 14), with real PostgreSQL 15 through the process kubelet: the primary's
//! processes die (and its data cannot start again) while a client writes a row every 100 ms
//! through `<name>-rw`; a standby is promoted after `failoverDelay`, the writes succeed again, the
//! other standby follows the new timeline, and the old primary, once it can start, rewinds and
//! rejoins as a standby that `<name>-ro` reaches. With `failoverDelay: 0` nothing is promoted
//! and the status says the primary is down; an operator stopped in the middle of a failover is
//! finished by the next one, and there are never two primaries.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::postgres::*;
use common::*;
use dbcluster_operator::databasecluster::failover::PRIMARY_AVAILABLE;
use dbcluster_operator::databasecluster::types::DatabaseCluster;
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolume, PersistentVolumeClaim, Pod, Secret};
use kube::api::{Api, DeleteParams, Patch, PatchParams};

const NAME: &str = "production-postgres";
const NS: &str = "default";
const POD_0: &str = "production-postgres-0";
const ROLE_LABEL: &str = "databases.madmmas.dev/role";

async fn create(cluster: &TestCluster, replicas: i32, failover_delay: i32) {
    let mut db = sample();
    db.spec.replicas = replicas;
    db.spec.backup_schedule = None;
    db.spec.failover_delay = Some(failover_delay);
    cluster.clusters().patch(NAME, &PatchParams::apply("kubectl"), &Patch::Apply(&db)).await.unwrap();
}

/// Waits until `replicas` instances are ready with `primary` the one primary and every standby
/// streaming from it.
async fn await_streaming(cluster: &TestCluster, replicas: usize, primary: &str) -> DatabaseCluster {
    let api = cluster.clusters();
    eventually_some(&format!("{replicas} instances streaming from {primary}"), || async {
        let db = api.get(NAME).await.ok()?;
        let status = db.status.as_ref()?;
        let streaming = status.instances.len() == replicas
            && status.instances.iter().all(|i| {
                i.ready
                    && if i.name == primary {
                        i.role == "primary"
                    } else {
                        i.role == "replica" && i.replication_state.as_deref() == Some("streaming")
                    }
            });
        (streaming && status.current_primary.as_deref() == Some(primary)).then_some(db)
    })
    .await
}

fn secret_value(secret: &Secret, key: &str) -> String {
    String::from_utf8(secret.data.as_ref().expect("data")[key].0.clone()).expect("utf-8")
}

/// The app user's uri to a client Service (`-rw`, `-ro`), resolved as a pod resolves it.
async fn service_uri(cluster: &TestCluster, service: &str) -> String {
    let secrets: Api<Secret> = cluster.api();
    let secret = eventually_some("the app Secret", || async {
        secrets.get_opt(&format!("{NAME}-app")).await.ok().flatten()
    })
    .await;
    let uri = secret_value(&secret, "uri").replace(&format!("{NAME}-rw."), &format!("{NAME}-{service}."));
    host_uri(cluster, NS, &uri)
}

async fn pod(cluster: &TestCluster, name: &str) -> Pod {
    cluster.api::<Pod>().get(name).await.unwrap()
}

fn pod_ip(pod: &Pod) -> String {
    pod.status.as_ref().and_then(|s| s.pod_ip.clone()).unwrap_or_default()
}

/// The superuser's uri to pod `name`.
async fn superuser_uri(cluster: &TestCluster, name: &str) -> String {
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

/// A client inserting one row every 100 ms through `<name>-rw`, remembering which inserts were
/// acknowledged and when.
struct Writer {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<Vec<(i64, Instant, bool)>>,
}

impl Writer {
    fn start(uri: String) -> Writer {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let task = tokio::task::spawn_blocking(move || {
            let mut log = Vec::new();
            let mut id = 0i64;
            while !flag.load(Ordering::Relaxed) {
                id += 1;
                let ok = psql(&uri, &format!("INSERT INTO ticks (id) VALUES ({id})")).is_ok();
                log.push((id, Instant::now(), ok));
                std::thread::sleep(Duration::from_millis(100));
            }
            log
        });
        Writer { stop, task }
    }

    async fn finish(self) -> Vec<(i64, Instant, bool)> {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.unwrap()
    }
}

fn primary_available(db: &DatabaseCluster) -> Option<(String, String, String)> {
    let c = db.status.as_ref()?.conditions.iter().find(|c| c.type_ == PRIMARY_AVAILABLE)?;
    Some((c.status.clone(), c.reason.clone(), c.message.clone()))
}

/// Every instance that says it accepts writes.
async fn writable_instances(cluster: &TestCluster, replicas: usize) -> Vec<String> {
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_takes_over_the_writes_and_the_old_primary_rejoins_as_its_standby() {
    const DELAY: Duration = Duration::from_secs(3);
    let cluster = process_cluster().await;
    let _operator = cluster.start_operator().await;
    create(&cluster, 3, 3).await;
    await_streaming(&cluster, 3, POD_0).await;
    let rw = service_uri(&cluster, "rw").await;
    psql(&rw, "CREATE TABLE ticks (id bigint PRIMARY KEY, at timestamptz DEFAULT clock_timestamp())")
        .unwrap();

    let writer = Writer::start(rw.clone());
    tokio::time::sleep(Duration::from_secs(3)).await; // let some writes reach the standbys
    let killed = Instant::now();
    break_primary(&cluster, POD_0).await;
    let api = cluster.clusters();
    let db = eventually_some("a standby promoted", || async {
        let db = api.get(NAME).await.ok()?;
        let status = db.status.as_ref()?;
        let promoted = status.current_primary.as_deref().filter(|p| *p != POD_0)?.to_owned();
        (status.target_primary.as_deref() == Some(promoted.as_str())).then_some((db, promoted))
    })
    .await;
    let (db, promoted) = db;
    assert!(
        db.status.as_ref().unwrap().current_primary_timestamp.is_some(),
        "the promotion time is recorded"
    );
    eventually_some("-rw accepts writes again", || async {
        (psql(&rw, "SELECT pg_is_in_recovery()").ok()? == "f").then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await; // a few more writes on the new primary
    let log = writer.finish().await;
    let first_success = log.iter().find(|(_, at, ok)| *ok && *at > killed).map(|(_, at, _)| *at);
    let outage = first_success.expect("a write succeeded after the failover") - killed;
    eprintln!("failover: writes failed for {outage:?} after the primary died (failoverDelay {DELAY:?})");
    assert!(outage <= DELAY + Duration::from_secs(15), "writes came back after {outage:?}");

    let new_primary = superuser_uri(&cluster, &promoted).await;
    let present: std::collections::BTreeSet<i64> =
        psql(&new_primary, "SELECT id FROM ticks").unwrap().lines().map(|l| l.parse().unwrap()).collect();
    let acknowledged: Vec<i64> = log.iter().filter(|(_, _, ok)| *ok).map(|(id, _, _)| *id).collect();
    let lost: Vec<&i64> = acknowledged.iter().filter(|id| !present.contains(id)).collect();
    eprintln!(
        "failover without synchronous replication: {} of {} acknowledged writes lost: {lost:?}",
        lost.len(),
        acknowledged.len()
    );
    let reasons = await_event_reasons(&cluster, NAME, &["FailingOver", "FailedOver"]).await;
    assert!(reasons.contains(&"FailedOver".to_owned()), "{reasons:?}");
    let events = cluster.events_about(NAME).await;
    let failed_over = events.iter().find(|e| e.reason.as_deref() == Some("FailedOver")).unwrap();
    assert!(failed_over.note.as_deref().unwrap_or_default().contains("lost"), "{failed_over:?}");

    // The other standby follows the new timeline; the old primary, repaired, rewinds and rejoins.
    repair(&cluster, POD_0).await;
    await_streaming(&cluster, 3, &promoted).await;
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
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_failover_the_status_says_the_primary_is_down_and_a_stopped_operator_finishes_a_failover() {
    let cluster = process_cluster().await;
    let operator = cluster.start_operator().await;
    create(&cluster, 2, 0).await;
    await_streaming(&cluster, 2, POD_0).await;
    let rw = service_uri(&cluster, "rw").await;
    psql(&rw, "CREATE TABLE ticks (id bigint PRIMARY KEY, at timestamptz DEFAULT clock_timestamp())")
        .unwrap();
    psql(&rw, "INSERT INTO ticks (id) VALUES (1)").unwrap();

    break_primary(&cluster, POD_0).await;
    let api = cluster.clusters();
    let (_, reason, message) = eventually_some("the status says the primary is down", || async {
        let condition = primary_available(&api.get(NAME).await.ok()?)?;
        (condition.0 == "False" && condition.1 == "FailoverDisabled").then_some(condition)
    })
    .await;
    assert!(message.contains(&format!("{POD_0} is down")), "{reason}: {message}");
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
    // when the stopped one had already promoted it, only moves the labels. (In that second case
    // no `FailedOver` Event is published: which of the two happens varies from run to run.)
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
}
