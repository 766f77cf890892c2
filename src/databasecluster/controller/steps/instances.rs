//! Step: the instances: what each pod's instance says, failover, role labels, slots, reloads,
//! passwords and the roll (`operate_instances`).

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::DeleteParams;

use crate::databasecluster::api::types::{
    DatabaseCluster, FailoverRecord, InstanceStatus, PrimaryUpdateMethod, SwitchoverStatus,
};
use crate::databasecluster::api::validation::ValidSpec;
use crate::databasecluster::cache::forms::{Forms, PodForm};
use crate::databasecluster::controller::context::*;
use crate::databasecluster::controller::events::EventNote;
use crate::databasecluster::controller::events::EventType;
use crate::databasecluster::controller::steps::secrets::Credentials;
use crate::databasecluster::failover::promotion::{Promotion, fail_over, finish, set_role_label};
use crate::databasecluster::failover::{
    Decision, decide, failover_delay, outcome, seen_down_since, synchronous, unreported_promotion,
};
use crate::databasecluster::instances::roll::{RollStep, next_step};
use crate::databasecluster::instances::topology::{
    PodView, REVISION_LABEL, all_standbys_streaming, current_primary, instance_statuses, label_changes,
    not_ready_since, slot_changes, start_failure, with_recorded_sync_states,
};
use crate::databasecluster::instances::{
    InstanceFacts, Target, check_login, connect, create_slot, drop_slot, observe, reload, set_password,
};
use crate::databasecluster::specs::config::{
    ConfigurationState, configuration_state, desired_config_hash, refused_configuration,
};
use crate::databasecluster::specs::credentials::Login;
use crate::databasecluster::specs::resources::{Owner, POSTGRES_PORT, label, statefulset_name};
use crate::databasecluster::specs::services::ROLE_LABEL;
use crate::databasecluster::switchover::demotion::{Switch, advance, begin};
use crate::databasecluster::switchover::{
    INVALID_PRIMARY, check_target, handled_request, next_step as switchover_step, ordinal_of, phase,
    record as switchover_record, requested,
};
use crate::runtime::Object;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
/// The cluster's pods as the cache holds them.
pub(crate) fn pod_views<F: Forms>(ctx: &Context<F>, owner: &Owner, now: Timestamp) -> Vec<PodView> {
    let prefix = format!("{}-", statefulset_name(owner.name()));
    ctx.pods
        .list_labelled(owner.namespace(), label::INSTANCE, owner.name())
        .iter()
        .filter_map(|pod| {
            let name = pod.name()?.to_owned();
            let ordinal = name.strip_prefix(&prefix)?.parse().ok()?;
            let status = pod.status();
            let status = status.as_ref();
            let not_ready_since = not_ready_since(status.map(|s| &**s), pod.created());
            let ready = status
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
            Some(PodView {
                name,
                ordinal,
                ip: status.and_then(|s| s.pod_ip.clone()).filter(|ip| !ip.is_empty()),
                ready,
                not_ready_since,
                deleting: pod.is_deleting(),
                revision: pod.label(REVISION_LABEL).map(str::to_owned),
                role_label: pod.label(ROLE_LABEL).map(str::to_owned),
                failure: status.and_then(|status| start_failure(status, now)),
            })
        })
        .collect()
}

/// What [`operate_instances`] found.
pub(crate) struct Topology {
    pub(crate) statuses: Vec<InstanceStatus>,
    pub(crate) current_primary: Option<String>,
    /// Something is under way (a roll, a reload, a password being applied): look again soon.
    pub(crate) busy: bool,
    /// Look again no later than this (a failover delay running out, a promotion under way).
    pub(crate) retry_after: Option<Duration>,
    /// What [`decide`] said about the recorded primary.
    pub(crate) decision: Decision,
    /// The failover this pass finished.
    pub(crate) promoted: Option<FailoverRecord>,
    /// The switchover record this pass made, if any.
    pub(crate) switchover: Option<SwitchoverStatus>,
    /// What PostgreSQL refuses of the configuration ([`refused_configuration`]).
    pub(crate) refused: Vec<String>,
}

/// What the `<name>-scripts` ConfigMap records ([`crate::databasecluster::specs::config`]).
pub(crate) struct Record<'a> {
    /// The instance that must accept writes.
    pub(crate) primary: &'a str,
    /// The old primary of a switchover under way.
    pub(crate) demoting: Option<&'a str>,
}

/// Observes every instance, then keeps the topology true: role labels, slots, reloads, passwords,
/// and the next step of a roll. Failures are logged and retried on the next pass; they never fail
/// the pass, since the status must still be written.
#[allow(clippy::too_many_arguments)]
#[allow(clippy::too_many_lines, reason = "being split into named steps")]
pub(crate) async fn operate_instances<F: Forms>(
    ctx: &Context<F>,
    cluster: &DatabaseCluster,
    owner: &Owner,
    spec: &ValidSpec,
    sts: &StatefulSet,
    pods: &[PodView],
    credentials: &Credentials,
    record: &Record<'_>,
) -> Topology {
    let primary_record = record.primary;
    let Some((su_user, su_password)) = credentials.get(Login::Superuser) else {
        return Topology {
            statuses: instance_statuses(pods, &BTreeMap::new()),
            current_primary: None,
            busy: true,
            retry_after: None,
            decision: Decision::Healthy,
            promoted: None,
            switchover: None,
            refused: Vec::new(),
        };
    };
    let target = |ip: &str, user: &str, password: &str, database: &str| Target {
        host: ip.to_owned(),
        port: u16::try_from(POSTGRES_PORT).unwrap_or(5432),
        user: user.to_owned(),
        password: password.to_owned(),
        database: database.to_owned(),
    };
    let observed = futures::future::join_all(pods.iter().filter(|p| !p.deleting).filter_map(|pod| {
        let ip = pod.ip.clone()?;
        let target = target(&ip, su_user, su_password, "postgres");
        Some(async move { (pod.name.clone(), observe(&target).await) })
    }))
    .await;
    let mut facts = BTreeMap::new();
    let mut refused_primary = false;
    for (name, result) in observed {
        match result {
            Ok(found) => {
                facts.insert(name, found);
            }
            Err(error) => {
                tracing::debug!(pod = %name, %error, "instance not observed");
                refused_primary |= error.is_password_refused() && name == primary_record;
            }
        }
    }
    let refused = refused_configuration(facts.values(), cluster.spec.postgres_config.as_ref());
    let previous = cluster.status.as_ref();
    let statuses = with_recorded_sync_states(
        instance_statuses(pods, &facts),
        previous.map(|s| s.instances.as_slice()).unwrap_or_default(),
    );
    let current_primary = current_primary(pods, &facts, primary_record);
    // While some instance can be observed, look again until every standby streams (replication
    // changes bring no watch event); with none observable there is nothing to wait for.
    let mut busy = !facts.is_empty()
        && (current_primary.is_none() || !all_standbys_streaming(&statuses, current_primary.as_deref()));

    let pods_api: Api<Pod> = Api::namespaced(ctx.client.clone(), owner.namespace());
    let login_to = |name: &str| {
        let ip = pods.iter().find(|p| p.name == name && !p.deleting)?.ip.as_deref()?;
        Some(target(ip, su_user, su_password, "postgres"))
    };
    let previous_switchover = previous.and_then(|s| s.switchover.as_ref());
    if let Some(old) = record.demoting {
        let now = Timestamp::now();
        let started = previous_switchover
            .filter(|s| s.phase == phase::SWITCHING_OVER)
            .and_then(|s| s.started.clone())
            .unwrap_or_else(|| Time(Timestamp::from_second(now.as_second()).unwrap_or(now)));
        let elapsed = Duration::try_from(now.duration_since(started.0)).unwrap_or_default();
        let step = switchover_step(old, primary_record, &facts, elapsed);
        let switch = Switch { ctx, cluster, owner, spec, pods: &pods_api, old, new: primary_record };
        let login = login_to(primary_record);
        let over = advance(&switch, step, login.as_ref()).await;
        let requested = previous_switchover.map_or(primary_record, |s| s.requested.as_str());
        let (now_phase, message) = match over {
            Some(done) if done == phase::COMPLETED => {
                (done, format!("{primary_record} is the primary in place of {old}; no transaction was lost"))
            }
            Some(aborted) => (
                aborted,
                format!("{primary_record} did not catch up with {old} in time: {old} is the primary again"),
            ),
            None => (phase::SWITCHING_OVER, format!("switching over from {old} to {primary_record}")),
        };
        let finished = over == Some(phase::COMPLETED);
        return Topology {
            statuses,
            current_primary: if finished { Some(primary_record.to_owned()) } else { current_primary },
            busy: true,
            retry_after: Some(FAILOVER_REQUEUE),
            decision: if finished {
                Decision::Healthy
            } else {
                Decision::SwitchingOver { from: old.to_owned() }
            },
            promoted: None,
            refused,
            switchover: Some(switchover_record(
                requested,
                now_phase,
                Some((old, primary_record)),
                Some(started),
                message,
            )),
        };
    }

    let decision = if spec.replicas > 0 {
        let synchronous = synchronous(spec.synchronous_replicas, &statuses);
        let seen_down = seen_down_since(previous, primary_record);
        decide(
            primary_record,
            pods,
            &facts,
            failover_delay(cluster),
            synchronous.as_ref(),
            seen_down,
            Timestamp::now(),
        )
    } else {
        Decision::Healthy
    };
    let pods_api: Api<Pod> = Api::namespaced(ctx.client.clone(), owner.namespace());
    if let Decision::Promote { pod: new, resume, down_for, received_lsn } = &decision {
        let old = match (resume, previous.and_then(|s| s.current_primary.as_deref())) {
            (true, Some(last)) => last,
            _ => primary_record,
        };
        let lag_bytes =
            previous.and_then(|s| s.instances.iter().find(|i| &i.name == new)).and_then(|i| i.lag_bytes);
        let mut promoted = None;
        if let Some(ip) = pods.iter().find(|p| &p.name == new).and_then(|p| p.ip.as_deref()) {
            let login = target(ip, su_user, su_password, "postgres");
            let promotion = Promotion {
                old,
                new,
                resume: *resume,
                down_for: *down_for,
                lag_bytes,
                received_lsn: *received_lsn,
                login,
            };
            promoted = fail_over(ctx, cluster, owner, spec, &promotion).await;
        }
        // The rest waits for the next pass, which observes the new topology.
        return Topology {
            statuses,
            current_primary: promoted.as_ref().map(|r| r.to.clone()).or(current_primary),
            busy: true,
            retry_after: Some(FAILOVER_REQUEUE),
            decision,
            promoted,
            switchover: None,
            refused,
        };
    }
    let mut promoted = None;
    if let Some(old) = unreported_promotion(primary_record, current_primary.as_deref(), previous) {
        tracing::info!(%old, new = %primary_record, "failover: finishing one a stopped operator carried out");
        // Promoted already, it no longer says how much WAL it had received.
        let record = outcome(&old, primary_record, None, spec.synchronous_replicas, Timestamp::now());
        promoted = Some(finish(ctx, cluster, &pods_api, &record).await);
    }

    // A scale down that would remove the primary switches over to a standby that stays first.
    let removed = spec.replicas > 0 && ordinal_of(primary_record).is_some_and(|o| o >= spec.replicas);
    if let (true, Decision::Healthy, None) = (removed, &decision, &promoted) {
        let healthy_primary = current_primary.as_deref().filter(|p| *p == primary_record);
        let mut staying: Vec<&PodView> = pods.iter().filter(|p| p.ordinal < spec.replicas).collect();
        staying.sort_by_key(|p| p.ordinal);
        let target = staying
            .into_iter()
            .find(|p| check_target(&p.name, pods, &statuses, spec.replicas, healthy_primary).is_ok());
        if let Some(new) = target {
            let requested = handled_request(previous_switchover, cluster.spec.primary.as_deref(), &new.name);
            let switch =
                Switch { ctx, cluster, owner, spec, pods: &pods_api, old: primary_record, new: &new.name };
            let login = login_to(primary_record);
            let why = format!("scale down to {} instances: ", spec.replicas);
            let begun = begin(&switch, login.as_ref(), &requested, &why).await;
            return switching(statuses, current_primary, decision, primary_record, begun, refused);
        }
        tracing::info!(primary = %primary_record, "scale down waits for a standby that stays to stream");
        busy = true;
    }

    // A switchover asked for by `spec.primary` ([`crate::databasecluster::switchover`]), while the primary is healthy.
    let mut switchover = None;
    let wanted = requested(cluster.spec.primary.as_deref(), previous_switchover);
    if let (Some(new), Decision::Healthy, None) = (wanted, &decision, &promoted) {
        let healthy_primary = current_primary
            .as_deref()
            .filter(|p| *p == primary_record && pods.iter().any(|pod| pod.name == *p && pod.ready));
        if new == primary_record {
            let message = format!("{new} is the primary already");
            switchover = Some(switchover_record(new, phase::COMPLETED, None, None, message));
        } else {
            match check_target(new, pods, &statuses, spec.replicas, healthy_primary) {
                Err(message) => {
                    let repeated = previous_switchover.is_some_and(|s| {
                        s.phase == phase::REFUSED && s.requested == new && s.message == message
                    });
                    if !repeated {
                        tracing::warn!(%new, %message, "switchover refused");
                        let note = EventNote::new(
                            EventType::Warning,
                            INVALID_PRIMARY,
                            "Switchover",
                            message.clone(),
                        );
                        ctx.events.publish(cluster, &note).await;
                    }
                    switchover = Some(switchover_record(new, phase::REFUSED, None, None, message));
                }
                Ok(()) => {
                    let switch =
                        Switch { ctx, cluster, owner, spec, pods: &pods_api, old: primary_record, new };
                    let login = login_to(primary_record);
                    let begun = begin(&switch, login.as_ref(), new, "").await;
                    return switching(statuses, current_primary, decision, primary_record, begun, refused);
                }
            }
        }
    }
    let retry_after = match &decision {
        Decision::Waiting { remaining, .. } => Some(*remaining + FAILOVER_REQUEUE),
        _ => None,
    };

    for (pod, role) in label_changes(pods, &facts) {
        set_role_label(&pods_api, &pod, role).await;
    }

    let desired_hash = desired_config_hash(owner.name(), spec);
    let primary_pod = current_primary.as_ref().and_then(|name| pods.iter().find(|p| &p.name == name));
    for pod in pods.iter().filter(|p| !p.deleting) {
        let (Some(found), Some(ip)) = (facts.get(&pod.name), pod.ip.as_deref()) else { continue };
        let on_disk = found.config_hash_on_disk.as_deref() == Some(desired_hash.as_str());
        let applied = found.config_hash_applied.as_deref() == Some(desired_hash.as_str());
        if applied {
            continue;
        }
        if !found.refused_settings.is_empty() {
            // Not reloaded: PostgreSQL would apply all but the refused lines, or nothing (an
            // unknown name). The status says what to fix; the next spec brings a new file.
            continue;
        }
        busy = true;
        if !on_disk {
            tracing::debug!(pod = %pod.name, "the changed configuration has not reached the instance yet");
            continue;
        }
        let target = target(ip, su_user, su_password, "postgres");
        let result = async { reload(&connect(&target).await?, &target).await }.await;
        match result {
            Ok(()) => {
                tracing::info!(pod = %pod.name, "configuration reloaded");
                ctx.events.publish(cluster, &EventNote::configuration_reloaded(&pod.name)).await;
            }
            Err(error) => tracing::warn!(pod = %pod.name, %error, "reload failed"),
        }
    }

    if let (Some(primary), Some(ip)) = (primary_pod, primary_pod.and_then(|p| p.ip.as_deref())) {
        let su = target(ip, su_user, su_password, "postgres");
        if let Some(found) = facts.get(&primary.name) {
            busy |= apply_slots(&su, found, primary.ordinal, spec.replicas).await;
        }
        for login in [Login::Replication, Login::App] {
            let Some((user, password)) = credentials.get(login) else { continue };
            let as_user = target(ip, user, password, login.database());
            match check_login(&as_user).await {
                Err(error) if error.is_password_refused() => {
                    busy = true;
                    let result =
                        async { set_password(&connect(&su).await?, &su, user, password).await }.await;
                    match result {
                        Ok(()) => {
                            tracing::info!(user, "password set from its Secret");
                            ctx.events.publish(cluster, &EventNote::password_applied(user)).await;
                        }
                        Err(error) => tracing::warn!(user, %error, "could not set the password"),
                    }
                }
                Err(error) => tracing::debug!(user, %error, "login check inconclusive"),
                Ok(()) => {}
            }
        }
    }

    let primary_down_for_credentials =
        refused_primary && pods.iter().any(|p| p.name == primary_record && p.ready && !p.deleting);
    if primary_down_for_credentials {
        tracing::warn!(pod = %primary_record, "the primary refuses the superuser Secret's password: restarting it so it applies the Secret");
        ctx.events.publish(cluster, &EventNote::credentials_restart(primary_record)).await;
        delete_pod(&pods_api, primary_record).await;
        busy = true;
    }

    let generation_observed =
        match (sts.metadata.generation, sts.status.as_ref().and_then(|s| s.observed_generation)) {
            (Some(generation), Some(observed)) => observed >= generation,
            _ => false,
        };
    let update_revision = sts.status.as_ref().and_then(|s| s.update_revision.clone());
    // A roll waits until the instances have the current configuration file (look again soon), and
    // holds while PostgreSQL refuses it (until the spec changes).
    let configuration = configuration_state(facts.values(), &desired_hash);
    let roll_held = update_revision.is_some() && configuration != ConfigurationState::InPlace;
    if roll_held {
        tracing::debug!(?configuration, "no roll step: the configuration is not in place");
        busy |= configuration == ConfigurationState::Arriving;
    }
    if let (true, Some(revision), false, false) =
        (generation_observed, update_revision, primary_down_for_credentials, roll_held)
    {
        let switch_over = spec.replicas >= 2
            && cluster.spec.primary_update_method.unwrap_or_default() == PrimaryUpdateMethod::Switchover;
        let primary = current_primary.as_deref();
        match next_step(pods, &revision, spec.replicas, primary, primary_record, &statuses, switch_over) {
            RollStep::Done => {}
            RollStep::Wait => busy = true,
            RollStep::SwitchOver { to } => {
                busy = true;
                let old = primary_record;
                tracing::info!(%old, %to, "rolling update: switching over to an updated standby");
                let switch = Switch { ctx, cluster, owner, spec, pods: &pods_api, old, new: &to };
                let requested = handled_request(previous_switchover, cluster.spec.primary.as_deref(), &to);
                let login = login_to(old);
                let why = "rolling update: ";
                switchover = begin(&switch, login.as_ref(), &requested, why).await;
            }
            RollStep::Delete { pod, primary, outdated } => {
                busy = true;
                let note = EventNote::rolling_instance(&pod, primary, outdated, pods.len());
                tracing::info!(%pod, primary, outdated, "rolling update: deleting the instance's pod");
                ctx.events.publish(cluster, &note).await;
                delete_pod(&pods_api, &pod).await;
            }
        }
    }
    Topology { statuses, current_primary, busy, retry_after, decision, promoted, switchover, refused }
}

/// The [`Topology`] of a pass that started a switchover from `old` (`begun`, when the fence
/// worked): the rest waits for the next pass.
pub(crate) fn switching(
    statuses: Vec<InstanceStatus>,
    current_primary: Option<String>,
    decision: Decision,
    old: &str,
    begun: Option<SwitchoverStatus>,
    refused: Vec<String>,
) -> Topology {
    Topology {
        statuses,
        current_primary,
        busy: true,
        retry_after: Some(FAILOVER_REQUEUE),
        decision: if begun.is_some() { Decision::SwitchingOver { from: old.to_owned() } } else { decision },
        promoted: None,
        switchover: begun,
        refused,
    }
}

/// Creates the missing slots and drops the unused ones on the primary; whether anything changed.
pub(crate) async fn apply_slots(
    su: &Target,
    primary: &InstanceFacts,
    primary_ordinal: i32,
    replicas: i32,
) -> bool {
    let changes = slot_changes(primary, primary_ordinal, replicas);
    if changes.create.is_empty() && changes.drop.is_empty() {
        return false;
    }
    let client = match connect(su).await {
        Ok(client) => client,
        Err(error) => {
            tracing::warn!(%error, "cannot reach the primary to manage slots");
            return true;
        }
    };
    for slot in &changes.create {
        match create_slot(&client, su, slot).await {
            Ok(()) => tracing::info!(%slot, "replication slot created"),
            Err(error) => tracing::warn!(%slot, %error, "could not create the replication slot"),
        }
    }
    for slot in &changes.drop {
        match drop_slot(&client, su, slot).await {
            Ok(()) => tracing::info!(%slot, "replication slot dropped"),
            Err(error) => tracing::warn!(%slot, %error, "could not drop the replication slot"),
        }
    }
    true
}

pub(crate) async fn delete_pod(api: &Api<Pod>, name: &str) {
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.is_not_found() => {}
        Err(error) => tracing::warn!(pod = %name, %error, "could not delete the pod"),
    }
}
