//! CEL validation rules: transition rules, messages, list and map correlation, and the
//! libraries each Kubernetes version offers.

use super::*;

// ---- CEL rules -------------------------------------------------------------------------------------

fn update_errors(old_spec: Value, new_spec: Value) -> Vec<FieldError> {
    let schema = compile(database_cluster_schema());
    schema.validate(&cluster(new_spec), Some(&cluster(old_spec)))
}

#[test]
fn changing_the_major_version_is_rejected() {
    let errors = update_errors(json!({"version": "15.4"}), json!({"version": "16.1"}));
    assert_eq!(
        errors,
        vec![FieldError {
            field: "spec.version".into(),
            reason: FieldErrorReason::Invalid,
            message: "Invalid value: \"string\": changing the major version is not supported: create a new \
                      cluster and migrate the data"
                .into(),
        }]
    );
}

#[test]
fn a_minor_version_change_is_allowed() {
    assert_eq!(update_errors(json!({"version": "15.4"}), json!({"version": "15.5"})), vec![]);
}

#[test]
fn shrinking_storage_is_rejected_and_growing_or_restating_it_is_allowed() {
    let shrink = update_errors(
        json!({"version": "15.4", "storageSize": "10Gi"}),
        json!({"version": "15.4", "storageSize": "5Gi"}),
    );
    assert_eq!(
        only_error(&shrink),
        "spec.storageSize: Invalid value: \"\": storageSize may not shrink",
        "int-or-string fields have no type name"
    );
    let grow = update_errors(
        json!({"version": "15.4", "storageSize": "10Gi"}),
        json!({"version": "15.4", "storageSize": "20Gi"}),
    );
    assert_eq!(grow, vec![]);
    let same = update_errors(
        json!({"version": "15.4", "storageSize": "1Gi"}),
        json!({"version": "15.4", "storageSize": "1024Mi"}),
    );
    assert_eq!(same, vec![], "1Gi and 1024Mi are the same quantity");
    let int_to_string = update_errors(
        json!({"version": "15.4", "storageSize": 2048}),
        json!({"version": "15.4", "storageSize": "2Ki"}),
    );
    assert_eq!(int_to_string, vec![], "string(self) turns an integer into a quantity too");
}

#[test]
fn transition_rules_are_skipped_on_create_and_for_new_fields() {
    let schema = compile(database_cluster_schema());
    let created = cluster(json!({"version": "16.0", "storageSize": "1Mi"}));
    assert_eq!(schema.validate(&created, None), vec![]);
    let old = cluster(json!({"version": "15.4"}));
    let new = cluster(json!({"version": "15.4", "storageSize": "1Mi"}));
    assert_eq!(schema.validate(&new, Some(&old)), vec![], "no old storageSize to compare with");
    let null_old = cluster(json!({"version": "15.4", "storageSize": null}));
    assert_eq!(schema.validate(&new, Some(&null_old)), vec![], "a null old value is no old value");
}

#[test]
fn schema_errors_that_block_rules_add_the_apiservers_note() {
    let errors = update_errors(
        json!({"version": "15.4", "storageSize": "10Gi"}),
        json!({"version": "16.4", "storageSize": "5Gi", "replicas": "three"}),
    );
    let shown: Vec<(&str, FieldErrorReason)> = errors.iter().map(|e| (e.field.as_str(), e.reason)).collect();
    assert_eq!(
        shown,
        vec![("spec.replicas", FieldErrorReason::TypeInvalid), ("<nil>", FieldErrorReason::Invalid)]
    );
    assert_eq!(
        errors[1].message,
        "Invalid value: \"null\": some validation rules were not checked because the object was invalid; correct \
         the existing errors to complete validation"
    );
    // A non-blocking error (a minimum) lets the rules run.
    let errors = update_errors(json!({"version": "15.4"}), json!({"version": "16.4", "replicas": 0}));
    let fields: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
    assert_eq!(fields, vec!["spec.replicas", "spec.version"]);
}

#[test]
fn unchanged_values_are_not_rejudged_on_update() {
    // Ratcheting: an object stored before its schema tightened can still be updated elsewhere.
    let schema = compile(database_cluster_schema());
    let old = cluster(json!({"version": "15.4", "replicas": 0}));
    let new = cluster(json!({"version": "15.5", "replicas": 0}));
    assert_eq!(schema.validate(&new, Some(&old)), vec![]);
    let changed = cluster(json!({"version": "15.5", "replicas": -1}));
    assert_eq!(schema.validate(&changed, Some(&old)).len(), 1);
}

#[test]
fn a_runtime_error_is_a_validation_error() {
    let schema = spec_with(json!({
        "type": "object",
        "properties": {"a": {"type": "integer"}},
        "x-kubernetes-validations": [{"rule": "self.missing == 1"}, {"rule": "1 / (self.a - self.a) == 1", "message": "no division"}]
    }));
    let errors = errors_for(&schema, json!({"a": 1}));
    let shown: Vec<String> = errors.iter().map(|e| format!("{}: {}", e.field, e.message)).collect();
    assert_eq!(
        shown,
        vec![
            "spec.x: Invalid value: \"object\": no such key: missing evaluating rule: self.missing == 1"
                .to_owned(),
            "spec.x: Invalid value: \"object\": division by zero evaluating rule: no division".to_owned(),
        ]
    );
}

#[test]
fn a_failing_rule_without_message_names_the_rule() {
    let schema =
        spec_with(json!({"type": "integer", "x-kubernetes-validations": [{"rule": " self % 2 == 0 "}]}));
    assert_eq!(
        only_error(&errors_for(&schema, json!(3))),
        "spec.x: Invalid value: \"integer\": failed rule: self % 2 == 0"
    );
    assert!(errors_for(&schema, json!(4)).is_empty());
}

#[test]
fn message_expression_field_path_and_reason_shape_the_error() {
    let schema = spec_with(json!({
        "type": "object",
        "properties": {"min": {"type": "integer"}, "max": {"type": "integer"}, "name": {"type": "string"}},
        "x-kubernetes-validations": [
            {
                "rule": "self.min <= self.max",
                "messageExpression": "'min ' + string(self.min) + ' exceeds max ' + string(self.max)",
                "fieldPath": ".max"
            },
            {"rule": "!has(self.name) || self.name != 'root'", "message": "root is reserved", "reason": "FieldValueForbidden"},
            {"rule": "has(self.name)", "message": "name is needed", "reason": "FieldValueRequired", "fieldPath": ".name"},
            {"rule": "self.min >= 0", "messageExpression": "42", "message": "min is negative"}
        ]
    }));
    let errors = errors_for(&schema, json!({"min": -5, "max": -9}));
    let shown: Vec<(String, &str, String)> =
        errors.iter().map(|e| (e.field.clone(), e.reason.as_cause_type(), e.message.clone())).collect();
    assert_eq!(
        shown,
        vec![
            (
                "spec.x.max".into(),
                "FieldValueInvalid",
                "Invalid value: \"object\": min -5 exceeds max -9".into()
            ),
            ("spec.x.name".into(), "FieldValueRequired", "Required value: name is needed".into()),
            ("spec.x".into(), "FieldValueInvalid", "Invalid value: \"object\": min is negative".into()),
        ],
        "a messageExpression that is not a string falls back to message"
    );
    let errors = errors_for(&schema, json!({"min": 1, "max": 2, "name": "root"}));
    assert_eq!(only_error(&errors), "spec.x: Forbidden: root is reserved");
    assert_eq!(errors[0].reason.as_cause_type(), "FieldValueForbidden");
}

#[test]
fn transition_rules_in_lists_correlate_only_by_list_map_keys() {
    let item = json!({
        "type": "object",
        "properties": {"name": {"type": "string"}, "size": {"type": "integer"}},
        "x-kubernetes-validations": [{"rule": "self.size >= oldSelf.size", "message": "size may not shrink"}]
    });
    let map_list = spec_with(json!({
        "type": "array", "items": item.clone(),
        "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]
    }));
    let old = json!({"spec": {"x": [{"name": "a", "size": 5}, {"name": "b", "size": 5}]}});
    let new = json!({"spec": {"x": [{"name": "b", "size": 4}, {"name": "a", "size": 6}, {"name": "c", "size": 1}]}});
    let errors = map_list.validate(&new, Some(&old));
    assert_eq!(only_error(&errors), "spec.x[0]: Invalid value: \"object\": size may not shrink");
    let atomic_list = json!({"type": "array", "items": item});
    let SchemaError::Invalid { path, message } = StructuralSchema::compile(&atomic_list).unwrap_err();
    assert_eq!(path, "openAPIV3Schema.items.x-kubernetes-validations[0]");
    assert_eq!(message, "oldSelf cannot be used on the uncorrelatable portion of the schema");
    let plain_rule_in_atomic_list = spec_with(json!({
        "type": "array",
        "items": {"type": "integer", "x-kubernetes-validations": [{"rule": "self > 0"}]}
    }));
    assert_eq!(
        only_error(&errors_for(&plain_rule_in_atomic_list, json!([1, 0]))),
        "spec.x[1]: Invalid value: \"integer\": failed rule: self > 0",
        "rules without oldSelf still run on list items"
    );
}

#[test]
fn root_rules_see_only_name_and_generate_name_of_metadata() {
    let schema = compile(json!({
        "type": "object",
        "properties": {"metadata": {"type": "object"}, "spec": {"type": "object"}},
        "x-kubernetes-validations": [
            {"rule": "self.metadata.name.startsWith('pg-')", "message": "name must start with pg-"},
            {"rule": "!has(self.metadata.labels)", "message": "labels are hidden from rules"}
        ]
    }));
    let obj = json!({"metadata": {"name": "pg-1", "labels": {"a": "b"}}, "spec": {}});
    assert_eq!(schema.validate(&obj, None), vec![]);
    let bad = json!({"metadata": {"name": "db-1"}, "spec": {}});
    assert_eq!(
        only_error(&schema.validate(&bad, None)),
        "<nil>: Invalid value: \"object\": name must start with pg-"
    );
}

#[test]
fn transition_rules_correlate_map_values_by_key() {
    let schema = spec_with(json!({
        "type": "object",
        "additionalProperties": {
            "type": "integer",
            "x-kubernetes-validations": [{"rule": "self >= oldSelf", "message": "may not decrease"}]
        }
    }));
    let old = json!({"spec": {"x": {"a": 2, "b": 2}}});
    let new = json!({"spec": {"x": {"a": 1, "b": 3, "c": 0}}});
    assert_eq!(
        only_error(&schema.validate(&new, Some(&old))),
        "spec.x.a: Invalid value: \"integer\": may not decrease"
    );
}

#[test]
fn list_type_set_and_map_reject_duplicates() {
    let set =
        spec_with(json!({"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "set"}));
    let errors = errors_for(&set, json!(["a", "b", "a", "a"]));
    assert_eq!(only_error(&errors), "spec.x[2]: Duplicate value: \"a\"", "only the second appearance");
    let short_set = spec_with(json!({
        "type": "array", "items": {"type": "string", "maxLength": 1}, "x-kubernetes-list-type": "set"
    }));
    let fields: Vec<String> = errors_for(&short_set, json!(["a", "bb", "a"]))
        .into_iter()
        .map(|e| format!("{} {}", e.field, e.reason.as_cause_type()))
        .collect();
    assert_eq!(
        fields[..2],
        ["spec.x[1] FieldValueTooLong".to_owned(), "spec.x[2] FieldValueDuplicate".to_owned()],
        "uniqueness is checked after the schema"
    );
    assert_eq!(errors[0].reason.as_cause_type(), "FieldValueDuplicate");
    let map = spec_with(json!({
        "type": "array",
        "items": {"type": "object", "properties": {"name": {"type": "string"}}},
        "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]
    }));
    assert_eq!(
        only_error(&errors_for(&map, json!([{"name": "a"}, {"name": "a"}]))),
        "spec.x[1]: Duplicate value: map[string]interface {}{\"name\":\"a\"}"
    );
}

#[test]
fn rules_that_do_not_compile_are_schema_errors() {
    let bad_rule = json!({"type": "object", "properties": {"spec": {
        "type": "string", "x-kubernetes-validations": [{"rule": "self.split('.'"}]
    }}});
    let SchemaError::Invalid { path, message } = StructuralSchema::compile(&bad_rule).unwrap_err();
    assert_eq!(path, "openAPIV3Schema.properties.spec.x-kubernetes-validations[0]");
    assert!(message.starts_with("rule compilation failed"), "{message}");

    let bad_field_path = json!({"type": "object", "properties": {"a": {"type": "string"}},
        "x-kubernetes-validations": [{"rule": "true", "fieldPath": ".b"}]});
    assert!(StructuralSchema::compile(&bad_field_path).is_err());
    let bad_reason =
        json!({"type": "object", "x-kubernetes-validations": [{"rule": "true", "reason": "Nope"}]});
    assert!(StructuralSchema::compile(&bad_reason).is_err());
    let bad_pattern = json!({"type": "string", "pattern": "(unclosed"});
    assert!(StructuralSchema::compile(&bad_pattern).is_err());
    let bad_type = json!({"type": "strnig"});
    assert!(StructuralSchema::compile(&bad_type).is_err());
}

#[test]
fn the_compiled_schema_can_be_shared_across_tasks() {
    fn assert_send_sync<T: Send + Sync + 'static>() {}
    assert_send_sync::<StructuralSchema>();
}

#[test]
fn a_call_with_no_matching_overload_is_reported_as_the_apiserver_does() {
    let schema = spec_with(json!({
        "x-kubernetes-int-or-string": true,
        "x-kubernetes-validations": [{"rule": "self.startsWith('a')"}]
    }));
    assert!(errors_for(&schema, json!("abc")).is_empty());
    let message = only_error(&errors_for(&schema, json!(5)));
    assert!(message.starts_with("spec.x: Invalid value: \"\": 'no such overload"), "{message}");
    assert!(
        message.ends_with(
            "': call arguments did not match a supported operator, function or macro signature for rule: \
             self.startsWith('a')"
        ),
        "{message}"
    );
}

#[test]
fn the_usual_cel_features_work_on_custom_resources() {
    let schema = spec_with(json!({
        "type": "object",
        "properties": {
            "members": {
                "type": "array",
                "items": {"type": "object", "properties": {"name": {"type": "string"}, "weight": {"type": "number"}}}
            },
            "mode": {"type": "string"}
        },
        "x-kubernetes-validations": [
            {"rule": "self.members.all(m, m.name.matches('^[a-z]+$'))", "message": "lower-case names"},
            {"rule": "size(self.members) <= 2", "message": "at most two members"},
            {"rule": "!has(self.mode) || self.mode in ['a', 'b']", "message": "mode a or b"},
            {"rule": "self.members.exists(m, m.weight > 0.5)", "message": "one heavy member"},
            {"rule": "self.members.map(m, m.name).join(',').lowerAscii().size() < 20", "message": "short names"}
        ]
    }));
    let good = json!({"members": [{"name": "a", "weight": 1}, {"name": "b", "weight": 0}], "mode": "a"});
    assert_eq!(errors_for(&schema, good), vec![], "an integer in a number field is a double to CEL");
    let bad = json!({"members": [{"name": "A", "weight": 0}, {"name": "b", "weight": 0}, {"name": "c", "weight": 0}], "mode": "z"});
    let messages: Vec<String> = errors_for(&schema, bad).into_iter().map(|e| e.message).collect();
    assert_eq!(
        messages,
        vec![
            "Invalid value: \"object\": lower-case names",
            "Invalid value: \"object\": at most two members",
            "Invalid value: \"object\": mode a or b",
            "Invalid value: \"object\": one heavy member",
        ]
    );
}

#[test]
fn date_time_fields_are_timestamps_to_cel() {
    let schema = spec_with(json!({
        "type": "object",
        "properties": {
            "start": {"type": "string", "format": "date-time"},
            "end": {"type": "string", "format": "date-time"}
        },
        "x-kubernetes-validations": [
            {"rule": "self.end > self.start", "message": "end must follow start"},
            {"rule": "self.start > timestamp('2020-01-01T00:00:00Z')", "message": "too early"},
            {"rule": "timestamp(self.end) == self.end", "message": "timestamp() of a timestamp is itself"}
        ]
    }));
    // As text, end sorts before start; as instants (23:00Z and 00:30Z) it follows it.
    let good = json!({"start": "2026-01-01T01:00:00+02:00", "end": "2026-01-01T00:30:00Z"});
    assert_eq!(errors_for(&schema, good), vec![], "compared as instants, not as text");
    let bad = json!({"start": "2019-01-01T10:00:00Z", "end": "2019-01-01T09:00:00Z"});
    let messages: Vec<String> = errors_for(&schema, bad).into_iter().map(|e| e.message).collect();
    assert_eq!(
        messages,
        vec!["Invalid value: \"object\": end must follow start", "Invalid value: \"object\": too early"]
    );
}

#[test]
fn defaults_must_validate_and_survive_pruning() {
    let below_minimum = json!({"type": "object", "properties": {
        "replicas": {"type": "integer", "minimum": 1, "default": 0}
    }});
    let SchemaError::Invalid { path, message } = StructuralSchema::compile(&below_minimum).unwrap_err();
    assert_eq!(path, "openAPIV3Schema.properties.replicas");
    assert_eq!(
        message,
        "default is invalid: default: Invalid value: 0: default in body should be greater than or equal to 1"
    );
    let unknown_field = json!({"type": "object", "properties": {
        "backup": {"type": "object", "properties": {"schedule": {"type": "string"}}, "default": {"cron": "x"}}
    }});
    let SchemaError::Invalid { message, .. } = StructuralSchema::compile(&unknown_field).unwrap_err();
    assert_eq!(message, "default has fields the schema prunes: default.cron");
    let completed_by_nested_defaults = json!({"type": "object", "properties": {"spec": {
        "type": "object", "default": {}, "required": ["version"],
        "properties": {"version": {"type": "string", "default": "16"}}
    }}});
    assert!(StructuralSchema::compile(&completed_by_nested_defaults).is_ok());
}

/// A CRD whose one rule calls `isQuantity`, as the operator's CRD did before 1.28 support.
fn crd_with_rule(rule: &str) -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com", "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {
                "type": "object",
                "properties": {"spec": {"type": "object", "properties": {"size": {
                    "type": "string", "maxLength": 32,
                    "x-kubernetes-validations": [{"rule": rule}],
                }}}},
            }}}],
        },
    })
}

#[tokio::test]
async fn new_cel_expressions_get_the_quantity_library_from_1_29_and_string_format_from_1_30() {
    use dbcluster_operator::sim::{KubernetesVersion, SimConfig, SimServer};
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::api::{Api, PostParams};

    let quantity = "!isQuantity(oldSelf) || quantity(self).compareTo(quantity(oldSelf)) >= 0";
    let format = "'%s'.format([self]) == self";
    for (minor, rule, accepted) in [
        (28, quantity, false),
        (29, quantity, true),
        (29, format, false),
        (30, format, true),
        (28, "self.split('.')[0] != '' && ['a'].join('') == 'a'", true),
    ] {
        let config = SimConfig { kubernetes_version: KubernetesVersion::new(minor), ..SimConfig::default() };
        let sim = SimServer::start_with(config).await.unwrap();
        let crds: Api<CustomResourceDefinition> = Api::all(sim.client());
        let crd: CustomResourceDefinition = serde_json::from_value(crd_with_rule(rule)).unwrap();
        let result = crds.create(&PostParams::default(), &crd).await;
        match (result, accepted) {
            (Ok(_), true) => {}
            (Err(kube::Error::Api(status)), false) => {
                assert_eq!(status.code, 422, "1.{minor} {rule}");
                assert!(status.message.contains("undeclared reference to"), "{}", status.message);
                assert!(status.message.contains("x-kubernetes-validations[0].rule"), "{}", status.message);
            }
            (result, _) => panic!("1.{minor} {rule}: {result:?}"),
        }
    }
}
