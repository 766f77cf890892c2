//! Drift: whether a live child differs from what the operator would write, in a field the operator
//! owns ([`needs_update`]), and the fields of the live StatefulSet a write must keep because the
//! API server refuses to change them ([`keep_immutable_fields`]).
//!
//! The builders (`resources`) return exactly the fields the operator owns, so "covered" is the
//! whole rule: every field the desired object sets is in the live one with the same value; fields
//! it leaves out belong to others. Reconcile writes only when a child needs an update, so a pass
//! over an unchanged cluster makes no write (and triggers no watch event, so no further pass).

use k8s_openapi::api::apps::v1::StatefulSet;
use serde::Serialize;
use serde_json::Value;

/// Copies from the live StatefulSet the fields the API server refuses to change
/// (`volumeClaimTemplates`), so that an update never fails on them; a larger `storageSize` is not
/// applied to an existing StatefulSet.
pub fn keep_immutable_fields(desired: &mut StatefulSet, live: &StatefulSet) {
    if let (Some(desired), Some(live)) = (desired.spec.as_mut(), live.spec.as_ref()) {
        desired.volume_claim_templates.clone_from(&live.volume_claim_templates);
    }
}

/// Whether `live` differs from `desired` in a field `desired` sets, i.e. whether a write is due.
///
/// Fields `desired` leaves out belong to others (server defaults, users, other controllers) and
/// are ignored. Lists of objects match entry by entry in any order and may hold extra entries
/// (another manager's container or env var); lists of scalars (commands, access modes) and empty
/// lists must be equal. An empty value (`null`, `false`, `0`, `""`, `[]`, `{}`) in `desired` also
/// matches an absent field, since the API server drops such values; so a builder marks an owned
/// list that is now empty with `[]` rather than leaving it out.
pub fn needs_update<K: Serialize>(desired: &K, live: &K) -> bool {
    needs_update_json(serde_json::to_value(desired), serde_json::to_value(live))
}

/// [`needs_update`] on the two objects as JSON (a cached object may have been expanded back
/// first: see `cached.rs`).
pub fn needs_update_json(desired: serde_json::Result<Value>, live: serde_json::Result<Value>) -> bool {
    match (desired, live) {
        (Ok(desired), Ok(live)) => !covers(&live, &desired),
        // Invariant: k8s-openapi objects always serialise to JSON (and the cache's own text is
        // JSON it wrote); were they not to, writing is the safe answer.
        _ => true,
    }
}

/// Whether `live` holds every field of `desired` with the same value (see [`needs_update`]).
fn covers(live: &Value, desired: &Value) -> bool {
    match (live, desired) {
        (Value::Object(live), Value::Object(desired)) => {
            desired.iter().all(|(key, want)| match live.get(key) {
                Some(have) => covers(have, want),
                None => is_empty(want),
            })
        }
        (Value::Array(live), Value::Array(desired))
            if !desired.is_empty() && desired.iter().all(Value::is_object) =>
        {
            desired.iter().all(|want| live.iter().any(|have| covers(have, want)))
        }
        (Value::Null, want) => is_empty(want),
        (have, want) => have == want,
    }
}

fn is_empty(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.values().all(is_empty),
    }
}

#[cfg(test)]
mod tests {

    use k8s_openapi::api::core::v1::Secret;
    use serde_json::json;

    use super::*;
    use crate::databasecluster::fixtures::{PASSWORD, owner, seed, statefulset, statefulset_for};
    use crate::databasecluster::specs::credentials::{Login, build_login_secret};

    /// The desired StatefulSet as a server would return it: with identity, defaults, other
    /// managers' fields and status added.
    fn as_stored(sts: &StatefulSet) -> Value {
        let mut live = serde_json::to_value(sts).unwrap();
        live["metadata"]["uid"] = json!("sts-uid");
        live["metadata"]["resourceVersion"] = json!("42");
        live["metadata"]["generation"] = json!(1);
        live["metadata"]["annotations"] = json!({"team.example.com/owner": "payments"});
        live["metadata"]["labels"]["team"] = json!("payments");
        live["spec"]["podManagementPolicy"] = json!("OrderedReady");
        live["spec"]["revisionHistoryLimit"] = json!(10);
        live["spec"]["updateStrategy"] = json!({"type": "OnDelete"});
        let pod = &mut live["spec"]["template"]["spec"];
        pod["restartPolicy"] = json!("Always");
        pod["dnsPolicy"] = json!("ClusterFirst");
        let container = &mut pod["containers"][0];
        container["imagePullPolicy"] = json!("IfNotPresent");
        container["terminationMessagePath"] = json!("/dev/termination-log");
        container["readinessProbe"]["successThreshold"] = json!(1);
        container["env"].as_array_mut().unwrap().push(json!({"name": "TZ", "value": "UTC"}));
        pod["containers"].as_array_mut().unwrap().push(json!({"name": "exporter", "image": "exporter:1"}));
        live["spec"]["volumeClaimTemplates"][0]["spec"]["volumeMode"] = json!("Filesystem");
        live["spec"]["volumeClaimTemplates"][0]["status"] = json!({"phase": "Pending"});
        live["status"] = json!({"replicas": 3, "readyReplicas": 3});
        live
    }

    fn stored(value: Value) -> StatefulSet {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn nothing_needs_writing_when_only_others_fields_differ() {
        let desired = statefulset();
        assert!(!needs_update(&desired, &desired));
        assert!(!needs_update(&desired, &stored(as_stored(&desired))));
    }

    #[test]
    fn drift_in_an_owned_field_needs_a_write() {
        let desired = statefulset();
        let drifted = |edit: &dyn Fn(&mut Value)| {
            let mut live = as_stored(&desired);
            edit(&mut live);
            needs_update(&desired, &stored(live))
        };
        assert!(drifted(&|live| live["spec"]["replicas"] = json!(5)), "replicas");
        assert!(drifted(
            &|live| live["spec"]["template"]["spec"]["containers"][0]["image"] = json!("postgres:15.5")
        ));
        assert!(drifted(&|live| live["metadata"]["labels"]["app.kubernetes.io/instance"] = json!("other")));
        assert!(drifted(&|live| {
            live["metadata"]["labels"].as_object_mut().unwrap().remove("app.kubernetes.io/component");
        }));
        assert!(drifted(&|live| {
            live["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGet"]["path"] =
                json!("/healthz")
        }));
        assert!(drifted(&|live| {
            live["spec"]["template"]["spec"]["containers"][0]["env"] =
                json!([{"name": "PGDATA", "value": "/x"}])
        }));
        assert!(drifted(&|live| {
            live["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["memory"] = json!("1Gi")
        }));
        assert!(drifted(&|live| live["metadata"]["ownerReferences"] = json!([])));
    }

    #[test]
    fn an_empty_args_list_matches_the_servers_absent_field() {
        let desired = statefulset();
        let mut without_args = as_stored(&desired);
        without_args["spec"]["template"]["spec"]["containers"][0].as_object_mut().unwrap().remove("args");
        assert!(!needs_update(&desired, &stored(without_args)), "the server drops an empty args list");
        let mut old_args = as_stored(&desired);
        old_args["spec"]["template"]["spec"]["containers"][0]["args"] = json!(["-c", "work_mem=8MB"]);
        assert!(needs_update(&desired, &stored(old_args)), "an older operator's -c arguments must go");
    }

    #[test]
    fn scalar_lists_must_match_in_order() {
        let desired = json!({"command": ["a", "b"]});
        assert!(covers(&json!({"command": ["a", "b"]}), &desired));
        assert!(!covers(&json!({"command": ["b", "a"]}), &desired));
        assert!(!covers(&json!({"command": ["a", "b", "c"]}), &desired));
    }

    #[test]
    fn empty_desired_values_match_absent_fields() {
        assert!(covers(&json!({}), &json!({"a": null, "b": [], "c": {}, "d": "", "e": false, "f": 0})));
        assert!(!covers(&json!({}), &json!({"a": true})));
        assert!(!covers(&json!({"a": {}}), &json!({"a": {"b": 1}})));
    }

    #[test]
    fn secrets_compare_equal_when_the_password_is_reused() {
        let desired = build_login_secret(&owner(), Login::App, PASSWORD);
        let mut live = serde_json::to_value(&desired).unwrap();
        live["metadata"]["annotations"] = json!({"reflector/enabled": "true"});
        let live: Secret = serde_json::from_value(live).unwrap();
        assert!(!needs_update(&desired, &live));
        let regenerated = build_login_secret(&owner(), Login::App, "another");
        assert!(needs_update(&regenerated, &live));
    }

    #[test]
    fn an_existing_statefulset_keeps_its_volume_claim_templates() {
        let live = stored(as_stored(&statefulset()));
        let mut larger = seed();
        larger.spec.storage_size = "2Gi".into();
        let mut desired = statefulset_for(&larger);
        assert!(needs_update(&desired, &live), "the claim template differs");
        keep_immutable_fields(&mut desired, &live);
        assert_eq!(
            desired.spec.as_ref().unwrap().volume_claim_templates,
            live.spec.as_ref().unwrap().volume_claim_templates
        );
        assert!(!needs_update(&desired, &live));
    }
}
