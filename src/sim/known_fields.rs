//! Unknown fields of built-in kinds, found as the apiserver finds them: by decoding into the
//! typed structs (here k8s-openapi's). They are dropped, or refused with
//! `fieldValidation=Strict`; a value of the wrong type is refused as undecodable. The object is
//! otherwise kept exactly as sent.

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{
    ConfigMap, Event, Namespace, PersistentVolume, PersistentVolumeClaim, Pod, Secret, Service,
    ServiceAccount,
};
use k8s_openapi::api::events::v1::Event as EventsEvent;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

use crate::sim::api_error::ApiError;
use crate::sim::resources::Kind;

fn round_trip<T: DeserializeOwned + Serialize>(obj: &Value) -> Result<Value, String> {
    let typed: T = serde_json::from_value(obj.clone()).map_err(|e| e.to_string())?;
    serde_json::to_value(typed).map_err(|e| e.to_string())
}

/// The object as the typed struct of its kind sees it, if the kind has one here.
fn decoded(kind: &Kind, obj: &Value) -> Option<Result<Value, String>> {
    Some(match (kind.group.as_str(), kind.plural.as_str()) {
        ("", "namespaces") => round_trip::<Namespace>(obj),
        ("", "pods") => round_trip::<Pod>(obj),
        ("", "services") => round_trip::<Service>(obj),
        ("", "secrets") => round_trip::<Secret>(obj),
        ("", "configmaps") => round_trip::<ConfigMap>(obj),
        ("", "persistentvolumeclaims") => round_trip::<PersistentVolumeClaim>(obj),
        ("", "persistentvolumes") => round_trip::<PersistentVolume>(obj),
        ("storage.k8s.io", "storageclasses") => round_trip::<StorageClass>(obj),
        ("", "events") => round_trip::<Event>(obj),
        ("", "serviceaccounts") => round_trip::<ServiceAccount>(obj),
        ("apps", "statefulsets") => round_trip::<StatefulSet>(obj),
        ("apps", "deployments") => round_trip::<Deployment>(obj),
        ("rbac.authorization.k8s.io", "roles") => round_trip::<Role>(obj),
        ("rbac.authorization.k8s.io", "clusterroles") => round_trip::<ClusterRole>(obj),
        ("rbac.authorization.k8s.io", "rolebindings") => round_trip::<RoleBinding>(obj),
        ("rbac.authorization.k8s.io", "clusterrolebindings") => round_trip::<ClusterRoleBinding>(obj),
        ("batch", "jobs") => round_trip::<Job>(obj),
        ("batch", "cronjobs") => round_trip::<CronJob>(obj),
        ("policy", "poddisruptionbudgets") => round_trip::<PodDisruptionBudget>(obj),
        ("coordination.k8s.io", "leases") => round_trip::<Lease>(obj),
        ("", "nodes") => round_trip::<k8s_openapi::api::core::v1::Node>(obj),
        ("events.k8s.io", "events") => round_trip::<EventsEvent>(obj),
        ("apiextensions.k8s.io", "customresourcedefinitions") => round_trip::<CustomResourceDefinition>(obj),
        _ => return None,
    })
}

/// Paths present (and not null) in `sent` but absent from `known`.
fn unknown_paths(sent: &Value, known: &Value, prefix: &str, out: &mut Vec<String>) {
    match (sent, known) {
        (Value::Object(s), Value::Object(k)) => {
            for (key, v) in s {
                let path = if prefix.is_empty() { key.clone() } else { format!("{prefix}.{key}") };
                match k.get(key) {
                    _ if v.is_null() => {}
                    None => out.push(path),
                    Some(kv) => unknown_paths(v, kv, &path, out),
                }
            }
        }
        (Value::Array(s), Value::Array(k)) if s.len() == k.len() => {
            for (i, (v, kv)) in s.iter().zip(k).enumerate() {
                unknown_paths(v, kv, &format!("{prefix}[{i}]"), out);
            }
        }
        _ => {}
    }
}

fn remove_path(obj: &mut Value, path: &str) {
    let mut segments: Vec<(String, Option<usize>)> = Vec::new();
    for part in path.split('.') {
        match part.split_once('[') {
            Some((name, rest)) => {
                segments.push((name.to_string(), None));
                for idx in rest.split('[') {
                    if let Ok(i) = idx.trim_end_matches(']').parse() {
                        segments.push((String::new(), Some(i)));
                    }
                }
            }
            None => segments.push((part.to_string(), None)),
        }
    }
    let Some((last, prefix)) = segments.split_last() else { return };
    let mut cur = obj;
    for (name, idx) in prefix {
        cur = match idx {
            Some(i) => match cur.get_mut(*i) {
                Some(v) => v,
                None => return,
            },
            None => match cur.get_mut(name.as_str()) {
                Some(v) => v,
                None => return,
            },
        };
    }
    if let Some(m) = cur.as_object_mut() {
        m.remove(&last.0);
    }
}

/// Drops the unknown fields of a built-in object, or refuses them under `strict`; refuses an
/// object that does not decode (a value of the wrong type).
pub fn check(kind: &Kind, obj: &mut Value, strict: bool) -> Result<(), ApiError> {
    let Some(known) = decoded(kind, obj) else { return Ok(()) };
    let known = known.map_err(|e| {
        ApiError::bad_request(format!(
            "{k} in version \"{v}\" cannot be handled as a {k}: {e}",
            k = kind.kind,
            v = kind.version
        ))
    })?;
    let mut unknown = Vec::new();
    unknown_paths(obj, &known, "", &mut unknown);
    if unknown.is_empty() {
        return Ok(());
    }
    if strict {
        let fields: Vec<String> = unknown.iter().map(|f| format!("unknown field \"{f}\"")).collect();
        return Err(ApiError::bad_request(format!(
            "{k} in version \"{v}\" cannot be handled as a {k}: strict decoding error: {}",
            fields.join(", "),
            k = kind.kind,
            v = kind.version,
        )));
    }
    for path in &unknown {
        remove_path(obj, path);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::resources::Registry;
    use serde_json::json;

    fn kind(plural: &str, group: &str) -> Kind {
        Registry::with_built_ins().get(group, "v1", plural).map(|k| (*k).clone()).unwrap()
    }

    #[test]
    fn unknown_fields_are_dropped_or_refused_and_known_ones_kept_as_sent() {
        let cm = kind("configmaps", "");
        let mut obj = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "labels": {}}, "data": {"k": "v"}, "dta": {"x": "y"}});
        let err = check(&cm, &mut obj.clone(), true).unwrap_err();
        assert!(err.message.contains("unknown field \"dta\""), "{}", err.message);
        check(&cm, &mut obj, false).unwrap();
        assert_eq!(
            obj,
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "labels": {}}, "data": {"k": "v"}})
        );
    }

    #[test]
    fn nested_unknown_fields_in_lists_are_found() {
        let sts = kind("statefulsets", "apps");
        let mut obj = json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "a"},
            "spec": {"selector": {}, "template": {"spec": {"containers": [{"name": "c", "imagee": "x"}]}}}});
        let err = check(&sts, &mut obj.clone(), true).unwrap_err();
        assert!(err.message.contains("spec.template.spec.containers[0].imagee"), "{}", err.message);
        check(&sts, &mut obj, false).unwrap();
        assert_eq!(obj["spec"]["template"]["spec"]["containers"][0], json!({"name": "c"}));
    }

    #[test]
    fn values_of_the_wrong_type_do_not_decode() {
        let sts = kind("statefulsets", "apps");
        let mut obj = json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "a"}, "spec": {"replicas": "three", "selector": {}, "template": {}}});
        assert_eq!(check(&sts, &mut obj, false).unwrap_err().code, 400);
    }
}
