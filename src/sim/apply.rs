//! Server-side apply as create-or-merge under a field manager: the applied configuration is
//! merged strategically into the live object, and fields this manager applied before but no
//! longer applies are removed unless another manager owns them. Conflicts between managers are
//! not detected (every apply behaves as `force=true`).

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
    fn a_first_apply_only_merges() {
        let live = json!({"metadata": {"name": "c"}, "data": {"keep": "1"}});
        let merged = merge_applied(&live, &json!({"data": {"new": "2"}}), "me");
        assert_eq!(merged["data"], json!({"keep": "1", "new": "2"}));
    }
}
