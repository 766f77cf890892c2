//! Metadata as a real server sets it: uid, timestamps, generated names, generation rules and
//! `managedFields` entries. Pure functions over JSON objects.

use rand::Rng;
use serde_json::{Map, Value, json};

/// The current time as the apiserver writes it: RFC 3339, whole seconds, UTC.
pub fn now() -> String {
    jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// A random version-4 UUID string.
pub fn new_uid() -> String {
    let b: [u8; 16] = rand::rng().random();
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-4{}-{:x}{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[13..16],
        (b[8] & 0x3) | 0x8,
        &hex[17..20],
        &hex[20..32]
    )
}

/// `generateName` (cut to 58 characters, as the apiserver cuts it) plus five random characters
/// from the apiserver's alphabet.
pub fn generated_name(prefix: &str) -> String {
    let prefix = prefix.char_indices().nth(58).map_or(prefix, |(at, _)| &prefix[..at]);
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut rng = rand::rng();
    let suffix: String = (0..5).map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char).collect();
    format!("{prefix}{suffix}")
}

/// Whether anything but metadata (and status, when it is a subresource) differs: the rule for
/// bumping `metadata.generation`.
pub fn spec_changed(old: &Value, new: &Value, status_subresource: bool) -> bool {
    let strip = |v: &Value| -> Map<String, Value> {
        let mut m = v.as_object().cloned().unwrap_or_default();
        m.remove("metadata");
        if status_subresource {
            m.remove("status");
        }
        m.remove("apiVersion");
        m.remove("kind");
        m
    };
    strip(old) != strip(new)
}

/// Whether two versions of an object are equal apart from resourceVersion and managedFields
/// (a write that changes nothing is not stored and sends no event, as on a real server).
pub fn same_content(old: &Value, new: &Value) -> bool {
    let strip = |v: &Value| {
        let mut v = v.clone();
        if let Some(m) = v["metadata"].as_object_mut() {
            m.remove("resourceVersion");
            m.remove("managedFields");
        }
        v
    };
    strip(old) == strip(new)
}

/// The metadata fields a field manager can own.
const OWNABLE_METADATA: &[&str] = &["labels", "annotations", "finalizers", "ownerReferences"];

/// The `fieldsV1` set of an object: every field path present, in the `f:` notation.
pub fn field_set(obj: &Value) -> Value {
    let mut top = Map::new();
    if let Some(map) = obj.as_object() {
        for (k, v) in map {
            match k.as_str() {
                "apiVersion" | "kind" => {}
                "metadata" => {
                    let mut meta = Map::new();
                    for f in OWNABLE_METADATA {
                        if let Some(v) = v.get(*f) {
                            meta.insert(format!("f:{f}"), fields_of(v));
                        }
                    }
                    if !meta.is_empty() {
                        top.insert("f:metadata".into(), Value::Object(meta));
                    }
                }
                _ => {
                    top.insert(format!("f:{k}"), fields_of(v));
                }
            }
        }
    }
    Value::Object(top)
}

fn fields_of(v: &Value) -> Value {
    match v {
        Value::Object(m) => {
            let mut out = Map::new();
            if m.is_empty() {
                out.insert(".".into(), json!({}));
            }
            for (k, v) in m {
                out.insert(format!("f:{k}"), fields_of(v));
            }
            Value::Object(out)
        }
        _ => json!({}),
    }
}

/// The part of `new` that differs from `old` (added or changed fields; whole values where a
/// non-object changed): what an `Update` manager comes to own.
pub fn changed_part(old: &Value, new: &Value) -> Value {
    match (old.as_object(), new.as_object()) {
        (Some(o), Some(n)) => {
            let mut out = Map::new();
            for (k, v) in n {
                match o.get(k) {
                    Some(ov) if ov == v => {}
                    Some(ov) if ov.is_object() && v.is_object() => {
                        out.insert(k.clone(), changed_part(ov, v));
                    }
                    _ => {
                        out.insert(k.clone(), v.clone());
                    }
                }
            }
            Value::Object(out)
        }
        _ => new.clone(),
    }
}

/// Unions two field sets.
fn merge_field_sets(a: &mut Value, b: &Value) {
    if let (Some(am), Some(bm)) = (a.as_object_mut(), b.as_object()) {
        for (k, v) in bm {
            match am.get_mut(k) {
                Some(existing) => merge_field_sets(existing, v),
                None => {
                    am.insert(k.clone(), v.clone());
                }
            }
        }
    }
}

/// One write's identity for `managedFields`.
#[derive(Debug, Clone)]
pub struct Manager<'a> {
    /// The field manager name.
    pub name: &'a str,
    /// `Update` or `Apply`.
    pub operation: &'a str,
    /// apiVersion the request used.
    pub api_version: &'a str,
    /// `status` for status writes.
    pub subresource: Option<&'a str>,
}

/// Records that `manager` wrote `fields` into the object's `managedFields`; an `Update` entry
/// accumulates fields, an `Apply` entry is replaced (it owns exactly what was last applied).
pub fn record_manager(obj: &mut Value, manager: &Manager<'_>, fields: Value) {
    let same = |e: &Value| {
        e["manager"] == manager.name
            && e["operation"] == manager.operation
            && e.get("subresource").and_then(Value::as_str) == manager.subresource
    };
    let mut entries: Vec<Value> = obj["metadata"]["managedFields"].as_array().cloned().unwrap_or_default();
    let mut fields = fields;
    if let Some(pos) = entries.iter().position(same) {
        let old = entries.remove(pos);
        if manager.operation == "Update" {
            let mut merged = old["fieldsV1"].clone();
            merge_field_sets(&mut merged, &fields);
            fields = merged;
        }
    }
    let mut entry = json!({
        "manager": manager.name,
        "operation": manager.operation,
        "apiVersion": manager.api_version,
        "time": now(),
        "fieldsType": "FieldsV1",
        "fieldsV1": fields,
    });
    if let Some(sub) = manager.subresource {
        entry["subresource"] = Value::String(sub.to_string());
    }
    entries.push(entry);
    obj["metadata"]["managedFields"] = Value::Array(entries);
}

/// Takes the fields at `paths` away from every manager but `taker` (a forced apply); managers
/// left owning nothing are dropped from `managedFields`.
pub fn release_fields(obj: &mut Value, taker: &str, paths: &[Vec<String>]) {
    let Some(entries) = obj["metadata"]["managedFields"].as_array_mut() else { return };
    for entry in entries.iter_mut().filter(|e| e["manager"] != taker) {
        for path in paths {
            remove_field(&mut entry["fieldsV1"], path);
        }
    }
    entries.retain(|e| e["fieldsV1"].as_object().is_some_and(|m| !m.is_empty()));
}

/// Removes one `f:` path from a field set, and the parents it leaves empty.
fn remove_field(set: &mut Value, path: &[String]) {
    let Some((first, rest)) = path.split_first() else { return };
    let key = format!("f:{first}");
    let Some(map) = set.as_object_mut() else { return };
    if rest.is_empty() {
        map.remove(&key);
        return;
    }
    if let Some(child) = map.get_mut(&key) {
        remove_field(child, rest);
        if child.as_object().is_some_and(|m| m.is_empty()) {
            map.remove(&key);
        }
    }
}

/// The fields the `Apply` manager `name` owned before this write, if any.
pub fn applied_fields(obj: &Value, name: &str) -> Option<Value> {
    obj["metadata"]["managedFields"]
        .as_array()?
        .iter()
        .find(|e| e["manager"] == name && e["operation"] == "Apply")
        .map(|e| e["fieldsV1"].clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_changed_part_holds_only_added_or_changed_fields() {
        let old = json!({"data": {"a": "1", "b": "2"}, "metadata": {"name": "x"}});
        let new = json!({"data": {"a": "1", "b": "3", "c": "4"}, "metadata": {"name": "x"}});
        assert_eq!(changed_part(&old, &new), json!({"data": {"b": "3", "c": "4"}}));
    }

    #[test]
    fn released_fields_leave_their_old_managers() {
        let mut obj = json!({"metadata": {"managedFields": [
            {"manager": "a", "fieldsV1": {"f:data": {"f:x": {}, "f:y": {}}}},
            {"manager": "b", "fieldsV1": {"f:data": {"f:x": {}}}},
        ]}});
        release_fields(&mut obj, "c", &[vec!["data".into(), "x".into()]]);
        let entries = obj["metadata"]["managedFields"].as_array().unwrap();
        assert_eq!(entries.len(), 1, "b owns nothing any more");
        assert_eq!(entries[0]["fieldsV1"], json!({"f:data": {"f:y": {}}}));
    }

    #[test]
    fn uids_look_like_uuids() {
        let u = new_uid();
        assert_eq!(u.len(), 36);
        assert_eq!(u.matches('-').count(), 4);
        assert_ne!(u, new_uid());
    }

    #[test]
    fn generation_ignores_metadata_and_status_subresource() {
        let a = json!({"metadata": {"labels": {"a": "1"}}, "spec": {"x": 1}, "status": {"y": 1}});
        let labels = json!({"metadata": {"labels": {"a": "2"}}, "spec": {"x": 1}, "status": {"y": 1}});
        let status = json!({"metadata": {"labels": {"a": "1"}}, "spec": {"x": 1}, "status": {"y": 2}});
        let spec = json!({"metadata": {"labels": {"a": "1"}}, "spec": {"x": 2}, "status": {"y": 1}});
        assert!(!spec_changed(&a, &labels, true));
        assert!(!spec_changed(&a, &status, true));
        assert!(spec_changed(&a, &status, false));
        assert!(spec_changed(&a, &spec, true));
    }

    #[test]
    fn field_sets_use_f_notation_and_update_entries_accumulate() {
        let obj = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "labels": {"a": "1"}}, "data": {"k": "v"}});
        let fs = field_set(&obj);
        assert_eq!(fs, json!({"f:metadata": {"f:labels": {"f:a": {}}}, "f:data": {"f:k": {}}}));
        let mut target = obj.clone();
        let m = Manager { name: "me", operation: "Update", api_version: "v1", subresource: None };
        record_manager(&mut target, &m, json!({"f:data": {"f:k": {}}}));
        record_manager(&mut target, &m, json!({"f:data": {"f:j": {}}}));
        let entries = target["metadata"]["managedFields"].as_array().unwrap();
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0]["fieldsV1"], json!({"f:data": {"f:k": {}, "f:j": {}}}));
    }
}
