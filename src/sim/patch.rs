//! Patch formats: JSON merge patch, JSON patch (RFC 6902, via the `json-patch` crate), strategic
//! merge patch for the built-in kinds held here, and the merge half of server-side apply.

use serde_json::{Map, Value};

use crate::sim::api_error::ApiError;

/// The patch formats, by request `Content-Type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchType {
    /// `application/merge-patch+json` (RFC 7386).
    Merge,
    /// `application/json-patch+json` (RFC 6902).
    Json,
    /// `application/strategic-merge-patch+json`.
    Strategic,
    /// `application/apply-patch+yaml` (server-side apply).
    Apply,
}

impl PatchType {
    /// The patch type of a request `Content-Type`, ignoring parameters like `charset`.
    pub fn from_content_type(content_type: &str) -> Option<Self> {
        match content_type.split(';').next().unwrap_or_default().trim() {
            "application/merge-patch+json" => Some(Self::Merge),
            "application/json-patch+json" => Some(Self::Json),
            "application/strategic-merge-patch+json" => Some(Self::Strategic),
            "application/apply-patch+yaml" | "application/apply-patch+json" => Some(Self::Apply),
            _ => None,
        }
    }
}

/// Parses a patch body: JSON for every type, YAML (a superset) for apply.
pub fn parse_body(patch_type: PatchType, body: &[u8]) -> Result<Value, ApiError> {
    let text =
        std::str::from_utf8(body).map_err(|e| ApiError::bad_request(format!("body is not UTF-8: {e}")))?;
    match patch_type {
        PatchType::Apply => serde_saphyr::from_str::<Value>(text)
            .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}"))),
        _ => serde_json::from_str(text)
            .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}"))),
    }
}

/// Applies a merge, JSON or strategic patch to a copy of `current`.
pub fn apply_patch(patch_type: PatchType, current: &Value, patch: &Value) -> Result<Value, ApiError> {
    let mut doc = current.clone();
    match patch_type {
        PatchType::Merge => json_patch::merge(&mut doc, patch),
        PatchType::Json => {
            let ops: json_patch::Patch = serde_json::from_value(patch.clone())
                .map_err(|e| ApiError::bad_request(format!("invalid JSON patch: {e}")))?;
            json_patch::patch(&mut doc, &ops)
                .map_err(|e| ApiError::unprocessable(format!("the JSON patch could not be applied: {e}")))?;
        }
        PatchType::Strategic | PatchType::Apply => strategic_merge(&mut doc, patch),
    }
    Ok(doc)
}

/// The merge key of a list field in the built-in kinds (`patchMergeKey`), by field name.
fn merge_key(field: &str, items: &[Value]) -> Option<&'static str> {
    match field {
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "volumes"
        | "env"
        | "imagePullSecrets"
        | "envFrom"
        | "resourceClaims" => Some("name"),
        "ports" if items.iter().any(|i| i.get("containerPort").is_some()) => Some("containerPort"),
        "ports" => Some("port"),
        "volumeMounts" => Some("mountPath"),
        "volumeDevices" => Some("devicePath"),
        "ownerReferences" => Some("uid"),
        "conditions" => Some("type"),
        "hostAliases" => Some("ip"),
        "topologySpreadConstraints" => Some("topologyKey"),
        _ => None,
    }
}

/// List fields of primitives merged as sets (`patchStrategy: merge` on a primitive list).
fn is_primitive_set(field: &str) -> bool {
    field == "finalizers"
}

/// Strategic merge: maps merge as in a merge patch, lists with a merge key merge element-wise
/// (`$patch: delete` removes an element, `$patch: replace` replaces), other lists are replaced.
pub fn strategic_merge(target: &mut Value, patch: &Value) {
    let Some(patch_map) = patch.as_object() else {
        *target = patch.clone();
        return;
    };
    if patch_map.get("$patch").and_then(Value::as_str) == Some("replace") {
        let mut replacement = patch_map.clone();
        replacement.remove("$patch");
        *target = Value::Object(replacement);
        return;
    }
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let target_map = target.as_object_mut().expect("made an object above");
    for (k, v) in patch_map {
        if let Some(list_field) = k.strip_prefix("$deleteFromPrimitiveList/") {
            if let (Some(existing), Some(remove)) =
                (target_map.get_mut(list_field).and_then(Value::as_array_mut), v.as_array())
            {
                existing.retain(|x| !remove.contains(x));
            }
            continue;
        }
        if k.starts_with('$') {
            continue;
        }
        match v {
            Value::Null => {
                target_map.remove(k);
            }
            Value::Object(_) => strategic_merge(target_map.entry(k.clone()).or_insert(Value::Null), v),
            Value::Array(items) => {
                let slot = target_map.entry(k.clone()).or_insert(Value::Array(vec![]));
                merge_list(slot, items, k);
            }
            _ => {
                target_map.insert(k.clone(), v.clone());
            }
        }
    }
}

fn merge_list(target: &mut Value, items: &[Value], field: &str) {
    if items.iter().any(|i| i.get("$patch").and_then(Value::as_str) == Some("replace")) {
        *target = Value::Array(items.iter().filter(|i| i.get("$patch").is_none()).cloned().collect());
        return;
    }
    if !target.is_array() {
        *target = Value::Array(vec![]);
    }
    let existing = target.as_array_mut().expect("made an array above");
    if is_primitive_set(field) {
        for item in items {
            if !existing.contains(item) {
                existing.push(item.clone());
            }
        }
        return;
    }
    let Some(key) = merge_key(field, items) else {
        *existing = items.to_vec();
        return;
    };
    for item in items {
        let id = &item[key];
        let pos = existing.iter().position(|e| &e[key] == id);
        match (pos, item.get("$patch").and_then(Value::as_str)) {
            (Some(p), Some("delete")) => {
                existing.remove(p);
            }
            (None, Some("delete")) => {}
            (Some(p), _) => strategic_merge(&mut existing[p], item),
            (None, _) => {
                let mut fresh = Value::Null;
                strategic_merge(&mut fresh, item);
                existing.push(fresh);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn strategic_merge_merges_containers_by_name() {
        let current = json!({"spec": {"containers": [{"name": "a", "image": "x"}, {"name": "b", "image": "y"}], "finalizers": ["f1"]}});
        let patch = json!({"spec": {"containers": [{"name": "b", "image": "z"}, {"name": "c", "image": "w"}], "finalizers": ["f2"]}});
        let out = apply_patch(PatchType::Strategic, &current, &patch).unwrap();
        assert_eq!(
            out["spec"]["containers"],
            json!([{"name": "a", "image": "x"}, {"name": "b", "image": "z"}, {"name": "c", "image": "w"}])
        );
        assert_eq!(out["spec"]["finalizers"], json!(["f1", "f2"]));
        let delete = json!({"spec": {"containers": [{"name": "a", "$patch": "delete"}]}});
        let out = apply_patch(PatchType::Strategic, &out, &delete).unwrap();
        assert_eq!(out["spec"]["containers"].as_array().unwrap().len(), 2);
    }

    #[test]
    fn merge_patch_replaces_lists_and_null_deletes() {
        let current = json!({"spec": {"containers": [{"name": "a"}], "x": 1}});
        let out = apply_patch(
            PatchType::Merge,
            &current,
            &json!({"spec": {"containers": [{"name": "b"}], "x": null}}),
        )
        .unwrap();
        assert_eq!(out, json!({"spec": {"containers": [{"name": "b"}]}}));
    }

    #[test]
    fn json_patch_applies_and_failed_tests_are_unprocessable() {
        let current = json!({"spec": {"replicas": 1}});
        let out = apply_patch(
            PatchType::Json,
            &current,
            &json!([{"op": "replace", "path": "/spec/replicas", "value": 3}]),
        )
        .unwrap();
        assert_eq!(out["spec"]["replicas"], 3);
        let err = apply_patch(
            PatchType::Json,
            &current,
            &json!([{"op": "test", "path": "/spec/replicas", "value": 9}]),
        )
        .unwrap_err();
        assert_eq!(err.code, 422);
    }

    #[test]
    fn apply_bodies_may_be_yaml() {
        let v = parse_body(PatchType::Apply, b"apiVersion: v1\nkind: ConfigMap\ndata:\n  a: b\n").unwrap();
        assert_eq!(v["data"]["a"], "b");
    }
}
