//! Step: the instances (`operate_instances`). Each pod's instance manager is asked for its
//! `/status` (`observe`); then, in this order, the first that applies ends the step: a
//! switchover under way advances (`continue_switchover`), a primary down for its delay is
//! replaced (`fail_over_now`), a requested switchover begins
//! (`upkeep::switchover_requests`). Otherwise the upkeep of a healthy cluster follows
//! ([`super::upkeep`]): role labels, reloads, slots, passwords and the roll. Failures are logged and
//! retried on the next pass; they never fail the pass, since the status must still be written.
//! The operator opens no database session: commands go through the instance managers.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Api;
use kube::api::DeleteParams;

use crate::databasecluster::api::types::{
    DatabaseCluster, DatabaseClusterStatus, FailoverRecord, InstanceStatus, SwitchoverStatus,
};
use crate::databasecluster::api::validation::ValidSpec;
use crate::databasecluster::cache::forms::{Forms, PodForm};
use crate::databasecluster::controller::context::*;
use crate::databasecluster::controller::events::EventNote;
use crate::databasecluster::controller::steps::secrets::Credentials;
use crate::databasecluster::controller::steps::upkeep;
use crate::databasecluster::failover::promotion::{Promotion, fail_over, finish};
use crate::databasecluster::failover::{
    Decision, decide, failover_delay, held_for_full_disk, outcome, seen_down_since, synchronous,
    unreported_promotion,
};
use crate::databasecluster::instances::client::Access;
use crate::databasecluster::instances::client::{self, unreached_message};
use crate::databasecluster::instances::passwords::Versions;
use crate::databasecluster::instances::topology::{
    PodView, REVISION_LABEL, all_standbys_streaming, current_primary, instance_statuses, not_ready_since,
    start_failure, with_recorded_sync_states, with_unreached,
};
use crate::databasecluster::instances::{InstanceFacts, Target};
use crate::databasecluster::specs::config::refused_configuration;
use crate::databasecluster::specs::instance_pod::STATUS_PORT;
use crate::databasecluster::specs::resources::{Owner, label, statefulset_name};
use crate::databasecluster::specs::services::ROLE_LABEL;
use crate::databasecluster::switchover::demotion::{Switch, advance};
use crate::databasecluster::switchover::{next_step as switchover_step, phase, record as switchover_record};
use crate::instance::archive::state::ArchiverReport;
use crate::runtime::Object;

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

/// What [`operate_instances`] found. `statuses` say nothing of the instances not reached: that
/// goes into the status after the failures of `Ready` are named
/// ([`crate::databasecluster::instances::topology::with_unreached`]), since an instance that does
/// not answer is not known to fail; one whose manager says its data volume is full is.
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
    /// `status.appliedSecretVersions` as the primary reported them (`None`: keep the recorded).
    pub(crate) secret_versions: Option<Versions>,
    /// Events to publish once the status that records them is written (`PasswordApplied`).
    pub(crate) notes: Vec<EventNote>,
    /// The instances whose `/status` could not be read, with why.
    pub(crate) unreached: BTreeMap<String, String>,
    /// The primary's WAL archiver, as it reported it this pass.
    pub(crate) archiver: Option<ArchiverReport>,
}

/// What the `<name>-scripts` ConfigMap records ([`crate::databasecluster::specs::config`]).
pub(crate) struct Record<'a> {
    /// The instance that must accept writes.
    pub(crate) primary: &'a str,
    /// The old primary of a switchover under way.
    pub(crate) demoting: Option<&'a str>,
}

/// One pass over the instances: what every step reads.
pub(crate) struct Pass<'a, F: Forms> {
    pub(crate) ctx: &'a Context<F>,
    pub(crate) cluster: &'a DatabaseCluster,
    pub(crate) owner: &'a Owner,
    pub(crate) spec: &'a ValidSpec,
    pub(crate) pods: &'a [PodView],
    pub(crate) record: &'a Record<'a>,
    /// How the instance managers are reached (token, TLS).
    pub(crate) access: &'a Access,
    /// The namespace's pods, for role labels and deletions.
    pub(crate) pods_api: Api<Pod>,
}

impl<F: Forms> Pass<'_, F> {
    /// The status the last pass wrote.
    pub(crate) fn previous(&self) -> Option<&DatabaseClusterStatus> {
        self.cluster.status.as_ref()
    }

    /// The instance manager of a pod with an address.
    pub(crate) fn target_of(&self, pod: &PodView) -> Option<Target> {
        let port = u16::try_from(STATUS_PORT).unwrap_or(8000);
        Some(self.access.target(&pod.name, pod.ip.clone()?, port))
    }

    /// The instance manager of pod `name`, when it is not being deleted and has an address.
    pub(crate) fn target(&self, name: &str) -> Option<Target> {
        self.target_of(self.pods.iter().find(|p| p.name == name && !p.deleting)?)
    }

    /// A switchover from `old` to `new`.
    pub(crate) fn switch<'s>(&'s self, old: &'s str, new: &'s str) -> Switch<'s, F> {
        let (ctx, cluster, owner, spec) = (self.ctx, self.cluster, self.owner, self.spec);
        Switch { ctx, cluster, owner, spec, pods: &self.pods_api, old, new }
    }
}

/// What the instances said, and what follows from it alone.
pub(crate) struct Observed {
    pub(crate) facts: BTreeMap<String, InstanceFacts>,
    pub(crate) unreached: BTreeMap<String, String>,
    /// The instances whose managers say their data volume is full.
    pub(crate) disk_full: BTreeSet<String>,
    pub(crate) statuses: Vec<InstanceStatus>,
    pub(crate) current_primary: Option<String>,
    pub(crate) refused: Vec<String>,
    /// Some instance answers, and the primary is missing or a standby does not stream: look again
    /// soon (replication changes bring no watch event).
    pub(crate) busy: bool,
}

impl Observed {
    /// The [`Topology`] of a pass that ends with `decision`.
    fn topology(self, decision: Decision) -> Topology {
        self.into_parts(decision).1
    }

    /// The facts, and the [`Topology`] of a pass that goes on with `decision`.
    fn into_parts(self, decision: Decision) -> (BTreeMap<String, InstanceFacts>, Topology) {
        let primary = self.current_primary.as_ref().and_then(|p| self.facts.get(p));
        let archiver = primary.and_then(|facts| facts.archiver.clone());
        let topology = Topology {
            archiver,
            statuses: self.statuses,
            current_primary: self.current_primary,
            busy: self.busy,
            retry_after: None,
            decision,
            promoted: None,
            switchover: None,
            refused: self.refused,
            secret_versions: None,
            notes: Vec::new(),
            unreached: self.unreached,
        };
        (self.facts, topology)
    }
}

/// Asks every instance with an address for its `/status`, all at once; one whose pod is not ready
/// gets a second to answer, so that a hung primary does not hold back its own failover.
pub(crate) async fn observe<F: Forms>(pass: &Pass<'_, F>) -> Observed {
    let asked = pass.pods.iter().filter(|p| !p.deleting).filter_map(|pod| {
        let target = pass.target_of(pod)?;
        let limit = if pod.ready { client::STATUS_TIMEOUT } else { client::UNREADY_STATUS_TIMEOUT };
        Some(async move { (pod.name.clone(), client::observe(&target, limit).await) })
    });
    let mut facts = BTreeMap::new();
    let mut unreached = BTreeMap::new();
    let mut disk_full = BTreeSet::new();
    for (name, result) in futures::future::join_all(asked).await {
        match result {
            Ok(found) => drop(facts.insert(name, found)),
            Err(error) => {
                tracing::debug!(pod = %name, %error, "instance not observed");
                if client::is_disk_full(&error) {
                    disk_full.insert(name.clone());
                }
                unreached.insert(name, unreached_message(&error));
            }
        }
    }
    let refused = refused_configuration(facts.values(), pass.cluster.spec.postgres_config.as_ref());
    let recorded = pass.previous().map(|s| s.instances.as_slice()).unwrap_or_default();
    let statuses = with_recorded_sync_states(instance_statuses(pass.pods, &facts), recorded);
    // A full data volume is a known failure (unlike silence): named with `Ready`'s failures.
    let full: BTreeMap<String, String> = unreached
        .iter()
        .filter(|(name, _)| disk_full.contains(*name))
        .map(|(n, m)| (n.clone(), m.clone()))
        .collect();
    let statuses = with_unreached(statuses, &full);
    let current_primary = current_primary(pass.pods, &facts, pass.record.primary);
    let busy = !facts.is_empty()
        && (current_primary.is_none() || !all_standbys_streaming(&statuses, current_primary.as_deref()));
    Observed { facts, unreached, disk_full, statuses, current_primary, refused, busy }
}

/// Observes every instance, then keeps the topology true (see the module docs).
#[allow(clippy::too_many_arguments)]
pub(crate) async fn operate_instances<F: Forms>(
    ctx: &Context<F>,
    cluster: &DatabaseCluster,
    owner: &Owner,
    spec: &ValidSpec,
    sts: &StatefulSet,
    pods: &[PodView],
    credentials: &Credentials,
    access: &Access,
    record: &Record<'_>,
) -> Topology {
    let pods_api: Api<Pod> = Api::namespaced(ctx.client.clone(), owner.namespace());
    let pass = Pass { ctx, cluster, owner, spec, pods, record, access, pods_api };
    let observed = observe(&pass).await;
    if let Some(old) = record.demoting {
        return continue_switchover(&pass, observed, old).await;
    }
    let decision = if spec.replicas > 0 {
        let synchronous = synchronous(spec.synchronous_replicas, &observed.statuses);
        let seen_down = seen_down_since(pass.previous(), record.primary);
        let delay = failover_delay(cluster);
        let decision = decide(
            record.primary,
            pods,
            &observed.facts,
            delay,
            synchronous.as_ref(),
            seen_down,
            Timestamp::now(),
        );
        held_for_full_disk(decision, observed.disk_full.contains(record.primary))
    } else {
        Decision::Healthy
    };
    if let Decision::Promote { .. } = &decision {
        return fail_over_now(&pass, observed, decision).await;
    }
    let mut promoted = None;
    let unreported =
        unreported_promotion(record.primary, observed.current_primary.as_deref(), pass.previous());
    if let Some(old) = unreported {
        tracing::info!(%old, new = %record.primary, "failover: finishing one a stopped operator carried out");
        // Promoted already, it no longer says how much WAL it had received.
        let record = outcome(&old, record.primary, None, spec.synchronous_replicas, Timestamp::now());
        promoted = Some(finish(ctx, cluster, &pass.pods_api, &record).await);
    }
    let (facts, mut topology) = observed.into_parts(decision);
    topology.promoted = promoted;
    if let Some(switching) = upkeep::switchover_requests(&pass, &mut topology).await {
        return switching;
    }
    if let Decision::Waiting { remaining, .. } = &topology.decision {
        topology.retry_after = Some(*remaining + FAILOVER_REQUEUE);
    }
    upkeep::keep_up(&pass, &facts, sts, credentials, &mut topology).await;
    topology
}

/// A switchover under way from `old` (the record's `demoting`): its next step
/// ([`crate::databasecluster::switchover::next_step`]); the pass ends here.
async fn continue_switchover<F: Forms>(pass: &Pass<'_, F>, observed: Observed, old: &str) -> Topology {
    let primary = pass.record.primary;
    let now = Timestamp::now();
    let previous = pass.previous().and_then(|s| s.switchover.as_ref());
    let started = previous
        .filter(|s| s.phase == phase::SWITCHING_OVER)
        .and_then(|s| s.started.clone())
        .unwrap_or_else(|| Time(Timestamp::from_second(now.as_second()).unwrap_or(now)));
    let elapsed = Duration::try_from(now.duration_since(started.0)).unwrap_or_default();
    let step = switchover_step(old, primary, &observed.facts, elapsed);
    let over = advance(&pass.switch(old, primary), step, pass.target(primary).as_ref()).await;
    let requested = previous.map_or(primary, |s| s.requested.as_str());
    let (now_phase, message) = match over {
        Some(done) if done == phase::COMPLETED => {
            (done, format!("{primary} is the primary in place of {old}; no transaction was lost"))
        }
        Some(aborted) => {
            (aborted, format!("{primary} did not catch up with {old} in time: {old} is the primary again"))
        }
        None => (phase::SWITCHING_OVER, format!("switching over from {old} to {primary}")),
    };
    let finished = over == Some(phase::COMPLETED);
    let decision =
        if finished { Decision::Healthy } else { Decision::SwitchingOver { from: old.to_owned() } };
    let current_primary = observed.current_primary.clone();
    let mut topology = observed.topology(decision);
    topology.current_primary = if finished { Some(primary.to_owned()) } else { current_primary };
    topology.busy = true;
    topology.retry_after = Some(FAILOVER_REQUEUE);
    let switched = Some((old, primary));
    topology.switchover = Some(switchover_record(requested, now_phase, switched, Some(started), message));
    topology
}

/// A failover [`decide`] asked for (`decision` is `Promote`): the promotion; the rest waits for
/// the next pass, which observes the new topology.
async fn fail_over_now<F: Forms>(pass: &Pass<'_, F>, observed: Observed, decision: Decision) -> Topology {
    let Decision::Promote { pod: new, resume, down_for, received_lsn } = &decision else {
        return observed.topology(decision);
    };
    let previous = pass.previous();
    let old = match (resume, previous.and_then(|s| s.current_primary.as_deref())) {
        (true, Some(last)) => last,
        _ => pass.record.primary,
    };
    let lag_bytes =
        previous.and_then(|s| s.instances.iter().find(|i| &i.name == new)).and_then(|i| i.lag_bytes);
    let mut promoted = None;
    if let Some(target) = pass.pods.iter().find(|p| &p.name == new).and_then(|p| pass.target_of(p)) {
        let promotion = Promotion {
            old,
            new,
            resume: *resume,
            down_for: *down_for,
            lag_bytes,
            received_lsn: *received_lsn,
            target,
        };
        promoted = fail_over(pass.ctx, pass.cluster, pass.owner, pass.spec, &promotion).await;
    }
    let current_primary = promoted.as_ref().map(|r| r.to.clone()).or(observed.current_primary.clone());
    let mut topology = observed.topology(decision.clone());
    topology.current_primary = current_primary;
    topology.busy = true;
    topology.retry_after = Some(FAILOVER_REQUEUE);
    topology.promoted = promoted;
    topology
}

/// `topology` for a pass that started a switchover from `old` (`begun`, when the fence worked):
/// the rest waits for the next pass.
pub(crate) fn switching(mut topology: Topology, old: &str, begun: Option<SwitchoverStatus>) -> Topology {
    topology.busy = true;
    topology.retry_after = Some(FAILOVER_REQUEUE);
    topology.promoted = None;
    if begun.is_some() {
        topology.decision = Decision::SwitchingOver { from: old.to_owned() };
    }
    topology.switchover = begun;
    topology
}

/// Deletes pod `name` (gone already is fine); failures are logged.
pub(crate) async fn delete_pod(api: &Api<Pod>, name: &str) {
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.is_not_found() => {}
        Err(error) => tracing::warn!(pod = %name, %error, "could not delete the pod"),
    }
}
