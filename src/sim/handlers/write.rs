//! Writes: create (POST), update (PUT), patch (PATCH, every patch type and server-side apply),
//! delete and deletecollection — HTTP parsing around the rules in `ops`.

use http::Response;
use serde_json::{Value, json};

use super::read::filter;
use super::{Body, Call, json_response, present};
use crate::sim::api_error::ApiError;
use crate::sim::apply;
use crate::sim::cluster::Cluster;
use crate::sim::ops::{self, DeleteOptions, Deletion, Propagation, WriteContext};
use crate::sim::patch::{self, PatchType};
use crate::sim::state::State;

fn body_json(call: &Call) -> Result<Value, ApiError> {
    serde_json::from_slice(&call.body)
        .map_err(|e| ApiError::bad_request(format!("error decoding the request body: {e}")))
}

fn context(call: &Call, operation: &'static str) -> WriteContext {
    WriteContext {
        manager: call.field_manager(),
        operation,
        dry_run: call.dry_run(),
        strict: call.query.get("fieldValidation").is_some_and(|v| v == "Strict"),
        applied: None,
        taken: vec![],
        user: call.user.clone(),
        internal: false,
    }
}

fn name(call: &Call) -> &str {
    call.target.name.as_deref().unwrap_or_default()
}

/// POST: create an object.
pub fn create(cluster: &Cluster, call: &Call) -> Result<Response<Body>, ApiError> {
    let kind = &call.target.kind;
    let obj = body_json(call)?;
    let cx = context(call, "Update");
    let created = cluster.write(|s| ops::create(s, kind, call.target.namespace.as_deref(), obj, &cx))?;
    Ok(json_response(201, &present(kind, &created)))
}

/// PUT: replace an object or its status.
pub fn update(cluster: &Cluster, call: &Call) -> Result<Response<Body>, ApiError> {
    let kind = &call.target.kind;
    let obj = body_json(call)?;
    let cx = context(call, "Update");
    let sub = call.target.subresource.as_deref();
    let updated = cluster
        .write(|s| ops::update(s, kind, call.target.namespace.as_deref(), name(call), obj, sub, &cx))?;
    Ok(json_response(200, &present(kind, &updated)))
}

/// PATCH: merge, JSON or strategic patch of an existing object; server-side apply creates or merges.
pub fn patch(cluster: &Cluster, call: &Call) -> Result<Response<Body>, ApiError> {
    let kind = &call.target.kind;
    let patch_type = PatchType::from_content_type(&call.content_type)
        .ok_or_else(|| ApiError::unsupported_media_type(&call.content_type))?;
    if patch_type == PatchType::Strategic && kind.custom {
        return Err(ApiError::unsupported_media_type(&call.content_type));
    }
    let body = patch::parse_body(patch_type, &call.body)?;
    if patch_type == PatchType::Apply && call.query.get("fieldManager").is_none_or(|m| m.is_empty()) {
        return Err(ApiError::bad_request(
            "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch",
        ));
    }
    let operation = if patch_type == PatchType::Apply { "Apply" } else { "Update" };
    let mut cx = context(call, operation);
    if patch_type == PatchType::Apply {
        cx.applied = Some(body.clone());
    }
    let ns = call.target.namespace.as_deref();
    let sub = call.target.subresource.as_deref();
    let (status, result) = cluster.write(|s| {
        let store_ns = if kind.namespaced { ns.unwrap_or_default() } else { "" };
        let current = s.store.get(&kind.storage_key(), store_ns, name(call)).cloned();
        match current {
            None if patch_type == PatchType::Apply && sub.is_none() => {
                let mut obj = body.clone();
                if obj["metadata"]["name"].is_null() {
                    obj["metadata"]["name"] = json!(name(call));
                }
                ops::create(s, kind, ns, obj, &cx).map(|o| (201, o))
            }
            None => Err(ApiError::not_found(kind, name(call))),
            Some(current) => {
                patch_existing(s, call, patch_type, &body, &current, cx.clone()).map(|o| (200, o))
            }
        }
    })?;
    Ok(json_response(status, &present(kind, &result)))
}

/// Patches a stored object: server-side apply (conflicts unless forced, then the merge that
/// releases fields), or a merge, JSON or strategic patch; then the update rules.
fn patch_existing(
    state: &mut State,
    call: &Call,
    patch_type: PatchType,
    body: &Value,
    current: &Value,
    mut cx: WriteContext,
) -> Result<Value, ApiError> {
    let kind = &call.target.kind;
    let patched = if patch_type == PatchType::Apply {
        let found = apply::conflicts(current, body, &cx.manager);
        let force = call.query.get("force").is_some_and(|f| f == "true");
        if !found.is_empty() && !force {
            return Err(ApiError::apply_conflicts(kind, name(call), &found));
        }
        cx.taken = found.into_iter().map(|c| c.path).collect();
        apply::merge_applied(current, body, &cx.manager)
    } else {
        patch::apply_patch(patch_type, current, body)?
    };
    let (ns, sub) = (call.target.namespace.as_deref(), call.target.subresource.as_deref());
    ops::update(state, kind, ns, name(call), patched, sub, &cx)
}

/// The delete options of a request: the body's `DeleteOptions` and the query's overrides.
fn delete_options(call: &Call) -> Result<DeleteOptions, ApiError> {
    let body: Value = if call.body.is_empty() { json!({}) } else { body_json(call)? };
    let policy = call
        .query
        .get("propagationPolicy")
        .cloned()
        .or_else(|| body["propagationPolicy"].as_str().map(String::from))
        .or_else(|| {
            match body["orphanDependents"]
                .as_bool()
                .or_else(|| call.query.get("orphanDependents").map(|o| o == "true"))
            {
                Some(true) => Some("Orphan".to_string()),
                _ => None,
            }
        });
    let propagation = match policy.as_deref() {
        None | Some("Background") => Propagation::Background,
        Some("Foreground") => Propagation::Foreground,
        Some("Orphan") => Propagation::Orphan,
        Some(other) => return Err(ApiError::bad_request(format!("unsupported propagationPolicy {other:?}"))),
    };
    let dry_run = call.dry_run() || body["dryRun"].as_array().is_some_and(|d| d.iter().any(|x| x == "All"));
    Ok(DeleteOptions {
        propagation,
        uid: body["preconditions"]["uid"].as_str().map(String::from),
        resource_version: body["preconditions"]["resourceVersion"].as_str().map(String::from),
        dry_run,
    })
}

/// DELETE on one object: 200 with the final object when it is gone, 202 with the object when
/// finalizers keep it.
pub fn delete(cluster: &Cluster, call: &Call) -> Result<Response<Body>, ApiError> {
    let kind = &call.target.kind;
    let opts = delete_options(call)?;
    let outcome =
        cluster.write(|s| ops::delete(s, kind, call.target.namespace.as_deref(), name(call), &opts))?;
    Ok(match outcome {
        Deletion::Gone(obj) => json_response(200, &present(kind, &obj)),
        Deletion::Marked(obj) => json_response(202, &present(kind, &obj)),
    })
}

/// DELETE on a collection: deletes every selected object, answers the list of them.
pub fn delete_collection(cluster: &Cluster, call: &Call) -> Result<Response<Body>, ApiError> {
    let kind = &call.target.kind;
    let opts = delete_options(call)?;
    let filter = filter(call)?;
    let items = cluster.write(|s| {
        let names: Vec<(String, String)> = s
            .store
            .list(&filter.key, filter.namespace.as_deref())
            .filter(|o| filter.matches(o))
            .map(crate::sim::store::object_name)
            .collect();
        let mut items = Vec::new();
        for (ns, n) in names {
            match ops::delete(s, kind, Some(&ns), &n, &opts) {
                Ok(Deletion::Gone(o) | Deletion::Marked(o)) => items.push(present(kind, &o)),
                Err(e) if e.code == 404 => {}
                Err(e) => return Err(e),
            }
        }
        Ok((items, s.store.resource_version()))
    })?;
    let (items, rv) = items;
    Ok(json_response(
        200,
        &json!({"apiVersion": kind.api_version(), "kind": format!("{}List", kind.kind), "metadata": {"resourceVersion": rv.to_string()}, "items": items}),
    ))
}
