//! Unit tests of `ops`.

use serde_json::json;

use super::*;
use crate::sim::resources::Registry;

fn pods() -> Kind {
    Registry::with_built_ins().get("", "v1", "pods").map(|k| (*k).clone()).unwrap()
}

fn pod_with_an_unknown_field() -> Value {
    json!({"metadata": {"name": "p"}, "spec": {"containers": [], "bogus": 1}})
}

#[test]
fn a_clients_write_loses_its_unknown_fields() {
    let mut pod = pod_with_an_unknown_field();
    check_known_fields(&pods(), &mut pod, &WriteContext::update("client")).unwrap();
    assert!(pod["spec"].get("bogus").is_none(), "{pod}");
}

#[cfg(debug_assertions)]
#[test]
#[should_panic(expected = "a simulated controller wrote")]
fn a_controllers_write_with_an_unknown_field_fails_debug_builds() {
    let mut pod = pod_with_an_unknown_field();
    let _ = check_known_fields(&pods(), &mut pod, &WriteContext::controller("kube-controller-manager"));
}
