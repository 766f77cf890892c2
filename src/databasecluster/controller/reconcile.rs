//! Reconcile: the seed's four-step contract, plus the instances, with reads from the informers'
//! caches and writes only where the cluster differs from its desired state.
//!
//! 1. **Fetch** the DatabaseCluster from the cache; gone (or being deleted) → `Done`: the garbage
//!    collector removes the children through their ownerReferences.
//! 2. **First pass**: write phase Provisioning with every condition Unknown, and end
//!    `RequeueAfter(0)`: the next pass, at once, makes the children (the echo of a pass's own
//!    status write queues no pass: `runtime::controller::echoes`).
//! 3. **Children**, each built purely from the cluster ([`crate::databasecluster::specs::resources`], [`crate::databasecluster::specs::config`],
//!    [`crate::databasecluster::specs::credentials`], [`crate::databasecluster::specs::services`]): the headless and the three client Services,
//!    the three login Secrets, the ConfigMap `<name>-scripts`, the StatefulSet and (2+ instances)
//!    the PodDisruptionBudget. Absent from the cache → create (POST); present → server-side apply
//!    (field manager [`FIELD_MANAGER`], forced) only when `drift::needs_update` finds a
//!    difference in a field the operator owns (`ChildForm::needs_update`: the cached form
//!    compared like with like), so other managers' fields survive and an unchanged cluster costs no
//!    write. A create answered `409 AlreadyExists` means the cache is behind: the object is
//!    read from the API once and handled as if cached. A password is drawn once from a CSPRNG
//!    when its Secret is created and read back from it ever after. A child that changed logs a
//!    line at INFO (`result=created|updated`), one left alone at DEBUG (`result=none`); the pass
//!    ends with one INFO line, `reconciled DatabaseCluster`, with its phase, readiness, primary
//!    and what comes next (its span says why it ran), so a pass that changes nothing logs one line.
//! 4. **Instances** (the I/O in [`crate::databasecluster::instances`], the decisions in [`crate::databasecluster::instances::topology`],
//!    [`crate::databasecluster::failover`] and [`crate::databasecluster::instances::roll`]): each pod's instance manager is asked
//!    for its `/status` (HTTPS verified against the cluster's CA, with the `<name>-status-token`; the operator opens no database
//!    session, and an instance that does not answer is `unknown`, its status saying why); a primary
//!    down for `failoverDelay` is replaced by a standby ([`crate::databasecluster::failover::promotion`]), and that pass ends
//!    there; role labels follow the answers;
//!    the primary's slots are created and dropped (`POST /slots`); a configuration that has reached
//!    an instance is reloaded (`POST /reload`), unless PostgreSQL refuses a line of it (then nothing
//!    of it is applied and `Ready=False`, `InvalidConfiguration`, names the lines); the versions of
//!    the login Secrets the primary reports applying are compared with the Secrets
//!    ([`crate::databasecluster::instances::passwords`]: the managers apply changed Secrets
//!    themselves); and the next outdated pod of a roll is deleted, once every instance has the
//!    current configuration file and PostgreSQL accepts it (a pod restarted with a refused file
//!    would not start). Failures here are logged and retried on a later pass.
//!    A major upgrade ([`crate::databasecluster::controller::steps::upgrade`]) runs before the
//!    StatefulSet: while the instances stop and `pg_upgrade` runs, the pass follows the running
//!    version with no instance; after a failed upgrade, the running version with every instance.
//! 5. **Backups** ([`crate::databasecluster::backup`]): the backup volume, the CronJob and the on-demand Jobs; the
//!    Jobs' outcomes go into the status with their Events. With `spec.bootstrap.fromBackup` the
//!    restore Job runs before the StatefulSet is created ([`crate::databasecluster::backup::reconcile::ensure_restore`]).
//! 6. **Storage** ([`crate::databasecluster::instances::storage`]): after `storageSize` grows, each instance's claim is
//!    patched to the new size (the StatefulSet's template keeps the old one: it is immutable);
//!    `Resizing` says how far that got, or why the StorageClass refuses it.
//! 7. **Status**: computed from the StatefulSet as observed and the instances, and merge-patched
//!    on `/status` with the cached resourceVersion as a precondition, only when it differs from
//!    the cached status. Then `RequeueAfter` while the cluster converges, a volume grows, or an
//!    instance operation is under way (every 10 s, or sooner when a failover or switchover step
//!    or the end of the failover delay is due: none of these brings a watch event); a settled
//!    cluster with instances every [`SETTLED_REQUEUE`] (30 s), so that its instances' facts in the
//!    status are never older; `Done` only without instances (`next_look`).
//!
//! An invalid spec (one that slipped past the CRD) writes phase Failed with `Ready=False,
//! InvalidSpec`, publishes a Warning Event once per generation, and ends the pass with a terminal
//! error: no retry until the spec changes. Events record created children, scaling, upgrades, the
//! invalid spec and (aggregated) reconcile errors; none ever carries the password. A retryable
//! error that lasts [`FAILURE_THRESHOLD`] passes also shows in the status
//! ([`crate::databasecluster::controller::failures`]), until a pass succeeds.
//!
//! A pass reads the caches through [`Context`], whose type parameter says in which form each
//! kind is cached ([`crate::databasecluster::cache::forms`]): the operator's own forms by default, the objects as
//! decoded for the kube-runtime anchor of the e2e benchmark, which runs this same function.

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::StatefulSet;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;

use crate::databasecluster::controller::context::*;
use crate::databasecluster::controller::steps::backups::*;
use crate::databasecluster::controller::steps::child::*;
use crate::databasecluster::controller::steps::instances::*;
use crate::databasecluster::controller::steps::pdb::*;
use crate::databasecluster::controller::steps::secrets::*;
use crate::databasecluster::controller::steps::services::*;
use crate::databasecluster::controller::steps::upgrade::ensure_major_upgrade;

use crate::databasecluster::api::types::{DatabaseCluster, DatabaseClusterStatus, RestoredFrom};
use crate::databasecluster::api::validation::{SpecError, ValidSpec, validate};
use crate::databasecluster::backup::reconcile::{
    BackupsObserved, RestoreGate, ensure_backups, ensure_restore,
};
use crate::databasecluster::cache::drift::keep_immutable_fields;
use crate::databasecluster::cache::forms::Forms;
use crate::databasecluster::controller::events::{EventNote, scaling_event, status_events};
use crate::databasecluster::controller::failures::{
    FAILURE_THRESHOLD, with_reconcile_error, with_reconcile_success,
};
use crate::databasecluster::controller::observed::with_observation;
use crate::databasecluster::controller::status::{
    compute_status, initial_status, is_first_pass, needs_requeue, with_instances, with_refused_configuration,
    with_resizing,
};
use crate::databasecluster::failover::with_failover;
use crate::databasecluster::instances::client::Access;
use crate::databasecluster::instances::storage::{Growth, grow_claims};
use crate::databasecluster::instances::topology::with_unreached;
use crate::databasecluster::specs::config::{Records, build_config_map, config_map_name, initial_primary};
use crate::databasecluster::specs::resources::{FIELD_MANAGER, Owner, build_statefulset, statefulset_name};
use crate::databasecluster::switchover::{held_replicas, with_switchover};
use crate::runtime::controller::writes::{Verb, recorded_as};
use crate::runtime::controller::{Action, ReconcileError};
use crate::runtime::{Object, ObjectKey};

/// One reconcile pass for the DatabaseCluster `key`; see the module docs.
pub async fn reconcile<F: Forms>(key: ObjectKey, ctx: Arc<Context<F>>) -> Result<Action, Error> {
    let Some(cached) = ctx.clusters.get(&key) else {
        tracing::info!("DatabaseCluster not found: deleted; nothing to do");
        ctx.events.clear_error(&key);
        ctx.failures.clear(&key);
        return Ok(Action::Done);
    };
    if cached.is_deleting() {
        tracing::info!("DatabaseCluster is being deleted; the garbage collector removes its children");
        return Ok(Action::Done);
    }
    // Boxed: the pass's future holds it across every await (a decoded cluster is 1.4 KB inline).
    let cluster: Box<DatabaseCluster> = Box::new(decode_cached(&*cached, "DatabaseCluster")?);
    let result = reconcile_cluster(&cluster, &ctx).await;
    match &result {
        Err(error) if !error.is_terminal() => {
            ctx.events.publish_error(&cluster, error).await;
            if ctx.failures.record_failure(&key) >= FAILURE_THRESHOLD {
                show_error(&ctx, &cluster, error).await;
            }
        }
        Err(_) => {}
        Ok(_) => {
            ctx.events.clear_error(&key);
            ctx.failures.clear(&key);
        }
    }
    result
}

/// Writes `error` into the cluster's status ([`with_reconcile_error`]); a failure to do so is
/// logged (the API may be what is failing) and the next failed pass tries again.
async fn show_error<F: Forms>(ctx: &Context<F>, cluster: &DatabaseCluster, error: &Error) {
    let status = with_reconcile_error(cluster, &error.to_string(), Timestamp::now());
    if let Err(write_error) = write_status(ctx, cluster, status).await {
        tracing::warn!(error = %write_error, "could not record the reconcile error in the status");
    }
}

async fn reconcile_cluster<F: Forms>(cluster: &DatabaseCluster, ctx: &Context<F>) -> Result<Action, Error> {
    let phase = cluster.status.as_ref().and_then(|s| s.phase).map(|p| p.as_str());
    tracing::debug!(replicas = cluster.spec.replicas, version = %cluster.spec.version, phase, "reconciling DatabaseCluster");

    if is_first_pass(cluster) {
        tracing::info!("new DatabaseCluster: setting phase Provisioning");
        write_status(ctx, cluster, initial_status(cluster, Timestamp::now())).await?;
        // Not `Done`: the children are still to be made, by the next pass, which reads the
        // status just written (the echo of the pass's own write queues nothing).
        return Ok(Action::RequeueAfter(Duration::ZERO));
    }
    let spec = match validate(cluster) {
        Ok(spec) => spec,
        Err(error) => return refuse_invalid_spec(ctx, cluster, error).await,
    };
    let owner = Owner::of(cluster)?;

    ensure_services(ctx, cluster, &owner).await?;
    let certificates = match crate::databasecluster::controller::steps::certificates::ensure_certificates(
        ctx, cluster, &owner, &spec,
    )
    .await
    {
        Err(error @ Error::UserCertificate { .. }) => return refuse_certificates(ctx, cluster, error).await,
        certificates => certificates?,
    };
    let credentials = ensure_secrets(ctx, cluster, &owner, &spec, &certificates.ca_cert).await?;
    let token =
        crate::databasecluster::controller::steps::status_token::ensure_status_token(ctx, cluster, &owner)
            .await?;
    // The managers serve the servers' certificate: verified with the CAs that verify the servers.
    let access = Access::new(token, &certificates.ca_cert, owner.name(), owner.namespace());
    let (primary_record, demoting) = ensure_config_map(ctx, cluster, &owner, &spec).await?;
    let upgrade = ensure_major_upgrade(ctx, cluster, &owner, &spec, &primary_record).await?;
    let spec = upgrade.statefulset_spec(spec);
    let restored = match ensure_restore(ctx, cluster, &owner, &spec).await? {
        RestoreGate::Open(restored) => restored,
        gate => {
            tracing::info!(?gate, "restoring from a backup; the StatefulSet waits");
            let status = compute_status(cluster, Ok(&spec), None, &[], Timestamp::now());
            write_status(ctx, cluster, status).await?;
            // The Job's progress brings the next pass (its informer); a failed restore waits for a change.
            return Ok(Action::Done);
        }
    };
    let record = Record { primary: &primary_record, demoting: demoting.as_deref() };
    let sts = ensure_statefulset(ctx, cluster, &owner, &spec, &record).await?;
    ensure_pdb(ctx, cluster, &owner, spec.replicas).await?;
    let backups = ensure_backups(ctx, cluster, &owner, &spec).await?;

    let pods = pod_views(ctx, &owner, Timestamp::now());
    let topology =
        operate_instances(ctx, cluster, &owner, &spec, &sts, &pods, &credentials, &access, &record).await;
    let growth = grow_claims(&ctx.client, cluster, &owner, &spec, &sts).await;

    let now = Timestamp::now();
    let observed = compute_status(cluster, Ok(&spec), Some(&sts), &pods, now);
    let (busy, retry_after) = (topology.busy, topology.retry_after);
    let outcome = PassOutcome { topology, growth: growth.as_ref(), restored, primary: &primary_record };
    let (status, backup_events) = pass_status(cluster, &spec, observed, outcome, backups, now);
    let status = certificates.on_status(status, ctx.certificates, now);
    let status = upgrade.status(status, now);
    let resizing = matches!(growth, Some(Growth::InProgress { .. }));
    let converging = needs_requeue(&status) || busy || resizing || upgrade.in_progress();
    let status = with_observation(cluster.status.as_ref(), status, converging, now);
    let summary = (status.phase.map(|p| p.as_str()), status.ready_replicas, status.current_primary.clone());
    write_status_with_events(ctx, cluster, status, backup_events).await?;
    // A certificate to renew before the next look brings its own.
    let renew_in = certificates.renew_in(now);
    let next = next_look(retry_after.into_iter().chain(renew_in).min(), converging, spec.replicas > 0);
    log_pass(cluster, converging || retry_after.is_some(), &next, summary);
    // A renewal the API refused is in the status; the pass is retried with back-off.
    certificates.into_refusal().map_or(Ok(next), Err)
}

/// A Secret `spec.certificates` names cannot be used: `Ready=False, InvalidCertificates` (with
/// its Warning Event), nothing else changed or deleted, and a look again in
/// [`CERTIFICATES_RETRY`] (the operator does not watch the user's Secrets).
async fn refuse_certificates<F: Forms>(
    ctx: &Context<F>,
    cluster: &DatabaseCluster,
    error: Error,
) -> Result<Action, Error> {
    use crate::databasecluster::controller::status::{ConditionSetter, condition, reason};
    tracing::warn!(%error, "the certificates spec.certificates names cannot be used");
    let mut status = cluster.status.clone().unwrap_or_default();
    let mut conditions =
        ConditionSetter::new(status.conditions, cluster.metadata.generation, Timestamp::now());
    conditions.set(condition::READY, "False", reason::INVALID_CERTIFICATES, error.to_string());
    status.conditions = conditions.into_inner();
    write_status(ctx, cluster, status).await?;
    Ok(Action::RequeueAfter(CERTIFICATES_RETRY))
}

/// How soon a cluster whose `spec.certificates` Secrets cannot be used is looked at again.
pub const CERTIFICATES_RETRY: Duration = Duration::from_secs(10);

/// An invalid spec: the status says so (with the StatefulSet and pods as they are), and the pass
/// ends with a terminal error.
async fn refuse_invalid_spec<F: Forms>(
    ctx: &Context<F>,
    cluster: &DatabaseCluster,
    error: SpecError,
) -> Result<Action, Error> {
    let cached = ctx.statefulsets.get(&child_key(cluster, statefulset_name));
    let observed =
        cached.as_deref().map(|sts| decode_cached::<StatefulSet, _>(sts, "StatefulSet")).transpose()?;
    let now = Timestamp::now();
    let pods = Owner::of(cluster).map(|owner| pod_views(ctx, &owner, now)).unwrap_or_default();
    let status = compute_status(cluster, Err(&error), observed.as_ref(), &pods, now);
    write_status(ctx, cluster, status).await?;
    Err(Error::InvalidSpec(error))
}

/// Keeps the ConfigMap, and returns what it records: the primary, and the old primary of a
/// switchover under way.
async fn ensure_config_map<F: Forms>(
    ctx: &Context<F>,
    cluster: &DatabaseCluster,
    owner: &Owner,
    spec: &ValidSpec,
) -> Result<(String, Option<String>), Error> {
    let config_key = child_key(cluster, config_map_name);
    let cached = ctx.configmaps.get(&config_key);
    let records: Records = match cached.as_deref() {
        Some(live) => view_cached(live, "ConfigMap")?,
        None => Records::default(),
    };
    let primary_record = records.primary().unwrap_or_else(|| initial_primary(owner.name()));
    let demoting = records.demoting();
    let (_, outcome) = ensure_child(ctx, owner, "ConfigMap", cached, |_| {
        Ok(build_config_map(owner, spec, &primary_record, demoting.as_deref()))
    })
    .await?;
    report(ctx, cluster, "ConfigMap", &config_key, &outcome, None).await;
    Ok((primary_record, demoting))
}

/// Keeps the StatefulSet (its replicas held while a promotion or switchover needs them), and
/// returns it as written or, unchanged, as it is.
async fn ensure_statefulset<F: Forms>(
    ctx: &Context<F>,
    cluster: &DatabaseCluster,
    owner: &Owner,
    spec: &ValidSpec,
    record: &Record<'_>,
) -> Result<StatefulSet, Error> {
    let sts_key = child_key(cluster, statefulset_name);
    let cached = ctx.statefulsets.get(&sts_key);
    let primaries: Vec<&str> = std::iter::once(record.primary).chain(record.demoting).collect();
    let held = ValidSpec { replicas: held_replicas(spec.replicas, &primaries), ..spec.clone() };
    // The live StatefulSet the last `build` decoded: unchanged, it is the StatefulSet; updated,
    // the one before. So a pass decodes the text once, and a written one not at all.
    let mut read = None;
    let (written, outcome) = ensure_child(ctx, owner, "StatefulSet", cached, |live| {
        let mut desired = build_statefulset(owner, &held);
        if let Some(live) = live {
            let live: StatefulSet = decode_cached(live, "StatefulSet")?;
            keep_immutable_fields(&mut desired, &live);
            read = Some(live);
        }
        Ok(desired)
    })
    .await?;
    let scaling = match (&read, &written) {
        (Some(before), Some(after)) => scaling_event(before, after),
        _ => None,
    };
    // Invariant: a pass that wrote nothing compared the live StatefulSet, which `build` decoded
    // into `read` (a decode that failed ended the pass above).
    let sts = written.or(read).expect("an unwritten StatefulSet was read by `build`");
    report(ctx, cluster, "StatefulSet", &sts_key, &outcome, scaling).await;
    Ok(sts)
}

/// What the pass found beyond the StatefulSet and pods: the instances' topology, the volumes'
/// growth, a restore this pass saw complete, and the recorded primary.
struct PassOutcome<'a> {
    topology: Topology,
    growth: Option<&'a Growth>,
    restored: Option<RestoredFrom>,
    primary: &'a str,
}

/// The status the pass writes: the observed one (`compute_status`) with what the pass found
/// ([`PassOutcome`]) and the backups; with the Events the backups' changes make.
fn pass_status(
    cluster: &DatabaseCluster,
    spec: &ValidSpec,
    observed: DatabaseClusterStatus,
    outcome: PassOutcome<'_>,
    backups: BackupsObserved,
    now: Timestamp,
) -> (DatabaseClusterStatus, Vec<EventNote>) {
    let PassOutcome { topology, growth, restored, primary } = outcome;
    let status = with_reconcile_success(observed, cluster.metadata.generation, now);
    let mut status = with_instances(status, topology.statuses, topology.current_primary);
    status.instances = with_unreached(std::mem::take(&mut status.instances), &topology.unreached);
    if let Some(versions) = topology.secret_versions {
        status.applied_secret_versions = versions;
    }
    let status = with_refused_configuration(status, &topology.refused, now);
    let status = if spec.replicas > 0 {
        with_failover(status, primary, &topology.decision, topology.promoted.as_ref(), now)
    } else {
        status
    };
    let status = with_switchover(status, topology.switchover, cluster.spec.primary.as_deref(), now);
    let mut status = with_resizing(status, growth, spec.storage.as_str(), now);
    let mut events = apply_backups(&mut status, cluster, backups, spec, now);
    events.extend(topology.notes);
    events.extend(apply_archiving(&mut status, cluster, spec, topology.archiver.as_ref(), now));
    if restored.is_some() {
        status.restored_from = restored;
    }
    (status, events)
}

/// The pass's one line at INFO (the changes it made have a line each): what it found (`phase`,
/// ready instances, primary) and what comes next (`converging`: a look soon because something is
/// under way, rather than the settled cluster's periodic one); the span around it says why it ran.
fn log_pass(
    cluster: &DatabaseCluster,
    converging: bool,
    next: &Action,
    (phase, ready, primary): (Option<&str>, i32, Option<String>),
) {
    let desired = cluster.spec.replicas;
    match next {
        Action::RequeueAfter(after) if converging => {
            tracing::info!(
                phase,
                ready,
                desired,
                primary,
                ?after,
                "reconciled DatabaseCluster: converging, looking again"
            )
        }
        _ => {
            tracing::info!(phase, ready, desired, primary, "reconciled DatabaseCluster: in its desired state")
        }
    }
}

/// What a pass that got to the status asks for next: a look when the instances' operation
/// (`retry_after`: a failover or switchover step, or the end of the failover delay) or a
/// converging cluster (every [`CONVERGING_REQUEUE`]) needs one, whichever is sooner; a cluster
/// with instances (`observing`) otherwise every [`SETTLED_REQUEUE`], so that its instances' facts
/// in the status (roles, replication, lag, refused settings) are never older than that; `Done`
/// only for a cluster without instances (hibernated). Nothing else brings that look: neither an
/// instance's state nor the passing of time makes a watch event, and the echo of the pass's own
/// status write queues no pass (see `runtime::controller::echoes`).
fn next_look(retry_after: Option<Duration>, converging: bool, observing: bool) -> Action {
    let converging = converging.then_some(CONVERGING_REQUEUE);
    let settled = observing.then_some(SETTLED_REQUEUE);
    match retry_after.into_iter().chain(converging).chain(settled).min() {
        Some(after) => Action::RequeueAfter(after),
        None => Action::Done,
    }
}
/// Merge-patches `status` on `/status` when it differs from the cached status, then publishes the
/// Events the change implies. The cached resourceVersion is a precondition: a `409 Conflict` means
/// the cache is behind, and the newer version's event brings the next pass.
async fn write_status<F: Forms>(
    ctx: &Context<F>,
    cluster: &DatabaseCluster,
    status: DatabaseClusterStatus,
) -> Result<(), Error> {
    write_status_with_events(ctx, cluster, status, Vec::new()).await
}

/// [`write_status`], also publishing `extra` Events (the backups') once the status that records
/// them is written, so that a write lost to a conflict repeats them on the next pass, not twice.
async fn write_status_with_events<F: Forms>(
    ctx: &Context<F>,
    cluster: &DatabaseCluster,
    status: DatabaseClusterStatus,
    extra: Vec<EventNote>,
) -> Result<(), Error> {
    let old = cluster.status.as_ref();
    if old == Some(&status) {
        tracing::debug!("status unchanged; not writing");
        return Ok(());
    }
    let name = cluster.metadata.name.as_deref().unwrap_or_default();
    let namespace = cluster.metadata.namespace.as_deref().unwrap_or("default");
    let api: Api<DatabaseCluster> = Api::namespaced(ctx.client.clone(), namespace);
    let patch = json!({
        "metadata": {"resourceVersion": cluster.metadata.resource_version},
        "status": status,
    });
    let params = PatchParams { field_manager: Some(FIELD_MANAGER.to_owned()), ..PatchParams::default() };
    match api.patch_status(name, &params, &Patch::Merge(&patch)).await {
        Ok(written) => drop(recorded_as(Verb::PatchStatus, written)),
        Err(kube::Error::Api(s)) if s.is_conflict() => {
            tracing::debug!("status patch conflicts: the cache is behind; the next event brings a new pass");
            return Ok(());
        }
        Err(source) => return Err(Error::Status(source)),
    }
    let phase = status.phase.map(|p| p.as_str());
    tracing::info!(phase, ready = status.ready_replicas, "status updated");
    for note in status_events(old, &status).into_iter().chain(extra) {
        ctx.events.publish(cluster, &note).await;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::databasecluster::api::validation::SpecError;
    use crate::databasecluster::specs::names::OwnerError;

    #[test]
    fn only_spec_and_ownership_errors_are_terminal() {
        assert!(Error::InvalidSpec(SpecError::ReplicasOutOfRange(0)).is_terminal());
        assert!(Error::Owner(OwnerError::MissingMetadata("uid")).is_terminal());
        let foreign = Error::ForeignChild {
            kind: "Service",
            name: "pg".into(),
            owner_kind: "Other".into(),
            owner_name: "x".into(),
        };
        assert!(!foreign.is_terminal());
    }

    #[test]
    fn a_pass_asks_for_the_sooner_of_the_instances_retry_and_the_converging_check() {
        let secs = Duration::from_secs;
        let after = Action::RequeueAfter;
        // (retry after, converging, with instances) → next
        let cases = [
            (None, false, false, Action::Done),
            (None, true, false, after(CONVERGING_REQUEUE)),
            (Some(secs(1)), true, true, after(secs(1))),
            (Some(secs(25)), true, true, after(CONVERGING_REQUEUE)),
            // A failover delay that ends after the converging check, in a cluster not converging:
            // nothing else would look again when it ends.
            (Some(secs(25)), false, true, after(secs(25))),
            (Some(secs(45)), false, false, after(secs(45))),
            // Settled: the instances are looked at again, never less often than every 30 s.
            (None, false, true, after(SETTLED_REQUEUE)),
            (Some(secs(45)), false, true, after(SETTLED_REQUEUE)),
            (None, true, true, after(CONVERGING_REQUEUE)),
        ];
        for (retry, converging, observing, want) in cases {
            assert_eq!(next_look(retry, converging, observing), want, "{retry:?} {converging} {observing}");
        }
        assert!(SETTLED_REQUEUE <= secs(30));
    }
}
