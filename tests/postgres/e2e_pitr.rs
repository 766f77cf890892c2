//! Base backups to the object store and point-in-time recovery from it, end to end: real
//! PostgreSQL 15 through the process kubelet, a real S3-compatible server (moto, `common::s3`).
//!
//! A source with a primary and a streaming standby archives WAL every second; `backup-now` takes a
//! base backup from the standby, streamed into the store with its manifest written last, and the
//! status names it with the first recoverability point. A source whose last rows are committed
//! seconds before it is deleted whole is recovered into new clusters to a time, an xid, an LSN,
//! a restore point and the end of its archive, each with exactly the rows before the target; a
//! target before the first backup fails with the first recoverability point; a recovered cluster
//! archives to its own store and may not name its source's. Retention by a one-minute window on a
//! synthetic clock deletes the first backup and its WAL, and the window's oldest point still
//! recovers. After a failover (the primary killed for good, the standby promoted onto timeline 2)
//! the archive continues on the new timeline and a recovery from the timeline-1 backup follows it.
#![cfg(feature = "sim")]

use crate::common;

use std::time::Duration;

use common::postgres::*;
use common::s3::S3Server;
use common::*;
use dbcluster_operator::databasecluster::api::backup::BackupRecord;
use dbcluster_operator::databasecluster::api::types::DatabaseCluster;
use dbcluster_operator::instance::archive::manifest::BackupManifest;
use dbcluster_operator::instance::archive::retention::{self, Catalog};
use dbcluster_operator::instance::archive::store::Store;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

const NS: &str = "default";
const BUCKET: &str = "e2e-pitr";
const SOURCE: &str = "pitr-source";
const ACCESS_KEY_ID: &str = "AKIDE2EPITRSOURCE";
const SECRET_ACCESS_KEY: &str = "e2e-pitr-secret-access-key";

/// The store spec of a cluster whose archive is at `s3://BUCKET/<path>`.
pub fn store_spec(s3: &S3Server, path: &str) -> serde_json::Value {
    json!({
        "destination": format!("s3://{BUCKET}/{path}"),
        "endpoint": s3.endpoint(),
        "credentials": {"name": "s3-credentials"},
    })
}

/// The app user's uri of `name`'s primary, as the host reaches it.
pub async fn app_uri(cluster: &TestCluster, name: &str) -> String {
    let secret = cluster.api::<Secret>().get(&format!("{name}-app")).await.unwrap();
    let uri = String::from_utf8(secret.data.unwrap()["uri"].0.clone()).unwrap();
    host_uri(cluster, NS, &uri)
}

/// The started environment: the store, the simulated cluster with the operator, the credentials.
pub struct Setup {
    /// moto.
    pub s3: S3Server,
    /// The simulated cluster.
    pub cluster: TestCluster,
    /// The operator (kept running).
    pub _operator: RunningOperator,
}

/// Starts moto with the bucket, the cluster, the operator, and the credentials Secret.
pub async fn setup() -> Setup {
    let s3 = S3Server::start().await;
    s3.create_bucket(BUCKET).await;
    let cluster = process_cluster().await;
    let operator = cluster.start_operator().await;
    cluster.track_events(&operator);
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "s3-credentials", "namespace": NS},
        "stringData": {"ACCESS_KEY_ID": ACCESS_KEY_ID, "ACCESS_SECRET_KEY": SECRET_ACCESS_KEY},
    }))
    .unwrap();
    cluster.api::<Secret>().create(&PostParams::default(), &secret).await.unwrap();
    Setup { s3, cluster, _operator: operator }
}

/// The store of the archive at `path`, as the tests read it.
pub fn store(setup: &Setup, path: &str) -> Store {
    setup.s3.client(BUCKET, path, ACCESS_KEY_ID, SECRET_ACCESS_KEY)
}

/// Creates the source (`replicas` instances, archiving every second) with table `items`.
pub async fn create_source(setup: &Setup, replicas: i32) -> String {
    let backup =
        json!({"objectStore": store_spec(&setup.s3, SOURCE), "walArchive": {"archiveTimeout": "1s"}});
    let db = sample_with(SOURCE, replicas, json!({"backup": backup}));
    setup.cluster.clusters().create(&PostParams::default(), &db).await.unwrap();
    await_streaming(&setup.cluster, SOURCE, replicas as usize, None).await;
    let uri = app_uri(&setup.cluster, SOURCE).await;
    eventually_some("the source's first write", || async {
        psql(
            &uri,
            "CREATE TABLE IF NOT EXISTS items (id int PRIMARY KEY, at timestamptz DEFAULT clock_timestamp())",
        )
        .ok()
    })
    .await;
    uri
}

/// Asks for a backup with `token` and waits for it to succeed; the cluster then.
pub async fn backup_now(setup: &Setup, token: &str) -> DatabaseCluster {
    let api = setup.cluster.clusters();
    let last_name = |db: &DatabaseCluster| {
        db.status
            .as_ref()
            .and_then(|s| s.backups.as_ref())
            .and_then(|b| b.last.as_ref())
            .map(|l| l.name.clone())
    };
    let before = last_name(&api.get(SOURCE).await.unwrap());
    let patch = json!({"metadata": {"annotations": {"databases.madmmas.dev/backup-now": token}}});
    api.patch(SOURCE, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    let job = dbcluster_operator::databasecluster::backup::jobs::on_demand_job_name(SOURCE, token);
    eventually_every(&format!("backup {token} succeeded"), REAL_WAIT, REAL_POLL_INTERVAL, || async {
        let db = api.get(SOURCE).await.map_err(|e| e.to_string())?;
        let last_job = db.status.as_ref().and_then(|s| s.backups.as_ref()).and_then(|b| b.last_job.clone());
        match (condition_of(&db, "LastBackupSucceeded"), last_job) {
            (Some((state, _, _)), Some(last))
                if last.name == job
                    && state == "True"
                    && last_name(&db).is_some_and(|n| Some(&n) != before.as_ref()) =>
            {
                Ok(db)
            }
            (Some((state, _, message)), Some(last)) if last.name == job && state == "False" => {
                panic!("backup {token} failed: {message}")
            }
            other => Err(format!("{other:?}")),
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_base_backup_streams_from_the_standby_into_the_store_with_its_manifest_last() {
    let setup = setup().await;
    let uri = create_source(&setup, 2).await;
    psql(&uri, "INSERT INTO items (id) SELECT generate_series(1, 1000)").unwrap();
    let db = backup_now(&setup, "first").await;
    let backups = db.status.clone().unwrap().backups.unwrap();
    let last = backups.last.expect("status.backups.last");
    let (_, _, message) = condition_of(&db, "LastBackupSucceeded").unwrap();
    assert!(message.contains("pitr-source-ro."), "taken from the streaming standby: {message}");
    assert_eq!(backups.first_recoverability_point, Some(last.end_time.clone()), "the only backup");
    await_event_reasons(&setup.cluster, SOURCE, &["BackupStarted", "BackupSucceeded"]).await;

    // In the store: the data and the manifest, whose checksum and size are the data's.
    let store = store(&setup, SOURCE);
    let manifest = store.get(&BackupManifest::object_name(&last.name)).await.unwrap().expect("the manifest");
    let manifest: BackupManifest = serde_json::from_slice(&manifest).unwrap();
    assert_eq!(manifest.name, last.name);
    assert!(manifest.source.starts_with("pitr-source-ro."), "{manifest:?}");
    assert_eq!(manifest.size_bytes as i64, last.size_bytes);
    let mut data = Vec::new();
    let got = store.download_stream(&manifest.data_object_name(), &mut data).await.unwrap();
    assert_eq!((got.bytes, got.sha256.as_str()), (manifest.size_bytes, manifest.sha256.as_str()));
    let names = store.list("wal").await.unwrap();
    for segment in [&manifest.start_wal, &manifest.end_wal] {
        assert!(names.iter().any(|n| n.contains(segment.as_str())), "{segment} archived: {names:?}");
    }

    // The Job's pod names the credentials' Secret, never a value; its command is the manager's.
    let pods = setup.cluster.api::<Pod>().list(&ListParams::default()).await.unwrap();
    let jobs = setup.cluster.api::<Job>().list(&ListParams::default()).await.unwrap();
    let job = dbcluster_operator::databasecluster::backup::jobs::on_demand_job_name(SOURCE, "first");
    let log = job_output(&setup, &job).await;
    assert!(log.contains("base backup complete"), "{log}");
    let shown = [
        log,
        serde_json::to_string(&pods.items).unwrap(),
        serde_json::to_string(&jobs.items).unwrap(),
        serde_json::to_string(&db.status).unwrap(),
        serde_json::to_string(&setup.cluster.events_about(SOURCE).await).unwrap(),
    ];
    for text in shown {
        assert!(!text.contains(SECRET_ACCESS_KEY) && !text.contains(ACCESS_KEY_ID), "a credential shown");
    }
    assert!(serde_json::to_string(&jobs.items).unwrap().contains("base-backup"));
}

/// `sql` on the source as its superuser (for `pg_create_restore_point`), at the primary's pod.
async fn superuser_uri(setup: &Setup) -> String {
    let secret = setup.cluster.api::<Secret>().get(&format!("{SOURCE}-superuser")).await.unwrap();
    let password = String::from_utf8(secret.data.unwrap()["password"].0.clone()).unwrap();
    let pod = setup.cluster.api::<Pod>().get(&format!("{SOURCE}-0")).await.unwrap();
    format!("postgresql://postgres:{password}@{}:5432/app", pod_ip(&pod))
}

/// Rows `from..=to` inserted one transaction each.
fn insert_rows(uri: &str, from: u32, to: u32) {
    let sql = format!(
        "DO $$ BEGIN FOR i IN {from}..{to} LOOP INSERT INTO items (id) VALUES (i); COMMIT; END LOOP; END $$"
    );
    psql(uri, &sql).unwrap();
}

/// A cluster recovered from the source's store with `target` (and its own store when `own`).
fn recovered(setup: &Setup, name: &str, target: serde_json::Value, own: Option<&str>) -> DatabaseCluster {
    recovered_from(setup, name, "latest", target, own)
}

/// A cluster recovered from the source's store from `backup` with `target`.
fn recovered_from(
    setup: &Setup,
    name: &str,
    backup: &str,
    target: serde_json::Value,
    own: Option<&str>,
) -> DatabaseCluster {
    let recovery = json!({"objectStore": store_spec(&setup.s3, SOURCE), "backup": backup, "target": target});
    let mut extra = json!({"bootstrap": {"recovery": recovery}});
    if let Some(path) = own {
        extra["backup"] =
            json!({"objectStore": store_spec(&setup.s3, path), "walArchive": {"archiveTimeout": "1s"}});
    }
    sample_with(name, 1, extra)
}

/// The statuses and logs of Job `job`'s pods (for a failure's message, and the secrets check).
async fn job_output(setup: &Setup, job: &str) -> String {
    let pods = setup.cluster.api::<Pod>();
    let list = pods.list(&ListParams::default().labels(&format!("job-name={job}"))).await.unwrap();
    let mut text = String::new();
    for pod in list.items {
        let pod_name = pod.metadata.name.clone().unwrap_or_default();
        let log = pods.logs(&pod_name, &Default::default()).await.unwrap_or_else(|e| e.to_string());
        text.push_str(&format!("{pod_name}: {:?}\n{log}\n", pod.status.and_then(|s| s.container_statuses)));
    }
    text
}

/// Waits until `name`'s restore Job succeeded; panics with its output when it failed.
async fn await_restored(setup: &Setup, name: &str) {
    let jobs = setup.cluster.api::<Job>();
    let job_name = format!("{name}-restore");
    let outcome =
        eventually_every(&format!("{job_name} finished"), REAL_WAIT, REAL_POLL_INTERVAL, || async {
            let job = jobs.get(&job_name).await.map_err(|e| e.to_string())?;
            let status = job.status.unwrap_or_default();
            match (status.succeeded.unwrap_or(0), status.conditions.unwrap_or_default()) {
                (1.., _) => Ok(true),
                (_, conditions) if conditions.iter().any(|c| c.type_ == "Failed" && c.status == "True") => {
                    Ok(false)
                }
                _ => Err("running".to_owned()),
            }
        })
        .await;
    assert!(outcome, "{job_name} failed: {}", job_output(setup, &job_name).await);
}

/// `SELECT count(*) || ' ' || max(id)` of `name`'s items, once it answers.
async fn rows_of(setup: &Setup, name: &str) -> String {
    await_restored(setup, name).await;
    await_streaming(&setup.cluster, name, 1, None).await;
    let uri = app_uri(&setup.cluster, name).await;
    eventually_some(&format!("{name} answers"), || async {
        psql(&uri, "SELECT count(*) || ' ' || coalesce(max(id), 0) FROM items").ok()
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_cluster_is_recovered_to_a_time_an_xid_an_lsn_a_name_and_the_end_of_its_archive() {
    let setup = setup().await;
    let api = setup.cluster.clusters();
    let uri = create_source(&setup, 1).await;
    let superuser = superuser_uri(&setup).await;
    insert_rows(&uri, 1, 100);
    let before_backup = psql(&uri, "SELECT clock_timestamp()").unwrap();
    let db = backup_now(&setup, "base").await;
    let first_point = db.status.clone().unwrap().backups.unwrap().first_recoverability_point.unwrap();

    // Rows one transaction each; between them a time, an xid, an lsn and a restore point.
    insert_rows(&uri, 101, 150);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let time = psql(
        &uri,
        "SELECT to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')",
    )
    .unwrap();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    insert_rows(&uri, 151, 174);
    let xid = psql(&uri, "INSERT INTO items (id) VALUES (175) RETURNING txid_current()").unwrap();
    let xid = xid.lines().next().unwrap().to_owned();
    insert_rows(&uri, 176, 180);
    let lsn = psql(&uri, "SELECT pg_current_wal_lsn()").unwrap();
    insert_rows(&uri, 181, 190);
    psql(&superuser, "SELECT pg_create_restore_point('after-190')").unwrap();
    insert_rows(&uri, 191, 250);
    // A second backup: `latest` for a time or an LSN before it still starts from the first.
    let second = backup_now(&setup, "second").await.status.unwrap().backups.unwrap().last.unwrap();
    // RPO: the last row, then the whole source gone a few seconds later (archiveTimeout 1s).
    insert_rows(&uri, 251, 260);
    tokio::time::sleep(Duration::from_secs(4)).await;
    api.delete(SOURCE, &Default::default()).await.unwrap();
    eventually_some("the source's pods are gone", || async {
        let pods = setup.cluster.api::<Pod>().list(&ListParams::default()).await.ok()?;
        (!pods.items.iter().any(|p| p.metadata.name.as_deref().is_some_and(|n| n.starts_with(SOURCE))))
            .then_some(())
    })
    .await;

    // A recovered cluster may not archive into its source's archive: refused at the API.
    let refused =
        api.create(&PostParams::default(), &recovered(&setup, "pitr-own", json!({}), Some(SOURCE))).await;
    assert!(refused.unwrap_err().to_string().contains("must archive somewhere else"));

    let cases = [
        ("pitr-time", json!({"time": time}), "150 150"),
        ("pitr-xid", json!({"xid": xid}), "175 175"),
        ("pitr-lsn", json!({"lsn": lsn}), "180 180"),
        ("pitr-name", json!({"name": "after-190"}), "190 190"),
    ];
    let first = db.status.clone().unwrap().backups.unwrap().last.unwrap().name;
    for (name, target, _) in &cases {
        // An xid or a restore point says nothing of when: the backup before it is named.
        let backup =
            if target.get("xid").or(target.get("name")).is_some() { first.as_str() } else { "latest" };
        let db = recovered_from(&setup, name, backup, target.clone(), None);
        api.create(&PostParams::default(), &db).await.unwrap();
    }
    let latest = recovered(&setup, "pitr-latest", json!({}), Some("pitr-latest"));
    api.create(&PostParams::default(), &latest).await.unwrap();
    let early = recovered(&setup, "pitr-early", json!({"time": before_backup}), None);
    api.create(&PostParams::default(), &early).await.unwrap();

    for (name, _, expected) in &cases {
        assert_eq!(rows_of(&setup, name).await, *expected, "{name}");
    }
    assert_eq!(rows_of(&setup, "pitr-latest").await, "260 260", "every row, the last 4 s before the loss");
    let restored = api.get("pitr-latest").await.unwrap();
    let from = restored.status.unwrap().restored_from.expect("status.restoredFrom");
    assert_eq!(from.cluster, format!("s3://{BUCKET}/{SOURCE}"));
    // It runs as a normal cluster: writes, archived into its own store.
    let latest_uri = app_uri(&setup.cluster, "pitr-latest").await;
    psql(&latest_uri, "INSERT INTO items (id) VALUES (1000)").unwrap();
    eventually_every("the recovered cluster archives", REAL_WAIT, REAL_POLL_INTERVAL, || async {
        let db = api.get("pitr-latest").await.map_err(|e| e.to_string())?;
        match condition_of(&db, "ContinuousArchiving") {
            Some((state, _, _)) if state == "True" => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    assert!(!store(&setup, "pitr-latest").list("wal").await.unwrap().is_empty());

    // A target before the first backup ended: the restore fails and says why.
    let event = eventually_some("RestoreFailed for the early target", || async {
        let events = setup.cluster.events_about("pitr-early").await;
        events.into_iter().find(|e| e.reason.as_deref() == Some("RestoreFailed"))
    })
    .await;
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    let note = event.note.unwrap_or_default();
    assert!(note.contains("first recoverability point"), "{note}");
    eprintln!("first recoverability point {}", first_point.0);

    retention_keeps_what_the_window_needs(&setup, &first, &second).await;
}

/// Retention with a window of a minute, a minute after the second backup ended: the first
/// backup and the WAL only it needs go; the second and everything after it stay.
async fn retention_keeps_what_the_window_needs(setup: &Setup, first: &str, second: &BackupRecord) {
    let api = setup.cluster.clusters();
    let source_store = store(setup, SOURCE);
    let catalog = Catalog::read(&source_store).await.unwrap();
    let now = jiff::Timestamp::from_second(second.end_time.0.as_second() + 60).unwrap();
    let deleted = retention::apply(&source_store, &catalog, Duration::from_secs(60), now).await.unwrap();
    assert_eq!(deleted, [first]);
    let kept = Catalog::read(&source_store).await.unwrap();
    assert_eq!(kept.backups.iter().map(|b| b.name.as_str()).collect::<Vec<_>>(), [second.name.as_str()]);
    assert_eq!(kept.first_recoverability_point(), Some(second.end_time.0.to_string()));
    let start_wal = &kept.backups[0].start_wal;
    let wal = source_store.list("wal").await.unwrap();
    assert!(wal.iter().all(|n| !retention::wal_deletable(n, start_wal)), "{wal:?}");
    assert!(wal.iter().any(|n| n.contains(start_wal.as_str())), "the kept backup's WAL stays: {wal:?}");
    // The oldest point in the window, and everything after it, still restores.
    let at_window_start = json!({"time": second.end_time.0.to_string()});
    let kept_restore = recovered(setup, "pitr-window", at_window_start, None);
    api.create(&PostParams::default(), &kept_restore).await.unwrap();
    let rows = rows_of(setup, "pitr-window").await;
    assert!(rows.starts_with("250 "), "the rows up to the second backup: {rows}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_failover_the_archive_continues_on_the_new_timeline_and_recovers_past_it() {
    let setup = setup().await;
    let api = setup.cluster.clusters();
    let uri = create_source(&setup, 2).await;
    insert_rows(&uri, 1, 100);
    backup_now(&setup, "timeline-1").await;

    // The primary dies for good (its pg_control hidden, so it cannot start again): a failover
    // promotes the standby onto timeline 2.
    let superuser = superuser_uri(&setup).await;
    let program = r#"mv "$PGDATA/global/pg_control" "$PGDATA/global/pg_control.broken"; kill -9 $(head -1 "$PGDATA/postmaster.pid")"#;
    let _ = psql(&superuser, &format!("COPY (SELECT 1) TO PROGRAM $${program}$$"));
    eventually_every("the standby is the primary", REAL_WAIT, REAL_POLL_INTERVAL, || async {
        let db = api.get(SOURCE).await.map_err(|e| e.to_string())?;
        let primary = db.status.and_then(|s| s.current_primary);
        (primary.as_deref() == Some("pitr-source-1")).then_some(()).ok_or(format!("{primary:?}"))
    })
    .await;
    eventually_some("writes on the new primary", || async { psql(&uri, "SELECT 1").ok() }).await;
    insert_rows(&uri, 101, 200);
    let time = psql(
        &uri,
        "SELECT to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')",
    )
    .unwrap();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    insert_rows(&uri, 201, 210);

    // The new primary archives timeline 2: its history file, then its segments.
    let store = store(&setup, SOURCE);
    let names = eventually_some("timeline 2 in the archive", || async {
        let names = store.list("wal").await.ok()?;
        let on_2 = names.iter().any(|n| n.contains("/00000002") && !n.contains(".history"));
        (names.iter().any(|n| n.ends_with("00000002.history.gz")) && on_2).then_some(names)
    })
    .await;
    eprintln!("archive after the failover: {names:?}");
    // Everything up to the last row is archived (archiveTimeout 1s switches the segment).
    let last_segment = psql(&uri, "SELECT pg_walfile_name(pg_current_wal_lsn())").unwrap();
    eventually_some(&format!("{last_segment} archived"), || async {
        let names = store.list("wal").await.ok()?;
        names.iter().any(|n| n.contains(last_segment.as_str())).then_some(())
    })
    .await;

    // A recovery from the timeline-1 backup to a time after the failover follows timeline 2.
    let db = recovered(&setup, "pitr-after-failover", json!({"time": time}), None);
    api.create(&PostParams::default(), &db).await.unwrap();
    assert_eq!(rows_of(&setup, "pitr-after-failover").await, "200 200");
}
