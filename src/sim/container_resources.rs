//! What the apiserver's core validation refuses in the `resources` of a pod spec's containers,
//! worded as it words it (Kubernetes 1.28 `ValidateResourceRequirements`), wherever the
//! apiserver validates a pod spec: a Pod, and the pod template of a Deployment, ReplicaSet,
//! DaemonSet, ReplicationController, PodTemplate, Job or CronJob. Not a StatefulSet's: 1.28's
//! `ValidatePodTemplateSpecForStatefulSet` checks only the template's labels and annotations
//! (its pod spec check is a TODO there), so such a StatefulSet is stored, and its pods are
//! refused when its controller creates them (a `FailedCreate` Warning on the StatefulSet).
//!
//! - A quantity that does not parse fails decoding (400), before validation.
//! - A name without a domain must be a standard container resource (`cpu`, `memory`,
//!   `ephemeral-storage`, `hugepages-<size>`); a domain-qualified one is taken as an extended
//!   resource, which must be a whole number.
//! - No quantity is negative.
//! - A request is at most its limit; for a resource that cannot be overcommitted (huge pages,
//!   extended resources) it equals its limit, and a limit must be set.
//! - Huge pages need a cpu or memory request or limit beside them, in whole pages.

use serde_json::Value;

use crate::sim::api_error::{ApiError, Cause};
use crate::sim::resources::Kind;
use crate::sim::schema::quantity::Quantity;

/// Where the pod spec of an object of this kind is, if it carries one.
fn pod_spec_path(kind: &Kind) -> Option<&'static [&'static str]> {
    match (kind.group.as_str(), kind.plural.as_str()) {
        ("", "pods") => Some(&["spec"]),
        ("", "podtemplates") => Some(&["template", "spec"]),
        ("apps", "deployments" | "replicasets" | "daemonsets")
        | ("", "replicationcontrollers")
        | ("batch", "jobs") => Some(&["spec", "template", "spec"]),
        ("batch", "cronjobs") => Some(&["spec", "jobTemplate", "spec", "template", "spec"]),
        _ => None,
    }
}

fn cause(reason: &str, field: String, message: String) -> Cause {
    Cause { reason: reason.into(), message, field }
}

fn invalid(field: String, value: &str, detail: &str) -> Cause {
    cause("FieldValueInvalid", field, format!("Invalid value: {}: {detail}", Value::from(value)))
}

/// A resource whose request may be below its limit: a native one (no domain, or a
/// `kubernetes.io/` one) that is not huge pages.
fn overcommit_allowed(name: &str) -> bool {
    let native = !name.contains('/') || name.contains("kubernetes.io/");
    native && !name.starts_with("hugepages-")
}

fn is_standard_container_resource(name: &str) -> bool {
    matches!(name, "cpu" | "memory" | "ephemeral-storage") || name.starts_with("hugepages-")
}

/// The refusals of one name and quantity at `field` (`…resources.limits[cpu]`).
fn amount_causes(name: &str, text: &str, quantity: &Quantity, field: &str) -> Vec<Cause> {
    let mut causes = Vec::new();
    if !name.contains('/') && !is_standard_container_resource(name) {
        causes.push(invalid(field.to_owned(), name, "must be a standard resource for containers"));
    }
    if quantity.sign() < 0 {
        causes.push(invalid(field.to_owned(), text, "must be greater than or equal to 0"));
    }
    if !overcommit_allowed(name) && !name.starts_with("hugepages-") && quantity.as_integer().is_none() {
        causes.push(invalid(field.to_owned(), text, "must be an integer"));
    }
    if let Some(page) = name.strip_prefix("hugepages-").and_then(|size| size.parse::<Quantity>().ok())
        && !quantity.is_multiple_of(&page)
    {
        causes.push(invalid(
            field.to_owned(),
            text,
            &format!("{text} is not positive integer multiple of {name}"),
        ));
    }
    causes
}

/// A quantity of an object of `kind`, as the apiserver decodes it: a text that does not parse
/// fails decoding (400), before any validation.
pub(crate) fn decode_quantity(kind: &Kind, text: &str) -> Result<Quantity, ApiError> {
    text.parse::<Quantity>().map_err(|error| {
        ApiError::bad_request(format!(
            "{k} in version \"{v}\" cannot be handled as a {k}: {error}",
            k = kind.kind,
            v = kind.version
        ))
    })
}

/// The quantities of a `requests` or `limits` map, decoded ([`decode_quantity`]).
fn amounts(kind: &Kind, map: &Value) -> Result<Vec<(String, String, Quantity)>, ApiError> {
    let mut amounts = Vec::new();
    for (name, value) in map.as_object().into_iter().flatten() {
        let text = value.as_str().unwrap_or_default().to_owned();
        let quantity = decode_quantity(kind, &text)?;
        amounts.push((name.clone(), text, quantity));
    }
    Ok(amounts)
}

/// The refusals of one container's `resources` at `path` (`spec.containers[0].resources`).
fn requirement_causes(kind: &Kind, resources: &Value, path: &str) -> Result<Vec<Cause>, ApiError> {
    let limits = amounts(kind, &resources["limits"])?;
    let requests = amounts(kind, &resources["requests"])?;
    let mut causes = Vec::new();
    for (name, text, quantity) in &limits {
        causes.extend(amount_causes(name, text, quantity, &format!("{path}.limits[{name}]")));
    }
    let requests_path = format!("{path}.requests");
    for (name, text, quantity) in &requests {
        causes.extend(amount_causes(name, text, quantity, &format!("{requests_path}[{name}]")));
        match limits.iter().find(|(limit_name, ..)| limit_name == name) {
            Some((_, limit_text, limit)) if !overcommit_allowed(name) && quantity != limit => {
                let detail = format!("must be equal to {name} limit of {limit_text}");
                causes.push(invalid(requests_path.clone(), text, &detail));
            }
            Some((_, limit_text, limit)) if quantity > limit => {
                let detail = format!("must be less than or equal to {name} limit of {limit_text}");
                causes.push(invalid(requests_path.clone(), text, &detail));
            }
            Some(_) => {}
            None if !overcommit_allowed(name) => causes.push(cause(
                "FieldValueRequired",
                format!("{path}.limits"),
                "Required value: Limit must be set for non overcommitable resources".into(),
            )),
            None => {}
        }
    }
    let names = || limits.iter().chain(&requests).map(|(name, ..)| name.as_str());
    if names().any(|n| n.starts_with("hugepages-")) && !names().any(|n| matches!(n, "cpu" | "memory")) {
        causes.push(cause(
            "FieldValueForbidden",
            path.to_owned(),
            "Forbidden: HugePages require cpu or memory".into(),
        ));
    }
    Ok(causes)
}

/// The refusals of the containers' resources of an object being written (none for a kind
/// without a pod spec); `Err` for a quantity that does not decode.
pub fn causes(kind: &Kind, obj: &Value) -> Result<Vec<Cause>, ApiError> {
    let Some(path) = pod_spec_path(kind) else { return Ok(Vec::new()) };
    let spec = path.iter().fold(obj, |value, field| &value[*field]);
    let mut causes = Vec::new();
    for list in ["initContainers", "containers"] {
        for (i, container) in spec[list].as_array().into_iter().flatten().enumerate() {
            let at = format!("{}.{list}[{i}].resources", path.join("."));
            causes.extend(requirement_causes(kind, &container["resources"], &at)?);
        }
    }
    Ok(causes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn kind(group: &str, version: &str, plural: &str) -> std::sync::Arc<Kind> {
        crate::sim::resources::Registry::with_built_ins()
            .get(group, version, plural)
            .expect("a built-in kind")
    }

    fn deployment(resources: Value) -> Value {
        json!({"spec": {"template": {"spec": {"containers": [{"name": "postgres", "resources": resources}]}}}})
    }

    fn refusals(resources: Value) -> Vec<(String, String)> {
        causes(&kind("apps", "v1", "deployments"), &deployment(resources))
            .expect("quantities that decode")
            .into_iter()
            .map(|c| (c.field, c.message))
            .collect()
    }

    #[test]
    fn a_request_may_not_exceed_its_limit() {
        let path = "spec.template.spec.containers[0].resources";
        assert_eq!(
            refusals(
                json!({"requests": {"cpu": "2", "memory": "256Mi"}, "limits": {"cpu": "1500m", "memory": "1Gi"}})
            ),
            [(
                format!("{path}.requests"),
                "Invalid value: \"2\": must be less than or equal to cpu limit of 1500m".into()
            )]
        );
        assert!(refusals(json!({"requests": {"cpu": "1500m"}, "limits": {"cpu": "1.5"}})).is_empty());
        assert!(refusals(json!({"requests": {"cpu": "8"}})).is_empty(), "no limit, no bound");
        assert!(refusals(json!({"limits": {"memory": "1Gi"}})).is_empty());
    }

    #[test]
    fn names_must_be_container_resources_and_amounts_not_negative() {
        let refused = refusals(json!({"requests": {"gpu": "1", "memory": "-1Mi"}}));
        let path = "spec.template.spec.containers[0].resources.requests";
        assert_eq!(
            refused,
            [
                (
                    format!("{path}[gpu]"),
                    "Invalid value: \"gpu\": must be a standard resource for containers".into()
                ),
                (
                    format!("{path}[memory]"),
                    "Invalid value: \"-1Mi\": must be greater than or equal to 0".into()
                ),
            ]
        );
    }

    #[test]
    fn what_cannot_be_overcommitted_needs_an_equal_limit() {
        let refused = refusals(json!({"requests": {"example.com/fpga": "1", "cpu": "1"}}));
        assert_eq!(refused.len(), 1, "{refused:?}");
        assert!(refused[0].1.contains("Limit must be set for non overcommitable resources"));
        let refused = refusals(json!({
            "requests": {"hugepages-2Mi": "64Mi", "memory": "1Gi"},
            "limits": {"hugepages-2Mi": "128Mi", "memory": "1Gi"},
        }));
        assert_eq!(refused.len(), 1, "{refused:?}");
        assert!(refused[0].1.contains("must be equal to hugepages-2Mi limit of 128Mi"), "{refused:?}");
        assert!(
            refusals(json!({"limits": {"hugepages-2Mi": "0", "memory": "1Gi"}})).is_empty(),
            "none is whole"
        );
        let refused = refusals(json!({"limits": {"hugepages-2Mi": "3Mi", "memory": "1Gi"}}));
        assert_eq!(refused.len(), 1, "{refused:?}");
        assert!(
            refused[0].1.ends_with("3Mi is not positive integer multiple of hugepages-2Mi"),
            "{refused:?}"
        );
        let refused = refusals(json!({"limits": {"hugepages-2Mi": "64Mi"}}));
        assert_eq!(
            refused,
            [(
                "spec.template.spec.containers[0].resources".into(),
                "Forbidden: HugePages require cpu or memory".into()
            )]
        );
    }

    #[test]
    fn every_pod_spec_is_checked_and_an_unparsable_quantity_fails_decoding() {
        let over =
            json!({"name": "c", "resources": {"requests": {"memory": "2Gi"}, "limits": {"memory": "1Gi"}}});
        let pod = json!({"spec": {"initContainers": [over.clone()], "containers": []}});
        let refused = causes(&kind("", "v1", "pods"), &pod).unwrap();
        assert_eq!(refused[0].field, "spec.initContainers[0].resources.requests");
        let cron = json!({"spec": {"jobTemplate": {"spec": {"template": {"spec": {"containers": [over]}}}}}});
        let refused = causes(&kind("batch", "v1", "cronjobs"), &cron).unwrap();
        assert_eq!(refused[0].field, "spec.jobTemplate.spec.template.spec.containers[0].resources.requests");
        let error =
            causes(&kind("apps", "v1", "deployments"), &deployment(json!({"requests": {"cpu": "lots"}})))
                .unwrap_err();
        assert_eq!(error.code, 400);
        assert!(
            error.message.contains("cannot be handled as a Deployment: quantities must match"),
            "{}",
            error.message
        );
        let template = deployment(json!({"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}));
        assert!(
            causes(&kind("apps", "v1", "statefulsets"), &template).unwrap().is_empty(),
            "1.28 stores a StatefulSet whatever its pod spec; its pods are refused"
        );
        assert!(
            causes(&kind("", "v1", "services"), &deployment(json!({"requests": {"cpu": "lots"}})))
                .unwrap()
                .is_empty()
        );
    }
}
