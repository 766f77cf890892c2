//! Failover, decided purely: whether the recorded primary is down long enough that a standby must
//! be promoted in its place, which one, and what the status says about it.
//!
//! The record is the `primary` key of the `<name>-scripts` ConfigMap ([`crate::databasecluster::specs::config`]): the
//! instance that must accept writes. Every instance reads it when it starts (and a watcher reads
//! it while it runs), so changing it is what makes a standby the primary and the old primary a
//! standby (the instance program's contract). Rules:
//! 1. The recorded primary's pod is ready → nothing to do.
//! 2. The recorded instance answers in recovery while no instance accepts writes → a failover
//!    was interrupted after the record changed (an operator restart): promote it now, whatever
//!    the delay says (the record already moved).
//! 3. Another instance accepts writes → nothing to do (the cache is behind a failover just made).
//! 4. Otherwise the primary is down since the earliest of what is true in every state of its pod
//!    ([`seen_down_since`], [`PodView::not_ready_since`]): when this operator first saw it down,
//!    kept in the status (the `PrimaryAvailable` condition's `lastTransitionTime`, so a restart of
//!    the operator does not reset the clock); when its pod's `Ready` condition turned false; when
//!    its pod was created, if it has never been ready (unschedulable, say); now, if none of these
//!    is known (a pod missing or being deleted, seen down for the first time). A pod that is never
//!    scheduled has no `Ready` condition at all, so that condition alone would never let the
//!    clock run. Down for less than `spec.failoverDelay` → wait (`0`: no wait); then the ready standby that has streamed since it started
//!    (`pg_last_wal_receive_lsn()` not null) with the most WAL received is promoted (ties: the
//!    lowest ordinal), or nothing when there is none.
//! 5. With `spec.synchronousReplicas` N > 0 ([`Synchronous`]) every acknowledged commit was
//!    flushed by at least N of the standbys recorded `sync`/`quorum` when the primary was last
//!    observed (the members, M of them). Rule 4's choice is promoted only if it is a member, and
//!    only while at least M − N + 1 members are observed with their WAL position: then one of
//!    them holds every acknowledged commit, and the one with the most WAL holds them all.
//!    Otherwise nothing is promoted (`NoSynchronousCandidate`): waiting loses no write.
//! 6. A recorded primary whose manager says its data volume is full is not failed over
//!    ([`held_for_full_disk`], `DiskFull`): its standbys hold the same data on volumes of the same
//!    size and would fill up next, and a promotion would lose what they have not received.
//!    Growing `storageSize` brings it back.
//!
//! A promotion that a stopped operator carried out but never reported (the record names an
//! instance that accepts writes, while the last status names another primary and no failover to
//! it) is reported by the next one: [`unreported_promotion`].
//!
//! Condition `PrimaryAvailable` says which of these holds (not set while hibernated); after a
//! failover `status.lastFailover` and the `FailedOver` Event say what was guaranteed
//! ([`outcome`]).

pub mod promotion;

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::databasecluster::api::types::{
    DEFAULT_FAILOVER_DELAY_SECONDS, DatabaseCluster, DatabaseClusterStatus, FailoverRecord, InstanceStatus,
    PrimaryUpdateMethod,
};
use crate::databasecluster::controller::events::{EventNote, EventType};
use crate::databasecluster::controller::status::ConditionSetter;
use crate::databasecluster::instances::InstanceFacts;
use crate::databasecluster::instances::topology::PodView;

/// Condition type: whether the recorded primary accepts writes.
pub const PRIMARY_AVAILABLE: &str = "PrimaryAvailable";

/// Reasons of [`PRIMARY_AVAILABLE`].
pub mod reason {
    /// True: the recorded primary is ready.
    pub const PRIMARY_READY: &str = "PrimaryReady";
    /// False: not ready, the failover delay has not passed.
    pub const PRIMARY_NOT_READY: &str = "PrimaryNotReady";
    /// False: not ready, and no standby can take over.
    pub const NO_FAILOVER_CANDIDATE: &str = "NoFailoverCandidate";
    /// False: not ready, and no standby is known to hold every acknowledged write.
    pub const NO_SYNCHRONOUS_CANDIDATE: &str = "NoSynchronousCandidate";
    /// False: a standby is being promoted.
    pub const FAILING_OVER: &str = "FailingOver";
    /// False: a switchover is under way.
    pub const SWITCHING_OVER: &str = "SwitchingOver";
    /// False: the primary's data volume is full; nothing is promoted.
    pub const DISK_FULL: &str = "DiskFull";
}

/// What synchronous replication asks of a failover candidate (rule 5 of the module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Synchronous {
    /// `spec.synchronousReplicas`: how many standbys confirm each commit.
    pub required: usize,
    /// The standbys recorded `sync` or `quorum` when the primary was last observed.
    pub members: Vec<String>,
}

/// The requirement for `synchronous_replicas` (none when 0) over the recorded `statuses`.
pub fn synchronous(synchronous_replicas: i32, statuses: &[InstanceStatus]) -> Option<Synchronous> {
    let required = usize::try_from(synchronous_replicas).ok().filter(|n| *n > 0)?;
    let members = statuses
        .iter()
        .filter(|s| matches!(s.sync_state.as_deref(), Some("sync" | "quorum")))
        .map(|s| s.name.clone())
        .collect();
    Some(Synchronous { required, members })
}

/// What to do about the recorded primary.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// The recorded primary is ready, or another instance accepts writes.
    Healthy,
    /// Down for `down_for`; a failover may come after `remaining`.
    Waiting {
        /// How long the primary has been not ready.
        down_for: Duration,
        /// How long until the delay has passed.
        remaining: Duration,
    },
    /// Down past the delay, and no standby can take over.
    NoCandidate {
        /// How long the primary has been not ready.
        down_for: Duration,
    },
    /// Down past the delay, and no standby is known to hold every acknowledged write.
    NoSynchronousCandidate {
        /// How long the primary has been not ready.
        down_for: Duration,
    },
    /// Down because its data volume is full: held, not failed over (rule 6).
    DiskFull,
    /// A switchover from `from` to the recorded instance is under way ([`crate::databasecluster::switchover`]).
    SwitchingOver {
        /// The primary being demoted.
        from: String,
    },
    /// Promote `pod`.
    Promote {
        /// The standby to promote.
        pod: String,
        /// WAL it has received, in bytes.
        received_lsn: Option<i64>,
        /// The record already names it (an interrupted failover is being finished).
        resume: bool,
        /// How long the primary has been not ready.
        down_for: Duration,
    },
}

/// `spec.failoverDelay`, or its default: how long the primary stays not ready before a standby
/// is promoted (zero: as soon as it is seen not ready). With `primaryUpdateMethod: Restart` a
/// roll restarts the primary in place, which takes seconds; the delay is then at least
/// [`IN_PLACE_RESTART_SECONDS`], so that a planned restart is not taken for a failure.
pub fn failover_delay(cluster: &DatabaseCluster) -> Duration {
    let mut seconds = cluster.spec.failover_delay.unwrap_or(DEFAULT_FAILOVER_DELAY_SECONDS);
    if cluster.spec.primary_update_method == Some(PrimaryUpdateMethod::Restart) {
        seconds = seconds.max(IN_PLACE_RESTART_SECONDS);
    }
    Duration::from_secs(u64::try_from(seconds).unwrap_or(0))
}

/// The least failover delay with `primaryUpdateMethod: Restart`, in seconds.
pub const IN_PLACE_RESTART_SECONDS: i32 = 30;

/// When this operator first saw `record` down, as the status it wrote last keeps it: the
/// [`PRIMARY_AVAILABLE`] condition's `lastTransitionTime`, while that condition is False about
/// `record` (the status's `targetPrimary`) for a reason that means the primary is down.
pub fn seen_down_since(previous: Option<&DatabaseClusterStatus>, record: &str) -> Option<Timestamp> {
    let previous = previous?;
    if previous.target_primary.as_deref() != Some(record) {
        return None;
    }
    let down_reasons = [
        reason::PRIMARY_NOT_READY,
        reason::NO_FAILOVER_CANDIDATE,
        reason::NO_SYNCHRONOUS_CANDIDATE,
        reason::FAILING_OVER,
        reason::DISK_FULL,
    ];
    let condition = previous.conditions.iter().find(|c| c.type_ == PRIMARY_AVAILABLE)?;
    (condition.status == "False" && down_reasons.contains(&condition.reason.as_str()))
        .then_some(condition.last_transition_time.0)
}

/// Rule 6: `decision` held when the recorded primary's data volume is full (`primary_disk_full`):
/// a wait or a new promotion becomes [`Decision::DiskFull`]. An interrupted failover being
/// finished (the record already moved) and a healthy primary are left as they are.
pub fn held_for_full_disk(decision: Decision, primary_disk_full: bool) -> Decision {
    match decision {
        Decision::Waiting { .. }
        | Decision::NoCandidate { .. }
        | Decision::NoSynchronousCandidate { .. }
        | Decision::Promote { resume: false, .. }
            if primary_disk_full =>
        {
            Decision::DiskFull
        }
        decision => decision,
    }
}

/// The decision for the instances `pods` (with what each said, `facts`) whose record names
/// `record` primary, under `synchronous` replication if any, when this operator saw `record`
/// down first at `seen_down` ([`seen_down_since`]); see the module docs.
pub fn decide(
    record: &str,
    pods: &[PodView],
    facts: &BTreeMap<String, InstanceFacts>,
    delay: Duration,
    synchronous: Option<&Synchronous>,
    seen_down: Option<Timestamp>,
    now: Timestamp,
) -> Decision {
    let live = |pod: &&PodView| !pod.deleting;
    let recorded = pods.iter().filter(live).find(|pod| pod.name == record);
    let accepting_writes =
        pods.iter().filter(live).any(|pod| facts.get(&pod.name).is_some_and(|f| !f.in_recovery));
    let recorded_in_recovery = recorded.and_then(|pod| facts.get(&pod.name)).is_some_and(|f| f.in_recovery);
    if recorded_in_recovery && !accepting_writes {
        let received_lsn = facts.get(record).and_then(|f| f.received_lsn);
        return Decision::Promote {
            pod: record.to_owned(),
            received_lsn,
            resume: true,
            down_for: Duration::ZERO,
        };
    }
    if recorded.is_some_and(|pod| pod.ready) || accepting_writes {
        return Decision::Healthy;
    }
    let pod_down = recorded.and_then(|pod| pod.not_ready_since);
    let since = [pod_down, seen_down].into_iter().flatten().min().unwrap_or(now).min(now);
    let down_for = Duration::try_from(now.duration_since(since)).unwrap_or(Duration::ZERO);
    if down_for < delay {
        return Decision::Waiting { down_for, remaining: delay - down_for };
    }
    let is_member = |name: &str| synchronous.is_none_or(|s| s.members.iter().any(|m| m == name));
    let candidates: Vec<(i64, &PodView)> = pods
        .iter()
        .filter(live)
        .filter(|pod| pod.ready && pod.name != record)
        .filter_map(|pod| {
            let found = facts.get(&pod.name).filter(|f| f.in_recovery)?;
            Some((found.received_lsn?, pod))
        })
        .collect();
    let best = candidates
        .iter()
        .max_by_key(|(lsn, pod)| (*lsn, is_member(&pod.name), std::cmp::Reverse(pod.ordinal)));
    let Some((lsn, pod)) = best else { return Decision::NoCandidate { down_for } };
    if let Some(synchronous) = synchronous {
        let observed = candidates.iter().filter(|(_, pod)| is_member(&pod.name)).count();
        let needed = (synchronous.members.len() + 1).saturating_sub(synchronous.required);
        if !is_member(&pod.name) || observed < needed.max(1) {
            return Decision::NoSynchronousCandidate { down_for };
        }
    }
    Decision::Promote { pod: pod.name.clone(), received_lsn: Some(*lsn), resume: false, down_for }
}

/// A promotion an earlier operator finished but did not report: the old primary, when `record`
/// is the `observed` primary while the `previous` status names another current primary and no
/// failover or switchover to `record`.
pub fn unreported_promotion(
    record: &str,
    observed: Option<&str>,
    previous: Option<&DatabaseClusterStatus>,
) -> Option<String> {
    let previous = previous?;
    let old = previous.current_primary.as_deref().filter(|old| *old != record)?;
    let reported = previous.last_failover.as_ref().is_some_and(|f| f.to == record)
        || previous.switchover.as_ref().is_some_and(|s| s.to.as_deref() == Some(record));
    (observed == Some(record) && !reported).then(|| old.to_owned())
}

/// The PostgreSQL text form of the WAL position `lsn` (bytes), e.g. `0/3000148`.
pub fn lsn_text(lsn: i64) -> String {
    format!("{:X}/{:X}", lsn >> 32, lsn & 0xFFFF_FFFF)
}

/// The record of a failover from `old` to `new`, which had received WAL up to `received_lsn`,
/// under `synchronous_replicas`, finished at `now`: what it guarantees.
pub fn outcome(
    old: &str,
    new: &str,
    received_lsn: Option<i64>,
    synchronous_replicas: i32,
    now: Timestamp,
) -> FailoverRecord {
    let (possible_loss, guarantee) = if synchronous_replicas > 0 {
        (
            false,
            format!(
                "synchronous (ANY {synchronous_replicas}): {new} was a synchronous standby with the most WAL, so every acknowledged write is on it"
            ),
        )
    } else {
        let after = received_lsn
            .map_or_else(|| format!("the last WAL {new} received"), |lsn| format!("LSN {}", lsn_text(lsn)));
        (true, format!("asynchronous: writes {old} acknowledged after {after} may be lost"))
    };
    FailoverRecord {
        from: old.to_owned(),
        to: new.to_owned(),
        time: Time(Timestamp::from_second(now.as_second()).unwrap_or(now)),
        possible_loss,
        message: format!("{new} is the primary in place of {old}; {guarantee}"),
    }
}

/// `status` after this pass's `decision` about `record`: `targetPrimary`, `PrimaryAvailable`,
/// and (after a `failover`) `currentPrimary`, `currentPrimaryTimestamp` and `lastFailover`.
pub fn with_failover(
    mut status: DatabaseClusterStatus,
    record: &str,
    decision: &Decision,
    failover: Option<&FailoverRecord>,
    now: Timestamp,
) -> DatabaseClusterStatus {
    let target = failover.map_or(record, |f| f.to.as_str());
    status.target_primary = Some(target.to_owned());
    if let Some(failover) = failover {
        status.current_primary = Some(failover.to.clone());
        status.current_primary_timestamp = Some(failover.time.clone());
        status.last_failover = Some(failover.clone());
    }
    // No durations in the messages: a message that changed every pass would be a status write
    // every pass.
    let (state, reason, message) = match decision {
        Decision::Healthy => ("True", reason::PRIMARY_READY, format!("{record} accepts writes")),
        Decision::Waiting { down_for, remaining } => (
            "False",
            reason::PRIMARY_NOT_READY,
            format!(
                "{record} is not ready; a standby is promoted once it has been for {}s",
                (*down_for + *remaining).as_secs()
            ),
        ),
        Decision::NoCandidate { .. } => (
            "False",
            reason::NO_FAILOVER_CANDIDATE,
            format!("{record} is down (not ready) and no ready standby has streamed since it started"),
        ),
        Decision::NoSynchronousCandidate { .. } => (
            "False",
            reason::NO_SYNCHRONOUS_CANDIDATE,
            format!(
                "{record} is down (not ready) and no observed standby is known to hold every acknowledged write (spec.synchronousReplicas): nothing is promoted until {record} or enough synchronous standbys are back"
            ),
        ),
        Decision::DiskFull => (
            "False",
            reason::DISK_FULL,
            format!(
                "{record}'s data volume is full: no standby is promoted (theirs hold the same data); grow spec.storageSize"
            ),
        ),
        Decision::Promote { pod, .. } => {
            ("False", reason::FAILING_OVER, format!("promoting {pod} in place of {record}"))
        }
        Decision::SwitchingOver { from } => (
            "False",
            reason::SWITCHING_OVER,
            format!("switching over from {from} to {record}: writes wait until {record} is promoted"),
        ),
    };
    let mut conditions = ConditionSetter::new(status.conditions, status.observed_generation, now);
    conditions.set(PRIMARY_AVAILABLE, state, reason, message);
    status.conditions = conditions.into_inner();
    status
}

/// The Warning Event of a failover starting: `old` down, `new` promoted, and how far `new` was
/// behind when last observed (`lag_bytes`).
pub fn failing_over(old: &str, new: &str, down_for: Duration, lag_bytes: Option<i64>) -> EventNote {
    let behind = match lag_bytes {
        Some(lag) => format!("{lag} bytes of WAL behind {old} when last observed"),
        None => "its lag behind the old primary unknown".to_owned(),
    };
    EventNote::new(
        EventType::Warning,
        reason::FAILING_OVER,
        "Failover",
        format!("{old} has not been ready for {}s: promoting {new} ({behind})", down_for.as_secs()),
    )
}

/// The Warning Event of a finished failover: its record's message (what was guaranteed).
pub fn failed_over(failover: &FailoverRecord) -> EventNote {
    EventNote::new(EventType::Warning, "FailedOver", "Failover", failover.message.clone())
}

#[cfg(test)]
mod tests;
