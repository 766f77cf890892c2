//! Update rules of built-in kinds whose spec is partly immutable, worded as the apiserver words
//! them: a StatefulSet may change only some spec fields (not its volumeClaimTemplates), and a
//! PersistentVolumeClaim only its storage request, which may grow but not shrink (and its
//! `volumeName`, set once by the binder).

use serde_json::{Map, Value};

use crate::sim::api_error::{ApiError, Cause};
use crate::sim::resources::Kind;
use crate::sim::schema::quantity::Quantity;

/// StatefulSet spec fields an update may change.
const STATEFULSET_MUTABLE: &[&str] = &[
    "replicas",
    "ordinals",
    "template",
    "updateStrategy",
    "revisionHistoryLimit",
    "persistentVolumeClaimRetentionPolicy",
    "minReadySeconds",
];

fn without(spec: &Value, mutable: &[&str]) -> Map<String, Value> {
    let mut m = spec.as_object().cloned().unwrap_or_default();
    m.retain(|k, _| !mutable.contains(&k.as_str()));
    m
}

fn forbidden(kind: &Kind, name: &str, field: &str, message: &str) -> ApiError {
    ApiError::invalid(
        kind,
        name,
        vec![Cause {
            reason: "FieldValueForbidden".into(),
            message: format!("Forbidden: {message}"),
            field: field.into(),
        }],
    )
}

fn storage(obj: &Value) -> Option<String> {
    obj["spec"]["resources"]["requests"]["storage"].as_str().map(String::from)
}

/// Refuses an update that changes what cannot change.
pub fn check_update(kind: &Kind, old: &Value, new: &Value) -> Result<(), ApiError> {
    let name = new["metadata"]["name"].as_str().unwrap_or_default();
    match (kind.group.as_str(), kind.plural.as_str()) {
        ("apps", "statefulsets")
            if without(&old["spec"], STATEFULSET_MUTABLE) != without(&new["spec"], STATEFULSET_MUTABLE) =>
        {
            Err(forbidden(
                kind,
                name,
                "spec",
                "updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', 'revisionHistoryLimit', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden",
            ))
        }
        ("", "persistentvolumeclaims") => {
            // The binder sets `volumeName` once, as the real apiserver allows.
            let unbound = old["spec"]["volumeName"].as_str().is_none_or(str::is_empty);
            let strip = |v: &Value| {
                let mut spec = v["spec"].clone();
                if unbound && let Some(m) = spec.as_object_mut() {
                    m.remove("volumeName");
                }
                if let Some(r) = spec["resources"]["requests"].as_object_mut() {
                    r.remove("storage");
                }
                if let Some(m) = spec.as_object_mut() {
                    m.remove("volumeAttributesClassName");
                }
                spec
            };
            if strip(old) != strip(new) {
                return Err(forbidden(
                    kind,
                    name,
                    "spec",
                    "spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims",
                ));
            }
            let parse = |s: Option<String>| s.and_then(|q| q.parse::<Quantity>().ok());
            match (parse(storage(old)), parse(storage(new))) {
                (Some(before), Some(after)) if after.compare(&before).is_lt() => Err(forbidden(
                    kind,
                    name,
                    "spec.resources.requests.storage",
                    "field can not be less than previous value",
                )),
                _ => Ok(()),
            }
        }
        _ => Ok(()),
    }
}
