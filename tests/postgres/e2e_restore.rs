//! Backups and restores with real PostgreSQL 15 through the process kubelet, in one
//! sequence so that the clusters start once: rows written, an on-demand backup taken from the
//! streaming standby, more rows written; a new cluster restored from `latest` holds exactly the
//! rows of the backup, accepts writes and replicates them, and its `bootstrap` is immutable; a
//! schedule every minute on the simulator's controller clock runs and retention keeps exactly
//! `keepLast` backups on the volume; with the source hibernated a backup fails with
//! `LastBackupSucceeded=False`, a Warning Event and a single pod (no retry storm).
#![cfg(feature = "sim")]

use crate::common;

use std::path::PathBuf;
use std::time::Duration;

use common::postgres::*;
use common::*;
use dbcluster_operator::databasecluster::api::types::DatabaseCluster;
use dbcluster_operator::databasecluster::backup::jobs::on_demand_job_name;
use k8s_openapi::api::batch::v1::CronJob;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod, Secret};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

const SOURCE: &str = "source";
const RESTORED: &str = "restored";
const NS: &str = "default";

async fn patch(cluster: &TestCluster, name: &str, patch: serde_json::Value) {
    cluster.clusters().patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
}

fn last_backup_name(db: &DatabaseCluster) -> Option<String> {
    Some(db.status.as_ref()?.backups.as_ref()?.last.as_ref()?.name.clone())
}

/// The app user's uri of `name` through `service` (`rw` or `ro`), as the host reaches it.
async fn app_uri(cluster: &TestCluster, name: &str, service: &str) -> String {
    let secrets: Api<Secret> = cluster.api();
    let secret = secrets.get(&format!("{name}-app")).await.unwrap();
    let uri = String::from_utf8(secret.data.unwrap()["uri"].0.clone()).unwrap();
    host_uri(cluster, NS, &uri.replace(&format!("{name}-rw."), &format!("{name}-{service}.")))
}

/// Waits until `sql` through `uri` answers `expected`.
async fn await_answer(uri: &str, sql: &str, expected: &str) {
    eventually_some(&format!("{sql} = {expected}"), || async move {
        (psql(uri, sql).ok()? == expected).then_some(())
    })
    .await;
}

/// The complete backups on the backup volume of `name`, by directory name, oldest first.
async fn backups_on_volume(cluster: &TestCluster, name: &str) -> Vec<String> {
    let claims: Api<PersistentVolumeClaim> = cluster.api();
    let claim = claims.get(&format!("{name}-backups")).await.unwrap();
    let volume_name = claim.spec.unwrap().volume_name.expect("the backup volume is bound");
    let volumes: Api<PersistentVolume> = Api::all(cluster.client.clone());
    let volume = volumes.get(&volume_name).await.unwrap();
    let dir = PathBuf::from(volume.spec.unwrap().host_path.unwrap().path);
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|entry| entry.ok())
        .filter(|entry| entry.path().join("manifest.json").is_file())
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_restores_exactly_its_rows_schedules_keep_n_and_an_unreachable_source_fails_once() {
    let cluster = process_cluster().await;
    let _operator = cluster.start_operator().await;
    let api = cluster.clusters();

    // The source: a primary and a streaming standby, backups on demand, keep the last 2.
    let backup = json!({"retention": {"keepLast": 2}, "storageSize": "1Gi"});
    api.create(&PostParams::default(), &sample_with(SOURCE, 2, json!({"backup": backup}))).await.unwrap();
    await_streaming(&cluster, SOURCE, 2, None).await;
    let source_rw = app_uri(&cluster, SOURCE, "rw").await;
    psql(
        &source_rw,
        "CREATE TABLE items (id int PRIMARY KEY); INSERT INTO items SELECT generate_series(1, 100)",
    )
    .unwrap();

    patch(
        &cluster,
        SOURCE,
        json!({"metadata": {"annotations": {"databases.madmmas.dev/backup-now": "first"}}}),
    )
    .await;
    let backed_up = eventually_some("the on-demand backup succeeded", || async {
        let db = api.get(SOURCE).await.ok()?;
        let (state, _, _) = condition_of(&db, "LastBackupSucceeded")?;
        (state == "True" && last_backup_name(&db).is_some()).then_some(db)
    })
    .await;
    let (_, reason, message) = condition_of(&backed_up, "LastBackupSucceeded").unwrap();
    assert_eq!(reason, "BackupSucceeded");
    assert!(message.contains("from source-ro."), "taken from the streaming standby: {message}");
    let status = backed_up.status.as_ref().unwrap();
    let first = status.backups.as_ref().unwrap().last.clone().unwrap();
    assert!(first.size_bytes > 0);
    assert_eq!(status.last_backup_time.as_ref(), Some(&first.end_time));
    assert_eq!(condition_of(&backed_up, "BackupsHealthy").unwrap().0, "True");
    await_event_reasons(&cluster, SOURCE, &["BackupStarted", "BackupSucceeded"]).await;
    psql(&source_rw, "INSERT INTO items SELECT generate_series(101, 200)").unwrap();

    // Restored from `latest`: exactly the rows the backup holds; it takes writes and replicates.
    let bootstrap = json!({"fromBackup": {"cluster": SOURCE, "backup": "latest"}});
    api.create(&PostParams::default(), &sample_with(RESTORED, 2, json!({"bootstrap": bootstrap})))
        .await
        .unwrap();
    await_streaming(&cluster, RESTORED, 2, None).await;
    let restored = api.get(RESTORED).await.unwrap();
    let from = restored.status.as_ref().unwrap().restored_from.clone().expect("status.restoredFrom");
    assert_eq!((from.cluster.as_str(), from.backup.as_str()), (SOURCE, first.name.as_str()));
    let restored_rw = app_uri(&cluster, RESTORED, "rw").await;
    await_answer(&restored_rw, "SELECT count(*) || ' ' || max(id) FROM items", "100 100").await;
    psql(&restored_rw, "INSERT INTO items VALUES (1000)").unwrap();
    let restored_ro = app_uri(&cluster, RESTORED, "ro").await;
    await_answer(&restored_ro, "SELECT count(*) || ' ' || pg_is_in_recovery() FROM items", "101 true").await;
    assert_eq!(psql(&source_rw, "SELECT count(*) FROM items").unwrap(), "200", "the source is untouched");
    // `bootstrap` is immutable: neither changed nor removed on an existing cluster.
    for change in [json!({"fromBackup": {"cluster": SOURCE, "backup": first.name}}), json!(null)] {
        let refused = api
            .patch(RESTORED, &PatchParams::default(), &Patch::Merge(&json!({"spec": {"bootstrap": change}})))
            .await
            .unwrap_err();
        assert!(refused.to_string().contains("bootstrap is immutable"), "{refused}");
    }

    let last = scheduled_backups_keep_the_last_two(&cluster, &first.name).await;

    a_backup_of_the_hibernated_source_fails_once(&cluster, &last).await;
}

/// Every minute on the controllers' clock: each run is a backup, and retention keeps 2 (`first`
/// goes); the newest backup's name.
async fn scheduled_backups_keep_the_last_two(cluster: &TestCluster, first: &str) -> String {
    let api = cluster.clusters();
    patch(cluster, SOURCE, json!({"spec": {"backup": {"schedule": "* * * * *"}}})).await;
    let mut last = first.to_string();
    for run in 0..3 {
        cluster.sim.advance_controller_clock(Duration::from_secs(60));
        let previous = last.clone();
        last = eventually_some(&format!("scheduled backup {run} succeeded"), || {
            let (api, previous) = (api.clone(), previous.clone());
            async move {
                let db = api.get(SOURCE).await.ok()?;
                let name = last_backup_name(&db)?;
                (name != previous && condition_of(&db, "LastBackupSucceeded")?.0 == "True").then_some(name)
            }
        })
        .await;
    }
    // No schedule: the CronJob goes (no run can start while the volume is read).
    patch(cluster, SOURCE, json!({"spec": {"backup": {"schedule": null}}})).await;
    let cronjobs: Api<CronJob> = cluster.api();
    eventually_some("the CronJob is gone", || async {
        cronjobs.get_opt("source-backup").await.ok()?.is_none().then_some(())
    })
    .await;
    let kept = backups_on_volume(cluster, SOURCE).await;
    assert_eq!(kept.len(), 2, "keepLast 2: {kept:?}");
    assert!(kept.contains(&last), "the newest is kept: {kept:?}");
    assert!(!kept.contains(&first.to_string()), "the oldest went: {kept:?}");
    last
}

/// The source hibernated: a backup finds nothing to back up, fails once, and says why; `last`
/// stays the last good backup.
async fn a_backup_of_the_hibernated_source_fails_once(cluster: &TestCluster, last: &str) {
    let api = cluster.clusters();
    patch(cluster, SOURCE, json!({"spec": {"replicas": 0}})).await;
    let pods: Api<Pod> = cluster.api();
    eventually_some("the source's instances are gone", || async {
        let list =
            pods.list(&ListParams::default().labels("app.kubernetes.io/instance=source")).await.ok()?;
        list.items.is_empty().then_some(())
    })
    .await;
    patch(
        cluster,
        SOURCE,
        json!({"metadata": {"annotations": {"databases.madmmas.dev/backup-now": "second"}}}),
    )
    .await;
    let failed = eventually_some("the backup of a hibernated cluster failed", || async {
        let db = api.get(SOURCE).await.ok()?;
        let failed = condition_of(&db, "LastBackupSucceeded")?;
        (failed.0 == "False").then_some(failed)
    })
    .await;
    assert_eq!(failed.1, "BackoffLimitExceeded");
    assert!(failed.2.contains("no instance answers"), "the script's message: {}", failed.2);
    let db = api.get(SOURCE).await.unwrap();
    assert_eq!(condition_of(&db, "BackupsHealthy").unwrap().1, "LastBackupFailed");
    assert_eq!(
        last_backup_name(&db).as_ref(),
        Some(&last.to_string()),
        "the last good backup is still named"
    );
    let warning = cluster
        .events_about(SOURCE)
        .await
        .into_iter()
        .find(|e| e.reason.as_deref() == Some("BackupFailed"))
        .expect("a BackupFailed Event");
    assert_eq!(warning.type_.as_deref(), Some("Warning"));
    let job = on_demand_job_name(SOURCE, "second");
    let job_pods = pods.list(&ListParams::default().labels(&format!("job-name={job}"))).await.unwrap();
    assert_eq!(job_pods.items.len(), 1, "backoffLimit 0: one attempt, no retry storm");
}
