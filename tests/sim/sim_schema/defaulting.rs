//! Defaulting and pruning: what a stored custom resource gains and loses.

use super::*;

// ---- defaulting ------------------------------------------------------------------------------------

#[test]
fn defaults_fill_nested_objects_array_items_and_map_values() {
    let schema = compile(json!({
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "default": {},
                "properties": {
                    "replicas": {"type": "integer", "default": 3},
                    "backup": {
                        "type": "object",
                        "properties": {"schedule": {"type": "string", "default": "0 2 * * *"}}
                    },
                    "members": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {"role": {"type": "string", "default": "replica"}}
                        }
                    },
                    "pools": {
                        "type": "object",
                        "additionalProperties": {
                            "type": "object",
                            "properties": {"size": {"type": "integer", "default": 1}}
                        }
                    },
                    "note": {"type": "string"},
                    "tier": {"type": "string", "default": "standard"},
                    "comment": {"type": "string", "nullable": true}
                }
            }
        }
    }));
    let mut obj = json!({"spec": {
        "backup": {},
        "members": [{"role": "primary"}, {}],
        "pools": {"a": {}, "b": {"size": 5}},
        "note": null,
        "tier": null,
        "comment": null
    }});
    schema.apply_defaults(&mut obj);
    assert_eq!(
        obj,
        json!({"spec": {
            "replicas": 3,
            "backup": {"schedule": "0 2 * * *"},
            "members": [{"role": "primary"}, {"role": "replica"}],
            "pools": {"a": {"size": 1}, "b": {"size": 5}},
            "tier": "standard",
            "comment": null
        }})
    );
    let mut empty = json!({});
    schema.apply_defaults(&mut empty);
    assert_eq!(empty, json!({"spec": {"replicas": 3, "tier": "standard"}}), "defaults are defaulted too");
}

#[test]
fn absent_objects_get_no_defaults() {
    let schema = compile(database_cluster_schema());
    let mut obj = json!({"apiVersion": "db.example.com/v1", "kind": "DatabaseCluster", "metadata": {}});
    schema.apply_defaults(&mut obj);
    assert_eq!(obj.get("spec"), None);
    let mut obj = cluster(json!({"version": "15.4"}));
    schema.apply_defaults(&mut obj);
    assert_eq!(obj["spec"], json!({"version": "15.4", "replicas": 3, "storageSize": "1Gi"}));
}

// ---- pruning ---------------------------------------------------------------------------------------

#[test]
fn pruning_drops_unknown_fields_and_reports_their_paths() {
    let schema = compile(database_cluster_schema());
    let mut obj = cluster(json!({"version": "15.4", "replicaz": 3, "extra": {"deep": true}}));
    obj["metadata"]["annotations"] = json!({"a": "b"});
    obj["unknownTop"] = json!(1);
    obj["status"] = json!({"phase": "Running", "anything": {"goes": [1]}});
    let removed = schema.prune(&mut obj);
    assert_eq!(removed, vec!["spec.extra", "spec.replicaz", "unknownTop"]);
    assert_eq!(obj["spec"], json!({"version": "15.4"}));
    assert_eq!(obj["metadata"], json!({"name": "pg", "annotations": {"a": "b"}}), "metadata is untouched");
    assert_eq!(obj["status"], json!({"phase": "Running", "anything": {"goes": [1]}}), "preserved subtree");
    assert_eq!(obj["apiVersion"], "db.example.com/v1");
}

#[test]
fn pruning_keeps_object_fields_at_the_root_even_when_the_schema_omits_them() {
    let schema = compile(json!({"type": "object", "properties": {"spec": {"type": "object"}}}));
    let mut obj = json!({"apiVersion": "v", "kind": "K", "metadata": {"name": "n"}, "spec": {"a": 1}});
    assert_eq!(schema.prune(&mut obj), vec!["spec.a"]);
    assert_eq!(obj, json!({"apiVersion": "v", "kind": "K", "metadata": {"name": "n"}, "spec": {}}));
}

#[test]
fn pruning_descends_into_items_and_known_fields_of_preserved_objects() {
    let schema = spec_with(json!({
        "type": "array",
        "items": {
            "type": "object",
            "x-kubernetes-preserve-unknown-fields": true,
            "properties": {"known": {"type": "object", "properties": {"a": {"type": "string"}}}}
        }
    }));
    let mut obj = json!({"spec": {"x": [{"free": 1, "known": {"a": "x", "b": "dropped"}}]}});
    assert_eq!(schema.prune(&mut obj), vec!["spec.x[0].known.b"]);
    assert_eq!(obj, json!({"spec": {"x": [{"free": 1, "known": {"a": "x"}}]}}));
}

#[test]
fn embedded_resources_keep_their_object_fields() {
    let schema = spec_with(json!({
        "type": "object",
        "x-kubernetes-embedded-resource": true,
        "properties": {"spec": {"type": "object"}}
    }));
    let mut obj =
        json!({"spec": {"x": {"apiVersion": "v1", "kind": "Pod", "metadata": {}, "spec": {}, "junk": 1}}});
    assert_eq!(schema.prune(&mut obj), vec!["spec.x.junk"]);
    assert_eq!(obj["spec"]["x"], json!({"apiVersion": "v1", "kind": "Pod", "metadata": {}, "spec": {}}));
}
