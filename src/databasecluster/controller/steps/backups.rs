//! Step: the backups' children (volume, CronJob, Jobs) and their status, and the WAL archive's.

use jiff::Timestamp;

use crate::databasecluster::api::types::{DatabaseCluster, DatabaseClusterStatus};
use crate::databasecluster::api::validation::ValidSpec;
use crate::databasecluster::backup::reconcile::BackupsObserved;
use crate::databasecluster::backup::status::apply_backup_status;
use crate::databasecluster::controller::events::EventNote;
use crate::databasecluster::objectstore::archiving::{self, Archiving};
use crate::instance::archive::state::ArchiverReport;

/// Folds the primary's WAL archiver report into `status` ([`crate::databasecluster::objectstore::archiving`]).
pub(crate) fn apply_archiving(
    status: &mut DatabaseClusterStatus,
    cluster: &DatabaseCluster,
    spec: &ValidSpec,
    report: Option<&ArchiverReport>,
    now: Timestamp,
) -> Vec<EventNote> {
    let store = spec.backup.as_ref().and_then(|b| b.object_store.as_ref());
    let archiving = Archiving {
        enabled: store.is_some_and(|s| s.archive_timeout_seconds.is_some()),
        destination: store.map_or("", |s| s.spec.destination.as_str()),
        report,
    };
    archiving::apply_archiving(status, cluster.status.as_ref(), archiving, cluster.metadata.generation, now)
}

/// Folds the backup Jobs into `status` ([`crate::databasecluster::backup::status`]) and records the on-demand
/// token handled; returns the Events to publish once the status is written.
pub(crate) fn apply_backups(
    status: &mut DatabaseClusterStatus,
    cluster: &DatabaseCluster,
    observed: BackupsObserved,
    spec: &ValidSpec,
    now: Timestamp,
) -> Vec<EventNote> {
    let events = apply_backup_status(
        status,
        cluster.status.as_ref(),
        spec.backup.as_ref(),
        &observed.jobs,
        cluster.metadata.generation,
        now,
    );
    if let Some(token) = observed.token {
        status.backups.get_or_insert_default().last_on_demand_token = Some(token);
    }
    events
}
