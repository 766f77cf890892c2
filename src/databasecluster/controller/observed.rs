//! How old the instances' figures are: `status.instancesObservedAt`, the time of the pass whose
//! observation of the instances (roles, readiness, lag, the primary) the status holds.
//!
//! Stamping every pass would cost a status write per pass, and a cluster whose status did not
//! change costs none. So the stamp is a pure decision ([`with_observation`]): it moves whenever
//! the status is written anyway (the figures, or anything else, changed), when none was recorded
//! yet, when it is older than [`OBSERVATION_REFRESH`] on a pass of a converging cluster (looked at
//! every 10 s), and when it is older than [`OBSERVATION_REFRESH_AT_REST`] on a settled cluster's
//! pass (looked at every 30 s: a status write every 30 s for each of thousands of clusters at rest
//! would cost more than a fresher stamp is worth, and the figures it stamps did not change).

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::databasecluster::api::types::DatabaseClusterStatus;

/// How stale the stamp may grow on a converging cluster before a pass that changed nothing
/// writes it anew, in seconds.
pub const OBSERVATION_REFRESH: i64 = 30;

/// How stale the stamp may grow on a settled cluster before a pass that changed nothing writes it
/// anew, in seconds.
pub const OBSERVATION_REFRESH_AT_REST: i64 = 300;

/// `status`, computed by a pass that observed the instances at `now`, with
/// `instancesObservedAt` as [the module](self) decides from the `previous` status and whether
/// the cluster is `converging`. No instances, no stamp.
pub fn with_observation(
    previous: Option<&DatabaseClusterStatus>,
    mut status: DatabaseClusterStatus,
    converging: bool,
    now: Timestamp,
) -> DatabaseClusterStatus {
    if status.instances.is_empty() {
        status.instances_observed_at = None;
        return status;
    }
    let kept = previous.and_then(|p| p.instances_observed_at.clone());
    let refresh = if converging { OBSERVATION_REFRESH } else { OBSERVATION_REFRESH_AT_REST };
    let fresh = kept.as_ref().is_some_and(|at| now.as_second() - at.0.as_second() < refresh);
    status.instances_observed_at = kept;
    let unchanged = previous == Some(&status);
    if unchanged && status.instances_observed_at.is_some() && fresh {
        return status;
    }
    // The API keeps whole seconds: stamping whole seconds keeps the status read back equal.
    status.instances_observed_at = Some(Time(Timestamp::from_second(now.as_second()).unwrap_or(now)));
    status
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::databasecluster::api::types::{InstanceStatus, Phase};

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(1_767_225_600 + second).unwrap()
    }

    fn observed(lag: i64, stamp: Option<i64>) -> DatabaseClusterStatus {
        DatabaseClusterStatus {
            phase: Some(Phase::Running),
            instances: vec![InstanceStatus {
                name: "pg-1".into(),
                role: "replica".into(),
                ready: true,
                lag_bytes: Some(lag),
                ..InstanceStatus::default()
            }],
            instances_observed_at: stamp.map(|s| Time(at(s))),
            ..DatabaseClusterStatus::default()
        }
    }

    #[test]
    fn the_stamp_moves_with_a_change_and_stays_while_nothing_changes() {
        let previous = observed(0, Some(0));
        let same = with_observation(Some(&previous), observed(0, None), true, at(12));
        assert_eq!(same, previous, "nothing changed, stamp 12 s old: no write");
        let at_rest = with_observation(Some(&previous), observed(0, None), false, at(OBSERVATION_REFRESH));
        assert_eq!(at_rest, previous, "at rest the stamp ages rather than costing a write every 30 s");
        let rest_stale =
            with_observation(Some(&previous), observed(0, None), false, at(OBSERVATION_REFRESH_AT_REST));
        assert_eq!(rest_stale.instances_observed_at, Some(Time(at(OBSERVATION_REFRESH_AT_REST))));
        let changed = with_observation(Some(&previous), observed(4096, None), false, at(12));
        assert_eq!(changed.instances_observed_at, Some(Time(at(12))), "written anyway: stamped now");
    }

    #[test]
    fn a_converging_clusters_stale_stamp_and_a_missing_one_are_written() {
        let previous = observed(0, Some(0));
        let stale = with_observation(Some(&previous), observed(0, None), true, at(OBSERVATION_REFRESH));
        assert_eq!(stale.instances_observed_at, Some(Time(at(OBSERVATION_REFRESH))));
        let unstamped = observed(0, None);
        let first = with_observation(Some(&unstamped), observed(0, None), false, at(5));
        assert_eq!(first.instances_observed_at, Some(Time(at(5))), "a status from before the field");
        let subsecond = at(7).checked_add(jiff::SignedDuration::from_millis(600)).unwrap();
        let whole = with_observation(None, observed(0, None), false, subsecond);
        assert_eq!(whole.instances_observed_at, Some(Time(at(7))), "whole seconds, as the API keeps them");
    }

    #[test]
    fn no_instances_no_stamp() {
        let previous = observed(0, Some(0));
        let hibernated = DatabaseClusterStatus { phase: Some(Phase::Hibernated), ..Default::default() };
        assert_eq!(with_observation(Some(&previous), hibernated, false, at(9)).instances_observed_at, None);
    }
}
