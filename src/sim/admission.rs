//! What the apiserver checks before storing the objects whose rules are data: custom resources
//! against their CRD version's schema (prune, strict unknown-field rejection, defaults,
//! validation with CEL rules), and CRDs themselves (names, compilable schemas).

use serde_json::Value;

use crate::sim::api_error::{ApiError, Cause};
use crate::sim::resources::{Kind, crd_kinds};

fn name_of(obj: &Value) -> &str {
    obj["metadata"]["name"].as_str().unwrap_or_default()
}

/// Prunes, defaults and validates a custom resource in the apiserver's order; `old` is the
/// stored object on update (for transition rules). With `strict`, unknown fields are refused
/// (400, as the apiserver's strict decoding) instead of silently pruned.
pub fn admit_custom(kind: &Kind, obj: &mut Value, old: Option<&Value>, strict: bool) -> Result<(), ApiError> {
    let Some(schema) = &kind.schema else { return Ok(()) };
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
    let errors = schema.validate(obj, old);
    if errors.is_empty() {
        return Ok(());
    }
    let causes = errors
        .into_iter()
        .map(|e| Cause { reason: e.reason.as_cause_type().into(), message: e.message, field: e.field })
        .collect();
    Err(ApiError::invalid(kind, name_of(obj), causes))
}

/// The kinds a CRD will serve, or 422 if its names or schemas are unacceptable.
pub fn crd_serving(kind: &Kind, crd: &Value) -> Result<Vec<Kind>, ApiError> {
    let mut causes = name_causes(crd);
    match crd_kinds(crd) {
        Ok(kinds) if causes.is_empty() => return Ok(kinds),
        Ok(_) => {}
        Err(errors) => causes.extend(errors.into_iter().map(|(field, message)| Cause {
            reason: "FieldValueInvalid".into(),
            message: format!("Invalid value: {message}"),
            field,
        })),
    }
    Err(ApiError::invalid(kind, name_of(crd), causes))
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
