//! `get` and `list`: one object, or a page of a resource's objects with selectors,
//! `limit`/`continue` and `resourceVersion` semantics; as JSON or as a kubectl Table.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use http::Response;
use serde_json::{Value, json};

use super::{Body, Call, json_response, present};
use crate::sim::api_error::ApiError;
use crate::sim::cluster::Cluster;
use crate::sim::events;
use crate::sim::selectors::{FieldSelector, LabelSelector};
use crate::sim::store::object_name;
use crate::sim::table;
use crate::sim::watch::Filter;

/// The list or watch filter of a request.
pub fn filter(call: &Call) -> Result<Filter, ApiError> {
    Ok(Filter {
        key: call.target.kind.storage_key(),
        namespace: call.target.namespace.clone(),
        labels: LabelSelector::parse(
            call.query.get("labelSelector").map(String::as_str).unwrap_or_default(),
        )?,
        fields: {
            let fields = call.query.get("fieldSelector").map(String::as_str).unwrap_or_default();
            if events::is_events_v1(&call.target.kind) {
                FieldSelector::parse(&events::core_field_selector(fields))?
            } else {
                FieldSelector::parse(fields)?
            }
        },
    })
}

/// GET on one object.
pub fn get(cluster: &Cluster, call: &Call) -> Result<Response<Body>, ApiError> {
    let kind = &call.target.kind;
    let name = call.target.name.as_deref().unwrap_or_default();
    let ns = if kind.namespaced { call.target.namespace.as_deref().unwrap_or_default() } else { "" };
    let obj = cluster
        .read(|s| s.store.get(&kind.storage_key(), ns, name).cloned())
        .ok_or_else(|| ApiError::not_found(kind, name))?;
    let obj = present(kind, &obj);
    if let Some(opts) = table::requested(&call.accept, &call.query) {
        let rv = obj["metadata"]["resourceVersion"].clone();
        return Ok(json_response(200, &table::table(kind, &[obj], &opts, rv)));
    }
    Ok(json_response(200, &obj))
}

/// Where a continued list resumes: the list's resourceVersion and the last key returned.
fn encode_continue(rv: u64, ns: &str, name: &str) -> String {
    URL_SAFE_NO_PAD.encode(json!({"rv": rv, "ns": ns, "name": name}).to_string())
}

fn decode_continue(token: &str) -> Result<(u64, (String, String)), ApiError> {
    let bad = || ApiError::bad_request("continue key is not valid");
    let bytes = URL_SAFE_NO_PAD.decode(token).map_err(|_| bad())?;
    let v: Value = serde_json::from_slice(&bytes).map_err(|_| bad())?;
    let rv = v["rv"].as_u64().ok_or_else(bad)?;
    let ns = v["ns"].as_str().ok_or_else(bad)?.to_string();
    let name = v["name"].as_str().ok_or_else(bad)?.to_string();
    Ok((rv, (ns, name)))
}

/// GET on a collection: the current state (any requested resourceVersion is served by the
/// latest state, which is "not older than" it), paginated by `limit` and `continue`.
pub fn list(cluster: &Cluster, call: &Call) -> Result<Response<Body>, ApiError> {
    let kind = &call.target.kind;
    let filter = filter(call)?;
    let limit = call.query.get("limit").and_then(|l| l.parse::<usize>().ok()).filter(|l| *l > 0);
    let resume =
        call.query.get("continue").filter(|c| !c.is_empty()).map(|c| decode_continue(c)).transpose()?;
    let exact = call.query.get("resourceVersionMatch").is_some_and(|m| m == "Exact");
    let requested_rv = call.query.get("resourceVersion").filter(|rv| !rv.is_empty() && *rv != "0");
    let (items, list_rv, next) = cluster.read(|s| {
        let current = s.store.resource_version();
        if let Some((rv, _)) = &resume
            && s.store.hub.since(*rv).is_none()
        {
            return Err(ApiError::gone(
                "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results.",
            ));
        }
        if exact && let Some(rv) = requested_rv {
            let rv: u64 = rv.parse().map_err(|_| ApiError::bad_request(format!("invalid resource version {rv:?}")))?;
            if rv != current {
                return Err(ApiError::gone(format!("too old resource version: {rv} ({current})")));
            }
        }
        let list_rv = resume.as_ref().map_or(current, |(rv, _)| *rv);
        let mut matching = s
            .store
            .list(&filter.key, filter.namespace.as_deref())
            .filter(|o| filter.matches(o))
            .filter(|o| resume.as_ref().is_none_or(|(_, after)| object_name(o) > *after));
        let items: Vec<Value> = match limit {
            Some(n) => matching.by_ref().take(n).cloned().collect(),
            None => matching.by_ref().cloned().collect(),
        };
        let remaining = matching.count();
        let next = match items.last() {
            Some(last) if remaining > 0 => {
                let (ns, name) = object_name(last);
                Some((encode_continue(list_rv, &ns, &name), remaining))
            }
            _ => None,
        };
        Ok((items, list_rv, next))
    })?;
    let items: Vec<Value> = items.iter().map(|o| present(kind, o)).collect();
    if let Some(opts) = table::requested(&call.accept, &call.query) {
        return Ok(json_response(200, &table::table(kind, &items, &opts, json!(list_rv.to_string()))));
    }
    let mut metadata = json!({"resourceVersion": list_rv.to_string()});
    if let Some((token, remaining)) = next {
        metadata["continue"] = json!(token);
        metadata["remainingItemCount"] = json!(remaining);
    }
    Ok(json_response(
        200,
        &json!({"apiVersion": kind.api_version(), "kind": format!("{}List", kind.kind), "metadata": metadata, "items": items}),
    ))
}
