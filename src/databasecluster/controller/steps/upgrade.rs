//! Step: a major upgrade (the decisions in [`crate::databasecluster::upgrade::plan`]). Observes the
//! upgrade Job (from the Job informer, with its pod's termination message) and the cluster's pods,
//! takes the next step, creates the Job when its time comes (a retried pass finds it by name:
//! `409` is success), publishes one Event per step, and gives the pass the spec its StatefulSet is
//! built from in this step ([`UpgradePass::statefulset_spec`]).

use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::batch::v1::Job;

use crate::databasecluster::api::types::{DatabaseCluster, DatabaseClusterStatus};
use crate::databasecluster::api::validation::{PostgresVersion, ValidSpec};
use crate::databasecluster::backup::jobs::CLUSTER_LABEL;
use crate::databasecluster::backup::status::{JobOutcome, job_view};
use crate::databasecluster::cache::forms::{Forms, PodForm};
use crate::databasecluster::controller::context::{Context, Error};
use crate::databasecluster::controller::events::{EventNote, EventType};
use crate::databasecluster::controller::steps::child::create_job_once;
use crate::databasecluster::controller::steps::instances::pod_views;
use crate::databasecluster::specs::resources::{DATA_VOLUME, Owner};
use crate::databasecluster::upgrade::admission::major_number;
use crate::databasecluster::upgrade::job::{UpgradeJob, build_upgrade_job, is_upgrade_job, upgrade_job_name};
use crate::databasecluster::upgrade::plan::{
    Facts, JobState, MAJOR_UPGRADE, Step, next_step, step_message, upgrade_wanted, with_major_upgrade,
};
use crate::runtime::cache::controller_uid;

/// Where this pass found the upgrade, and the versions it is between.
#[derive(Debug)]
pub struct UpgradePass {
    /// The step.
    pub step: Step,
    running: Option<String>,
    desired: String,
}

impl UpgradePass {
    /// Whether an upgrade is under way (the pass looks again soon).
    pub fn in_progress(&self) -> bool {
        matches!(self.step, Step::Stopping { .. } | Step::Upgrading { .. } | Step::Starting { .. })
    }

    /// The spec the StatefulSet (and the rest of the pass) follows in this step: the running
    /// version, with no instance while stopping and upgrading (see [`Step::statefulset`]).
    pub fn statefulset_spec(&self, mut spec: ValidSpec) -> ValidSpec {
        if let Some((version, replicas)) = self.step.statefulset(self.running.as_deref(), spec.replicas)
            && let Some(version) = PostgresVersion::parse(&version)
        {
            spec.version = version;
            spec.replicas = replicas;
        }
        spec
    }

    /// `status` saying where the upgrade is ([`with_major_upgrade`]).
    pub fn status(&self, status: DatabaseClusterStatus, now: Timestamp) -> DatabaseClusterStatus {
        let from = self.running.as_deref().unwrap_or(&self.desired);
        with_major_upgrade(status, &self.step, (from, &self.desired), now)
    }
}

/// Observes and advances a major upgrade of `cluster`, whose primary is `primary`.
pub(crate) async fn ensure_major_upgrade<F: Forms>(
    ctx: &Context<F>,
    cluster: &DatabaseCluster,
    owner: &Owner,
    spec: &ValidSpec,
    primary: &str,
) -> Result<UpgradePass, Error> {
    let running = cluster.status.as_ref().and_then(|s| s.current_version.clone());
    let desired = spec.version.as_str().to_owned();
    let pass = |step| UpgradePass { step, running: running.clone(), desired: desired.clone() };
    let (Some(from), Some(to)) = (running.as_deref().and_then(major_number), major_number(&desired)) else {
        return Ok(pass(Step::None));
    };
    if !upgrade_wanted(running.as_deref(), &desired) {
        announce(ctx, cluster, &Step::None, (running.as_deref().unwrap_or(&desired), &desired)).await;
        return Ok(pass(Step::None));
    }
    let name = upgrade_job_name(owner.name(), to);
    let pods = pod_views(ctx, owner, Timestamp::now()).len();
    let job = job_state(ctx, owner, &name);
    let step = next_step(&Facts { running: running.as_deref(), desired: &desired, job, pods });
    if step == (Step::Upgrading { create: true }) {
        let claim = format!("{DATA_VOLUME}-{primary}");
        let from_version = running.as_deref().unwrap_or_default();
        let job = UpgradeJob { from: from_version, from_major: from, to_major: to, claim: &claim };
        let job = build_upgrade_job(owner, spec, &job);
        create_job_once(ctx, owner, &job, "every instance stopped: major upgrade Job created").await?;
    }
    announce(ctx, cluster, &step, (running.as_deref().unwrap_or_default(), &desired)).await;
    Ok(pass(step))
}

/// The upgrade Job `name` as observed, with its pod's termination message as the reason. Another
/// upgrade Job of the cluster still running (the spec named another major meanwhile) counts as
/// running: two upgrades never work on one volume at once.
fn job_state<F: Forms>(ctx: &Context<F>, owner: &Owner, name: &str) -> JobState {
    let jobs = ctx.jobs.list_labelled(owner.namespace(), CLUSTER_LABEL, owner.name());
    let unfinished = |job: &Job| {
        !job.status.as_ref().is_some_and(|s| s.completion_time.is_some() || s.failed.unwrap_or(0) > 0)
    };
    if jobs.iter().any(|j| is_upgrade_job(j) && j.metadata.name.as_deref() != Some(name) && unfinished(j)) {
        return JobState::Running;
    }
    let Some(job) = jobs.iter().find(|j| j.metadata.name.as_deref() == Some(name)) else {
        return JobState::Absent;
    };
    let uid = job.metadata.uid.as_deref().unwrap_or_default();
    let pods = ctx.pods.children_of(uid);
    let pod = pods.iter().filter(|p| controller_uid(p.as_ref()) == Some(uid)).max_by_key(|p| p.created());
    let view = job_view(job, pod.map(Arc::as_ref));
    let message = view.message.unwrap_or_default();
    match view.outcome {
        JobOutcome::Running => JobState::Running,
        JobOutcome::Succeeded => JobState::Succeeded(message),
        JobOutcome::Failed { reason, message: job_message } if message.is_empty() => {
            JobState::Failed(format!("the upgrade Job failed ({reason}: {job_message})"))
        }
        JobOutcome::Failed { .. } => JobState::Failed(message),
    }
}

/// One Event when the upgrade reaches a new step (the status's `MajorUpgrade` reason differs).
async fn announce<F: Forms>(
    ctx: &Context<F>,
    cluster: &DatabaseCluster,
    step: &Step,
    (from, to): (&str, &str),
) {
    let previous =
        cluster.status.as_ref().and_then(|s| s.conditions.iter().find(|c| c.type_ == MAJOR_UPGRADE));
    let under_way = previous.is_some_and(|c| c.status == "True");
    if previous.is_some_and(|c| c.reason == step.reason()) || (*step == Step::None && !under_way) {
        return;
    }
    let type_ = if matches!(step, Step::RolledBack { .. }) { EventType::Warning } else { EventType::Normal };
    let reason = format!("MajorUpgrade{}", step.reason());
    let note = EventNote::new(type_, reason, "MajorUpgrade", step_message(step, from, to));
    ctx.events.publish(cluster, &note).await;
}
