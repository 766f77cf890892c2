//! Switchover, decided purely: a planned change of primary to the standby `spec.primary` names,
//! with no lost transaction (the I/O is in [`crate::databasecluster::failover::promotion`]).
//!
//! `spec.primary` is a request, acted on when it changes: the status records the value handled
//! (`status.switchover.requested`), so that a later failover is not undone by a value still in the
//! spec. A request naming the current primary is handled at once and changes nothing.
//!
//! The steps, each durable before the next, so that a restarted operator resumes:
//! 1. **Check** the target ([`check_target`]): an instance of the cluster, ready, streaming from
//!    a ready primary. Otherwise `Ready=False` with reason `InvalidPrimary` and a Warning Event
//!    (once per value); the request waits for the next change (spec or instances), no retries.
//! 2. **Fence** (Event `SwitchingOver`): `CHECKPOINT` on the old primary (so that its shutdown
//!    checkpoint is quick), its role label becomes `replica` (`<name>-rw` reaches nothing), and the
//!    record names the target with the old primary as `demoting`. The old primary's watcher sees
//!    the record and makes a fast shutdown: PostgreSQL then sends every WAL record, the shutdown
//!    checkpoint last, to the connected standbys before it stops. It restarts as a standby of the
//!    target without a rewind (its data ends at that checkpoint).
//! 3. **Promote** once the old primary answers in recovery and the target has replayed past the
//!    old primary's shutdown checkpoint ([`next_step`]): every transaction is on the target.
//! 4. **Finish**: the target's label becomes `primary`, `demoting` is cleared, Event
//!    `SwitchedOver`.
//!
//! If the old primary neither fences nor comes back in recovery within [`SWITCHOVER_TIMEOUT`], or
//! the target never catches up, the switchover is **aborted**: the record names the old primary
//! again (a standby now, promoted by failover rule 2 with all of its own WAL), and the failover
//! rules apply from there.

pub mod demotion;

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::databasecluster::api::types::{DatabaseClusterStatus, InstanceStatus, SwitchoverStatus};
use crate::databasecluster::controller::status::{ConditionSetter, condition};
use crate::databasecluster::instances::InstanceFacts;
use crate::databasecluster::instances::topology::PodView;

/// How long a switchover may wait for the old primary to come back in recovery and for the target
/// to catch up with it.
pub const SWITCHOVER_TIMEOUT: Duration = Duration::from_secs(60);

/// Reason of the `Ready=False` condition and the Warning Event for a target that cannot be used.
pub const INVALID_PRIMARY: &str = "InvalidPrimary";

/// `status.switchover.phase` values.
pub mod phase {
    /// The target cannot take over (yet); the request is retried when something changes.
    pub const REFUSED: &str = "Refused";
    /// The old primary is fenced; the target is not promoted yet.
    pub const SWITCHING_OVER: &str = "SwitchingOver";
    /// The target is the primary.
    pub const COMPLETED: &str = "Completed";
    /// The old primary is the primary again.
    pub const ABORTED: &str = "Aborted";
}

/// The `spec.primary` value still to act on: set, and not the value `previous` handled (a
/// refused value is not handled).
pub fn requested<'a>(spec_primary: Option<&'a str>, previous: Option<&SwitchoverStatus>) -> Option<&'a str> {
    let handled = previous.filter(|s| s.phase != phase::REFUSED).map(|s| s.requested.as_str());
    spec_primary.filter(|target| Some(*target) != handled)
}

/// `status` with this pass's `switchover` record (if any), and `Ready=False, InvalidPrimary`
/// while the value the spec asks for (`spec_primary`) is refused.
pub fn with_switchover(
    mut status: DatabaseClusterStatus,
    switchover: Option<SwitchoverStatus>,
    spec_primary: Option<&str>,
    now: Timestamp,
) -> DatabaseClusterStatus {
    if let Some(switchover) = switchover {
        status.switchover = Some(switchover);
    }
    let refused = status
        .switchover
        .as_ref()
        .filter(|s| s.phase == phase::REFUSED && Some(s.requested.as_str()) == spec_primary)
        .map(|s| s.message.clone());
    if let Some(message) = refused {
        let mut conditions = ConditionSetter::new(status.conditions, status.observed_generation, now);
        conditions.set(condition::READY, "False", INVALID_PRIMARY, message);
        status.conditions = conditions.into_inner();
    }
    status
}

/// A `status.switchover` record about `requested`; `switch` is the switchover's old and new
/// primary, if one was started.
pub fn record(
    requested: &str,
    phase: &str,
    switch: Option<(&str, &str)>,
    started: Option<Time>,
    message: String,
) -> SwitchoverStatus {
    SwitchoverStatus {
        requested: requested.to_owned(),
        phase: phase.to_owned(),
        from: switch.map(|(from, _)| from.to_owned()),
        to: switch.map(|(_, to)| to.to_owned()),
        started,
        message,
    }
}

/// The ordinal of the pod `name` (`<statefulset>-<ordinal>`).
pub fn ordinal_of(name: &str) -> Option<i32> {
    name.rsplit_once('-').and_then(|(_, ordinal)| ordinal.parse().ok())
}

/// The StatefulSet's replicas for `replicas` instances while `primaries` (the recorded primary
/// and a switchover's demoting one) must stay: a scale down never removes them before a
/// switchover has moved the primary below the new count. Hibernation (0) is not held.
pub fn held_replicas(replicas: i32, primaries: &[&str]) -> i32 {
    if replicas == 0 {
        return 0;
    }
    primaries.iter().filter_map(|name| ordinal_of(name)).map(|o| o + 1).fold(replicas, i32::max)
}

/// The value a switchover the operator starts itself (a roll, a scale down) records as handled:
/// the one handled before, else the spec's, else `target`; so a later `spec.primary` request is
/// judged against what the user asked, not against this switchover.
pub fn handled_request(
    previous: Option<&SwitchoverStatus>,
    spec_primary: Option<&str>,
    target: &str,
) -> String {
    previous.map(|s| s.requested.as_str()).or(spec_primary).unwrap_or(target).to_owned()
}

/// Why `spec.primary` cannot be switched to; the message of `Ready=False, InvalidPrimary`.
pub fn check_target(
    target: &str,
    pods: &[PodView],
    statuses: &[InstanceStatus],
    replicas: i32,
    primary: Option<&str>,
) -> Result<(), String> {
    let Some(pod) = pods.iter().find(|p| p.name == target && p.ordinal < replicas && !p.deleting) else {
        let names: Vec<&str> = statuses.iter().map(|s| s.name.as_str()).collect();
        return Err(format!(
            "spec.primary {target:?} is not an instance of this cluster (instances: {})",
            names.join(", ")
        ));
    };
    let status = statuses.iter().find(|s| s.name == target);
    let streaming =
        status.is_some_and(|s| s.role == "replica" && s.replication_state.as_deref() == Some("streaming"));
    match primary {
        _ if !pod.ready || !streaming => Err(format!(
            "spec.primary {target:?} is not a ready standby streaming from the primary; the switchover waits until it is"
        )),
        None => Err(format!("spec.primary {target:?}: no primary accepts writes to switch over from")),
        Some(_) => Ok(()),
    }
}

/// What to do next in a switchover from `demoting` to `target`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// The old primary has not fenced, or the target has not caught up yet.
    Wait,
    /// Every transaction of the old primary is on the target: promote it.
    Promote,
    /// The target accepts writes: move its label, clear `demoting`.
    Finish,
    /// Past [`SWITCHOVER_TIMEOUT`]: name the old primary again.
    Abort,
}

/// The next step, from what `demoting` and `target` said (`facts`) `elapsed` after the fence.
pub fn next_step(
    demoting: &str,
    target: &str,
    facts: &BTreeMap<String, InstanceFacts>,
    elapsed: Duration,
) -> Step {
    let target_facts = facts.get(target);
    if target_facts.is_some_and(|f| !f.in_recovery) {
        return Step::Finish;
    }
    let final_checkpoint = facts.get(demoting).filter(|f| f.in_recovery).and_then(|f| f.checkpoint_lsn);
    let replayed = target_facts.and_then(|f| f.replay_lsn);
    if let (Some(checkpoint), Some(replayed)) = (final_checkpoint, replayed)
        && replayed > checkpoint
    {
        return Step::Promote;
    }
    if elapsed > SWITCHOVER_TIMEOUT { Step::Abort } else { Step::Wait }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(ordinal: i32, ready: bool) -> PodView {
        PodView { name: format!("db-{ordinal}"), ordinal, ready, ..PodView::default() }
    }

    fn status(ordinal: i32, role: &str, state: Option<&str>) -> InstanceStatus {
        InstanceStatus {
            name: format!("db-{ordinal}"),
            role: role.into(),
            replication_state: state.map(str::to_owned),
            ..InstanceStatus::default()
        }
    }

    #[test]
    fn a_request_is_acted_on_once_and_a_refused_one_again() {
        let handled = |phase: &str| record("db-1", phase, Some(("db-0", "db-1")), None, String::new());
        assert_eq!(requested(Some("db-1"), None), Some("db-1"));
        let done = handled(phase::COMPLETED);
        assert_eq!(requested(Some("db-1"), Some(&done)), None, "handled: a later failover is not undone");
        assert_eq!(requested(Some("db-2"), Some(&done)), Some("db-2"));
        assert_eq!(requested(Some("db-1"), Some(&handled(phase::REFUSED))), Some("db-1"));
        assert_eq!(requested(None, None), None);
    }

    #[test]
    fn a_scale_down_keeps_the_primary_until_it_has_moved() {
        assert_eq!(held_replicas(1, &["db-2"]), 3);
        assert_eq!(held_replicas(2, &["db-0", "db-3"]), 4, "the demoting primary stays too");
        assert_eq!(held_replicas(3, &["db-1"]), 3);
        assert_eq!(held_replicas(0, &["db-2"]), 0, "hibernation stops every instance");
        assert_eq!(ordinal_of("my-db-12"), Some(12));
        assert_eq!(handled_request(None, None, "db-0"), "db-0");
        assert_eq!(handled_request(None, Some("db-1"), "db-0"), "db-1");
    }

    #[test]
    fn a_refused_target_makes_the_cluster_not_ready_while_the_spec_asks_for_it() {
        let at = Timestamp::from_second(1_700_000_000).unwrap();
        let refused = record("db-7", phase::REFUSED, None, None, "no such instance".into());
        let status = with_switchover(DatabaseClusterStatus::default(), Some(refused), Some("db-7"), at);
        let ready = status.conditions.iter().find(|c| c.type_ == condition::READY).unwrap();
        assert_eq!((ready.status.as_str(), ready.reason.as_str()), ("False", INVALID_PRIMARY));
        assert_eq!(ready.message, "no such instance");
        let withdrawn = with_switchover(DatabaseClusterStatus::default(), status.switchover, None, at);
        assert!(withdrawn.conditions.is_empty(), "no longer asked for");
    }

    #[test]
    fn the_target_must_be_a_ready_streaming_standby_of_this_cluster() {
        let pods = [pod(0, true), pod(1, true), pod(2, false)];
        let statuses =
            [status(0, "primary", None), status(1, "replica", Some("streaming")), status(2, "replica", None)];
        assert_eq!(check_target("db-1", &pods, &statuses, 3, Some("db-0")), Ok(()));
        let missing = check_target("db-7", &pods, &statuses, 3, Some("db-0")).unwrap_err();
        assert!(missing.contains("not an instance") && missing.contains("db-0, db-1, db-2"), "{missing}");
        let behind = check_target("db-2", &pods, &statuses, 3, Some("db-0")).unwrap_err();
        assert!(behind.contains("not a ready standby streaming"), "{behind}");
        assert!(check_target("db-1", &pods, &statuses, 1, Some("db-0")).is_err(), "scaled away");
        assert!(check_target("db-1", &pods, &statuses, 3, None).is_err(), "no primary");
    }

    #[test]
    fn the_target_is_promoted_only_past_the_old_primarys_shutdown_checkpoint() {
        let standby = |checkpoint: Option<i64>, replay: Option<i64>| InstanceFacts {
            in_recovery: true,
            checkpoint_lsn: checkpoint,
            replay_lsn: replay,
            ..InstanceFacts::default()
        };
        let facts = |old: InstanceFacts, new: InstanceFacts| {
            BTreeMap::from([("db-0".to_owned(), old), ("db-1".to_owned(), new)])
        };
        let early = Duration::from_secs(5);
        let still_primary = InstanceFacts { in_recovery: false, ..InstanceFacts::default() };
        assert_eq!(
            next_step("db-0", "db-1", &facts(still_primary, standby(None, Some(10))), early),
            Step::Wait
        );
        let behind = facts(standby(Some(100), None), standby(None, Some(100)));
        assert_eq!(
            next_step("db-0", "db-1", &behind, early),
            Step::Wait,
            "the checkpoint record not replayed"
        );
        assert_eq!(next_step("db-0", "db-1", &behind, SWITCHOVER_TIMEOUT * 2), Step::Abort);
        let caught_up = facts(standby(Some(100), None), standby(None, Some(180)));
        assert_eq!(next_step("db-0", "db-1", &caught_up, early), Step::Promote);
        let only_target = BTreeMap::from([("db-1".to_owned(), standby(None, Some(500)))]);
        assert_eq!(next_step("db-0", "db-1", &only_target, early), Step::Wait, "the old primary is not back");
        let promoted = BTreeMap::from([(
            "db-1".to_owned(),
            InstanceFacts { in_recovery: false, ..InstanceFacts::default() },
        )]);
        assert_eq!(next_step("db-0", "db-1", &promoted, SWITCHOVER_TIMEOUT * 2), Step::Finish);
    }
}
