//! The major upgrade as a state machine over observed facts: [`next_step`] says where the upgrade
//! is from what the operator sees (the versions, the upgrade Job, the pods left), so a pass that
//! stops anywhere resumes from the facts; [`with_major_upgrade`] says it in the status.
//!
//! 1. No upgrade unless the spec asks for a later major than the one running ([`Step::None`]).
//! 2. A failed upgrade Job rolls back: the old version's StatefulSet with every instance, on the
//!    untouched old data ([`Step::RolledBack`]), `Ready=False` naming the Job's reason; the Job
//!    stays (with its reason) until the spec names another major or the Job is deleted.
//! 3. A succeeded Job: the instances start on the new version ([`Step::Starting`]); the standbys'
//!    data, of the old major, is re-cloned from the upgraded primary by their instance managers.
//!    `currentVersion` moves when the rollout completes, which ends the upgrade.
//! 4. A running Job: wait ([`Step::Upgrading`]).
//! 5. No Job: stop every instance first ([`Step::Stopping`]: the StatefulSet at zero, on the old
//!    version; its scale-down removes the highest ordinal first, one at a time, and each manager
//!    shuts its server down cleanly); with no pod left, start the Job ([`Step::Upgrading`]).

use jiff::Timestamp;

use crate::databasecluster::api::types::{DatabaseClusterStatus, Phase};
use crate::databasecluster::controller::status::{ConditionSetter, condition};
use crate::databasecluster::upgrade::admission::major_number;

/// The condition saying where a major upgrade is.
pub const MAJOR_UPGRADE: &str = "MajorUpgrade";

/// The upgrade Job as observed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JobState {
    /// Not there.
    Absent,
    /// Created, not finished.
    Running,
    /// Finished successfully, with its message.
    Succeeded(String),
    /// Failed, with its reason.
    Failed(String),
}

/// What a pass observed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Facts<'a> {
    /// `status.currentVersion`.
    pub running: Option<&'a str>,
    /// `spec.version`.
    pub desired: &'a str,
    /// The upgrade Job for the desired major.
    pub job: JobState,
    /// The cluster's pods that still exist.
    pub pods: usize,
}

/// Where the upgrade is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// No major upgrade asked for.
    None,
    /// Stopping the instances; `pods` left.
    Stopping {
        /// Pods still there.
        pods: usize,
    },
    /// The upgrade Job runs (or is to be created: `create`).
    Upgrading {
        /// No Job yet: create it.
        create: bool,
    },
    /// The Job succeeded: the instances start on the new version.
    Starting {
        /// The Job's message (notes such as extensions to update).
        message: String,
    },
    /// The Job failed: the old version runs again.
    RolledBack {
        /// Why.
        reason: String,
    },
}

impl Step {
    /// The condition reason (and Event reason suffix) of this step.
    pub fn reason(&self) -> &'static str {
        match self {
            Step::None => "Completed",
            Step::Stopping { .. } => "StoppingInstances",
            Step::Upgrading { .. } => "RunningPgUpgrade",
            Step::Starting { .. } => "StartingNewVersion",
            Step::RolledBack { .. } => "RolledBack",
        }
    }

    /// The version and instances the StatefulSet runs in this step: the running version and none
    /// while stopping and upgrading, the running version and all while rolled back, the spec's
    /// otherwise (`None`: as the spec says).
    pub fn statefulset(&self, running: Option<&str>, replicas: i32) -> Option<(String, i32)> {
        let running = running?.to_owned();
        match self {
            Step::Stopping { .. } | Step::Upgrading { .. } => Some((running, 0)),
            Step::RolledBack { .. } => Some((running, replicas)),
            Step::None | Step::Starting { .. } => None,
        }
    }
}

/// Whether the spec asks for a later major than the one running.
pub fn upgrade_wanted(running: Option<&str>, desired: &str) -> bool {
    matches!((running.and_then(major_number), major_number(desired)), (Some(from), Some(to)) if to > from)
}

/// The next step from the facts; see the module docs.
pub fn next_step(facts: &Facts) -> Step {
    if !upgrade_wanted(facts.running, facts.desired) {
        return Step::None;
    }
    match &facts.job {
        JobState::Failed(reason) => Step::RolledBack { reason: reason.clone() },
        JobState::Succeeded(message) => Step::Starting { message: message.clone() },
        JobState::Running => Step::Upgrading { create: false },
        JobState::Absent if facts.pods > 0 => Step::Stopping { pods: facts.pods },
        JobState::Absent => Step::Upgrading { create: true },
    }
}

/// The message of the `MajorUpgrade` condition (and the step's Event) for `step`.
pub fn step_message(step: &Step, from: &str, to: &str) -> String {
    match step {
        Step::None => format!("upgraded to PostgreSQL {to}"),
        Step::Stopping { pods } => {
            format!(
                "upgrading {from} to {to}: stopping the instances cleanly ({pods} left); writes are refused"
            )
        }
        Step::Upgrading { .. } => {
            format!("upgrading {from} to {to}: pg_upgrade runs on the primary's volume")
        }
        Step::Starting { message } => {
            format!("upgrading {from} to {to}: starting the instances on {to}: {message}")
        }
        Step::RolledBack { reason } => format!(
            "the upgrade from {from} to {to} failed and {from} runs again on its untouched data: {reason}; \
             set spec.version back to {from}, or fix the cause and delete the upgrade Job to try again"
        ),
    }
}

/// `status` saying where the upgrade is: phase Upgrading and `MajorUpgrade=True` (with the step as
/// reason) while under way, `Ready=False` while the instances are down or rolled back, and
/// `MajorUpgrade=False` once over (reason `Completed` or `RolledBack`). A status that never had an
/// upgrade is left as it is.
pub fn with_major_upgrade(
    mut status: DatabaseClusterStatus,
    step: &Step,
    (from, to): (&str, &str),
    now: Timestamp,
) -> DatabaseClusterStatus {
    let had_upgrade = status.conditions.iter().any(|c| c.type_ == MAJOR_UPGRADE && c.status == "True");
    if *step == Step::None && !had_upgrade {
        return status;
    }
    let message = step_message(step, from, to);
    let mut conditions =
        ConditionSetter::new(std::mem::take(&mut status.conditions), status.observed_generation, now);
    match step {
        Step::None => conditions.set(MAJOR_UPGRADE, "False", step.reason(), message),
        Step::RolledBack { .. } => {
            conditions.set(MAJOR_UPGRADE, "False", step.reason(), message.clone());
            conditions.set(condition::READY, "False", "MajorUpgradeFailed", message);
        }
        Step::Stopping { .. } | Step::Upgrading { .. } => {
            conditions.set(MAJOR_UPGRADE, "True", step.reason(), message.clone());
            conditions.set(condition::READY, "False", "MajorUpgrade", message);
            status.phase = Some(Phase::Upgrading);
        }
        Step::Starting { .. } => {
            conditions.set(MAJOR_UPGRADE, "True", step.reason(), message);
            status.phase = Some(Phase::Upgrading);
        }
    }
    status.conditions = conditions.into_inner();
    status
}

#[cfg(test)]
mod tests;
