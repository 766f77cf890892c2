//! Reconcile errors a user can see: after [`FAILURE_THRESHOLD`] consecutive failed passes of a
//! cluster (retryable errors only: an invalid spec has its own `Ready=False, InvalidSpec`), its
//! status carries the condition `ReconcileSucceeded=False` with reason `ReconcileError` and the
//! error's message; the next successful pass flips it to `True`. A cluster that never failed long
//! enough never gets the condition, so a healthy cluster's status is unchanged by this module.
//!
//! The count of consecutive failures lives in memory ([`FailureCounts`]): a restarted operator
//! counts again from zero, and the condition already written stays until a pass succeeds.

use dashmap::DashMap;
use jiff::Timestamp;

use crate::databasecluster::api::types::{DatabaseCluster, DatabaseClusterStatus};
use crate::databasecluster::controller::events::truncate;
use crate::databasecluster::controller::status::ConditionSetter;
use crate::runtime::ObjectKey;

/// How many consecutive failed passes make an error visible in the status: one or two failures
/// are usually a stale cache or a blip that the retry heals, three are worth a user's attention.
pub const FAILURE_THRESHOLD: u32 = 3;

/// The condition type: whether the operator's last passes over the cluster succeeded.
pub const RECONCILE_SUCCEEDED: &str = "ReconcileSucceeded";

/// `ReconcileSucceeded=False`: the passes keep failing; the message is the last error.
pub const REASON_RECONCILE_ERROR: &str = "ReconcileError";

/// `ReconcileSucceeded=True`: the pass after a visible error succeeded.
pub const REASON_RECONCILED: &str = "Reconciled";

/// The longest message a `metav1.Condition` accepts.
const MAX_MESSAGE_BYTES: usize = 32 * 1024;

/// Consecutive failed passes per cluster.
#[derive(Debug, Default)]
pub struct FailureCounts {
    counts: DashMap<ObjectKey, u32>,
}

impl FailureCounts {
    /// Counts one more failed pass of `key`; returns the count of consecutive failures so far.
    pub fn record_failure(&self, key: &ObjectKey) -> u32 {
        let mut count = self.counts.entry(key.clone()).or_insert(0);
        *count = count.saturating_add(1);
        *count
    }

    /// Forgets `key`'s failures (its pass succeeded, or the cluster is gone).
    pub fn clear(&self, key: &ObjectKey) {
        self.counts.remove(key);
    }
}

/// `cluster`'s status with `ReconcileSucceeded=False, ReconcileError` and `message`; every other
/// field and condition as it is.
pub fn with_reconcile_error(
    cluster: &DatabaseCluster,
    message: &str,
    now: Timestamp,
) -> DatabaseClusterStatus {
    let mut status = cluster.status.clone().unwrap_or_default();
    let mut conditions = ConditionSetter::new(status.conditions, cluster.metadata.generation, now);
    let message = truncate(message.to_owned(), MAX_MESSAGE_BYTES);
    conditions.set(RECONCILE_SUCCEEDED, "False", REASON_RECONCILE_ERROR, message);
    status.conditions = conditions.into_inner();
    status
}

/// `status` after a successful pass: `ReconcileSucceeded` flipped to `True` if it is there,
/// otherwise unchanged.
pub fn with_reconcile_success(
    mut status: DatabaseClusterStatus,
    generation: Option<i64>,
    now: Timestamp,
) -> DatabaseClusterStatus {
    if status.conditions.iter().any(|c| c.type_ == RECONCILE_SUCCEEDED) {
        let mut conditions = ConditionSetter::new(status.conditions, generation, now);
        let message = "The last reconcile pass succeeded".to_owned();
        conditions.set(RECONCILE_SUCCEEDED, "True", REASON_RECONCILED, message);
        status.conditions = conditions.into_inner();
    }
    status
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::databasecluster::fixtures;

    fn cluster() -> DatabaseCluster {
        fixtures::cluster(1, "15", 2)
    }

    fn condition(status: &DatabaseClusterStatus) -> Option<(&str, &str, &str)> {
        let c = status.conditions.iter().find(|c| c.type_ == RECONCILE_SUCCEEDED)?;
        Some((c.status.as_str(), c.reason.as_str(), c.message.as_str()))
    }

    #[test]
    fn failures_count_up_until_cleared() {
        let counts = FailureCounts::default();
        let key = ObjectKey::new(Some("default"), "pg");
        let other = ObjectKey::new(Some("default"), "other");
        assert_eq!(counts.record_failure(&key), 1);
        assert_eq!(counts.record_failure(&key), 2);
        assert_eq!(counts.record_failure(&other), 1);
        assert_eq!(counts.record_failure(&key), FAILURE_THRESHOLD);
        counts.clear(&key);
        assert_eq!(counts.record_failure(&key), 1);
    }

    #[test]
    fn an_error_sets_the_condition_and_a_success_flips_it_keeping_other_conditions() {
        let now = Timestamp::from_second(1_800_000_000).unwrap();
        let mut cluster = cluster();
        let mut status = DatabaseClusterStatus::default();
        let mut ready = ConditionSetter::new(Vec::new(), Some(2), now);
        ready.set("Ready", "True", "AllReplicasReady", "ok".into());
        status.conditions = ready.into_inner();
        cluster.status = Some(status.clone());

        assert_eq!(with_reconcile_success(status.clone(), Some(2), now), status, "never failed: unchanged");

        let failing = with_reconcile_error(&cluster, "Service pg is controlled by ConfigMap x", now);
        assert_eq!(
            condition(&failing),
            Some(("False", "ReconcileError", "Service pg is controlled by ConfigMap x"))
        );
        assert!(failing.conditions.iter().any(|c| c.type_ == "Ready"), "other conditions kept");
        cluster.status = Some(failing.clone());
        assert_eq!(with_reconcile_error(&cluster, "Service pg is controlled by ConfigMap x", now), failing);

        let later = Timestamp::from_second(1_800_000_060).unwrap();
        let healed = with_reconcile_success(failing, Some(2), later);
        assert_eq!(condition(&healed).map(|(s, r, _)| (s, r)), Some(("True", "Reconciled")));
        let flipped = healed.conditions.iter().find(|c| c.type_ == RECONCILE_SUCCEEDED).unwrap();
        assert_eq!(flipped.last_transition_time.0, later);
    }

    #[test]
    fn a_long_message_is_cut_to_what_the_api_accepts() {
        let failing = with_reconcile_error(&cluster(), &"é".repeat(MAX_MESSAGE_BYTES), Timestamp::UNIX_EPOCH);
        assert!(condition(&failing).unwrap().2.len() <= MAX_MESSAGE_BYTES);
    }
}
