//! Reconcile: the seed's four-step contract, with reads from the informers' caches and writes only
//! where the cluster differs from its desired state.
//!
//! 1. **Fetch** the DatabaseCluster from the cache; gone (or being deleted) → `Done`: the garbage
//!    collector removes the children through their ownerReferences.
//! 2. **First pass**: write phase Provisioning with every condition Unknown, and return; the status
//!    write's own watch event brings the next pass.
//! 3. **Children**, each built purely from the cluster ([`super::resources`]): absent from the
//!    cache → create (POST); present → server-side apply (field manager
//!    [`FIELD_MANAGER`], forced) only when [`needs_update`] finds a difference in a field the
//!    operator owns, so other managers' fields survive and an unchanged cluster costs no write.
//!    A create answered `409 AlreadyExists` means the cache is behind: the object is read from the
//!    API once and handled as if cached. The Secret's password is drawn once from a CSPRNG when the
//!    Secret is created and read back from it ever after. One log line per child and pass:
//!    `result=created|updated|none`.
//! 4. **Status**: computed from the StatefulSet as observed (the object the write returned, else
//!    the cache) and merge-patched on `/status` with the cached resourceVersion as a precondition,
//!    only when it differs from the cached status. Then `Done`, or `RequeueAfter(10 s)` while the
//!    cluster converges (the seed's safety net for missed events).
//!
//! An invalid spec (one that slipped past the CRD) writes phase Failed with `Ready=False,
//! InvalidSpec`, publishes a Warning Event once per generation, and ends the pass with a terminal
//! error: no retry until the spec changes. Events record created children, scaling, upgrades, the
//! invalid spec and (aggregated) reconcile errors; none ever carries the password. A retryable
//! error that lasts [`FAILURE_THRESHOLD`] passes also shows in the status
//! ([`super::failures`]), until a pass succeeds.

use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Secret, Service};
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client, Resource};
use rand::distr::{Alphanumeric, SampleString};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;
use thiserror::Error;

use super::drift::{keep_immutable_fields, needs_update};
use super::events::EventPublisher;
use super::events::{EventNote, scaling_event, status_events};
use super::failures::{FAILURE_THRESHOLD, FailureCounts, with_reconcile_error, with_reconcile_success};
use super::resources::{
    FIELD_MANAGER, Owner, OwnerError, app_secret_name, app_secret_password, build_app_secret,
    build_headless_service, build_statefulset, foreign_controller, headless_service_name, statefulset_name,
};
use super::status::{compute_status, initial_status, is_first_pass, needs_requeue};
use super::types::{DatabaseCluster, DatabaseClusterStatus};
use super::validation::{SpecError, validate};
use crate::runtime::ObjectKey;
use crate::runtime::cache::Cache;
use crate::runtime::client;
use crate::runtime::controller::{Action, ReconcileError};
use crate::runtime::writes::recorded;

/// How long to wait before looking again while replicas are not ready, even without an event.
pub const CONVERGING_REQUEUE: Duration = Duration::from_secs(10);
/// Length of the generated superuser password (alphanumeric: about 190 bits).
const PASSWORD_LENGTH: usize = 32;

/// What every reconcile pass shares: the client for writes, the caches for reads, the Event
/// publisher.
pub struct Context {
    /// The client every write goes through.
    pub client: Client,
    /// The DatabaseClusters, as the primary informer holds them.
    pub clusters: Arc<Cache<DatabaseCluster>>,
    /// The operator's StatefulSets.
    pub statefulsets: Arc<Cache<StatefulSet>>,
    /// The operator's headless Services.
    pub services: Arc<Cache<Service>>,
    /// The operator's app Secrets.
    pub secrets: Arc<Cache<Secret>>,
    /// Where Events go.
    pub events: EventPublisher,
    /// Consecutive failed passes per cluster, to make a lasting error visible in its status.
    pub failures: FailureCounts,
}

impl Debug for Context {
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
    /// A request for a child failed.
    #[error("{verb} {kind} {name}: {source}")]
    Child {
        /// `creating`, `reading` or `applying`.
        verb: &'static str,
        /// The child's kind.
        kind: &'static str,
        /// The child's name.
        name: String,
        /// The client's error.
        source: kube::Error,
    },
    /// The status patch failed.
    #[error("patching the status: {0}")]
    Status(#[source] kube::Error),
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
pub async fn reconcile(key: ObjectKey, ctx: Arc<Context>) -> Result<Action, Error> {
    let Some(cluster) = ctx.clusters.get(&key) else {
        tracing::info!("DatabaseCluster not found: deleted; nothing to do");
        ctx.events.clear_error(&key);
        ctx.failures.clear(&key);
        return Ok(Action::Done);
    };
    if cluster.metadata.deletion_timestamp.is_some() {
        tracing::info!("DatabaseCluster is being deleted; the garbage collector removes its children");
        return Ok(Action::Done);
    }
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
async fn show_error(ctx: &Context, cluster: &DatabaseCluster, error: &Error) {
    let status = with_reconcile_error(cluster, &error.to_string(), Timestamp::now());
    if let Err(write_error) = write_status(ctx, cluster, status).await {
        tracing::warn!(error = %write_error, "could not record the reconcile error in the status");
    }
}

async fn reconcile_cluster(cluster: &DatabaseCluster, ctx: &Context) -> Result<Action, Error> {
    let phase = cluster.status.as_ref().and_then(|s| s.phase).map(|p| p.as_str());
    tracing::info!(replicas = cluster.spec.replicas, version = %cluster.spec.version, phase, "reconciling DatabaseCluster");

    if is_first_pass(cluster) {
        tracing::info!("new DatabaseCluster: setting phase Provisioning");
        write_status(ctx, cluster, initial_status(cluster, Timestamp::now())).await?;
        return Ok(Action::Done);
    }

    let spec = match validate(cluster) {
        Ok(spec) => spec,
        Err(error) => {
            let observed = ctx.statefulsets.get(&child_key(cluster, statefulset_name));
            let status = compute_status(cluster, Err(&error), observed.as_deref(), Timestamp::now());
            write_status(ctx, cluster, status).await?;
            return Err(Error::InvalidSpec(error));
        }
    };
    let owner = Owner::of(cluster)?;

    let service_key = child_key(cluster, headless_service_name);
    let cached = ctx.services.get(&service_key);
    let (_, outcome) =
        ensure_child(ctx, &owner, "Service", cached, |_| build_headless_service(&owner)).await?;
    report(ctx, cluster, "Service", &service_key, &outcome, None).await;

    let secret_key = child_key(cluster, app_secret_name);
    let cached = ctx.secrets.get(&secret_key);
    let (_, outcome) = ensure_child(ctx, &owner, "Secret", cached, |live: Option<&Secret>| {
        let password = live.and_then(app_secret_password).unwrap_or_else(|| {
            if live.is_some() {
                tracing::warn!(secret = %secret_key, "the app Secret holds no password; generating a new one");
            }
            generate_password()
        });
        build_app_secret(&owner, &password)
    })
    .await?;
    report(ctx, cluster, "Secret", &secret_key, &outcome, None).await;

    let sts_key = child_key(cluster, statefulset_name);
    let cached = ctx.statefulsets.get(&sts_key);
    let (sts, outcome) = ensure_child(ctx, &owner, "StatefulSet", cached, |live| {
        let mut desired = build_statefulset(&owner, &spec);
        if let Some(live) = live {
            keep_immutable_fields(&mut desired, live);
        }
        desired
    })
    .await?;
    let scaling = match &outcome {
        Outcome::Updated { before } => scaling_event(before, &sts),
        _ => None,
    };
    report(ctx, cluster, "StatefulSet", &sts_key, &outcome, scaling).await;

    let now = Timestamp::now();
    let status = with_reconcile_success(
        compute_status(cluster, Ok(&spec), Some(&sts), now),
        cluster.metadata.generation,
        now,
    );
    let ready = status.ready_replicas;
    tracing::info!(ready, desired = cluster.spec.replicas, "observed StatefulSet");
    let converging = needs_requeue(&status);
    write_status(ctx, cluster, status).await?;
    if converging {
        tracing::info!(ready, desired = cluster.spec.replicas, "waiting for replicas; requeuing");
        Ok(Action::RequeueAfter(CONVERGING_REQUEUE))
    } else {
        tracing::info!(ready, "DatabaseCluster is in its desired state");
        Ok(Action::Done)
    }
}

/// The key of a child named by `name_of(cluster name)`, in the cluster's namespace.
fn child_key(cluster: &DatabaseCluster, name_of: fn(&str) -> String) -> ObjectKey {
    let name = cluster.metadata.name.as_deref().unwrap_or_default();
    ObjectKey::new(cluster.metadata.namespace.as_deref(), &name_of(name))
}

/// A fresh superuser password from the thread-local CSPRNG (ChaCha, seeded from the OS).
fn generate_password() -> String {
    Alphanumeric.sample_string(&mut rand::rng(), PASSWORD_LENGTH)
}

/// What a pass did to one child.
enum Outcome<K> {
    /// The child did not exist and was created.
    Created,
    /// The child differed in an owned field and was applied; this is how it was before.
    Updated {
        /// The live object before the write.
        before: Arc<K>,
    },
    /// The child was as desired; nothing was written.
    Unchanged,
}

impl<K> Outcome<K> {
    fn as_str(&self) -> &'static str {
        match self {
            Outcome::Created => "created",
            Outcome::Updated { .. } => "updated",
            Outcome::Unchanged => "none",
        }
    }
}

/// Logs one child's outcome and publishes its Event (created, or `extra` such as scaling).
async fn report<K>(
    ctx: &Context,
    cluster: &DatabaseCluster,
    kind: &'static str,
    key: &ObjectKey,
    outcome: &Outcome<K>,
    extra: Option<EventNote>,
) {
    tracing::info!(kind = %kind, name = %key.name(), result = %outcome.as_str(), "child reconciled");
    let note = match outcome {
        Outcome::Created => Some(EventNote::created(kind, key.name())),
        _ => extra,
    };
    if let Some(note) = note {
        ctx.events.publish(cluster, &note).await;
    }
}

/// Brings one child to its desired state: creates it when absent, applies it when an owned field
/// differs, and otherwise leaves it alone. `build` makes the desired object from the live one (if
/// any); `kind` names the child in logs and errors. Returns the child as the server now has it,
/// and what was done.
async fn ensure_child<K>(
    ctx: &Context,
    owner: &Owner,
    kind: &'static str,
    cached: Option<Arc<K>>,
    build: impl Fn(Option<&K>) -> K,
) -> Result<(Arc<K>, Outcome<K>), Error>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + Debug
        + Serialize
        + DeserializeOwned,
{
    let api: Api<K> = Api::namespaced(ctx.client.clone(), owner.namespace());
    let live = match cached {
        Some(live) => live,
        None => {
            let desired = build(None);
            let name = desired.meta().name.clone().unwrap_or_default();
            let params =
                PostParams { field_manager: Some(FIELD_MANAGER.to_owned()), ..PostParams::default() };
            match api.create(&params, &desired).await {
                Ok(created) => return Ok((Arc::new(recorded(created)), Outcome::Created)),
                Err(kube::Error::Api(status)) if status.is_already_exists() => {
                    tracing::debug!(kind, %name, "the cache is behind the server; reading the child once");
                    let live =
                        api.get(&name).await.map_err(|source| child_error("reading", kind, &name, source))?;
                    Arc::new(live)
                }
                Err(source) => return Err(child_error("creating", kind, &name, source)),
            }
        }
    };
    let name = live.meta().name.clone().unwrap_or_default();
    if let Some(other) = foreign_controller(live.meta(), owner) {
        return Err(Error::ForeignChild {
            kind,
            name,
            owner_kind: other.kind.clone(),
            owner_name: other.name.clone(),
        });
    }
    let desired = build(Some(&live));
    if !needs_update(&desired, &live) {
        return Ok((live, Outcome::Unchanged));
    }
    let applied = api
        .patch(&name, &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(&desired))
        .await
        .map_err(|source| child_error("applying", kind, &name, source))?;
    Ok((Arc::new(recorded(applied)), Outcome::Updated { before: live }))
}

fn child_error(verb: &'static str, kind: &'static str, name: &str, source: kube::Error) -> Error {
    Error::Child { verb, kind, name: name.to_owned(), source }
}

/// Merge-patches `status` on `/status` when it differs from the cached status, then publishes the
/// Events the change implies. The cached resourceVersion is a precondition: a `409 Conflict` means
/// the cache is behind, and the newer version's event brings the next pass.
async fn write_status(
    ctx: &Context,
    cluster: &DatabaseCluster,
    status: DatabaseClusterStatus,
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
        Ok(written) => drop(recorded(written)),
        Err(kube::Error::Api(s)) if s.is_conflict() => {
            tracing::debug!("status patch conflicts: the cache is behind; the next event brings a new pass");
            return Ok(());
        }
        Err(source) => return Err(Error::Status(source)),
    }
    let phase = status.phase.map(|p| p.as_str());
    tracing::info!(phase, ready = status.ready_replicas, "status updated");
    for note in status_events(old, &status) {
        ctx.events.publish(cluster, &note).await;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_long_alphanumeric_and_fresh_each_time() {
        let a = generate_password();
        let b = generate_password();
        assert_eq!(a.len(), PASSWORD_LENGTH);
        assert!(a.bytes().all(|c| c.is_ascii_alphanumeric()));
        assert_ne!(a, b);
    }

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
}
