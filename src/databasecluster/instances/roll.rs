//! Rolling updates, decided purely: which outdated pod to delete next, if any.
//!
//! The StatefulSet uses `updateStrategy: OnDelete`, so a pod runs its old template until the
//! operator deletes it (the StatefulSet controller then recreates it from the new one). One pod
//! at a time, and only when every pod exists, is ready, is not being deleted, and every standby
//! streams from the primary: the standbys first (highest ordinal first), the primary last. With a
//! single instance the update is a restart of the database. With 2+ instances observed and
//! `spec.primaryUpdateMethod: switchover` (the default), the primary's turn is a switchover to
//! the lowest-ordinal (updated) standby instead ([`crate::databasecluster::switchover`]); the old primary, a
//! standby then, is deleted on a later pass like any other.
//!
//! When the operator can observe no instance at all (no SQL access to the pods, as with the
//! simulator's timer kubelet), the readiness probes are the only signal: the roll still goes one
//! ready pod at a time in the same order, with the recorded primary last.

use crate::databasecluster::api::types::InstanceStatus;
use crate::databasecluster::instances::topology::{PodView, ROLE_UNKNOWN, all_standbys_streaming};

/// The next step of a roll.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RollStep {
    /// Every pod runs the current template.
    Done,
    /// Outdated pods remain, but the cluster is not settled enough to take one down.
    Wait,
    /// Only the primary is outdated: switch over to this updated standby first.
    SwitchOver {
        /// The standby to promote.
        to: String,
    },
    /// Delete this pod now.
    Delete {
        /// The pod's name.
        pod: String,
        /// Whether it is the primary.
        primary: bool,
        /// Outdated pods left, this one included.
        outdated: usize,
    },
}

/// The next step for `pods` whose StatefulSet's `updateRevision` is `update_revision`; `replicas`
/// is the desired number of instances; `switch_over` whether the primary is updated by a
/// switchover.
pub fn next_step(
    pods: &[PodView],
    update_revision: &str,
    replicas: i32,
    primary: Option<&str>,
    recorded_primary: &str,
    statuses: &[InstanceStatus],
    switch_over: bool,
) -> RollStep {
    let mut outdated: Vec<&PodView> =
        pods.iter().filter(|pod| pod.revision.as_deref() != Some(update_revision)).collect();
    if outdated.is_empty() {
        return RollStep::Done;
    }
    let observed = statuses.iter().any(|s| s.role != ROLE_UNKNOWN);
    let settled = pods.len() == usize::try_from(replicas).unwrap_or(0)
        && pods.iter().all(|pod| pod.ready && !pod.deleting)
        && (!observed || (primary.is_some() && all_standbys_streaming(statuses, primary)));
    if !settled {
        return RollStep::Wait;
    }
    let primary = primary.unwrap_or(recorded_primary);
    let is_primary = |pod: &PodView| pod.name == primary;
    // Standbys before the primary; among standbys, the highest ordinal first.
    outdated.sort_by_key(|pod| (is_primary(pod), std::cmp::Reverse(pod.ordinal)));
    let next = outdated[0];
    if is_primary(next) && switch_over && observed {
        let updated = pods
            .iter()
            .filter(|pod| !is_primary(pod) && pod.revision.as_deref() == Some(update_revision))
            .min_by_key(|pod| pod.ordinal);
        if let Some(standby) = updated {
            return RollStep::SwitchOver { to: standby.name.clone() };
        }
    }
    RollStep::Delete { pod: next.name.clone(), primary: is_primary(next), outdated: outdated.len() }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(ordinal: i32, revision: &str) -> PodView {
        PodView {
            name: format!("db-{ordinal}"),
            ordinal,
            ready: true,
            revision: Some(revision.to_owned()),
            ..PodView::default()
        }
    }

    fn statuses(pods: &[PodView], streaming: bool) -> Vec<InstanceStatus> {
        pods.iter()
            .map(|p| InstanceStatus {
                name: p.name.clone(),
                role: if p.ordinal == 0 { "primary" } else { "replica" }.into(),
                ready: true,
                replication_state: (p.ordinal != 0 && streaming).then(|| "streaming".into()),
                ..InstanceStatus::default()
            })
            .collect()
    }

    fn step(pods: &[PodView], streaming: bool) -> RollStep {
        next_step(pods, "new", 3, Some("db-0"), "db-0", &statuses(pods, streaming), false)
    }

    #[test]
    fn standbys_go_first_highest_ordinal_first_and_the_primary_last() {
        let mut pods = vec![pod(0, "old"), pod(1, "old"), pod(2, "old")];
        let mut order = Vec::new();
        while let RollStep::Delete { pod: name, primary, .. } = step(&pods, true) {
            order.push((name.clone(), primary));
            let updated = pods.iter_mut().find(|p| p.name == name).unwrap();
            updated.revision = Some("new".into());
        }
        assert_eq!(
            order,
            [("db-2".to_owned(), false), ("db-1".to_owned(), false), ("db-0".to_owned(), true)]
        );
        assert_eq!(step(&pods, true), RollStep::Done);
    }

    #[test]
    fn nothing_is_deleted_while_a_pod_is_down_or_a_standby_is_not_streaming() {
        let mut pods = vec![pod(0, "old"), pod(1, "new"), pod(2, "old")];
        assert_eq!(step(&pods, false), RollStep::Wait);
        pods[1].ready = false;
        assert_eq!(step(&pods, true), RollStep::Wait);
        pods[1].ready = true;
        pods[1].deleting = true;
        assert_eq!(step(&pods, true), RollStep::Wait);
        pods.truncate(2);
        pods[1].deleting = false;
        assert_eq!(step(&pods, true), RollStep::Wait, "a missing pod is being recreated");
    }

    #[test]
    fn without_observations_readiness_alone_gates_and_the_recorded_primary_goes_last() {
        let pods = vec![pod(0, "old"), pod(1, "old")];
        let unknown: Vec<InstanceStatus> = pods
            .iter()
            .map(|p| InstanceStatus {
                name: p.name.clone(),
                role: ROLE_UNKNOWN.into(),
                ..InstanceStatus::default()
            })
            .collect();
        let step = next_step(&pods, "new", 2, None, "db-0", &unknown, true);
        assert_eq!(step, RollStep::Delete { pod: "db-1".into(), primary: false, outdated: 2 });
        let mut down = pods.clone();
        down[1].ready = false;
        assert_eq!(next_step(&down, "new", 2, None, "db-0", &unknown, true), RollStep::Wait);
    }

    #[test]
    fn a_single_instance_is_restarted() {
        let pods = vec![pod(0, "old")];
        let step = next_step(&pods, "new", 1, Some("db-0"), "db-0", &statuses(&pods, true), true);
        assert_eq!(step, RollStep::Delete { pod: "db-0".into(), primary: true, outdated: 1 });
    }

    #[test]
    fn the_primarys_turn_is_a_switchover_to_the_first_updated_standby() {
        let pods = vec![pod(0, "old"), pod(1, "new"), pod(2, "new")];
        let observed = statuses(&pods, true);
        let step = next_step(&pods, "new", 3, Some("db-0"), "db-0", &observed, true);
        assert_eq!(step, RollStep::SwitchOver { to: "db-1".into() });
        let restart = next_step(&pods, "new", 3, Some("db-0"), "db-0", &observed, false);
        assert_eq!(restart, RollStep::Delete { pod: "db-0".into(), primary: true, outdated: 1 });
        let unobserved: Vec<InstanceStatus> =
            observed.iter().map(|s| InstanceStatus { role: ROLE_UNKNOWN.into(), ..s.clone() }).collect();
        let blind = next_step(&pods, "new", 3, None, "db-0", &unobserved, true);
        assert!(matches!(blind, RollStep::Delete { primary: true, .. }), "no switchover without observing");
    }
}
