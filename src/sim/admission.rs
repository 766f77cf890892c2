//! What the apiserver checks before storing the objects whose rules are data: custom resources
//! against their CRD version's schema (prune, strict unknown-field rejection, defaults,
//! validation with CEL rules), and CRDs themselves (names, compilable schemas).

use std::collections::HashSet;

use serde_json::Value;

use crate::sim::api_error::{ApiError, Cause};
use crate::sim::resources::{Kind, crd_kinds};
use crate::sim::schema::SchemaError;
use crate::sim::version::KubernetesVersion;

fn name_of(obj: &Value) -> &str {
    obj["metadata"]["name"].as_str().unwrap_or_default()
}

/// Prunes, defaults and validates a custom resource in the apiserver's order; `old` is the
/// stored object on update (for transition rules). With `strict`, unknown fields are refused
/// (400, as the apiserver's strict decoding) instead of silently pruned. The metadata's field
/// errors (`metadata_causes`) come first in the one 422 that lists every error.
pub fn admit_custom(
    kind: &Kind,
    obj: &mut Value,
    old: Option<&Value>,
    strict: bool,
    metadata_causes: Vec<Cause>,
) -> Result<(), ApiError> {
    let refuse = |causes: Vec<Cause>| Err(ApiError::invalid(kind, name_of(obj), causes));
    let Some(schema) = &kind.schema else {
        return if metadata_causes.is_empty() { Ok(()) } else { refuse(metadata_causes) };
    };
    let unknown = schema.prune(obj);
    if strict && !unknown.is_empty() {
        let fields: Vec<String> = unknown.iter().map(|f| format!("unknown field \"{f}\"")).collect();
        return Err(ApiError::bad_request(format!(
            "{kind} in version \"{version}\" cannot be handled as a {kind}: strict decoding error: {}",
            fields.join(", "),
            kind = kind.kind,
            version = kind.version,
        )));
    }
    schema.apply_defaults(obj);
    let mut causes = metadata_causes;
    causes.extend(schema.validate(obj, old).into_iter().map(|e| Cause {
        reason: e.reason.as_cause_type().into(),
        message: e.message,
        field: e.field,
    }));
    if causes.is_empty() { Ok(()) } else { Err(ApiError::invalid(kind, name_of(obj), causes)) }
}

/// The kinds a CRD will serve, or 422 if its names or schemas are unacceptable: on a server of
/// `version`, a CEL expression that `old` (the stored CRD, on update) did not hold may use only
/// the functions that version offers to new expressions.
pub fn crd_serving(
    kind: &Kind,
    crd: &Value,
    old: Option<&Value>,
    version: KubernetesVersion,
) -> Result<Vec<Kind>, ApiError> {
    let mut causes = name_causes(crd);
    let mut stored = HashSet::new();
    if let Some(old) = old {
        collect_expressions(old, &mut stored);
    }
    let is_stored = |source: &str| stored.contains(source);
    match crd_kinds(crd) {
        Ok(kinds) => {
            for (i, served) in kinds.iter().enumerate() {
                let Some(schema) = &served.schema else { continue };
                if let Err(SchemaError::Invalid { path, message }) =
                    schema.check_new_expressions(version, &is_stored)
                {
                    causes.push(Cause {
                        reason: "FieldValueInvalid".into(),
                        message: format!("Invalid value: {message}"),
                        field: format!("spec.versions[{i}].schema.{path}"),
                    });
                }
            }
            if causes.is_empty() {
                return Ok(kinds);
            }
        }
        Err(errors) => causes.extend(errors.into_iter().map(|(field, message)| Cause {
            reason: "FieldValueInvalid".into(),
            message: format!("Invalid value: {message}"),
            field,
        })),
    }
    Err(ApiError::invalid(kind, name_of(crd), causes))
}

/// Every CEL `rule` and `messageExpression` source (trimmed) anywhere in `value`.
fn collect_expressions(value: &Value, into: &mut HashSet<String>) {
    match value {
        Value::Object(map) => {
            if let Some(Value::Array(rules)) = map.get("x-kubernetes-validations") {
                for rule in rules {
                    for key in ["rule", "messageExpression"] {
                        if let Some(source) = rule[key].as_str() {
                            into.insert(source.trim().to_owned());
                        }
                    }
                }
            }
            map.values().for_each(|v| collect_expressions(v, into));
        }
        Value::Array(items) => items.iter().for_each(|v| collect_expressions(v, into)),
        _ => {}
    }
}

fn name_causes(crd: &Value) -> Vec<Cause> {
    let spec = &crd["spec"];
    let (group, plural) = (spec["group"].as_str().unwrap_or_default(), spec["names"]["plural"].as_str());
    let mut causes = Vec::new();
    let mut cause = |field: &str, reason: &str, message: String| {
        causes.push(Cause { reason: reason.into(), message, field: field.into() })
    };
    if group.is_empty() {
        cause("spec.group", "FieldValueRequired", "Required value".into());
    }
    match plural {
        None | Some("") => cause("spec.names.plural", "FieldValueRequired", "Required value".into()),
        Some(p) if name_of(crd) != format!("{p}.{group}") => cause(
            "metadata.name",
            "FieldValueInvalid",
            format!("Invalid value: {:?}: must be spec.names.plural+\".\"+spec.group", name_of(crd)),
        ),
        Some(_) => {}
    }
    if spec["names"]["kind"].as_str().unwrap_or_default().is_empty() {
        cause("spec.names.kind", "FieldValueRequired", "Required value".into());
    }
    let versions = spec["versions"].as_array().map(Vec::as_slice).unwrap_or_default();
    if versions.iter().filter(|v| v["storage"] == Value::Bool(true)).count() != 1 {
        cause(
            "spec.versions",
            "FieldValueInvalid",
            "Invalid value: must have exactly one version marked as storage version".into(),
        );
    }
    causes
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::resources::Registry;
    use serde_json::json;

    fn crd(rule: &str) -> Value {
        json!({
            "metadata": {"name": "widgets.example.com"},
            "spec": {
                "group": "example.com",
                "names": {"plural": "widgets", "kind": "Widget"},
                "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {"size": {"type": "string", "x-kubernetes-validations": [{"rule": rule}]}},
                }}}],
            },
        })
    }

    #[test]
    fn a_stored_expression_is_not_judged_by_the_new_expression_environment() {
        let registry = Registry::with_built_ins();
        let kind = registry.get("apiextensions.k8s.io", "v1", "customresourcedefinitions").unwrap();
        let v1_28 = KubernetesVersion::new(28);
        let stored = crd(" isQuantity(self) ");
        assert!(crd_serving(&kind, &stored, None, v1_28).is_err(), "new on 1.28");
        assert!(crd_serving(&kind, &stored, Some(&crd("isQuantity(self)")), v1_28).is_ok(), "kept on update");
        let error = crd_serving(&kind, &crd("quantity(self).sign() > 0"), Some(&stored), v1_28).unwrap_err();
        assert!(error.message.contains("undeclared reference to 'quantity'"), "{}", error.message);
    }
}
