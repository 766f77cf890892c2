//! A cluster's row: each figure with its age, the named empty cells, the tones.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

use super::*;
use crate::databasecluster::api::backup::{BackupJobRecord, BackupRecord, BackupSpec, BackupsStatus};
use crate::databasecluster::fixtures::seed;

fn at(text: &str) -> Time {
    Time(text.parse().unwrap())
}

fn now() -> Timestamp {
    "2026-01-01T00:10:00Z".parse().unwrap()
}

fn instance(name: &str, role: &str, ready: bool, lag: Option<i64>, state: Option<&str>) -> InstanceStatus {
    InstanceStatus {
        name: name.into(),
        role: role.into(),
        ready,
        lag_bytes: lag,
        replication_state: state.map(Into::into),
        ..InstanceStatus::default()
    }
}

fn running() -> DatabaseCluster {
    let mut cluster = seed();
    cluster.status = Some(DatabaseClusterStatus {
        phase: Some(Phase::Running),
        ready_replicas: 3,
        current_primary: Some("production-postgres-0".into()),
        target_primary: Some("production-postgres-0".into()),
        instances: vec![
            instance("production-postgres-0", "primary", true, None, None),
            instance("production-postgres-1", "replica", true, Some(0), Some("streaming")),
            instance("production-postgres-2", "replica", true, Some(4096), Some("streaming")),
        ],
        instances_observed_at: Some(at("2026-01-01T00:09:48Z")),
        conditions: vec![Condition {
            type_: "Ready".into(),
            status: "True".into(),
            reason: "AllReplicasReady".into(),
            message: String::new(),
            observed_generation: Some(1),
            last_transition_time: at("2026-01-01T00:06:00Z"),
        }],
        ..DatabaseClusterStatus::default()
    });
    cluster
}

fn texts(row: &ObjectRow) -> Vec<&str> {
    row.cells.iter().map(|c| c.text.as_str()).collect()
}

#[test]
fn a_running_cluster_shows_each_figure_with_its_age() {
    let row = cluster_row(&running(), now());
    assert_eq!(row.key, "default/production-postgres");
    assert_eq!(row.cells.len(), COLUMNS.len());
    let [phase, primary, instances, backup, archive] = &row.cells[..] else { unreachable!() };
    assert_eq!((phase.text.as_str(), phase.tone), ("Running\n3/3 ready", Tone::Good));
    assert_eq!(phase.note.as_deref(), Some("Ready=True since 4 min ago"));
    assert_eq!(primary.text, "production-postgres-0 (12 s ago)");
    let lines: Vec<&str> = instances.text.lines().collect();
    assert_eq!(
        lines,
        [
            "production-postgres-0 primary, ready (12 s ago)",
            "production-postgres-1 replica, ready, lag 0 B, streaming (12 s ago)",
            "production-postgres-2 replica, ready, lag 4096 B, streaming (12 s ago)",
        ]
    );
    assert_eq!(instances.tone, Tone::Good);
    assert_eq!((backup.text.as_str(), backup.tone), ("", Tone::Absent), "no backups configured");
    assert_eq!((archive.text.as_str(), archive.tone), ("", Tone::Absent));
    assert_eq!(archive.note.as_deref(), Some(NO_ARCHIVE_STATE));
}

#[test]
fn a_converging_cluster_says_what_is_missing_and_what_is_unknown() {
    let mut cluster = running();
    let status = cluster.status.as_mut().unwrap();
    status.phase = Some(Phase::Degraded);
    status.ready_replicas = 2;
    status.target_primary = Some("production-postgres-1".into());
    status.instances[2] = InstanceStatus {
        message: Some("container postgres: CrashLoopBackOff".into()),
        ..instance("production-postgres-2", "replica", false, None, None)
    };
    status.instances_observed_at = None;
    status.instances[1].role = "unknown".into();
    let row = cluster_row(&cluster, now());
    assert!(row.cells[2].text.contains("production-postgres-1 role unknown, ready, lag 0 B"), "{row:?}");
    assert_eq!(row.cells[0].tone, Tone::Bad);
    assert_eq!(
        row.cells[1].text,
        "production-postgres-0 (observation time not recorded)\n→ production-postgres-1 (the operator's record)"
    );
    assert!(
        row.cells[2].text.ends_with(
            "production-postgres-2 replica, not ready, not streaming (observation time not recorded)\n  container postgres: CrashLoopBackOff"
        ),
        "{}",
        row.cells[2].text
    );
    assert_eq!(row.cells[2].tone, Tone::Warn);
}

#[test]
fn the_last_backup_is_dated_and_a_new_cluster_has_only_empty_named_cells() {
    let mut cluster = running();
    cluster.spec.backup = Some(BackupSpec::default());
    let t = at("2026-01-01T00:07:00Z");
    cluster.status.as_mut().unwrap().backups = Some(BackupsStatus {
        last: Some(BackupRecord {
            name: "20260101T000600Z".into(),
            start_time: t.clone(),
            end_time: t,
            size_bytes: 12_900_000,
        }),
        last_job: Some(BackupJobRecord { name: "pg-backup-1".into(), state: "Failed".into() }),
        last_on_demand_token: None,
        ..BackupsStatus::default()
    });
    let row = cluster_row(&cluster, now());
    assert_eq!(row.cells[3].text, "20260101T000600Z\nended 3 min ago, 12.3 MiB\njob pg-backup-1: Failed");
    assert_eq!(row.cells[3].tone, Tone::Bad);
    cluster.status.as_mut().unwrap().backups = None;
    assert_eq!(cluster_row(&cluster, now()).cells[3].text, "none yet", "configured, none taken");

    let fresh = seed();
    let row = cluster_row(&fresh, now());
    assert_eq!(texts(&row), ["", "", "", "", ""]);
    assert!(row.cells.iter().all(|c| c.tone == Tone::Absent && c.note.is_some()));
}

#[test]
fn bytes_are_read_in_binary_units() {
    assert_eq!(bytes(0), "0 B");
    assert_eq!(bytes(10_239), "10239 B");
    assert_eq!(bytes(12_900_000), "12.3 MiB");
    assert_eq!(bytes(3 * 1024 * 1024 * 1024 / 2), "1.5 GiB");
}
