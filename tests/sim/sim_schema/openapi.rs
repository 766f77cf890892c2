//! OpenAPI validation keywords: the errors and messages as the apiserver writes them.

use super::*;

// ---- OpenAPI keywords ------------------------------------------------------------------------------

#[test]
fn minimum_error_reads_as_the_apiserver_writes_it() {
    let schema = compile(database_cluster_schema());
    let errors =
        schema.validate(&cluster(json!({"version": "15.4", "replicas": 0, "storageSize": "1Gi"})), None);
    assert_eq!(
        errors,
        vec![FieldError {
            field: "spec.replicas".into(),
            reason: FieldErrorReason::Invalid,
            message: "Invalid value: 0: spec.replicas in body should be greater than or equal to 1".into(),
        }]
    );
    assert_eq!(errors[0].reason.as_cause_type(), "FieldValueInvalid");
}

#[test]
fn maximum_and_exclusive_bounds() {
    let schema = spec_with(json!({"type": "number", "minimum": 0, "exclusiveMinimum": true, "maximum": 1.5}));
    assert!(errors_for(&schema, json!(1.5)).is_empty());
    assert_eq!(
        only_error(&errors_for(&schema, json!(2))),
        "spec.x: Invalid value: 2: spec.x in body should be less than or equal to 1.5"
    );
    assert_eq!(
        only_error(&errors_for(&schema, json!(0))),
        "spec.x: Invalid value: 0: spec.x in body should be greater than 0"
    );
    let exclusive_max = spec_with(json!({"type": "integer", "maximum": 10, "exclusiveMaximum": true}));
    assert_eq!(
        only_error(&errors_for(&exclusive_max, json!(10))),
        "spec.x: Invalid value: 10: spec.x in body should be less than 10"
    );
    assert!(errors_for(&exclusive_max, json!(9)).is_empty());
}

#[test]
fn integer_and_number_types_are_told_apart() {
    let integer = spec_with(json!({"type": "integer"}));
    let errors = errors_for(&integer, json!(1.5));
    assert_eq!(errors[0].reason, FieldErrorReason::TypeInvalid);
    assert_eq!(errors[0].message, "Invalid value: 1.5: spec.x in body must be of type integer: \"number\"");
    assert!(errors_for(&integer, json!(2.0)).is_empty(), "an integral double is an integer");
    assert_eq!(
        only_error(&errors_for(&integer, json!("3"))),
        "spec.x: Invalid value: \"3\": spec.x in body must be of type integer: \"string\""
    );
    let number = spec_with(json!({"type": "number"}));
    assert!(errors_for(&number, json!(3)).is_empty(), "an integer is a number");
    assert_eq!(errors_for(&number, json!(true))[0].reason.as_cause_type(), "FieldValueTypeInvalid");
}

#[test]
fn other_types_are_checked() {
    for (ty, good, bad) in [
        ("string", json!("a"), json!(1)),
        ("boolean", json!(true), json!("true")),
        ("array", json!([]), json!({})),
        ("object", json!({}), json!([])),
    ] {
        let schema = spec_with(json!({"type": ty}));
        assert!(errors_for(&schema, good).is_empty(), "{ty}");
        assert_eq!(errors_for(&schema, bad)[0].reason, FieldErrorReason::TypeInvalid, "{ty}");
    }
}

#[test]
fn int_or_string_accepts_both_and_nothing_else() {
    let schema = spec_with(json!({
        "x-kubernetes-int-or-string": true,
        "anyOf": [{"type": "integer"}, {"type": "string"}]
    }));
    assert!(errors_for(&schema, json!(80)).is_empty());
    assert!(errors_for(&schema, json!("http")).is_empty());
    let errors = errors_for(&schema, json!(true));
    assert_eq!(errors[0].reason, FieldErrorReason::TypeInvalid, "{errors:#?}");
    assert_eq!(errors[0].field, "spec.x");
}

#[test]
fn composite_keywords_report_as_the_apiserver_does() {
    let schema = spec_with(json!({"type": "string", "anyOf": [{"pattern": "^a"}, {"maxLength": 3}]}));
    assert!(errors_for(&schema, json!("apple")).is_empty());
    assert!(errors_for(&schema, json!("ch")).is_empty());
    let shown: Vec<String> =
        errors_for(&schema, json!("cherry")).iter().map(|e| format!("{}: {}", e.field, e.message)).collect();
    assert_eq!(
        shown,
        vec![
            "<nil>: Invalid value: \"\": \"spec.x\" must validate at least one schema (anyOf)".to_owned(),
            "spec.x: Invalid value: \"cherry\": spec.x in body should match '^a'".to_owned(),
        ],
        "the composite error has no field; the closest branch's errors follow"
    );
    let one_of = spec_with(json!({"type": "string", "oneOf": [{"pattern": "^a"}, {"pattern": "e$"}]}));
    assert!(errors_for(&one_of, json!("ab")).is_empty());
    assert_eq!(
        errors_for(&one_of, json!("apple"))[0].message,
        "Invalid value: \"\": \"spec.x\" must validate one and only one schema (oneOf). Found 2 valid alternatives"
    );
    let all_of = spec_with(json!({"type": "string", "allOf": [{"minLength": 2}, {"pattern": "^a"}]}));
    let errors = errors_for(&all_of, json!("b"));
    assert_eq!(errors.len(), 3, "{errors:#?}");
    assert_eq!(
        errors[2].message,
        "Invalid value: \"\": \"spec.x\" must validate all the schemas (allOf). None validated"
    );
    let one_field_of = spec_with(json!({
        "type": "object",
        "properties": {"a": {"type": "string"}, "b": {"type": "string"}},
        "oneOf": [{"required": ["a"]}, {"required": ["b"]}]
    }));
    assert!(errors_for(&one_field_of, json!({"a": "x"})).is_empty());
    assert!(!errors_for(&one_field_of, json!({"a": "x", "b": "y"})).is_empty());
    let neither = errors_for(&one_field_of, json!({}));
    assert_eq!(neither[1].field, "spec.x.a", "{neither:#?}");
    assert_eq!(neither[1].reason, FieldErrorReason::Required);
}

#[test]
fn required_fields_are_reported_by_their_own_path() {
    let schema = compile(database_cluster_schema());
    let errors = schema.validate(&cluster(json!({"replicas": 3})), None);
    assert_eq!(errors[0].field, "spec.version");
    assert_eq!(errors[0].reason, FieldErrorReason::Required);
    assert_eq!(errors[0].message, "Required value");
    assert_eq!(errors[0].reason.as_cause_type(), "FieldValueRequired");
}

#[test]
fn pattern_enum_and_lengths() {
    let pattern = spec_with(json!({"type": "string", "pattern": "^[a-z]+$"}));
    assert_eq!(
        only_error(&errors_for(&pattern, json!("Abc"))),
        "spec.x: Invalid value: \"Abc\": spec.x in body should match '^[a-z]+$'"
    );
    let enumeration = spec_with(json!({"type": "string", "enum": ["Retain", "Delete"]}));
    let errors = errors_for(&enumeration, json!("Keep"));
    assert_eq!(errors[0].reason.as_cause_type(), "FieldValueNotSupported");
    assert_eq!(
        only_error(&errors),
        "spec.x: Unsupported value: \"Keep\": supported values: \"Retain\", \"Delete\""
    );
    let lengths = spec_with(json!({"type": "string", "minLength": 2, "maxLength": 4}));
    assert!(errors_for(&lengths, json!("abcd")).is_empty());
    assert_eq!(
        only_error(&errors_for(&lengths, json!("a"))),
        "spec.x: Invalid value: \"a\": spec.x in body should be at least 2 chars long"
    );
    let too_long = errors_for(&lengths, json!("abcde"));
    assert_eq!(too_long[0].reason.as_cause_type(), "FieldValueTooLong");
    assert_eq!(only_error(&too_long), "spec.x: Too long: may not be more than 4 bytes");
    assert!(errors_for(&lengths, json!("äöüß")).is_empty(), "lengths count characters");
}

#[test]
fn item_and_property_counts() {
    let items =
        spec_with(json!({"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 2}));
    assert_eq!(
        only_error(&errors_for(&items, json!([]))),
        "spec.x: Invalid value: 0: spec.x in body should have at least 1 items"
    );
    let too_many = errors_for(&items, json!(["a", "b", "c"]));
    assert_eq!(too_many[0].reason.as_cause_type(), "FieldValueTooMany");
    assert_eq!(only_error(&too_many), "spec.x: Too many: 3: must have at most 2 items");
    let props = spec_with(json!({
        "type": "object", "additionalProperties": {"type": "string"}, "minProperties": 1, "maxProperties": 1
    }));
    assert_eq!(
        only_error(&errors_for(&props, json!({}))),
        "spec.x: Invalid value: 0: spec.x in body should have at least 1 properties"
    );
    assert_eq!(errors_for(&props, json!({"a": "1", "b": "2"}))[0].reason, FieldErrorReason::TooMany);
}

#[test]
fn nested_paths_name_list_items_and_map_values() {
    let schema = spec_with(json!({
        "type": "array",
        "items": {
            "type": "object",
            "required": ["name"],
            "properties": {
                "name": {"type": "string"},
                "labels": {"type": "object", "additionalProperties": {"type": "string", "maxLength": 3}}
            }
        }
    }));
    let errors = errors_for(&schema, json!([{"name": "a"}, {"labels": {"app": "long"}}]));
    let shown: Vec<String> = errors.iter().map(|e| format!("{}: {}", e.field, e.message)).collect();
    // As kube-openapi orders them: a property's own errors, then the object's missing required fields.
    assert_eq!(
        shown,
        vec![
            "spec.x[1].labels.app: Too long: may not be more than 3 bytes".to_owned(),
            "spec.x[1].name: Required value".to_owned(),
            "<nil>: Invalid value: \"null\": some validation rules were not checked because the object was invalid; \
             correct the existing errors to complete validation"
                .to_owned(),
        ]
    );
}

#[test]
fn formats_date_time_and_quantity_pattern() {
    let date_time = spec_with(json!({"type": "string", "format": "date-time"}));
    assert!(errors_for(&date_time, json!("2026-11-29T16:00:00Z")).is_empty());
    let errors = errors_for(&date_time, json!("tomorrow"));
    assert_eq!(errors[0].reason, FieldErrorReason::TypeInvalid);
    assert_eq!(
        only_error(&errors),
        "spec.x: Invalid value: \"tomorrow\": spec.x in body must be of type date-time: \"tomorrow\""
    );
    let schema = compile(database_cluster_schema());
    for good in [json!("10Gi"), json!("500m"), json!("1e3"), json!(1024)] {
        let errors = schema.validate(&cluster(json!({"version": "15.4", "storageSize": good})), None);
        assert!(errors.is_empty(), "{good}: {errors:#?}");
    }
    let errors = schema.validate(&cluster(json!({"version": "15.4", "storageSize": "10GB"})), None);
    assert_eq!(errors[0].field, "spec.storageSize");
    assert!(
        errors[0].message.starts_with("Invalid value: \"10GB\": spec.storageSize in body should match '^")
    );
}

#[test]
fn nullable_allows_null_and_non_nullable_refuses_it() {
    let nullable = spec_with(json!({"type": "string", "nullable": true, "minLength": 3}));
    assert!(errors_for(&nullable, Value::Null).is_empty());
    let plain = spec_with(json!({"type": "string"}));
    let errors = errors_for(&plain, Value::Null);
    assert_eq!(errors[0].reason, FieldErrorReason::TypeInvalid);
    assert_eq!(
        only_error(&errors),
        "spec.x: Invalid value: \"null\": spec.x in body must be of type string: \"null\""
    );
}
