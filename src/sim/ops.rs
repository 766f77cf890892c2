//! The write rules every create, update and delete goes through, whoever makes it (a request
//! handler, a simulated controller, the garbage collector): metadata, conflicts, the status
//! subresource, generation, finalizers and deletion.

use serde_json::{Value, json};

use crate::sim::admission;
use crate::sim::api_error::{ApiError, Cause};
use crate::sim::authorizer::User;
use crate::sim::batch;
use crate::sim::claims;
use crate::sim::config_data;
use crate::sim::container_resources;
use crate::sim::defaults;
use crate::sim::events;
use crate::sim::gc::GcWork;
use crate::sim::immutable;
use crate::sim::known_fields;
use crate::sim::meta::{self, Manager};
use crate::sim::names::{self, NameRule};
use crate::sim::owner_references;
use crate::sim::resources::{Kind, established_crd_status};
use crate::sim::state::State;

mod deletion;

pub use deletion::{delete, remove};

/// Who writes, and how.
#[derive(Debug, Clone)]
pub struct WriteContext {
    /// Field manager recorded in `managedFields`.
    pub manager: String,
    /// `Update`, or `Apply` for server-side apply.
    pub operation: &'static str,
    /// `dryRun=All`: run every check, store nothing.
    pub dry_run: bool,
    /// `fieldValidation=Strict`: refuse unknown fields of custom resources instead of pruning them.
    pub strict: bool,
    /// For server-side apply: the applied configuration, whose fields the manager then owns.
    pub applied: Option<Value>,
    /// For a forced apply: the fields taken from other managers.
    pub taken: Vec<Vec<String>>,
    /// The user making the request, if not the cluster admin (for RBAC-based admission).
    pub user: Option<User>,
    /// A write by the simulator's own controllers ([`WriteContext::controller`]), built from
    /// stored objects: the unknown-fields check (a decode of the whole object into its typed
    /// struct, a large share of the controllers' cost at scale) is skipped, and in debug builds
    /// asserted to find nothing. Every write that comes over HTTP is checked.
    pub internal: bool,
}

impl WriteContext {
    /// An `Update` by `manager`.
    pub fn update(manager: &str) -> Self {
        Self {
            manager: manager.to_string(),
            operation: "Update",
            dry_run: false,
            strict: false,
            applied: None,
            taken: vec![],
            user: None,
            internal: false,
        }
    }

    /// An `Update` by `manager`, one of the simulator's own controllers (`internal`).
    pub fn controller(manager: &str) -> Self {
        Self { internal: true, ..Self::update(manager) }
    }
}

/// The unknown-fields check of a built-in object ([`known_fields::check`]), skipped for the
/// simulator's own writes (see [`WriteContext::internal`]).
fn check_known_fields(kind: &Kind, obj: &mut Value, cx: &WriteContext) -> Result<(), ApiError> {
    if !cx.internal {
        return known_fields::check(kind, obj, cx.strict);
    }
    if cfg!(debug_assertions) {
        let checked = known_fields::check(kind, &mut obj.clone(), true);
        assert!(
            checked.is_ok(),
            "a simulated controller wrote what the apiserver would not keep: {checked:?}"
        );
    }
    Ok(())
}

/// How dependents are treated when their owner is deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Propagation {
    /// Delete the owner now, its dependents afterwards.
    #[default]
    Background,
    /// Delete the dependents first, then the owner.
    Foreground,
    /// Delete the owner, keep the dependents (without the ownerReference).
    Orphan,
}

/// The parts of `DeleteOptions` the server honours.
#[derive(Debug, Clone, Default)]
pub struct DeleteOptions {
    /// `propagationPolicy`.
    pub propagation: Propagation,
    /// `preconditions.uid`.
    pub uid: Option<String>,
    /// `preconditions.resourceVersion`.
    pub resource_version: Option<String>,
    /// `dryRun=All`.
    pub dry_run: bool,
}

/// The outcome of a delete.
#[derive(Debug, Clone)]
pub enum Deletion {
    /// The object is gone; its final state.
    Gone(Value),
    /// Finalizers keep the object; it now carries a deletionTimestamp.
    Marked(Value),
}

const FOREGROUND_FINALIZER: &str = "foregroundDeletion";

/// Namespaces the apiserver refuses to delete.
const PROTECTED_NAMESPACES: &[&str] = &["default", "kube-system", "kube-public"];

fn store_namespace<'a>(kind: &Kind, namespace: Option<&'a str>) -> &'a str {
    if kind.namespaced { namespace.unwrap_or_default() } else { "" }
}

/// Creates an object as POST does.
pub fn create(
    state: &mut State,
    kind: &Kind,
    namespace: Option<&str>,
    mut obj: Value,
    cx: &WriteContext,
) -> Result<Value, ApiError> {
    let ns = prepare_new_object(state, kind, namespace, &mut obj)?;
    let (name, generated_from) = new_object_name(kind, &obj)?;
    // Refused with the kind's own field errors after admission, in one 422, as the apiserver
    // aggregates them; an invalid object is refused before its name is found taken.
    let mut metadata_causes =
        names::name_causes(NameRule::of(&kind.group, &kind.plural), &name, generated_from.as_deref());
    metadata_causes.extend(names::label_and_annotation_causes(&obj["metadata"]));
    if metadata_causes.is_empty() && state.store.get(&kind.storage_key(), ns, &name).is_some() {
        return Err(ApiError::already_exists(kind, &name));
    }
    let now = meta::now();
    stamp_new_metadata(kind, &mut obj, &name, &now);
    if kind.status_subresource {
        obj.as_object_mut().expect("checked above").remove("status");
    }
    if kind.custom {
        admission::admit_custom(kind, &mut obj, None, cx.strict, metadata_causes)?;
    } else {
        check_known_fields(kind, &mut obj, cx)?;
        defaults::apply(&kind.group, &kind.plural, &mut obj);
        if kind.group.is_empty() && kind.plural == "pods" {
            crate::sim::nodes::lifecycle::default_tolerations(&mut obj, state.default_toleration_seconds);
        }
        if kind.group == "batch" && kind.plural == "jobs" {
            batch::generate_selector(&mut obj);
        }
        validate_built_in(kind, &mut obj, &name, metadata_causes, true)?;
    }
    let served =
        if is_crd(kind) { Some(admission::crd_serving(kind, &obj, None, state.version)?) } else { None };
    owner_references::admit(state, kind, cx.user.as_ref(), &obj, None)?;
    initialise_kind(kind, &mut obj, &now);
    let written = obj.clone();
    record_write(kind, cx, None, &mut obj, &written);
    if cx.dry_run {
        return Ok(obj);
    }
    queue_dangling_owners(state, &obj);
    let stored = state.store.put(&kind.storage_key(), obj);
    if let Some(kinds) = served {
        state.registry.serve_crd(kinds);
    }
    Ok(stored)
}

/// A new object's body made the kind's (apiVersion, kind, metadata an object) and placed in
/// its namespace, which must exist and not be terminating; returns the namespace it is stored in.
fn prepare_new_object<'a>(
    state: &State,
    kind: &Kind,
    namespace: Option<&'a str>,
    obj: &mut Value,
) -> Result<&'a str, ApiError> {
    if !obj.is_object() {
        return Err(ApiError::bad_request("the body of the request must be a JSON object"));
    }
    if let Some(k) = obj["kind"].as_str().filter(|k| *k != kind.kind) {
        return Err(ApiError::bad_request(format!(
            "the kind {k:?} does not match the resource {}",
            kind.plural
        )));
    }
    obj["apiVersion"] = json!(kind.api_version());
    obj["kind"] = json!(kind.kind);
    if !obj["metadata"].is_object() {
        obj["metadata"] = json!({});
    }
    let ns = store_namespace(kind, namespace);
    if kind.namespaced {
        match obj["metadata"]["namespace"].as_str() {
            Some(given) if !given.is_empty() && given != ns => {
                return Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ));
            }
            _ => obj["metadata"]["namespace"] = json!(ns),
        }
        match state.store.get("namespaces", "", ns) {
            None => return Err(ApiError::namespace_not_found(ns)),
            Some(n) if n["metadata"]["deletionTimestamp"].is_string() => {
                return Err(ApiError::namespace_terminating(kind, obj, ns));
            }
            Some(_) => {}
        }
    } else if let Some(m) = obj["metadata"].as_object_mut() {
        m.remove("namespace");
    }
    Ok(ns)
}

/// A new object's name: `metadata.name`, or one generated from `generateName` (returned too).
fn new_object_name(kind: &Kind, obj: &Value) -> Result<(String, Option<String>), ApiError> {
    match (obj["metadata"]["name"].as_str(), obj["metadata"]["generateName"].as_str()) {
        (Some(n), _) if !n.is_empty() => Ok((n.to_string(), None)),
        (_, Some(prefix)) if !prefix.is_empty() => {
            Ok((meta::generated_name(prefix), Some(prefix.to_string())))
        }
        _ => Err(ApiError::invalid(
            kind,
            "",
            vec![Cause {
                reason: "FieldValueRequired".into(),
                message: "Required value: name or generateName is required".into(),
                field: "metadata.name".into(),
            }],
        )),
    }
}

/// The metadata the server sets on a new object (name, uid, creation time, generation) and
/// the fields a client cannot set on it.
fn stamp_new_metadata(kind: &Kind, obj: &mut Value, name: &str, now: &str) {
    let m = obj["metadata"].as_object_mut().expect("metadata was made an object above");
    m.insert("name".into(), json!(name));
    m.insert("uid".into(), json!(meta::new_uid()));
    m.insert("creationTimestamp".into(), json!(now));
    if kind.generation {
        m.insert("generation".into(), json!(1));
    } else {
        m.remove("generation");
    }
    for f in
        ["resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds", "managedFields", "selfLink"]
    {
        m.remove(f);
    }
}

/// Queues collection for each owner uid of a new object that names an object already removed,
/// as the garbage collector deletes a dependent whose owners are gone (a controller acting on a
/// stale cache may create a child just after its owner was deleted). Unlike the real collector,
/// a uid that never existed is left alone, so tests may use made-up owners.
fn queue_dangling_owners(state: &mut State, obj: &Value) {
    let Some(owners) = obj["metadata"]["ownerReferences"].as_array() else { return };
    let removed: Vec<String> = owners
        .iter()
        .filter_map(|o| o["uid"].as_str())
        .filter(|uid| state.removed_uids.contains(*uid))
        .map(String::from)
        .collect();
    for uid in removed {
        state.gc_queue.push(GcWork::Dependents(uid));
    }
}

/// What a real server fills in on create for the kinds whose controllers are not simulated.
fn initialise_kind(kind: &Kind, obj: &mut Value, now: &str) {
    match (kind.group.as_str(), kind.plural.as_str()) {
        ("", "namespaces") => {
            obj["spec"]["finalizers"] = json!(["kubernetes"]);
            obj["status"] = json!({"phase": "Active"});
        }
        ("", "pods") => obj["status"] = json!({"phase": "Pending"}),
        // Until the volume controller binds it (`SetDefaults_PersistentVolumeClaim`).
        ("", "persistentvolumeclaims") => obj["status"] = json!({"phase": "Pending"}),
        ("apiextensions.k8s.io", "customresourcedefinitions") => {
            obj["status"] = established_crd_status(obj, now);
        }
        _ => {}
    }
}

/// Refuses a built-in object with the `metadata_causes` and its kind's own: for Jobs and
/// CronJobs ([`batch`]), for the containers' resources of any pod spec
/// ([`container_resources`]), for claims ([`claims`]), for the data of ConfigMaps and Secrets
/// ([`config_data`]), and for Events of either version (an `events.k8s.io/v1` one is converted
/// to the stored core shape first). A write of the `status` subresource keeps the stored spec, so
/// its spec is not checked again (`spec_written` false), as the apiserver's status strategies
/// validate the status only.
fn validate_built_in(
    kind: &Kind,
    obj: &mut Value,
    name: &str,
    mut causes: Vec<Cause>,
    spec_written: bool,
) -> Result<(), ApiError> {
    if events::is_events_v1(kind) {
        events::to_core(obj);
    }
    if events::is_events_v1(kind) || (kind.group.is_empty() && kind.plural == "events") {
        causes.extend(events::causes(kind, obj));
    }
    if spec_written {
        causes.extend(batch::causes(kind, obj));
        causes.extend(container_resources::causes(kind, obj)?);
        causes.extend(claims::causes(kind, obj)?);
        causes.extend(config_data::causes(kind, obj));
    }
    if causes.is_empty() { Ok(()) } else { Err(ApiError::invalid(kind, name, causes)) }
}

fn is_crd(kind: &Kind) -> bool {
    kind.group == "apiextensions.k8s.io" && kind.plural == "customresourcedefinitions"
}

/// Records the write in `managedFields`: the fields of `fields_of` owned by the context's manager.
fn record_write(
    kind: &Kind,
    cx: &WriteContext,
    subresource: Option<&str>,
    obj: &mut Value,
    fields_of: &Value,
) {
    let api_version = kind.api_version();
    let manager =
        Manager { name: &cx.manager, operation: cx.operation, api_version: &api_version, subresource };
    meta::record_manager(obj, &manager, meta::field_set(fields_of));
}

/// Replaces an object as PUT does (on the main resource or the `status` subresource).
pub fn update(
    state: &mut State,
    kind: &Kind,
    namespace: Option<&str>,
    name: &str,
    obj: Value,
    subresource: Option<&str>,
    cx: &WriteContext,
) -> Result<Value, ApiError> {
    let ns = store_namespace(kind, namespace);
    let key = kind.storage_key();
    let old = state.store.get(&key, ns, name).cloned().ok_or_else(|| ApiError::not_found(kind, name))?;
    check_update_body(kind, ns, name, &obj, &old)?;
    let mut new = updated_object(kind, &old, obj, subresource);
    admit_update(state, kind, name, &old, &mut new, subresource, cx)?;
    let served = if is_crd(kind) {
        Some(admission::crd_serving(kind, &new, Some(&old), state.version)?)
    } else {
        None
    };
    owner_references::admit(state, kind, cx.user.as_ref(), &new, Some(&old))?;
    if kind.generation {
        let generation = old["metadata"]["generation"].as_i64().unwrap_or(1);
        let bumped =
            if meta::spec_changed(&old, &new, kind.status_subresource) { generation + 1 } else { generation };
        new["metadata"]["generation"] = json!(bumped);
    }
    if meta::same_content(&old, &new) {
        return Ok(old);
    }
    let written = meta::changed_part(&old, &new);
    meta::release_fields(&mut new, &cx.manager, &cx.taken);
    record_write(kind, cx, subresource, &mut new, &written);
    if cx.dry_run {
        return Ok(new);
    }
    if new["metadata"]["deletionTimestamp"].is_string() && finalizers(&new).is_empty() {
        return Ok(remove(state, kind, ns, name).unwrap_or(new));
    }
    let stored = state.store.put(&key, new);
    if let Some(kinds) = served {
        state.registry.serve_crd(kinds);
    }
    Ok(stored)
}

/// An update's body against the URL and the stored object: an object, of the same name and
/// namespace, and for a custom resource with the resourceVersion it updates (which must be
/// current when given).
fn check_update_body(kind: &Kind, ns: &str, name: &str, obj: &Value, old: &Value) -> Result<(), ApiError> {
    if !obj.is_object() {
        return Err(ApiError::bad_request("the body of the request must be a JSON object"));
    }
    if let Some(body_name) = obj["metadata"]["name"].as_str().filter(|n| *n != name) {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({body_name}) does not match the name on the URL ({name})"
        )));
    }
    // Custom resources, like the apiserver's CR strategy, allow no unconditional update.
    let given_rv = obj["metadata"]["resourceVersion"].as_str().filter(|rv| !rv.is_empty());
    if kind.custom && given_rv.is_none() {
        return Err(ApiError::invalid(
            kind,
            name,
            vec![Cause {
                reason: "FieldValueInvalid".into(),
                message: "Invalid value: 0x0: must be specified for an update".into(),
                field: "metadata.resourceVersion".into(),
            }],
        ));
    }
    if let Some(rv) = given_rv
        && old["metadata"]["resourceVersion"] != rv
    {
        return Err(ApiError::stale(kind, name));
    }
    if let Some(body_ns) = obj["metadata"]["namespace"].as_str().filter(|n| kind.namespaced && *n != ns) {
        return Err(ApiError::bad_request(format!(
            "the namespace of the provided object ({body_ns}) does not match the namespace sent on the request ({ns})"
        )));
    }
    Ok(())
}

/// The object an update asks for: on `status`, the stored object with the body's status; on
/// the main resource, the body with the stored status (when the kind has the subresource) and
/// the metadata only the server sets.
fn updated_object(kind: &Kind, old: &Value, mut obj: Value, subresource: Option<&str>) -> Value {
    if subresource == Some("status") {
        let mut new = old.clone();
        match obj.get("status") {
            Some(s) => new["status"] = s.clone(),
            None => {
                new.as_object_mut().expect("stored objects are objects").remove("status");
            }
        }
        return new;
    }
    if kind.status_subresource {
        match old.get("status") {
            Some(s) => obj["status"] = s.clone(),
            None => {
                obj.as_object_mut().expect("checked above").remove("status");
            }
        }
    }
    obj["apiVersion"] = json!(kind.api_version());
    obj["kind"] = json!(kind.kind);
    keep_server_metadata(old, &mut obj);
    obj
}

/// Admission of an update: no finalizer added to an object being deleted, then the kind's
/// checks (a custom resource's schema and rules, or a built-in kind's fields, defaults,
/// validation, immutable fields, a Job's and a claim's rules).
fn admit_update(
    state: &State,
    kind: &Kind,
    name: &str,
    old: &Value,
    new: &mut Value,
    subresource: Option<&str>,
    cx: &WriteContext,
) -> Result<(), ApiError> {
    if new["metadata"]["deletionTimestamp"].is_string() && adds_finalizer(old, new) {
        return Err(ApiError::invalid(
            kind,
            name,
            vec![Cause {
                reason: "FieldValueForbidden".into(),
                message: "Forbidden: no new finalizers can be added if the object is being deleted".into(),
                field: "metadata.finalizers".into(),
            }],
        ));
    }
    let metadata_causes = names::label_and_annotation_causes(&new["metadata"]);
    if kind.custom {
        return admission::admit_custom(kind, new, Some(old), cx.strict, metadata_causes);
    }
    check_known_fields(kind, new, cx)?;
    defaults::apply(&kind.group, &kind.plural, new);
    validate_built_in(kind, new, name, metadata_causes, subresource != Some("status"))?;
    immutable::check_update(kind, old, new, state.version)?;
    batch::check_job_update(kind, old, new)?;
    if kind.group.is_empty() && kind.plural == "persistentvolumeclaims" {
        crate::sim::controllers::volumes::admit_resize(state, kind, old, new)?;
    }
    Ok(())
}

/// Metadata the client cannot change on update: identity, creation and deletion marks.
fn keep_server_metadata(old: &Value, new: &mut Value) {
    if !new["metadata"].is_object() {
        new["metadata"] = json!({});
    }
    for f in [
        "name",
        "namespace",
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "generation",
        "managedFields",
    ] {
        match old["metadata"].get(f) {
            Some(v) => new["metadata"][f] = v.clone(),
            None => {
                if let Some(m) = new["metadata"].as_object_mut() {
                    m.remove(f);
                }
            }
        }
    }
}

fn finalizers(obj: &Value) -> Vec<String> {
    obj["metadata"]["finalizers"]
        .as_array()
        .map(|a| a.iter().filter_map(|f| f.as_str().map(String::from)).collect())
        .unwrap_or_default()
}

fn adds_finalizer(old: &Value, new: &Value) -> bool {
    let before = finalizers(old);
    finalizers(new).iter().any(|f| !before.contains(f))
}

#[cfg(test)]
mod tests;
