//! Writing one child: create it when the cache lacks it, apply it when it drifted, and report
//! what happened (`ensure_child`); reading a cached child back (`decode_cached`).

use std::fmt::Debug;
use std::sync::Arc;

use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Resource};
use serde::de::DeserializeOwned;

use crate::databasecluster::api::types::DatabaseCluster;
use crate::databasecluster::cache::cached::ChildForm;
use crate::databasecluster::cache::forms::{Decoded, Forms};
use crate::databasecluster::controller::context::*;
use crate::databasecluster::controller::events::EventNote;
use crate::databasecluster::specs::resources::{FIELD_MANAGER, Owner, foreign_controller};
use crate::runtime::controller::writes::{Verb, recorded_as};
use crate::runtime::{Object, ObjectKey};
/// The key of a child named by `name_of(cluster name)`, in the cluster's namespace.
pub(crate) fn child_key(cluster: &DatabaseCluster, name_of: fn(&str) -> String) -> ObjectKey {
    let name = cluster.metadata.name.as_deref().unwrap_or_default();
    ObjectKey::new(cluster.metadata.namespace.as_deref(), &name_of(name))
}

/// What a pass did to one child.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
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
pub(crate) async fn report<F: Forms>(
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
pub(crate) async fn ensure_child<F: Forms, C: ChildForm>(
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
pub(crate) fn decode_cached<K, C>(cached: &C, kind: &'static str) -> Result<K, Error>
where
    C: Decoded<K> + Object,
{
    cached.expand().map_err(|source| cached_error(cached, kind, source))
}

/// The few fields `T` names of a cached object ([`Decoded::decode_as`]; for a [`Compact`]
/// not its identity, which the text does not hold).
///
/// [`Compact`]: crate::databasecluster::cache::cached::Compact
pub(crate) fn view_cached<T, K, C>(cached: &C, kind: &'static str) -> Result<T, Error>
where
    T: DeserializeOwned,
    C: Decoded<K> + Object,
{
    cached.decode_as().map_err(|source| cached_error(cached, kind, source))
}

pub(crate) fn cached_error<K: Object>(cached: &K, kind: &'static str, source: serde_json::Error) -> Error {
    Error::Cached { kind, name: cached.name().unwrap_or_default().to_owned(), source }
}

pub(crate) fn child_error(verb: &'static str, kind: &'static str, name: &str, source: kube::Error) -> Error {
    Error::Child { verb, kind, name: name.to_owned(), source }
}

/// Creates `job` once: a Job of that name already there (a retried pass) counts as created.
/// Logs `what` when this call created it.
pub(crate) async fn create_job_once<F: Forms>(
    ctx: &Context<F>,
    owner: &Owner,
    job: &k8s_openapi::api::batch::v1::Job,
    what: &str,
) -> Result<(), Error> {
    let name = job.metadata.name.clone().unwrap_or_default();
    let api: Api<k8s_openapi::api::batch::v1::Job> = Api::namespaced(ctx.client.clone(), owner.namespace());
    let params = PostParams { field_manager: Some(FIELD_MANAGER.to_owned()), ..PostParams::default() };
    match api.create(&params, job).await {
        Ok(created) => {
            recorded_as(Verb::Create, created);
            tracing::info!(job = %name, "{what}");
            Ok(())
        }
        Err(kube::Error::Api(status)) if status.is_already_exists() => {
            tracing::debug!(job = %name, "the Job exists already");
            Ok(())
        }
        Err(source) => Err(child_error("creating", "Job", &name, source)),
    }
}
