//! Switching over (the I/O of [`crate::databasecluster::switchover`]): fencing the old primary, promoting the
//! target once it holds all of the old primary's WAL, then finishing, or aborting. Each call is
//! one pass's step; a failure is logged and the next pass decides again from what it observes.

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Api;

use crate::databasecluster::api::types::{DatabaseCluster, SwitchoverStatus};
use crate::databasecluster::api::validation::ValidSpec;
use crate::databasecluster::cache::forms::{CompactForms, Forms};
use crate::databasecluster::controller::context::Context;
use crate::databasecluster::controller::events::{EventNote, EventType};
use crate::databasecluster::failover::promotion::{set_role_label, write_record};
use crate::databasecluster::instances::Target;
use crate::databasecluster::instances::client::{checkpoint, promote};
use crate::databasecluster::specs::resources::Owner;
use crate::databasecluster::specs::services::{ROLE_PRIMARY, ROLE_REPLICA};
use crate::databasecluster::switchover::{Step, phase, record};

/// A switchover from `old` to `new` of `cluster`, and what its steps write with.
#[derive(Debug)]
pub struct Switch<'a, F: Forms = CompactForms> {
    /// The operator's clients, caches and Event publisher.
    pub ctx: &'a Context<F>,
    /// The cluster switching over.
    pub cluster: &'a DatabaseCluster,
    /// Its identity, for the record.
    pub owner: &'a Owner,
    /// Its spec, for the record.
    pub spec: &'a ValidSpec,
    /// Its namespace's pods, for the role labels.
    pub pods: &'a Api<Pod>,
    /// The primary being demoted.
    pub old: &'a str,
    /// The standby becoming the primary.
    pub new: &'a str,
}

/// Starts a switchover: step 2 of [`crate::databasecluster::switchover`], when the old primary's
/// instance manager is known (`target`): Event `SwitchingOver`, a checkpoint (`POST /checkpoint`),
/// its label, and the record naming `new` with `old` demoting. Once the record is written, the `status.switchover` record, about the
/// spec value `requested`, its message starting with `why`.
pub async fn begin<F: Forms>(
    switch: &Switch<'_, F>,
    target: Option<&Target>,
    requested: &str,
    why: &str,
) -> Option<SwitchoverStatus> {
    let target = target?;
    let Switch { ctx, cluster, owner, spec, pods, old, new } = *switch;
    tracing::info!(%old, %new, "switchover: fencing the primary");
    let note = format!(
        "switching over from {old} to {new}: {old} stops cleanly, {new} is promoted once it has replayed all of {old}'s WAL"
    );
    ctx.events
        .publish(cluster, &EventNote::new(EventType::Normal, phase::SWITCHING_OVER, "Switchover", note))
        .await;
    if let Err(error) = checkpoint(target).await {
        tracing::warn!(%old, %error, "switchover: CHECKPOINT failed; the shutdown checkpoint will take longer");
    }
    set_role_label(pods, old, ROLE_REPLICA).await;
    if let Err(error) = write_record(ctx, owner, spec, new, Some(old)).await {
        tracing::warn!(%new, %error, "switchover: could not record the new primary; retrying on the next pass");
        return None;
    }
    let now = Timestamp::now();
    let started = Time(Timestamp::from_second(now.as_second()).unwrap_or(now));
    let message = format!("{why}switching over from {old} to {new}");
    Some(record(requested, phase::SWITCHING_OVER, Some((old, new)), Some(started), message))
}

/// Steps 3 and 4, or the abort, as [`crate::databasecluster::switchover::next_step`] said (`step`);
/// `target` is `new`'s instance manager. Whether the switchover is over (completed or aborted).
pub async fn advance<F: Forms>(
    switch: &Switch<'_, F>,
    step: Step,
    target: Option<&Target>,
) -> Option<&'static str> {
    let Switch { ctx, cluster, owner, spec, old, new, .. } = *switch;
    match step {
        Step::Wait => None,
        Step::Promote => {
            let target = target?;
            tracing::info!(%old, %new, "switchover: the target has replayed the old primary's WAL; promoting it");
            match promote(target).await {
                Ok(true) => complete(switch).await,
                Ok(false) => None,
                Err(error) => {
                    tracing::warn!(%new, %error, "switchover: could not promote; retrying on the next pass");
                    None
                }
            }
        }
        Step::Finish => complete(switch).await,
        Step::Abort => {
            tracing::warn!(%old, %new, "switchover: timed out; naming the old primary again");
            write_record(ctx, owner, spec, old, None).await.ok()?;
            let note = format!("{new} did not catch up with {old} in time: {old} is the primary again");
            ctx.events
                .publish(
                    cluster,
                    &EventNote::new(EventType::Warning, "SwitchoverAborted", "Switchover", note),
                )
                .await;
            Some(phase::ABORTED)
        }
    }
}

async fn complete<F: Forms>(switch: &Switch<'_, F>) -> Option<&'static str> {
    let Switch { ctx, cluster, owner, spec, pods, old, new } = *switch;
    set_role_label(pods, new, ROLE_PRIMARY).await;
    if let Err(error) = write_record(ctx, owner, spec, new, None).await {
        tracing::warn!(%new, %error, "switchover: could not clear the demoting record; retrying on the next pass");
        return None;
    }
    tracing::info!(%old, %new, "switchover: done");
    let note = format!("{new} is the primary in place of {old}; no transaction was lost");
    ctx.events.publish(cluster, &EventNote::new(EventType::Normal, "SwitchedOver", "Switchover", note)).await;
    Some(phase::COMPLETED)
}
