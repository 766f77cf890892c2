//! Step: the backups' children (volume, CronJob, Jobs) and their status.

use jiff::Timestamp;

use crate::databasecluster::api::types::{DatabaseCluster, DatabaseClusterStatus};
use crate::databasecluster::api::validation::ValidSpec;
use crate::databasecluster::backup::reconcile::BackupsObserved;
use crate::databasecluster::backup::status::apply_backup_status;
use crate::databasecluster::controller::events::EventNote;
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
