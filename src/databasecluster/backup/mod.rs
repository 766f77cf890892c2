//! Backups and restores of a DatabaseCluster.
//!
//! - [`crate::databasecluster::api::backup`]: `spec.backup`, `spec.bootstrap`, their status records, and the checks the CRD
//!   cannot make (the cron schedule, parsed by `croner`).
//!
//! How it works, end to end: the operator owns a PVC `<name>-backups`, a CronJob `<name>-backup`
//! (concurrencyPolicy `Forbid`) and, for each `databases.madmmas.dev/backup-now` token, one Job
//! made from the same template. The Job's pod runs `scripts/backup.sh`: `pg_basebackup` (tar,
//! gzip, WAL streamed into the backup) from a streaming standby (`<name>-ro`) when one answers,
//! else from the primary (`<name>-rw`), as the replication user only, into a directory named by
//! its UTC start time, with a `manifest.json`; then it prunes by the retention rules, and writes
//! the manifest as its termination message, which is how the operator learns the backup's name
//! and size. The status follows the Jobs' real outcomes.
pub mod jobs;
pub mod reconcile;
pub mod restore;

pub mod status;

/// The backup Job's program (`scripts/backup.sh`), run by `bash -c` in the backup pod.
pub const BACKUP_SCRIPT: &str = include_str!("../scripts/backup.sh");
/// The restore Job's program (`scripts/restore.sh`), run by `bash -c` in the restore pod.
pub const RESTORE_SCRIPT: &str = include_str!("../scripts/restore.sh");

/// Fixtures shared by this module's unit tests.
#[cfg(test)]
pub(crate) mod fixtures {
    use crate::databasecluster::api::types::{DatabaseCluster, DatabaseClusterSpec};
    use crate::databasecluster::specs::names::Owner;

    /// A stored cluster named `name` in `default` with `spec`.
    pub fn cluster(name: &str, spec: DatabaseClusterSpec) -> DatabaseCluster {
        let mut cluster = DatabaseCluster::new(name, spec);
        cluster.metadata.namespace = Some("default".into());
        cluster.metadata.uid = Some(format!("{name}-uid"));
        cluster.metadata.generation = Some(1);
        cluster
    }

    /// A one-instance spec without backups.
    pub fn spec() -> DatabaseClusterSpec {
        crate::databasecluster::fixtures::spec(1, "15.4", "1Gi")
    }

    /// The owner of a cluster named `name`.
    pub fn owner(name: &str) -> Owner {
        Owner::of(&cluster(name, spec())).expect("the fixture has a name, namespace and uid")
    }
}
