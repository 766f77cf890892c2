//! Reconcile: the seed's four-step contract, plus the instances, with reads from the informers'
//! caches and writes only where the cluster differs from its desired state.
//!
//! 1. **Fetch** the DatabaseCluster from the cache; gone (or being deleted) → `Done`: the garbage
//!    collector removes the children through their ownerReferences.
//! 2. **First pass**: write phase Provisioning with every condition Unknown, and end
//!    `RequeueAfter(0)`: the next pass, at once, makes the children (the echo of a pass's own
//!    status write queues no pass: `runtime::echoes`).
//! 3. **Children**, each built purely from the cluster ([`super::resources`], [`super::config`],
//!    [`super::credentials`], [`super::services`]): the headless and the three client Services,
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
//! 4. **Instances** (the I/O in [`super::instances`], the decisions in [`super::topology`],
//!    [`super::failover`] and [`super::roll`]): each pod's instance is asked what it is; a primary
//!    down for `failoverDelay` is replaced by a standby ([`super::promotion`]), and that pass ends
//!    there; role labels follow the answers;
//!    the primary's slots are created and dropped; a configuration that has reached an instance
//!    is reloaded, unless PostgreSQL refuses a line of it (then nothing of it is applied and
//!    `Ready=False`, `InvalidConfiguration`, names the lines); a password the primary refuses is
//!    set from its Secret (a refused superuser password restarts the primary); and the next
//!    outdated pod of a roll is deleted, once every instance has the current configuration file
//!    and PostgreSQL accepts it (a pod restarted with a refused file would not start). Failures
//!    here are logged and retried on a later pass.
//! 5. **Backups** ([`super::backup`]): the backup volume, the CronJob and the on-demand Jobs; the
//!    Jobs' outcomes go into the status with their Events. With `spec.bootstrap.fromBackup` the
//!    restore Job runs before the StatefulSet is created ([`super::backup::reconcile::ensure_restore`]).
//! 6. **Storage** ([`super::storage`]): after `storageSize` grows, each instance's claim is
//!    patched to the new size (the StatefulSet's template keeps the old one: it is immutable);
//!    `Resizing` says how far that got, or why the StorageClass refuses it.
//! 7. **Status**: computed from the StatefulSet as observed and the instances, and merge-patched
//!    on `/status` with the cached resourceVersion as a precondition, only when it differs from
//!    the cached status. Then `RequeueAfter` while the cluster converges, a volume grows, or an
//!    instance operation is under way (every 10 s, or sooner when a failover or switchover step
//!    or the end of the failover delay is due: none of these brings a watch event), else `Done`
//!    ([`next_look`]).
//!
//! An invalid spec (one that slipped past the CRD) writes phase Failed with `Ready=False,
//! InvalidSpec`, publishes a Warning Event once per generation, and ends the pass with a terminal
//! error: no retry until the spec changes. Events record created children, scaling, upgrades, the
//! invalid spec and (aggregated) reconcile errors; none ever carries the password. A retryable
//! error that lasts [`FAILURE_THRESHOLD`] passes also shows in the status
//! ([`super::failures`]), until a pass succeeds.
//!
//! A pass reads the caches through [`Context`], whose type parameter says in which form each
//! kind is cached ([`super::forms`]): the operator's own forms by default, the objects as
//! decoded for the kube-runtime anchor of the e2e benchmark, which runs this same function.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Secret};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use serde_json::json;
use thiserror::Error;

use super::app_secret;
use super::backup::reconcile::{BackupsObserved, RestoreGate, ensure_backups, ensure_restore};
use super::backup::status::apply_backup_status;
use super::cached::ChildForm;
use super::config::{
    ConfigurationState, Records, build_config_map, config_map_name, configuration_state, desired_config_hash,
    initial_primary, refused_configuration,
};
use super::credentials::{Login, build_login_secret, generate_password, secret_password, secret_value};
use super::demotion::{Switch, advance, begin};
use super::drift::keep_immutable_fields;
use super::events::EventType;
use super::events::{EventNote, EventPublisher, scaling_event, status_events};
use super::failover::{
    Decision, decide, failover_delay, outcome, seen_down_since, synchronous, unreported_promotion,
    with_failover,
};
use super::failures::{FAILURE_THRESHOLD, FailureCounts, with_reconcile_error, with_reconcile_success};
use super::forms::{CompactForms, Decoded, Forms, Listing, Lookup, PodForm};
use super::instances::{
    InstanceFacts, Target, check_login, connect, create_slot, drop_slot, observe, reload, set_password,
};
use super::promotion::{Promotion, fail_over, finish, set_role_label};
use super::resources::{
    FIELD_MANAGER, Owner, OwnerError, POSTGRES_PORT, build_headless_service, build_statefulset,
    foreign_controller, headless_service_name, label, statefulset_name,
};
use super::roll::{RollStep, next_step};
use super::services::{ClientService, ROLE_LABEL, build_client_service, build_pdb, pdb_name};
use super::status::{
    compute_status, initial_status, is_first_pass, needs_requeue, with_instances, with_refused_configuration,
    with_resizing,
};
use super::storage::{Growth, grow_claims};
use super::switchover::{
    INVALID_PRIMARY, check_target, handled_request, held_replicas, next_step as switchover_step, ordinal_of,
    phase, record as switchover_record, requested, with_switchover,
};
use super::topology::{
    PodView, REVISION_LABEL, all_standbys_streaming, current_primary, instance_statuses, label_changes,
    not_ready_since, slot_changes, start_failure, with_recorded_sync_states,
};
use super::types::{
    DatabaseCluster, DatabaseClusterStatus, FailoverRecord, InstanceStatus, PrimaryUpdateMethod,
    SwitchoverStatus,
};
use super::validation::{SpecError, ValidSpec, validate};
use crate::runtime::client;
use crate::runtime::controller::{Action, ReconcileError};
use crate::runtime::writes::{Verb, recorded_as};
use crate::runtime::{Object, ObjectKey};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// How long to wait before looking again while replicas are not ready, even without an event.
pub const CONVERGING_REQUEUE: Duration = Duration::from_secs(10);
/// How soon to look again while a failover is due or under way.
const FAILOVER_REQUEUE: Duration = Duration::from_secs(1);

/// What every reconcile pass shares: the client for writes, the caches for reads, the Event
/// publisher.
pub struct Context<F: Forms = CompactForms> {
    /// The client every write goes through.
    pub client: Client,
    /// The DatabaseClusters, as the primary informer holds them.
    pub clusters: Arc<dyn Lookup<F::Cluster>>,
    /// The operator's StatefulSets.
    pub statefulsets: Arc<dyn Lookup<F::StatefulSet>>,
    /// The operator's Services (headless and client).
    pub services: Arc<dyn Lookup<F::Service>>,
    /// The operator's login Secrets.
    pub secrets: Arc<dyn Lookup<F::Secret>>,
    /// The users' own app Secrets (`spec.appSecretName`) once labelled ([`app_secret`]).
    pub app_secrets: Arc<dyn Lookup<Secret>>,
    /// The operator's ConfigMaps.
    pub configmaps: Arc<dyn Lookup<F::ConfigMap>>,
    /// The operator's PodDisruptionBudgets.
    pub pdbs: Arc<dyn Lookup<F::Pdb>>,
    /// The clusters' pods (labelled managed-by the operator through the pod template).
    pub pods: Arc<dyn Listing<F::Pod>>,
    /// The operator's backup and restore Jobs (scheduled and on-demand).
    pub jobs: Arc<dyn Listing<Job>>,
    /// The operator's backup CronJobs.
    pub cronjobs: Arc<dyn Lookup<CronJob>>,
    /// The backup volumes (the instances' data claims are not cached).
    pub volumes: Arc<dyn Lookup<PersistentVolumeClaim>>,
    /// Where Events go.
    pub events: EventPublisher,
    /// Consecutive failed passes per cluster, to make a lasting error visible in its status.
    pub failures: FailureCounts,
}

impl<F: Forms> Debug for Context<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context").field("events", &self.events).finish_non_exhaustive()
    }
}

/// Why a pass failed.
#[derive(Debug, Error)]
pub enum Error {
    /// The spec cannot be acted on; only a change to it helps (terminal).
    #[error("invalid spec: {0}")]
    InvalidSpec(#[from] SpecError),
    /// The cluster lacks server-assigned metadata, so it cannot own children (terminal).
    #[error(transparent)]
    Owner(#[from] OwnerError),
    /// A child with the operator's name is controlled by something else; retried, since the
    /// other object may go away.
    #[error("{kind} {name} already exists and is controlled by {owner_kind} {owner_name}")]
    ForeignChild {
        /// The child's kind.
        kind: &'static str,
        /// The child's name.
        name: String,
        /// The kind of its controller.
        owner_kind: String,
        /// The name of its controller.
        owner_name: String,
    },
    /// A Secret with the operator's name has another type, which no write can change; retried,
    /// since it may be deleted.
    #[error(
        "Secret {name} already exists with type {found}, not {wanted}, and a Secret's type cannot change: \
         delete or rename it"
    )]
    ForeignSecretType {
        /// The Secret's name.
        name: String,
        /// Its type.
        found: String,
        /// The type of the operator's login Secrets.
        wanted: String,
    },
    /// A request for a child failed.
    #[error("{verb} {kind} {name}: {source}")]
    Child {
        /// `creating`, `reading`, `applying` or `labelling`.
        verb: &'static str,
        /// The child's kind.
        kind: &'static str,
        /// The child's name.
        name: String,
        /// The client's error.
        source: kube::Error,
    },
    /// The Secret named by `spec.appSecretName` cannot be used; retried, since the user may
    /// create or fix it.
    #[error("spec.appSecretName: Secret {name} {problem}")]
    AppSecret {
        /// The Secret's name.
        name: String,
        /// What is wrong with it.
        problem: &'static str,
    },
    /// The status patch failed.
    #[error("patching the status: {0}")]
    Status(#[source] kube::Error),
    /// A cached child's text did not decode. It decoded when it was cached ([`Compact`]), so
    /// this is a broken invariant; retried, and the pass writes nothing meanwhile.
    #[error("decoding the cached {kind} {name}: {source}")]
    Cached {
        /// The child's kind.
        kind: &'static str,
        /// The child's name.
        name: String,
        /// The decoder's error.
        source: serde_json::Error,
    },
}

impl ReconcileError for Error {
    fn is_terminal(&self) -> bool {
        matches!(self, Error::InvalidSpec(_) | Error::Owner(_))
    }

    fn retry_after(&self) -> Option<Duration> {
        match self {
            Error::Child { source, .. } | Error::Status(source) => client::retry_after(source),
            _ => None,
        }
    }
}

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
        Err(error) => {
            let cached = ctx.statefulsets.get(&child_key(cluster, statefulset_name));
            let observed = cached
                .as_deref()
                .map(|sts| decode_cached::<StatefulSet, _>(sts, "StatefulSet"))
                .transpose()?;
            let now = Timestamp::now();
            let pods = Owner::of(cluster).map(|owner| pod_views(ctx, &owner, now)).unwrap_or_default();
            let status = compute_status(cluster, Err(&error), observed.as_ref(), &pods, now);
            write_status(ctx, cluster, status).await?;
            return Err(Error::InvalidSpec(error));
        }
    };
    let owner = Owner::of(cluster)?;

    ensure_services(ctx, cluster, &owner).await?;
    let credentials = ensure_secrets(ctx, cluster, &owner, &spec).await?;
    super::status_token::ensure_status_token(ctx, cluster, &owner).await?;

    let config_key = child_key(cluster, config_map_name);
    let cached = ctx.configmaps.get(&config_key);
    let records: Records = match cached.as_deref() {
        Some(live) => view_cached(live, "ConfigMap")?,
        None => Records::default(),
    };
    let primary_record = records.primary().unwrap_or_else(|| initial_primary(owner.name()));
    let demoting = records.demoting();
    let (_, outcome) = ensure_child(ctx, &owner, "ConfigMap", cached, |_| {
        Ok(build_config_map(&owner, &spec, &primary_record, demoting.as_deref()))
    })
    .await?;
    report(ctx, cluster, "ConfigMap", &config_key, &outcome, None).await;

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
    let sts_key = child_key(cluster, statefulset_name);
    let cached = ctx.statefulsets.get(&sts_key);
    let primaries: Vec<&str> = std::iter::once(primary_record.as_str()).chain(demoting.as_deref()).collect();
    let held = ValidSpec { replicas: held_replicas(spec.replicas, &primaries), ..spec.clone() };
    // The live StatefulSet the last `build` decoded: unchanged, it is the StatefulSet; updated,
    // the one before. So a pass decodes the text once, and a written one not at all.
    let mut read = None;
    let (written, outcome) = ensure_child(ctx, &owner, "StatefulSet", cached, |live| {
        let mut desired = build_statefulset(&owner, &held);
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

    ensure_pdb(ctx, cluster, &owner, spec.replicas).await?;
    let backups = ensure_backups(ctx, cluster, &owner, &spec).await?;

    let pods = pod_views(ctx, &owner, Timestamp::now());
    let record = Record { primary: &primary_record, demoting: demoting.as_deref() };
    let topology = operate_instances(ctx, cluster, &owner, &spec, &sts, &pods, &credentials, &record).await;

    let growth = grow_claims(&ctx.client, cluster, &owner, &spec, &sts).await;

    let now = Timestamp::now();
    let status = with_reconcile_success(
        compute_status(cluster, Ok(&spec), Some(&sts), &pods, now),
        cluster.metadata.generation,
        now,
    );
    let status = with_instances(status, topology.statuses, topology.current_primary);
    let status = with_refused_configuration(status, &topology.refused, now);
    let status = if spec.replicas > 0 {
        with_failover(status, &primary_record, &topology.decision, topology.promoted.as_ref(), now)
    } else {
        status
    };
    let status = with_switchover(status, topology.switchover, cluster.spec.primary.as_deref(), now);
    let mut status = with_resizing(status, growth.as_ref(), spec.storage.as_str(), now);
    let backup_events = apply_backups(&mut status, cluster, backups, &spec, now);
    if restored.is_some() {
        status.restored_from = restored;
    }
    let ready = status.ready_replicas;
    let (phase, primary) = (status.phase.map(|p| p.as_str()), status.current_primary.clone());
    let resizing = matches!(growth, Some(Growth::InProgress { .. }));
    let converging = needs_requeue(&status) || topology.busy || resizing;
    write_status_with_events(ctx, cluster, status, backup_events).await?;
    let next = next_look(topology.retry_after, converging);
    // The pass's one line at INFO (the changes it made have a line each): what it found and
    // what comes next; the span around it says why it ran.
    let desired = cluster.spec.replicas;
    match next {
        Action::RequeueAfter(after) => {
            tracing::info!(
                phase,
                ready,
                desired,
                primary,
                ?after,
                "reconciled DatabaseCluster: converging, looking again"
            )
        }
        Action::Done => {
            tracing::info!(phase, ready, desired, primary, "reconciled DatabaseCluster: in its desired state")
        }
    }
    Ok(next)
}

/// What a pass that got to the status asks for next: a look when the instances' operation
/// (`retry_after`: a failover or switchover step, or the end of the failover delay) or a
/// converging cluster (every [`CONVERGING_REQUEUE`]) needs one, whichever is sooner; `Done`
/// only when neither does. Nothing else brings that look: neither an instance's state nor the
/// passing of time makes a watch event, and the echo of the pass's own status write queues no
/// pass (see `runtime::echoes`).
fn next_look(retry_after: Option<Duration>, converging: bool) -> Action {
    let converging = converging.then_some(CONVERGING_REQUEUE);
    match retry_after.into_iter().chain(converging).min() {
        Some(after) => Action::RequeueAfter(after),
        None => Action::Done,
    }
}

/// Folds the backup Jobs into `status` ([`super::backup::status`]) and records the on-demand
/// token handled; returns the Events to publish once the status is written.
fn apply_backups(
    status: &mut DatabaseClusterStatus,
    cluster: &DatabaseCluster,
    observed: BackupsObserved,
    spec: &ValidSpec,
    now: Timestamp,
) -> Vec<EventNote> {
    let events = apply_backup_status(
        status,
        cluster.status.as_ref(),
        spec.backup.as_ref(),
        &observed.jobs,
        cluster.metadata.generation,
        now,
    );
    if let Some(token) = observed.token {
        status.backups.get_or_insert_default().last_on_demand_token = Some(token);
    }
    events
}

/// The headless Service and the three client Services.
async fn ensure_services<F: Forms>(
    ctx: &Context<F>,
    cluster: &DatabaseCluster,
    owner: &Owner,
) -> Result<(), Error> {
    let service_key = child_key(cluster, headless_service_name);
    let cached = ctx.services.get(&service_key);
    let (_, outcome) =
        ensure_child(ctx, owner, "Service", cached, |_| Ok(build_headless_service(owner))).await?;
    report(ctx, cluster, "Service", &service_key, &outcome, None).await;
    for which in ClientService::ALL {
        let key = ObjectKey::new(Some(owner.namespace()), &which.name(owner.name()));
        let cached = ctx.services.get(&key);
        let (_, outcome) =
            ensure_child(ctx, owner, "Service", cached, |_| Ok(build_client_service(owner, which))).await?;
        report(ctx, cluster, "Service", &key, &outcome, None).await;
    }
    Ok(())
}

/// Each login's user and password, as its Secret holds them.
#[derive(Clone, Default)]
struct Credentials(BTreeMap<&'static str, (String, String)>);

impl Credentials {
    fn get(&self, login: Login) -> Option<(&str, &str)> {
        self.0.get(login.mount_dir()).map(|(user, password)| (user.as_str(), password.as_str()))
    }
}

/// The three login Secrets (the app one only when the spec names none): created with a fresh
/// password when absent, applied with the password read back otherwise.
async fn ensure_secrets<F: Forms>(
    ctx: &Context<F>,
    cluster: &DatabaseCluster,
    owner: &Owner,
    spec: &ValidSpec,
) -> Result<Credentials, Error> {
    let mut credentials = Credentials::default();
    for login in Login::ALL {
        if let (Login::App, Some(name)) = (login, spec.app_secret_name.as_deref()) {
            let api: Api<Secret> = Api::namespaced(ctx.client.clone(), owner.namespace());
            // Labelled already: the informer's copy is current. Otherwise read it and label it.
            let key = ObjectKey::new(Some(owner.namespace()), name);
            let cached = ctx.app_secrets.get(&key).filter(|s| app_secret::is_labelled_for(s, owner.name()));
            let secret = match cached {
                Some(cached) => Some(Secret::clone(&cached)),
                None => app_secret::read_and_label(&api, name, owner.name())
                    .await
                    .map_err(|source| child_error("labelling", "Secret", name, source))?,
            };
            if let Some(problem) = app_secret::problem(secret.as_ref()) {
                return Err(Error::AppSecret { name: name.to_owned(), problem });
            }
            if let Some(secret) = &secret
                && let (Some(user), Some(password)) =
                    (secret_value(secret, "username"), secret_password(secret))
            {
                credentials.0.insert(login.mount_dir(), (user, password));
            }
            continue;
        }
        let key = ObjectKey::new(Some(owner.namespace()), &login.secret_name(owner.name()));
        let cached = ctx.secrets.get(&key);
        // The password the last `build` put in the Secret: what the server now holds (written
        // with it, or already holding it, since a differing password is drift).
        let mut chosen = None;
        let (_, outcome) = ensure_child(ctx, owner, "Secret", cached, |live: Option<&F::Secret>| {
            let live = live.map(|live| decode_cached::<Secret, _>(live, "Secret")).transpose()?;
            let password = live.as_ref().and_then(secret_password).unwrap_or_else(|| {
                if live.is_some() {
                    tracing::warn!(secret = %key, "the Secret holds no password; generating a new one");
                }
                generate_password()
            });
            let desired = build_login_secret(owner, login, &password);
            let type_of = |secret: &Secret| secret.type_.clone().unwrap_or_else(|| "Opaque".to_owned());
            if let Some(live) = live.as_ref().filter(|live| type_of(live) != type_of(&desired)) {
                return Err(Error::ForeignSecretType {
                    name: login.secret_name(owner.name()),
                    found: type_of(live),
                    wanted: type_of(&desired),
                });
            }
            chosen = Some(password);
            Ok(desired)
        })
        .await?;
        report(ctx, cluster, "Secret", &key, &outcome, None).await;
        if let Some(password) = chosen {
            credentials.0.insert(login.mount_dir(), (login.username().to_owned(), password));
        }
    }
    Ok(credentials)
}

/// The PodDisruptionBudget with 2+ instances; none (deleted if there) below.
async fn ensure_pdb<F: Forms>(
    ctx: &Context<F>,
    cluster: &DatabaseCluster,
    owner: &Owner,
    replicas: i32,
) -> Result<(), Error> {
    let key = ObjectKey::new(Some(owner.namespace()), &pdb_name(owner.name()));
    let cached = ctx.pdbs.get(&key);
    match build_pdb(owner, replicas) {
        Some(pdb) => {
            let (_, outcome) =
                ensure_child(ctx, owner, "PodDisruptionBudget", cached, |_| Ok(pdb.clone())).await?;
            report(ctx, cluster, "PodDisruptionBudget", &key, &outcome, None).await;
        }
        None if cached.is_some() => {
            let api: Api<PodDisruptionBudget> = Api::namespaced(ctx.client.clone(), owner.namespace());
            match api.delete(key.name(), &DeleteParams::default()).await {
                Ok(_) => {
                    tracing::info!(name = %key.name(), "fewer than two instances: PodDisruptionBudget deleted")
                }
                Err(kube::Error::Api(status)) if status.is_not_found() => {}
                Err(source) => {
                    return Err(child_error("deleting", "PodDisruptionBudget", key.name(), source));
                }
            }
        }
        None => {}
    }
    Ok(())
}

/// The cluster's pods as the cache holds them.
fn pod_views<F: Forms>(ctx: &Context<F>, owner: &Owner, now: Timestamp) -> Vec<PodView> {
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
struct Topology {
    statuses: Vec<InstanceStatus>,
    current_primary: Option<String>,
    /// Something is under way (a roll, a reload, a password being applied): look again soon.
    busy: bool,
    /// Look again no later than this (a failover delay running out, a promotion under way).
    retry_after: Option<Duration>,
    /// What [`decide`] said about the recorded primary.
    decision: Decision,
    /// The failover this pass finished.
    promoted: Option<FailoverRecord>,
    /// The switchover record this pass made, if any.
    switchover: Option<SwitchoverStatus>,
    /// What PostgreSQL refuses of the configuration ([`refused_configuration`]).
    refused: Vec<String>,
}

/// What the `<name>-scripts` ConfigMap records ([`super::config`]).
struct Record<'a> {
    /// The instance that must accept writes.
    primary: &'a str,
    /// The old primary of a switchover under way.
    demoting: Option<&'a str>,
}

/// Observes every instance, then keeps the topology true: role labels, slots, reloads, passwords,
/// and the next step of a roll. Failures are logged and retried on the next pass; they never fail
/// the pass, since the status must still be written.
#[allow(clippy::too_many_arguments)]
async fn operate_instances<F: Forms>(
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

    // A switchover asked for by `spec.primary` ([`super::switchover`]), while the primary is healthy.
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
fn switching(
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
async fn apply_slots(su: &Target, primary: &InstanceFacts, primary_ordinal: i32, replicas: i32) -> bool {
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

async fn delete_pod(api: &Api<Pod>, name: &str) {
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.is_not_found() => {}
        Err(error) => tracing::warn!(pod = %name, %error, "could not delete the pod"),
    }
}

/// The key of a child named by `name_of(cluster name)`, in the cluster's namespace.
fn child_key(cluster: &DatabaseCluster, name_of: fn(&str) -> String) -> ObjectKey {
    let name = cluster.metadata.name.as_deref().unwrap_or_default();
    ObjectKey::new(cluster.metadata.namespace.as_deref(), &name_of(name))
}

/// What a pass did to one child.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Outcome {
    /// The child did not exist and was created.
    Created,
    /// The child differed in an owned field and was applied.
    Updated,
    /// The child was as desired; nothing was written.
    Unchanged,
}

impl Outcome {
    fn as_str(&self) -> &'static str {
        match self {
            Outcome::Created => "created",
            Outcome::Updated => "updated",
            Outcome::Unchanged => "none",
        }
    }
}

/// Logs one child's outcome and publishes its Event (created, or `extra` such as scaling).
pub(super) async fn report<F: Forms>(
    ctx: &Context<F>,
    cluster: &DatabaseCluster,
    kind: &'static str,
    key: &ObjectKey,
    outcome: &Outcome,
    extra: Option<EventNote>,
) {
    match outcome {
        Outcome::Unchanged => {
            tracing::debug!(kind = %kind, name = %key.name(), result = %outcome.as_str(), "child reconciled")
        }
        _ => tracing::info!(kind = %kind, name = %key.name(), result = %outcome.as_str(), "child reconciled"),
    }
    let note = match outcome {
        Outcome::Created => Some(EventNote::created(kind, key.name())),
        _ => extra,
    };
    if let Some(note) = note {
        ctx.events.publish(cluster, &note).await;
    }
}

/// Brings one child to its desired state: creates it when absent, applies it when an owned field
/// differs, and otherwise leaves it alone. `build` makes the desired object from the live one's
/// cached form (if any); `kind` names the child in logs and errors. Returns the object as the
/// server returned it from a write (none when nothing was written), and what was done.
pub(super) async fn ensure_child<F: Forms, C: ChildForm>(
    ctx: &Context<F>,
    owner: &Owner,
    kind: &'static str,
    cached: Option<Arc<C>>,
    mut build: impl FnMut(Option<&C>) -> Result<C::Object, Error>,
) -> Result<(Option<C::Object>, Outcome), Error> {
    let api: Api<C::Object> = Api::namespaced(ctx.client.clone(), owner.namespace());
    let live = match cached {
        Some(live) => live,
        None => {
            let desired = build(None)?;
            let name = desired.meta().name.clone().unwrap_or_default();
            let params =
                PostParams { field_manager: Some(FIELD_MANAGER.to_owned()), ..PostParams::default() };
            match api.create(&params, &desired).await {
                Ok(created) => return Ok((Some(recorded_as(Verb::Create, created)), Outcome::Created)),
                Err(kube::Error::Api(status)) if status.is_already_exists() => {
                    tracing::debug!(kind, %name, "the cache is behind the server; reading the child once");
                    let live =
                        api.get(&name).await.map_err(|source| child_error("reading", kind, &name, source))?;
                    Arc::new(C::from_server(live))
                }
                Err(source) => return Err(child_error("creating", kind, &name, source)),
            }
        }
    };
    let name = live.name().unwrap_or_default().to_owned();
    if let Some(other) = foreign_controller(live.as_ref(), owner) {
        return Err(Error::ForeignChild {
            kind,
            name,
            owner_kind: other.kind.to_owned(),
            owner_name: other.name.to_owned(),
        });
    }
    let desired = build(Some(&live))?;
    // The cache keeps some kinds in a form of their own ([`ChildForm`]): compare like with like.
    if !C::needs_update(&desired, &live) {
        return Ok((None, Outcome::Unchanged));
    }
    let applied = api
        .patch(&name, &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(&desired))
        .await
        .map_err(|source| child_error("applying", kind, &name, source))?;
    Ok((Some(recorded_as(Verb::Apply, applied)), Outcome::Updated))
}

/// A cached object decoded whole for a pass that reads it ([`Decoded::expand`]: its identity
/// included).
pub(super) fn decode_cached<K, C>(cached: &C, kind: &'static str) -> Result<K, Error>
where
    C: Decoded<K> + Object,
{
    cached.expand().map_err(|source| cached_error(cached, kind, source))
}

/// The few fields `T` names of a cached object ([`Decoded::decode_as`]; for a [`Compact`]
/// not its identity, which the text does not hold).
///
/// [`Compact`]: super::cached::Compact
pub(super) fn view_cached<T, K, C>(cached: &C, kind: &'static str) -> Result<T, Error>
where
    T: DeserializeOwned,
    C: Decoded<K> + Object,
{
    cached.decode_as().map_err(|source| cached_error(cached, kind, source))
}

fn cached_error<K: Object>(cached: &K, kind: &'static str, source: serde_json::Error) -> Error {
    Error::Cached { kind, name: cached.name().unwrap_or_default().to_owned(), source }
}

pub(super) fn child_error(verb: &'static str, kind: &'static str, name: &str, source: kube::Error) -> Error {
    Error::Child { verb, kind, name: name.to_owned(), source }
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
        assert_eq!(next_look(None, false), Action::Done);
        assert_eq!(next_look(None, true), Action::RequeueAfter(CONVERGING_REQUEUE));
        assert_eq!(next_look(Some(secs(1)), true), Action::RequeueAfter(secs(1)));
        assert_eq!(next_look(Some(secs(25)), true), Action::RequeueAfter(CONVERGING_REQUEUE));
        // A failover delay that ends after the converging check, in a cluster not converging:
        // nothing else would look again when it ends.
        assert_eq!(next_look(Some(secs(25)), false), Action::RequeueAfter(secs(25)));
    }
}
