//! Custom resources handled as the apiserver handles them, through the `kube` client: pruning of
//! unknown fields (and `fieldValidation=Strict`), defaulting, OpenAPI validation and CEL rules
//! including transition rules, each refusal a 422 whose causes name the field.
#![cfg(feature = "sim")]

use crate::common;

use dbcluster_operator::sim::{KubernetesVersion, SimConfig, SimServer};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams, ValidationDirective};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

fn crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "databaseclusters.databases.example.dev"},
        "spec": {
            "group": "databases.example.dev",
            "scope": "Namespaced",
            "names": {"plural": "databaseclusters", "singular": "databasecluster", "kind": "DatabaseCluster", "shortNames": ["dbc"]},
            "versions": [{
                "name": "v1alpha1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {
                        "spec": {
                            "type": "object",
                            "required": ["replicas", "version"],
                            "properties": {
                                "replicas": {"type": "integer", "minimum": 1, "maximum": 10},
                                "version": {
                                    "type": "string",
                                    "x-kubernetes-validations": [{
                                        "rule": "self.split('.')[0] == oldSelf.split('.')[0]",
                                        "message": "changing the major version is not supported: create a new cluster and migrate the data"
                                    }]
                                },
                                "storageSize": {
                                    "type": "string",
                                    "default": "10Gi",
                                    "x-kubernetes-validations": [{
                                        "rule": "quantity(string(self)).compareTo(quantity(string(oldSelf))) >= 0",
                                        "message": "storageSize may not shrink"
                                    }]
                                },
                                "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
                            }
                        },
                        "status": {
                            "type": "object",
                            "properties": {"phase": {"type": "string", "enum": ["Creating", "Running"]}}
                        }
                    }
                }}
            }]
        }
    })
}

/// A server new enough (1.29) for the CRD's quantity rule in a new expression.
async fn setup() -> (SimServer, Api<DynamicObject>) {
    let config = SimConfig { kubernetes_version: KubernetesVersion::new(29), ..SimConfig::default() };
    let sim = SimServer::start_with(config).await.unwrap();
    let crds: Api<DynamicObject> = common::crd_objects(sim.client());
    crds.create(&PostParams::default(), &serde_json::from_value(crd()).unwrap()).await.unwrap();
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("databases.example.dev", "v1alpha1", "DatabaseCluster"),
        "databaseclusters",
    );
    let api = Api::default_namespaced_with(sim.client(), &ar);
    (sim, api)
}

fn cluster(spec: Value) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "databases.example.dev/v1alpha1", "kind": "DatabaseCluster",
        "metadata": {"name": "pg"}, "spec": spec,
    }))
    .unwrap()
}

/// The 422's causes as `(field, reason)`, and its message.
fn invalid<T: std::fmt::Debug>(r: Result<T, kube::Error>) -> (Vec<(String, String)>, String) {
    match r {
        Err(kube::Error::Api(s)) if s.code == 422 => {
            assert_eq!(s.reason, "Invalid");
            let causes = s.details.unwrap().causes.into_iter().map(|c| (c.field, c.reason)).collect();
            (causes, s.message)
        }
        other => panic!("expected 422 Invalid, got {other:?}"),
    }
}

#[tokio::test]
async fn unknown_fields_are_pruned_except_where_preserved_and_defaults_are_applied() {
    let (_sim, api) = setup().await;
    let created = api
        .create(
            &PostParams::default(),
            &cluster(json!({"replicas": 3, "version": "15.4", "bogus": true, "extra": {"anything": 1}})),
        )
        .await
        .unwrap();
    assert!(created.data["spec"].get("bogus").is_none());
    assert_eq!(created.data["spec"]["extra"]["anything"], 1);
    assert_eq!(created.data["spec"]["storageSize"], "10Gi");
}

#[tokio::test]
async fn strict_field_validation_refuses_unknown_fields() {
    let (_sim, api) = setup().await;
    let params = PatchParams::apply("test").validation(ValidationDirective::Strict);
    let obj = json!({
        "apiVersion": "databases.example.dev/v1alpha1", "kind": "DatabaseCluster",
        "metadata": {"name": "pg"}, "spec": {"replicas": 3, "version": "15.4", "bogus": true},
    });
    match api.patch("pg", &params, &Patch::Apply(obj)).await {
        Err(kube::Error::Api(s)) => {
            assert_eq!(s.code, 400);
            assert!(s.message.contains("unknown field \"spec.bogus\""), "{}", s.message);
        }
        other => panic!("expected 400, got {other:?}"),
    }
}

#[tokio::test]
async fn schema_violations_are_422_with_causes_naming_the_fields() {
    let (_sim, api) = setup().await;
    let (causes, message) =
        invalid(api.create(&PostParams::default(), &cluster(json!({"replicas": 0}))).await);
    assert!(causes.contains(&("spec.replicas".into(), "FieldValueInvalid".into())), "{causes:?}");
    assert!(causes.contains(&("spec.version".into(), "FieldValueRequired".into())), "{causes:?}");
    assert!(message.starts_with("DatabaseCluster.databases.example.dev \"pg\" is invalid"), "{message}");
}

#[tokio::test]
async fn transition_rules_compare_with_the_stored_object() {
    let (_sim, api) = setup().await;
    api.create(
        &PostParams::default(),
        &cluster(json!({"replicas": 3, "version": "15.4", "storageSize": "2Gi"})),
    )
    .await
    .unwrap();
    let pp = PatchParams::default();
    let (causes, message) =
        invalid(api.patch("pg", &pp, &Patch::Merge(json!({"spec": {"version": "16.1"}}))).await);
    assert_eq!(causes, [("spec.version".to_string(), "FieldValueInvalid".to_string())]);
    assert!(message.contains("changing the major version is not supported"), "{message}");
    api.patch("pg", &pp, &Patch::Merge(json!({"spec": {"version": "15.6"}}))).await.unwrap();

    let (causes, message) =
        invalid(api.patch("pg", &pp, &Patch::Merge(json!({"spec": {"storageSize": "1Gi"}}))).await);
    assert_eq!(causes, [("spec.storageSize".to_string(), "FieldValueInvalid".to_string())]);
    assert!(message.contains("storageSize may not shrink"));
    let grown =
        api.patch("pg", &pp, &Patch::Merge(json!({"spec": {"storageSize": "3000Mi"}}))).await.unwrap();
    assert_eq!(grown.data["spec"]["storageSize"], "3000Mi");
}

#[tokio::test]
async fn status_writes_are_validated_too() {
    let (_sim, api) = setup().await;
    api.create(&PostParams::default(), &cluster(json!({"replicas": 3, "version": "15.4"}))).await.unwrap();
    let pp = PatchParams::default();
    let (causes, _) =
        invalid(api.patch_status("pg", &pp, &Patch::Merge(json!({"status": {"phase": "Exploded"}}))).await);
    assert_eq!(causes[0], ("status.phase".to_string(), "FieldValueNotSupported".to_string()));
    let ok =
        api.patch_status("pg", &pp, &Patch::Merge(json!({"status": {"phase": "Running"}}))).await.unwrap();
    assert_eq!(ok.data["status"]["phase"], "Running");
}

#[tokio::test]
async fn a_crd_with_an_uncompilable_schema_is_refused() {
    let sim = SimServer::start().await.unwrap();
    let crds: Api<DynamicObject> = common::crd_objects(sim.client());
    let mut bad = crd();
    bad["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["version"]
        ["x-kubernetes-validations"][0]["rule"] = json!("self.split('.'[0] ==");
    let (causes, _) =
        invalid(crds.create(&PostParams::default(), &serde_json::from_value(bad).unwrap()).await);
    assert_eq!(causes[0].0, "spec.versions[0].schema");
}

#[tokio::test]
async fn a_custom_resource_update_must_name_a_resource_version() {
    let (_sim, api) = setup().await;
    let created = api
        .create(&PostParams::default(), &cluster(json!({"replicas": 3, "version": "15.4"})))
        .await
        .unwrap();
    let mut unconditional = created.clone();
    unconditional.metadata.resource_version = None;
    let (causes, _) = invalid(api.replace("pg", &PostParams::default(), &unconditional).await);
    assert_eq!(causes, [("metadata.resourceVersion".to_string(), "FieldValueInvalid".to_string())]);
    api.replace("pg", &PostParams::default(), &created).await.unwrap();
}

#[tokio::test]
async fn deleting_the_crd_deletes_its_resources_and_through_gc_their_children() {
    let (sim, api) = setup().await;
    let created =
        api.create(&PostParams::default(), &cluster(json!({"replicas": 1, "version": "15"}))).await.unwrap();
    let owner = json!([{
        "apiVersion": "databases.example.dev/v1alpha1", "kind": "DatabaseCluster", "name": "pg",
        "uid": created.metadata.uid.unwrap(), "controller": true, "blockOwnerDeletion": true,
    }]);
    let config_maps: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::default_namespaced(sim.client());
    let child = json!({"metadata": {"name": "pg-config", "ownerReferences": owner}});
    config_maps.create(&PostParams::default(), &serde_json::from_value(child).unwrap()).await.unwrap();
    let crds: Api<
        k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
    > = Api::all(sim.client());
    crds.delete("databaseclusters.databases.example.dev", &Default::default()).await.unwrap();
    common::eventually(
        "the garbage collector to delete the child of the deleted custom resource",
        std::time::Duration::from_secs(10),
        || async {
            match config_maps.get_opt("pg-config").await.unwrap() {
                None => Ok(()),
                Some(child) => Err(child.metadata.name),
            }
        },
    )
    .await;
}
