//! Backups through the operator on the simulator (timer kubelet: a Job succeeds after
//! `job_duration`, or fails when a fault says so), on a paused clock; the simulated CronJob
//! controller's clock is moved a minute ahead for each scheduled run: the CronJob and its Jobs, the status from the Jobs' real
//! outcomes, on-demand backups once per token, the schedule checked by the cron parser, and what
//! deleting the cluster keeps. The backup program itself runs against real PostgreSQL in
//! `tests/backup_script.rs`.
#![cfg(feature = "sim")]

use crate::common;

use common::*;
use dbcluster_operator::databasecluster::api::types::DatabaseCluster;
use dbcluster_operator::databasecluster::backup::jobs::on_demand_job_name;
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

const NAME: &str = "production-postgres";
const MINUTE: std::time::Duration = std::time::Duration::from_secs(60);

fn with_backup(backup: serde_json::Value) -> DatabaseCluster {
    let mut cluster = serde_json::to_value(sample()).unwrap();
    cluster["spec"]["replicas"] = json!(1);
    cluster["spec"]["backup"] = backup;
    serde_json::from_value(cluster).unwrap()
}

fn last_backup(cluster: &DatabaseCluster) -> Option<(String, String)> {
    condition(cluster, "LastBackupSucceeded")
}

async fn backup_jobs(cluster: &TestCluster) -> Vec<Job> {
    let jobs: kube::Api<Job> = cluster.api();
    jobs.list(&ListParams::default().labels(&format!("databases.madmmas.dev/cluster={NAME}")))
        .await
        .unwrap()
        .items
}

#[tokio::test(start_paused = true)]
async fn scheduled_backups_run_from_a_forbid_cronjob_and_a_failure_is_reported_then_cleared() {
    let cluster = TestCluster::start().await;
    let operator = cluster.start_operator().await;
    cluster
        .clusters()
        .create(&PostParams::default(), &with_backup(json!({"schedule": "* * * * *"})))
        .await
        .unwrap();

    let cronjobs: kube::Api<CronJob> = cluster.api();
    let cj = await_object(&cronjobs, "production-postgres-backup", "the CronJob", |_| true).await;
    let spec = cj.spec.as_ref().unwrap();
    assert_eq!(spec.schedule, "* * * * *");
    assert_eq!(spec.concurrency_policy.as_deref(), Some("Forbid"));
    let owner = &cj.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str(), owner.controller),
        ("DatabaseCluster", NAME, Some(true))
    );
    let pvcs: kube::Api<PersistentVolumeClaim> = cluster.api();
    let volume = await_object(&pvcs, "production-postgres-backups", "the backup volume", |_| true).await;
    assert_eq!(volume.metadata.owner_references.unwrap_or_default(), vec![], "kept by default");

    // Each run is due a minute later on the controllers' clock: move it rather than wait for it.
    cluster.sim.advance_controller_clock(MINUTE);
    let done = await_object(&cluster.clusters(), NAME, "a scheduled backup succeeded", |c| {
        last_backup(c).is_some_and(|(s, _)| s == "True")
    })
    .await;
    assert_eq!(last_backup(&done).unwrap().1, "BackupSucceeded");
    assert!(done.status.as_ref().unwrap().last_backup_time.is_some());
    await_event_reasons(&cluster, NAME, &["BackupStarted", "BackupSucceeded"]).await;

    // The next scheduled Job fails: reported with the Job's reason and a Warning Event.
    cluster.sim.faults().fail_next_jobs(1);
    cluster.sim.advance_controller_clock(MINUTE);
    let failed = await_object(&cluster.clusters(), NAME, "a scheduled backup failed", |c| {
        last_backup(c).is_some_and(|(s, _)| s == "False")
    })
    .await;
    assert_eq!(last_backup(&failed).unwrap().1, "BackoffLimitExceeded");
    assert_eq!(condition(&failed, "BackupsHealthy").unwrap(), ("False".into(), "LastBackupFailed".into()));
    let warning =
        cluster.events_about(NAME).await.into_iter().find(|e| e.reason.as_deref() == Some("BackupFailed"));
    assert_eq!(warning.unwrap().type_.as_deref(), Some("Warning"));

    // The schedule still runs, and the next success flips both conditions back.
    cluster.sim.advance_controller_clock(MINUTE);
    let healed = await_object(&cluster.clusters(), NAME, "a later backup succeeded", |c| {
        last_backup(c).is_some_and(|(s, _)| s == "True")
    })
    .await;
    assert_eq!(condition(&healed, "BackupsHealthy").unwrap().0, "True");
    assert!(healed.status.unwrap().last_backup_time > done.status.unwrap().last_backup_time);
    operator.stop().await;
}

#[tokio::test(start_paused = true)]
async fn an_on_demand_backup_runs_once_per_token() {
    let cluster = TestCluster::start().await;
    let operator = cluster.start_operator().await;
    cluster.clusters().create(&PostParams::default(), &with_backup(json!({}))).await.unwrap();
    let pvcs: kube::Api<PersistentVolumeClaim> = cluster.api();
    await_object(&pvcs, "production-postgres-backups", "the backup volume", |_| true).await;
    let cronjobs: kube::Api<CronJob> = cluster.api();
    assert!(
        cronjobs.get_opt("production-postgres-backup").await.unwrap().is_none(),
        "no schedule, no CronJob"
    );

    let annotate = |token: &str| {
        Patch::Merge(json!({"metadata": {"annotations": {"databases.madmmas.dev/backup-now": token}}}))
    };
    cluster.clusters().patch(NAME, &PatchParams::default(), &annotate("first")).await.unwrap();
    let done = await_object(&cluster.clusters(), NAME, "the on-demand backup", |c| {
        last_backup(c).is_some_and(|(s, _)| s == "True")
    })
    .await;
    let backups = done.status.as_ref().unwrap().backups.as_ref().unwrap();
    assert_eq!(backups.last_on_demand_token.as_deref(), Some("first"));
    assert_eq!(backups.last_job.as_ref().unwrap().name, on_demand_job_name(NAME, "first"));
    // Another pass with the same token starts nothing.
    reconcile_now(&operator, &key(NAME)).await;
    assert_eq!(backup_jobs(&cluster).await.len(), 1);

    cluster.clusters().patch(NAME, &PatchParams::default(), &annotate("second")).await.unwrap();
    await_object(&cluster.clusters(), NAME, "the second token handled", |c| {
        c.status.as_ref().and_then(|s| s.backups.as_ref()).and_then(|b| b.last_on_demand_token.as_deref())
            == Some("second")
    })
    .await;
    let names: Vec<String> =
        backup_jobs(&cluster).await.into_iter().filter_map(|j| j.metadata.name).collect();
    assert_eq!(names.len(), 2, "{names:?}");
    assert!(names.contains(&on_demand_job_name(NAME, "second")));
    operator.stop().await;
}

/// A `backup-now` token on a cluster without `spec.backup` is not ignored in silence: one Warning
/// Event says what to add, and the token counts as handled (no Event again on the next passes).
#[tokio::test(start_paused = true)]
async fn a_backup_request_without_spec_backup_says_what_to_add() {
    let cluster = TestCluster::start().await;
    let operator = sample_running(&cluster).await;
    let annotate = json!({"metadata": {"annotations": {"databases.madmmas.dev/backup-now": "first"}}});
    cluster.clusters().patch(NAME, &PatchParams::default(), &Patch::Merge(annotate)).await.unwrap();
    await_event_reasons(&cluster, NAME, &["BackupNotConfigured"]).await;
    let db =
        await_object(&cluster.clusters(), NAME, "the token recorded as handled", |db: &DatabaseCluster| {
            db.status
                .as_ref()
                .and_then(|s| s.backups.as_ref())
                .and_then(|b| b.last_on_demand_token.as_deref())
                == Some("first")
        })
        .await;
    reconcile_now(&operator, &key(NAME)).await;
    let warnings: Vec<_> = cluster
        .events_about(NAME)
        .await
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("BackupNotConfigured"))
        .collect();
    assert_eq!(warnings.len(), 1, "once per token");
    let note = warnings[0].note.clone().unwrap_or_default();
    assert!(note.contains("add spec.backup"), "{note}");
    assert!(backup_jobs(&cluster).await.is_empty(), "no Job for {db:?}");
}

#[tokio::test]
async fn the_crd_reads_its_schedule_pattern_as_go_does() {
    let cluster = TestCluster::start().await;
    // `\s` in the pattern is ASCII whitespace in Go's RE2: a no-break space is not one.
    let spaced = with_backup(json!({"schedule": "0\u{a0}3 * * *"}));
    let refused = cluster.clusters().create(&PostParams::default(), &spaced).await.unwrap_err();
    assert!(refused.to_string().contains("spec.backup.schedule"), "{refused}");
    cluster
        .clusters()
        .create(&PostParams::default(), &with_backup(json!({"schedule": "0 3 * * *"})))
        .await
        .unwrap();
}

#[tokio::test(start_paused = true)]
async fn an_impossible_schedule_is_an_invalid_spec_with_the_parsers_message() {
    let cluster = TestCluster::start().await;
    let operator = cluster.start_operator().await;
    // Five fields of cron characters: the CRD's pattern lets it through, the parser does not.
    cluster
        .clusters()
        .create(&PostParams::default(), &with_backup(json!({"schedule": "99 99 99 99 99"})))
        .await
        .unwrap();
    let failed = await_object(&cluster.clusters(), NAME, "InvalidSpec", |c| {
        condition(c, "Ready").is_some_and(|(_, reason)| reason == "InvalidSpec")
    })
    .await;
    let message = failed.status.unwrap().conditions.into_iter().find(|c| c.type_ == "Ready").unwrap().message;
    assert!(
        message.contains("spec.backup.schedule \"99 99 99 99 99\" is not a valid cron schedule"),
        "{message}"
    );
    await_event_reasons(&cluster, NAME, &["InvalidSpec"]).await;
    let cronjobs: kube::Api<CronJob> = cluster.api();
    assert!(cronjobs.get_opt("production-postgres-backup").await.unwrap().is_none());

    // Sunday as 7: croner reads it, a CronJob does not (its days are 0-6), so neither does the operator.
    let sunday = Patch::Merge(json!({"spec": {"backup": {"schedule": "0 3 * * 7"}}}));
    cluster.clusters().patch(NAME, &PatchParams::default(), &sunday).await.unwrap();
    let failed = await_object(&cluster.clusters(), NAME, "InvalidSpec for day 7", |c| {
        c.status
            .as_ref()
            .is_some_and(|s| s.conditions.iter().any(|c| c.message.contains("day of the week 7")))
    })
    .await;
    assert_eq!(condition(&failed, "Ready").map(|(_, reason)| reason).as_deref(), Some("InvalidSpec"));
    assert!(cronjobs.get_opt("production-postgres-backup").await.unwrap().is_none());
    operator.stop().await;
}

#[tokio::test(start_paused = true)]
async fn deleting_the_cluster_removes_cronjob_and_jobs_and_keeps_the_volume_unless_told_otherwise() {
    let cluster = TestCluster::start().await;
    let operator = cluster.start_operator().await;
    let pvcs: kube::Api<PersistentVolumeClaim> = cluster.api();
    let cronjobs: kube::Api<CronJob> = cluster.api();
    for (retention, kept) in [("Retain", true), ("Delete", false)] {
        let mut dbc = with_backup(json!({"schedule": "* * * * *"}));
        dbc.spec.pvc_retention = serde_json::from_value(json!(retention)).unwrap();
        cluster.clusters().create(&PostParams::default(), &dbc).await.unwrap();
        cluster.sim.advance_controller_clock(MINUTE);
        await_object(&cluster.clusters(), NAME, "a backup ran", |c| {
            last_backup(c).is_some_and(|(s, _)| s == "True")
        })
        .await;
        assert!(!backup_jobs(&cluster).await.is_empty());
        cluster.clusters().delete(NAME, &Default::default()).await.unwrap();
        await_absent(&cluster.clusters(), NAME, "the cluster").await;
        await_absent(&cronjobs, "production-postgres-backup", "the CronJob").await;
        eventually("the backup Jobs to go", WAIT_LIMIT, || async {
            let jobs: Vec<_> =
                backup_jobs(&cluster).await.into_iter().filter_map(|j| j.metadata.name).collect();
            if jobs.is_empty() { Ok(()) } else { Err(jobs) }
        })
        .await;
        if kept {
            assert!(pvcs.get_opt("production-postgres-backups").await.unwrap().is_some(), "Retain keeps it");
            pvcs.delete("production-postgres-backups", &Default::default()).await.unwrap();
        }
        await_absent(&pvcs, "production-postgres-backups", "the backup volume").await;
    }
    operator.stop().await;
}
