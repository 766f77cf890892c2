//! What the apiserver refuses in a PersistentVolumeClaim's spec, worded as it words it
//! (Kubernetes 1.28 `ValidatePersistentVolumeClaimSpec`): no access mode, no storage request or
//! one that is not above zero (one that is not a quantity fails decoding first, 400), and a
//! `storageClassName` that is not a DNS-1123 subdomain (`""` is allowed: it asks for no class). A StatefulSet's claim templates are not checked when the
//! StatefulSet is written (1.28 does not); the claims its controller makes from them are.

use serde_json::Value;

use crate::sim::api_error::{ApiError, Cause};
use crate::sim::container_resources::decode_quantity;
use crate::sim::names::NameRule;
use crate::sim::resources::Kind;

fn cause(reason: &str, field: &str, message: String) -> Cause {
    Cause { reason: reason.into(), message, field: field.into() }
}

/// The refusals of a claim being created or updated (none for other kinds); `Err` for a storage
/// request that does not decode.
pub fn causes(kind: &Kind, obj: &Value) -> Result<Vec<Cause>, ApiError> {
    if !kind.group.is_empty() || kind.plural != "persistentvolumeclaims" {
        return Ok(Vec::new());
    }
    let spec = &obj["spec"];
    let mut causes = Vec::new();
    if spec["accessModes"].as_array().is_none_or(Vec::is_empty) {
        causes.push(cause(
            "FieldValueRequired",
            "spec.accessModes",
            "Required value: at least 1 access mode is required".into(),
        ));
    }
    let storage = &spec["resources"]["requests"]["storage"];
    match storage.as_str().map(|text| decode_quantity(kind, text)).transpose()? {
        None => causes.push(cause("FieldValueRequired", "spec.resources[storage]", "Required value".into())),
        Some(amount) if amount.sign() <= 0 => causes.push(cause(
            "FieldValueInvalid",
            "spec.resources[storage]",
            format!("Invalid value: {storage}: must be greater than zero"),
        )),
        Some(_) => {}
    }
    if let Some(class) = spec["storageClassName"].as_str().filter(|class| !class.is_empty()) {
        for problem in NameRule::Subdomain.problems(class) {
            causes.push(cause(
                "FieldValueInvalid",
                "spec.storageClassName",
                format!("Invalid value: {}: {problem}", Value::from(class)),
            ));
        }
    }
    Ok(causes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn refusals(spec: Value) -> Vec<String> {
        let kind = crate::sim::resources::Registry::with_built_ins()
            .get("", "v1", "persistentvolumeclaims")
            .expect("claims are built in");
        causes(&kind, &json!({"spec": spec}))
            .expect("quantities that decode")
            .into_iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect()
    }

    #[test]
    fn a_claim_needs_an_access_mode_a_positive_size_and_a_class_name_that_is_a_subdomain() {
        let good = json!({"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}});
        assert!(refusals(good.clone()).is_empty());
        let mut no_class = good.clone();
        no_class["storageClassName"] = json!("");
        assert!(refusals(no_class).is_empty(), "\"\" asks for no class");
        let mut bad_class = good;
        bad_class["storageClassName"] = json!("Fast_SSD");
        let refused = refusals(bad_class);
        assert_eq!(refused.len(), 1);
        assert!(
            refused[0].starts_with(
                "spec.storageClassName: Invalid value: \"Fast_SSD\": a lowercase RFC 1123 subdomain"
            ),
            "{refused:?}"
        );
        assert_eq!(
            refusals(json!({"resources": {"requests": {"storage": "0"}}})),
            [
                "spec.accessModes: Required value: at least 1 access mode is required",
                "spec.resources[storage]: Invalid value: \"0\": must be greater than zero"
            ]
        );
        assert_eq!(
            refusals(json!({"accessModes": ["ReadWriteOnce"]})),
            ["spec.resources[storage]: Required value"]
        );
        let kind = crate::sim::resources::Registry::with_built_ins()
            .get("", "v1", "persistentvolumeclaims")
            .expect("claims are built in");
        let lots = json!({"spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "lots"}}}});
        assert_eq!(
            causes(&kind, &lots).unwrap_err().code,
            400,
            "a request that is not a quantity does not decode"
        );
    }
}
