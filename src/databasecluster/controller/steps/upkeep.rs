//! Step: the upkeep of a cluster whose primary needs no failover (after [`super::instances`]
//! observed it): the switchovers asked for (a scale-down that removes the primary, `spec.primary`),
//! then role labels, reloads, the primary's slots, the passwords and the next step of a roll, each
//! through the instance managers. Failures are logged and retried on a later pass.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::StatefulSet;

use crate::databasecluster::api::types::PrimaryUpdateMethod;
use crate::databasecluster::cache::forms::Forms;
use crate::databasecluster::controller::events::{EventNote, EventType};
use crate::databasecluster::controller::steps::instances::{Pass, Topology, delete_pod, switching};
use crate::databasecluster::controller::steps::secrets::Credentials;
use crate::databasecluster::failover::Decision;
use crate::databasecluster::failover::promotion::set_role_label;
use crate::databasecluster::instances::client::{change_slots, reload};
use crate::databasecluster::instances::passwords::{desired_versions, password_progress};
use crate::databasecluster::instances::roll::{RollStep, next_step};
use crate::databasecluster::instances::topology::{PodView, label_changes, slot_changes};
use crate::databasecluster::instances::{InstanceFacts, Target};
use crate::databasecluster::specs::config::{ConfigurationState, configuration_state, desired_config_hash};
use crate::databasecluster::specs::credentials::Login;
use crate::databasecluster::switchover::demotion::begin;
use crate::databasecluster::switchover::{
    INVALID_PRIMARY, check_target, handled_request, ordinal_of, phase, record as switchover_record, requested,
};

/// The switchovers asked for while the primary is healthy: a scale-down that would remove the
/// primary switches over to a standby that stays first; then `spec.primary`
/// ([`crate::databasecluster::switchover`]). A switchover begun ends the pass (`Some`).
pub(crate) async fn switchover_requests<F: Forms>(
    pass: &Pass<'_, F>,
    topology: &mut Topology,
) -> Option<Topology> {
    if !matches!(topology.decision, Decision::Healthy) || topology.promoted.is_some() {
        return None;
    }
    let (spec, pods, primary) = (pass.spec, pass.pods, pass.record.primary);
    let previous = pass.previous().and_then(|s| s.switchover.as_ref());
    let removed = spec.replicas > 0 && ordinal_of(primary).is_some_and(|o| o >= spec.replicas);
    if removed {
        let healthy_primary = topology.current_primary.as_deref().filter(|p| *p == primary);
        let mut staying: Vec<&PodView> = pods.iter().filter(|p| p.ordinal < spec.replicas).collect();
        staying.sort_by_key(|p| p.ordinal);
        let statuses = &topology.statuses;
        let target = staying
            .into_iter()
            .find(|p| check_target(&p.name, pods, statuses, spec.replicas, healthy_primary).is_ok());
        if let Some(new) = target {
            let requested = handled_request(previous, pass.cluster.spec.primary.as_deref(), &new.name);
            let why = format!("scale down to {} instances: ", spec.replicas);
            let (switch, target) = (pass.switch(primary, &new.name), pass.target(primary));
            let begun = begin(&switch, target.as_ref(), &requested, &why).await;
            return Some(switching(take(topology), primary, begun));
        }
        tracing::info!(%primary, "scale down waits for a standby that stays to stream");
        topology.busy = true;
    }
    let new = requested(pass.cluster.spec.primary.as_deref(), previous)?;
    if new == primary {
        let message = format!("{new} is the primary already");
        topology.switchover = Some(switchover_record(new, phase::COMPLETED, None, None, message));
        return None;
    }
    let healthy_primary = topology
        .current_primary
        .as_deref()
        .filter(|p| *p == primary && pods.iter().any(|pod| pod.name == *p && pod.ready));
    match check_target(new, pods, &topology.statuses, spec.replicas, healthy_primary) {
        Err(message) => {
            let repeated = previous
                .is_some_and(|s| s.phase == phase::REFUSED && s.requested == new && s.message == message);
            if !repeated {
                tracing::warn!(%new, %message, "switchover refused");
                let note = EventNote::new(EventType::Warning, INVALID_PRIMARY, "Switchover", message.clone());
                pass.ctx.events.publish(pass.cluster, &note).await;
            }
            topology.switchover = Some(switchover_record(new, phase::REFUSED, None, None, message));
            None
        }
        Ok(()) => {
            let begun = begin(&pass.switch(primary, new), pass.target(primary).as_ref(), new, "").await;
            Some(switching(take(topology), primary, begun))
        }
    }
}

/// `topology`'s content, leaving an empty one behind.
fn take(topology: &mut Topology) -> Topology {
    std::mem::replace(
        topology,
        Topology {
            statuses: Vec::new(),
            current_primary: None,
            busy: false,
            retry_after: None,
            decision: Decision::Healthy,
            promoted: None,
            switchover: None,
            refused: Vec::new(),
            secret_versions: None,
            notes: Vec::new(),
            unreached: BTreeMap::new(),
            archiver: None,
        },
    )
}

/// Role labels, reloads, the primary's slots and passwords, and the roll.
pub(crate) async fn keep_up<F: Forms>(
    pass: &Pass<'_, F>,
    facts: &BTreeMap<String, InstanceFacts>,
    sts: &StatefulSet,
    credentials: &Credentials,
    topology: &mut Topology,
) {
    for (pod, role) in label_changes(pass.pods, facts) {
        set_role_label(&pass.pods_api, &pod, role).await;
    }
    let desired_hash = desired_config_hash(pass.owner.name(), pass.spec);
    topology.busy |= reload_changed(pass, facts, &desired_hash).await;
    let primary =
        topology.current_primary.as_ref().and_then(|name| pass.pods.iter().find(|p| &p.name == name));
    let observed = primary.and_then(|p| Some((p, pass.target_of(p)?, facts.get(&p.name)?)));
    if let Some((primary, target, found)) = observed {
        topology.busy |= apply_slots(&target, found, primary.ordinal, pass.spec.replicas).await;
        passwords(pass, found, credentials, topology);
    }
    roll(pass, facts, sts, &desired_hash, topology).await;
}

/// Reloads each instance that has the configuration file `desired_hash` on disk but not in force,
/// unless PostgreSQL refuses a line of it (then it would apply all but that line, or nothing: the
/// status says what to fix, and the next spec brings a new file). Whether any instance is still
/// to apply it.
async fn reload_changed<F: Forms>(
    pass: &Pass<'_, F>,
    facts: &BTreeMap<String, InstanceFacts>,
    desired_hash: &str,
) -> bool {
    let mut changing = false;
    for pod in pass.pods.iter().filter(|p| !p.deleting) {
        let (Some(found), Some(target)) = (facts.get(&pod.name), pass.target_of(pod)) else { continue };
        if found.config_hash_applied.as_deref() == Some(desired_hash) || !found.refused_settings.is_empty() {
            continue;
        }
        changing = true;
        if found.config_hash_on_disk.as_deref() != Some(desired_hash) {
            tracing::debug!(pod = %pod.name, "the changed configuration has not reached the instance yet");
            continue;
        }
        match reload(&target).await {
            Ok(()) => {
                tracing::info!(pod = %pod.name, "configuration reloaded");
                pass.ctx.events.publish(pass.cluster, &EventNote::configuration_reloaded(&pod.name)).await;
            }
            Err(error) => tracing::warn!(pod = %pod.name, %error, "reload failed"),
        }
    }
    changing
}

/// Creates the missing slots and drops the unused ones on the primary ([`slot_changes`]); whether
/// anything was to change.
pub(crate) async fn apply_slots(
    target: &Target,
    primary: &InstanceFacts,
    ordinal: i32,
    replicas: i32,
) -> bool {
    let changes = slot_changes(primary, ordinal, replicas);
    if changes.is_empty() {
        return false;
    }
    match change_slots(target, &changes).await {
        Ok(()) => tracing::info!(create = ?changes.create, drop = ?changes.drop, "replication slots changed"),
        Err(error) => tracing::warn!(%error, "could not change the replication slots"),
    }
    true
}

/// The passwords ([`crate::databasecluster::instances::passwords`]): look again while the primary
/// has not applied a Secret; `PasswordApplied` for each it applied since the last status.
fn passwords<F: Forms>(
    pass: &Pass<'_, F>,
    primary: &InstanceFacts,
    credentials: &Credentials,
    topology: &mut Topology,
) {
    let logins: Vec<(&str, &str, &str)> = Login::ALL
        .into_iter()
        .filter_map(|login| {
            credentials.get(login).map(|(user, password)| (login.mount_dir(), user, password))
        })
        .collect();
    let desired = desired_versions(pass.access.token().expose(), logins.iter().copied());
    let recorded = pass.previous().map(|s| s.applied_secret_versions.clone()).unwrap_or_default();
    let progress = password_progress(&desired, Some(&primary.credentials), &recorded);
    if !progress.pending.is_empty() {
        tracing::debug!(pending = ?progress.pending, "waiting for the primary to apply the changed Secrets");
        topology.busy = true;
    }
    for login in &progress.applied {
        if let Some((_, user, _)) = logins.iter().find(|(dir, _, _)| dir == login) {
            tracing::info!(user, "the primary applied the password of its Secret");
            topology.notes.push(EventNote::password_applied(user));
        }
    }
    topology.secret_versions = Some(progress.record);
}

/// The next step of a roll ([`next_step`]), once the StatefulSet controller has observed the
/// set's generation; it waits until every instance has the current configuration file (look
/// again soon), and holds while PostgreSQL refuses it (until the spec changes).
async fn roll<F: Forms>(
    pass: &Pass<'_, F>,
    facts: &BTreeMap<String, InstanceFacts>,
    sts: &StatefulSet,
    desired_hash: &str,
    topology: &mut Topology,
) {
    let generation_observed =
        match (sts.metadata.generation, sts.status.as_ref().and_then(|s| s.observed_generation)) {
            (Some(generation), Some(observed)) => observed >= generation,
            _ => false,
        };
    let Some(revision) = sts.status.as_ref().and_then(|s| s.update_revision.clone()) else { return };
    let configuration = configuration_state(facts.values(), desired_hash);
    if configuration != ConfigurationState::InPlace {
        tracing::debug!(?configuration, "no roll step: the configuration is not in place");
        topology.busy |= configuration == ConfigurationState::Arriving;
        return;
    }
    if !generation_observed {
        return;
    }
    let (spec, pods, old) = (pass.spec, pass.pods, pass.record.primary);
    let switch_over = spec.replicas >= 2
        && pass.cluster.spec.primary_update_method.unwrap_or_default() == PrimaryUpdateMethod::Switchover;
    let primary = topology.current_primary.as_deref();
    match next_step(pods, &revision, spec.replicas, primary, old, &topology.statuses, switch_over) {
        RollStep::Done => {}
        RollStep::Wait => topology.busy = true,
        RollStep::SwitchOver { to } => {
            topology.busy = true;
            tracing::info!(%old, %to, "rolling update: switching over to an updated standby");
            let previous = pass.previous().and_then(|s| s.switchover.as_ref());
            let requested = handled_request(previous, pass.cluster.spec.primary.as_deref(), &to);
            let why = "rolling update: ";
            topology.switchover =
                begin(&pass.switch(old, &to), pass.target(old).as_ref(), &requested, why).await;
        }
        RollStep::Delete { pod, primary, outdated } => {
            topology.busy = true;
            let note = EventNote::rolling_instance(&pod, primary, outdated, pods.len());
            tracing::info!(%pod, primary, outdated, "rolling update: deleting the instance's pod");
            pass.ctx.events.publish(pass.cluster, &note).await;
            delete_pod(&pass.pods_api, &pod).await;
        }
    }
}
