//! The `scale` subresource of StatefulSets (`kubectl scale`): an `autoscaling/v1` Scale read
//! from, and written to, `spec.replicas`.

use http::Response;
use serde_json::{Value, json};

use super::{Body, Call, json_response};
use crate::sim::api_error::ApiError;
use crate::sim::cluster::Cluster;
use crate::sim::ops::{self, WriteContext};
use crate::sim::patch::{self, PatchType};
use crate::sim::resources::Kind;

/// The Scale view of an object.
fn scale_of(obj: &Value) -> Value {
    let labels = obj["spec"]["selector"]["matchLabels"].as_object();
    let selector: Vec<String> = labels
        .into_iter()
        .flatten()
        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
        .collect();
    let meta = &obj["metadata"];
    json!({
        "apiVersion": "autoscaling/v1",
        "kind": "Scale",
        "metadata": {
            "name": meta["name"], "namespace": meta["namespace"], "uid": meta["uid"],
            "resourceVersion": meta["resourceVersion"], "creationTimestamp": meta["creationTimestamp"],
        },
        "spec": {"replicas": obj["spec"]["replicas"].as_i64().unwrap_or(1)},
        "status": {"replicas": obj["status"]["replicas"].as_i64().unwrap_or(0), "selector": selector.join(",")},
    })
}

fn current(cluster: &Cluster, kind: &Kind, call: &Call) -> Result<Value, ApiError> {
    let name = call.target.name.as_deref().unwrap_or_default();
    let ns = call.target.namespace.as_deref().unwrap_or_default();
    cluster
        .read(|s| s.store.get(&kind.storage_key(), ns, name).cloned())
        .ok_or_else(|| ApiError::not_found(kind, name))
}

/// What a request on `…/scale` does.
pub enum ScaleVerb {
    /// GET: read the Scale.
    Get,
    /// PUT: replace the Scale.
    Put,
    /// PATCH the Scale with this patch type.
    Patch(PatchType),
}

/// GET, PUT or PATCH on `…/scale`.
pub fn handle(cluster: &Cluster, call: &Call, verb: ScaleVerb) -> Result<Response<Body>, ApiError> {
    let kind = &call.target.kind;
    let obj = current(cluster, kind, call)?;
    let scale = match verb {
        ScaleVerb::Get => return Ok(json_response(200, &scale_of(&obj))),
        ScaleVerb::Put => serde_json::from_slice(&call.body)
            .map_err(|e| ApiError::bad_request(format!("error decoding the request body: {e}")))?,
        ScaleVerb::Patch(how) => {
            patch::apply_patch(how, &scale_of(&obj), &patch::parse_body(how, &call.body)?)?
        }
    };
    let replicas = scale["spec"]["replicas"]
        .as_i64()
        .ok_or_else(|| ApiError::bad_request("spec.replicas of the Scale must be an integer"))?;
    let name = call.target.name.as_deref().unwrap_or_default();
    let ns = call.target.namespace.as_deref();
    let mut updated = obj.clone();
    updated["spec"]["replicas"] = json!(replicas);
    if let Some(rv) = scale["metadata"]["resourceVersion"].as_str() {
        updated["metadata"]["resourceVersion"] = json!(rv);
    }
    let cx = WriteContext::update(&call.field_manager());
    let stored = cluster.write(|s| ops::update(s, kind, ns, name, updated, None, &cx))?;
    Ok(json_response(200, &scale_of(&stored)))
}
