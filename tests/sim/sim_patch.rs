//! Patch types of the simulated API server through the `kube` client: strategic merge for
//! built-in kinds, and server-side apply as create-or-merge under a field manager.
#![cfg(feature = "sim")]

use dbcluster_operator::sim::SimServer;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

fn stateful_set() -> StatefulSet {
    serde_json::from_value(json!({
        "metadata": {"name": "db"},
        "spec": {
            "replicas": 1,
            "serviceName": "db",
            "selector": {"matchLabels": {"app": "db"}},
            "template": {
                "metadata": {"labels": {"app": "db"}},
                "spec": {"containers": [
                    {"name": "postgres", "image": "postgres:15.4", "env": [{"name": "A", "value": "1"}]},
                    {"name": "exporter", "image": "exporter:1"}
                ]}
            }
        }
    }))
    .unwrap()
}

#[tokio::test]
async fn strategic_merge_merges_containers_by_name() {
    let sim = SimServer::start().await.unwrap();
    let sts: Api<StatefulSet> = Api::default_namespaced(sim.client());
    sts.create(&PostParams::default(), &stateful_set()).await.unwrap();
    let patch = json!({"spec": {"template": {"spec": {"containers": [
        {"name": "postgres", "image": "postgres:15.6", "env": [{"name": "B", "value": "2"}]}
    ]}}}});
    let patched = sts.patch("db", &PatchParams::default(), &Patch::Strategic(patch)).await.unwrap();
    let containers = patched.spec.unwrap().template.spec.unwrap().containers;
    assert_eq!(containers.len(), 2, "the exporter is kept");
    assert_eq!(containers[0].image.as_deref(), Some("postgres:15.6"));
    let env: Vec<&str> = containers[0].env.as_ref().unwrap().iter().map(|e| e.name.as_str()).collect();
    assert_eq!(env, ["A", "B"]);
    assert_eq!(patched.metadata.generation, Some(2));
}

#[tokio::test]
async fn server_side_apply_creates_then_merges_and_releases_fields() {
    let sim = SimServer::start().await.unwrap();
    let cms: Api<ConfigMap> = Api::default_namespaced(sim.client());
    let pp = PatchParams::apply("dbcluster-operator");
    let first = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"}, "data": {"a": "1", "b": "2"}});
    let created = cms.patch("cfg", &pp, &Patch::Apply(&first)).await.unwrap();
    assert_eq!(created.data.as_ref().unwrap().len(), 2);
    let entry = &created.metadata.managed_fields.as_ref().unwrap()[0];
    assert_eq!(
        (entry.manager.as_deref(), entry.operation.as_deref()),
        (Some("dbcluster-operator"), Some("Apply"))
    );

    // Another manager's field survives; the field this manager stops applying goes.
    cms.patch("cfg", &PatchParams::default(), &Patch::Merge(json!({"data": {"c": "3"}}))).await.unwrap();
    let second =
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"}, "data": {"a": "9"}});
    let applied = cms.patch("cfg", &pp, &Patch::Apply(&second)).await.unwrap();
    let data = applied.data.unwrap();
    assert_eq!(data.get("a").map(String::as_str), Some("9"));
    assert_eq!(data.get("c").map(String::as_str), Some("3"));
    assert!(!data.contains_key("b"));
}

#[tokio::test]
async fn apply_conflicts_with_other_managers_unless_forced() {
    let sim = SimServer::start().await.unwrap();
    let cms: Api<ConfigMap> = Api::default_namespaced(sim.client());
    let cm = |v: &str| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"}, "data": {"a": v}});
    cms.patch("cfg", &PatchParams::apply("first"), &Patch::Apply(cm("1"))).await.unwrap();
    match cms.patch("cfg", &PatchParams::apply("second"), &Patch::Apply(cm("2"))).await {
        Err(kube::Error::Api(s)) => {
            assert_eq!((s.code, s.reason.as_str()), (409, "Conflict"));
            assert!(s.message.contains("conflict with \"first\""), "{}", s.message);
            assert_eq!(s.details.unwrap().causes[0].field, ".data.a");
        }
        other => panic!("expected 409, got {other:?}"),
    }
    // Applying the same value is no conflict; forcing takes the field.
    cms.patch("cfg", &PatchParams::apply("second"), &Patch::Apply(cm("1"))).await.unwrap();
    let forced =
        cms.patch("cfg", &PatchParams::apply("second").force(), &Patch::Apply(cm("2"))).await.unwrap();
    assert_eq!(forced.data.unwrap()["a"], "2");
}

#[tokio::test]
async fn apply_without_a_field_manager_is_refused() {
    let sim = SimServer::start().await.unwrap();
    let request = http::Request::patch("/api/v1/namespaces/default/configmaps/x")
        .header("content-type", "application/apply-patch+yaml")
        .body(b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n".to_vec())
        .unwrap();
    match sim.client().request::<ConfigMap>(request).await {
        Err(kube::Error::Api(s)) => assert_eq!(s.code, 400),
        other => panic!("expected 400, got {other:?}"),
    }
}

#[tokio::test]
async fn the_scale_subresource_reads_and_writes_spec_replicas() {
    let sim = SimServer::start().await.unwrap();
    let sts: Api<StatefulSet> = Api::default_namespaced(sim.client());
    sts.create(&PostParams::default(), &stateful_set()).await.unwrap();
    let scale = sts.get_scale("db").await.unwrap();
    assert_eq!(scale.spec.unwrap().replicas, Some(1));
    assert_eq!(scale.status.unwrap().selector.as_deref(), Some("app=db"));
    let scaled = sts
        .patch_scale("db", &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": 4}})))
        .await
        .unwrap();
    assert_eq!(scaled.spec.unwrap().replicas, Some(4));
    assert_eq!(sts.get("db").await.unwrap().spec.unwrap().replicas, Some(4));
    let resources = sim.client().list_api_group_resources("apps/v1").await.unwrap();
    assert!(resources.resources.iter().any(|r| r.name == "statefulsets/scale" && r.kind == "Scale"));
}
