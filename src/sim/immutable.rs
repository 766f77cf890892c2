//! Update rules of built-in kinds whose spec is partly immutable, worded as the apiserver words
//! them: a StatefulSet may change only some spec fields (not its volumeClaimTemplates), and a
//! PersistentVolumeClaim only its storage request, once it is bound, which may grow but not
//! shrink (and its `volumeName`, set once by the binder); a Secret keeps its `type`, and a Secret
//! or ConfigMap marked `immutable` its data.

use serde_json::{Map, Value};

use crate::sim::api_error::{ApiError, Cause};
use crate::sim::resources::Kind;
use crate::sim::schema::quantity::Quantity;
use crate::sim::version::KubernetesVersion;

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

/// A Secret's `type` never changes, and a Secret or ConfigMap marked `immutable` keeps its data
/// and the mark (1.28 `ValidateSecretUpdate`, `ValidateConfigMapUpdate`).
fn config_data_causes(kind: &Kind, old: &Value, new: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    if kind.plural == "secrets" && old["type"] != new["type"] {
        causes.push(Cause {
            reason: "FieldValueInvalid".into(),
            message: format!("Invalid value: {}: field is immutable", new["type"]),
            field: "type".into(),
        });
    }
    if old["immutable"] == true {
        let frozen = |field: &str| Cause {
            reason: "FieldValueForbidden".into(),
            message: "Forbidden: field is immutable when `immutable` is set".into(),
            field: field.into(),
        };
        if new["immutable"] != true {
            causes.push(frozen("immutable"));
        }
        for field in ["data", "binaryData"] {
            if old[field] != new[field] && !(kind.plural == "secrets" && field == "binaryData") {
                causes.push(frozen(field));
            }
        }
    }
    causes
}

/// Refuses an update that changes what cannot change, on a server of `version` (from 1.34, with
/// VolumeAttributesClass on by default, a bound claim may also change its
/// `volumeAttributesClassName`).
pub fn check_update(
    kind: &Kind,
    old: &Value,
    new: &Value,
    version: KubernetesVersion,
) -> Result<(), ApiError> {
    let attributes_class = version >= KubernetesVersion::new(34);
    let name = new["metadata"]["name"].as_str().unwrap_or_default();
    match (kind.group.as_str(), kind.plural.as_str()) {
        ("", "secrets" | "configmaps") => {
            let causes = config_data_causes(kind, old, new);
            if causes.is_empty() { Ok(()) } else { Err(ApiError::invalid(kind, name, causes)) }
        }
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
            // The binder sets `volumeName` once, as the real apiserver allows; the storage
            // request may change only once the claim is bound.
            let unbound = old["spec"]["volumeName"].as_str().is_none_or(str::is_empty);
            let bound = old["status"]["phase"] == "Bound";
            let strip = |v: &Value| {
                let mut spec = v["spec"].clone();
                if unbound && let Some(m) = spec.as_object_mut() {
                    m.remove("volumeName");
                }
                if bound && let Some(r) = spec["resources"]["requests"].as_object_mut() {
                    r.remove("storage");
                }
                if bound
                    && attributes_class
                    && let Some(m) = spec.as_object_mut()
                {
                    m.remove("volumeAttributesClassName");
                }
                spec
            };
            if strip(old) != strip(new) {
                let message = if attributes_class {
                    "spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims"
                } else {
                    "spec is immutable after creation except resources.requests for bound claims"
                };
                return Err(forbidden(kind, name, "spec", message));
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn kind(plural: &str) -> std::sync::Arc<Kind> {
        crate::sim::resources::Registry::with_built_ins().get("", "v1", plural).expect("a built-in kind")
    }

    fn refused_fields(plural: &str, old: Value, new: Value) -> Vec<String> {
        let error = check_update(&kind(plural), &old, &new, KubernetesVersion::default()).err();
        let causes = error.and_then(|e| e.details).map(|d| d["causes"].clone()).unwrap_or_default();
        causes
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| c["field"].as_str().unwrap_or_default().to_owned())
            .collect()
    }

    #[test]
    fn a_secret_keeps_its_type_and_immutable_data_stays() {
        let secret =
            |type_: &str, data: &str| json!({"metadata": {"name": "s"}, "type": type_, "data": {"k": data}});
        assert!(refused_fields("secrets", secret("Opaque", "YQ=="), secret("Opaque", "Yg==")).is_empty());
        assert_eq!(
            refused_fields("secrets", secret("Opaque", "YQ=="), secret("kubernetes.io/basic-auth", "YQ==")),
            ["type"]
        );
        let frozen = |data: &str, immutable: bool| json!({"metadata": {"name": "c"}, "data": {"k": data}, "immutable": immutable});
        assert_eq!(refused_fields("configmaps", frozen("a", true), frozen("b", true)), ["data"]);
        assert_eq!(refused_fields("configmaps", frozen("a", true), frozen("a", false)), ["immutable"]);
        assert!(refused_fields("configmaps", frozen("a", false), frozen("b", true)).is_empty());
    }

    #[test]
    fn an_unbound_claims_request_does_not_change() {
        let claim = |storage: &str, phase: &str| json!({"metadata": {"name": "d"}, "spec": {"resources": {"requests": {"storage": storage}}}, "status": {"phase": phase}});
        let update = |old: Value, new: Value, minor: u32| {
            check_update(&kind("persistentvolumeclaims"), &old, &new, KubernetesVersion::new(minor))
        };
        assert!(update(claim("1Gi", "Bound"), claim("2Gi", "Bound"), 28).is_ok());
        let refused = update(claim("1Gi", "Pending"), claim("2Gi", "Pending"), 28).unwrap_err();
        assert!(
            refused.message.contains("immutable after creation except resources.requests for bound claims")
        );
        let refused = update(claim("1Gi", "Pending"), claim("2Gi", "Pending"), 34).unwrap_err();
        assert!(
            refused.message.contains("except resources.requests and volumeAttributesClassName for bound")
        );
    }
}
