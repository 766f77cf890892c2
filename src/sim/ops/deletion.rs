//! Deletion: finalizers, graceful deletion and propagation to dependants, and the removal of an
//! object from the store.

use serde_json::{Value, json};

use crate::sim::api_error::ApiError;
use crate::sim::gc::GcWork;
use crate::sim::meta::{self};
use crate::sim::resources::Kind;
use crate::sim::state::State;

use super::*;
/// Deletes an object as DELETE does: removed now, or only marked while finalizers remain.
pub fn delete(
    state: &mut State,
    kind: &Kind,
    namespace: Option<&str>,
    name: &str,
    opts: &DeleteOptions,
) -> Result<Deletion, ApiError> {
    let ns = store_namespace(kind, namespace);
    let key = kind.storage_key();
    let old = state.store.get(&key, ns, name).cloned().ok_or_else(|| ApiError::not_found(kind, name))?;
    if let Some(uid) = &opts.uid
        && old["metadata"]["uid"] != uid.as_str()
    {
        return Err(ApiError::conflict(
            kind,
            name,
            &format!(
                "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                old["metadata"]["uid"].as_str().unwrap_or_default()
            ),
        ));
    }
    if let Some(rv) = &opts.resource_version
        && old["metadata"]["resourceVersion"] != rv.as_str()
    {
        return Err(ApiError::conflict(
            kind,
            name,
            &format!(
                "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                old["metadata"]["resourceVersion"].as_str().unwrap_or_default()
            ),
        ));
    }
    let is_namespace = kind.group.is_empty() && kind.plural == "namespaces";
    if is_namespace && PROTECTED_NAMESPACES.contains(&name) {
        return Err(ApiError::forbidden(kind, name, "this namespace may not be deleted"));
    }
    let mut finals = finalizers(&old);
    if opts.propagation == Propagation::Foreground && !finals.iter().any(|f| f == FOREGROUND_FINALIZER) {
        finals.push(FOREGROUND_FINALIZER.to_string());
    }
    let graceful_pod = state.graceful_pod_deletion && kind.group.is_empty() && kind.plural == "pods";
    if finals.is_empty() && !is_namespace && !graceful_pod {
        if opts.dry_run {
            return Ok(Deletion::Gone(old));
        }
        let gone = remove(state, kind, ns, name).unwrap_or(old);
        if opts.propagation == Propagation::Orphan
            && let Some(uid) = gone["metadata"]["uid"].as_str()
        {
            state.gc_queue.retain(|w| *w != GcWork::Dependents(uid.to_string()));
            state.gc_queue.push(GcWork::Orphan(uid.to_string()));
        }
        return Ok(Deletion::Gone(gone));
    }
    if old["metadata"]["deletionTimestamp"].is_string() {
        return Ok(Deletion::Marked(old));
    }
    let mut marked = old.clone();
    marked["metadata"]["deletionTimestamp"] = json!(meta::now());
    let grace =
        if graceful_pod { old["spec"]["terminationGracePeriodSeconds"].as_i64().unwrap_or(30) } else { 0 };
    marked["metadata"]["deletionGracePeriodSeconds"] = json!(grace);
    if !finals.is_empty() {
        marked["metadata"]["finalizers"] = json!(finals);
    }
    if kind.generation {
        let generation = old["metadata"]["generation"].as_i64().unwrap_or(1);
        marked["metadata"]["generation"] = json!(generation + 1);
    }
    if is_namespace {
        marked["status"]["phase"] = json!("Terminating");
    }
    if opts.dry_run {
        return Ok(Deletion::Marked(marked));
    }
    let stored = state.store.put(&key, marked);
    if is_namespace {
        state.gc_queue.push(GcWork::Namespace(name.to_string()));
    } else if opts.propagation == Propagation::Foreground
        && let Some(uid) = stored["metadata"]["uid"].as_str()
    {
        state.gc_queue.push(GcWork::Foreground(uid.to_string()));
    }
    Ok(Deletion::Marked(stored))
}

/// Removes an object for good, queueing its dependents for the garbage collector (and, for a
/// CRD, its custom resources and served kinds).
pub fn remove(state: &mut State, kind: &Kind, namespace: &str, name: &str) -> Option<Value> {
    let gone = state.store.remove(&kind.storage_key(), namespace, name)?;
    if let Some(uid) = gone["metadata"]["uid"].as_str() {
        state.gc_queue.push(GcWork::Dependents(uid.to_string()));
        state.removed_uids.insert(uid.to_string());
    }
    if is_crd(kind) {
        let group = gone["spec"]["group"].as_str().unwrap_or_default().to_string();
        let plural = gone["spec"]["names"]["plural"].as_str().unwrap_or_default().to_string();
        let key = crate::sim::resources::storage_key(&group, &plural);
        let names: Vec<(String, String)> =
            state.store.list(&key, None).map(crate::sim::store::object_name).collect();
        for (ns, n) in names {
            // Each custom resource goes as any deleted object goes: its dependents are collected.
            let Some(resource) = state.store.remove(&key, &ns, &n) else { continue };
            if let Some(uid) = resource["metadata"]["uid"].as_str() {
                state.gc_queue.push(GcWork::Dependents(uid.to_string()));
                state.removed_uids.insert(uid.to_string());
            }
        }
        state.registry.unserve_crd(&group, &plural);
    }
    Some(gone)
}
