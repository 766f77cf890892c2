//! Server-side apply as create-or-merge under a field manager: the applied configuration is
//! merged strategically into the live object, and fields this manager applied before but no
//! longer applies are removed unless another manager owns them. Conflicts between managers are
//! reported as the apiserver reports them (409 with one cause per field) unless `force=true`.

use serde_json::{Map, Value};

use crate::sim::meta;
use crate::sim::patch::strategic_merge;

/// The live object after `manager` applies `applied` to it.
pub fn merge_applied(live: &Value, applied: &Value, manager: &str) -> Value {
    let mut merged = live.clone();
    strategic_merge(&mut merged, applied);
    if let Some(before) = meta::applied_fields(live, manager) {
        let after = meta::field_set(applied);
        let others: Vec<Value> = live["metadata"]["managedFields"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|e| !(e["manager"] == manager && e["operation"] == "Apply"))
            .map(|e| e["fieldsV1"].clone())
            .collect();
        let others: Vec<&Value> = others.iter().collect();
        drop_released(&mut merged, &before, &after, &others);
    }
    merged
}

/// One field the applied configuration would change although another manager owns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    /// The manager owning the field.
    pub manager: String,
    /// The apiVersion that manager used.
    pub api_version: String,
    /// The field as the apiserver prints it: `.spec.replicas`.
    pub field: String,
    /// The field's path segments: `["spec", "replicas"]`.
    pub path: Vec<String>,
}

/// The fields `applied` would change on `live` that managers other than `manager` own.
pub fn conflicts(live: &Value, applied: &Value, manager: &str) -> Vec<Conflict> {
    let mut leaves = Vec::new();
    leaf_paths(&meta::field_set(applied), &mut Vec::new(), &mut leaves);
    let mut found = Vec::new();
    for entry in live["metadata"]["managedFields"].as_array().into_iter().flatten() {
        if entry["manager"] == manager {
            continue;
        }
        for path in &leaves {
            let owned =
                path.iter().try_fold(&entry["fieldsV1"], |v, seg| v.get(format!("f:{seg}"))).is_some();
            let value_at = |root: &Value| path.iter().try_fold(root, |v, seg| v.get(seg)).cloned();
            if owned && value_at(live) != value_at(applied) {
                found.push(Conflict {
                    manager: entry["manager"].as_str().unwrap_or_default().to_string(),
                    api_version: entry["apiVersion"].as_str().unwrap_or_default().to_string(),
                    field: path.iter().map(|s| format!(".{s}")).collect(),
                    path: path.clone(),
                });
            }
        }
    }
    found
}

/// The leaf field paths of a field set (`f:` keys whose value has no `f:` children).
fn leaf_paths(set: &Value, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    let Some(map) = set.as_object() else { return };
    for (key, sub) in map {
        let Some(field) = key.strip_prefix("f:") else { continue };
        prefix.push(field.to_string());
        let has_children = sub.as_object().is_some_and(|m| m.keys().any(|k| k.starts_with("f:")));
        if has_children {
            leaf_paths(sub, prefix, out);
        } else {
            out.push(prefix.clone());
        }
        prefix.pop();
    }
}

/// Removes from `obj` what `before` owned and `after` no longer owns, unless one of `others` owns it.
fn drop_released(obj: &mut Value, before: &Value, after: &Value, others: &[&Value]) {
    let (Some(before), Some(map)) = (before.as_object(), obj.as_object_mut()) else { return };
    let empty = Value::Object(Map::new());
    for (key, before_sub) in before {
        let Some(field) = key.strip_prefix("f:") else { continue };
        let others_sub: Vec<&Value> = others.iter().filter_map(|o| o.get(key)).collect();
        match after.get(key) {
            Some(after_sub) => {
                if let Some(child) = map.get_mut(field) {
                    drop_released(child, before_sub, after_sub, &others_sub);
                }
            }
            None if others_sub.is_empty() => {
                map.remove(field);
            }
            None => {
                if let Some(child) = map.get_mut(field) {
                    drop_released(child, before_sub, &empty, &others_sub);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn with_apply_entry(mut obj: Value, manager: &str, applied: &Value) -> Value {
        obj["metadata"]["managedFields"] = json!([
            {"manager": manager, "operation": "Apply", "fieldsV1": meta::field_set(applied)},
            {"manager": "other", "operation": "Update", "fieldsV1": {"f:data": {"f:theirs": {}}}}
        ]);
        obj
    }

    #[test]
    fn fields_no_longer_applied_are_removed_unless_others_own_them() {
        let first = json!({"data": {"a": "1", "b": "2", "theirs": "x"}});
        let live = with_apply_entry(
            json!({"metadata": {"name": "c"}, "data": {"a": "1", "b": "2", "theirs": "x"}}),
            "me",
            &first,
        );
        let merged = merge_applied(&live, &json!({"data": {"a": "3"}}), "me");
        assert_eq!(merged["data"], json!({"a": "3", "theirs": "x"}));
    }

    #[test]
    fn changing_a_field_another_manager_owns_is_a_conflict() {
        let live =
            with_apply_entry(json!({"metadata": {"name": "c"}, "data": {"theirs": "x"}}), "me", &json!({}));
        let same = conflicts(&live, &json!({"data": {"theirs": "x"}}), "me");
        assert!(same.is_empty(), "applying the same value is no conflict");
        let changed = conflicts(&live, &json!({"data": {"theirs": "y", "mine": "z"}}), "me");
        assert_eq!(changed.len(), 1);
        assert_eq!((changed[0].manager.as_str(), changed[0].field.as_str()), ("other", ".data.theirs"));
    }

    #[test]
    fn a_first_apply_only_merges() {
        let live = json!({"metadata": {"name": "c"}, "data": {"keep": "1"}});
        let merged = merge_applied(&live, &json!({"data": {"new": "2"}}), "me");
        assert_eq!(merged["data"], json!({"keep": "1", "new": "2"}));
    }
}
