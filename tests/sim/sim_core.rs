//! The simulated API server through the unmodified `kube` client over real HTTP: discovery,
//! every verb, metadata, conflicts, generation and status-subresource rules, pagination, CRDs.
#![cfg(feature = "sim")]

use crate::common;

use dbcluster_operator::sim::SimServer;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::json;

fn api_code<T: std::fmt::Debug>(r: Result<T, kube::Error>) -> u16 {
    match r {
        Err(kube::Error::Api(s)) => s.code,
        other => panic!("expected an API error, got {other:?}"),
    }
}

fn config_map(name: &str, labels: serde_json::Value) -> ConfigMap {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "labels": labels},
        "data": {"k": "v"},
    }))
    .unwrap()
}

#[tokio::test]
async fn discovery_reports_version_groups_and_resources() {
    let sim = SimServer::start().await.unwrap();
    let client = sim.client();
    let version = client.apiserver_version().await.unwrap();
    assert_eq!((version.major.as_str(), version.minor.as_str()), ("1", "28"), "the oldest supported");
    let core = client.list_core_api_versions().await.unwrap();
    assert_eq!(core.versions, ["v1"]);
    let groups = client.list_api_groups().await.unwrap();
    let names: Vec<&str> = groups.groups.iter().map(|g| g.name.as_str()).collect();
    for g in ["apps", "batch", "policy", "coordination.k8s.io", "events.k8s.io", "apiextensions.k8s.io"] {
        assert!(names.contains(&g), "{g} missing from {names:?}");
    }
    let apps = client.list_api_group_resources("apps/v1").await.unwrap();
    let sts = apps.resources.iter().find(|r| r.name == "statefulsets").unwrap();
    assert!(sts.namespaced);
    assert_eq!(sts.short_names.as_deref(), Some(&["sts".to_string()][..]));
    assert!(apps.resources.iter().any(|r| r.name == "statefulsets/status"));
    let core_resources = client.list_core_api_resources("v1").await.unwrap();
    assert!(core_resources.resources.iter().any(|r| r.name == "namespaces" && !r.namespaced));
}

#[tokio::test]
async fn initial_namespaces_exist_and_creating_into_a_missing_namespace_is_not_found() {
    let sim = SimServer::start().await.unwrap();
    let client = sim.client();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns = namespaces.get("default").await.unwrap();
    assert_eq!(ns.status.unwrap().phase.as_deref(), Some("Active"));
    let missing: Api<ConfigMap> = Api::namespaced(client.clone(), "nowhere");
    assert_eq!(api_code(missing.create(&PostParams::default(), &config_map("a", json!({}))).await), 404);
    let created: Namespace = serde_json::from_value(json!({"metadata": {"name": "team"}})).unwrap();
    namespaces.create(&PostParams::default(), &created).await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client, "team");
    cms.create(&PostParams::default(), &config_map("a", json!({}))).await.unwrap();
}

#[tokio::test]
async fn crud_with_metadata_conflicts_and_not_found() {
    let sim = SimServer::start().await.unwrap();
    let cms: Api<ConfigMap> = Api::default_namespaced(sim.client());
    let created = cms.create(&PostParams::default(), &config_map("cfg", json!({"app": "db"}))).await.unwrap();
    let meta = &created.metadata;
    assert_eq!(meta.namespace.as_deref(), Some("default"));
    assert_eq!(meta.uid.as_ref().unwrap().len(), 36);
    assert!(meta.creation_timestamp.is_some());
    assert_eq!(meta.generation, None, "ConfigMaps have no generation, as on a real server");
    let managed = meta.managed_fields.as_ref().unwrap();
    assert_eq!(managed[0].operation.as_deref(), Some("Update"));
    assert!(managed[0].fields_v1.is_some());

    assert_eq!(api_code(cms.create(&PostParams::default(), &config_map("cfg", json!({}))).await), 409);
    assert_eq!(api_code(cms.get("nope").await), 404);

    let mut fresh = cms.get("cfg").await.unwrap();
    assert_eq!(fresh.metadata.resource_version, created.metadata.resource_version);
    fresh.data.as_mut().unwrap().insert("k".into(), "changed".into());
    let replaced = cms.replace("cfg", &PostParams::default(), &fresh).await.unwrap();
    let rv_after: u64 = replaced.metadata.resource_version.clone().unwrap().parse().unwrap();
    let rv_before: u64 = created.metadata.resource_version.clone().unwrap().parse().unwrap();
    assert!(rv_after > rv_before);
    // Writing with the old resourceVersion conflicts.
    assert_eq!(api_code(cms.replace("cfg", &PostParams::default(), &fresh).await), 409);

    let merged =
        cms.patch("cfg", &PatchParams::default(), &Patch::Merge(json!({"data": {"m": "1"}}))).await.unwrap();
    assert_eq!(merged.data.as_ref().unwrap()["m"], "1");
    // kube's `Patch::Json` needs a feature this crate does not enable: send the JSON patch by hand.
    let request = http::Request::patch("/api/v1/namespaces/default/configmaps/cfg")
        .header("content-type", "application/json-patch+json")
        .body(serde_json::to_vec(&json!([{"op": "add", "path": "/data/j", "value": "2"}])).unwrap())
        .unwrap();
    let patched: ConfigMap = sim.client().request(request).await.unwrap();
    assert_eq!(patched.data.as_ref().unwrap()["j"], "2");
    assert_eq!(patched.data.as_ref().unwrap()["m"], "1");
    // A merge patch carrying a stale resourceVersion is a failed precondition.
    let stale = json!({"metadata": {"resourceVersion": rv_before.to_string()}, "data": {"x": "y"}});
    assert_eq!(api_code(cms.patch("cfg", &PatchParams::default(), &Patch::Merge(stale)).await), 409);

    let deleted = cms.delete("cfg", &DeleteParams::default()).await.unwrap();
    assert!(deleted.is_left(), "an object without finalizers is gone at once");
    assert_eq!(api_code(cms.get("cfg").await), 404);
    assert_eq!(api_code(cms.delete("cfg", &DeleteParams::default()).await), 404);
}

#[tokio::test]
async fn a_write_that_changes_nothing_keeps_the_resource_version() {
    let sim = SimServer::start().await.unwrap();
    let cms: Api<ConfigMap> = Api::default_namespaced(sim.client());
    let created = cms.create(&PostParams::default(), &config_map("same", json!({}))).await.unwrap();
    let patched =
        cms.patch("same", &PatchParams::default(), &Patch::Merge(json!({"data": {"k": "v"}}))).await.unwrap();
    assert_eq!(patched.metadata.resource_version, created.metadata.resource_version);
}

/// A PodDisruptionBudget: a status subresource and no simulated controller writing it.
fn pdb(min_available: i32) -> PodDisruptionBudget {
    serde_json::from_value(json!({
        "metadata": {"name": "db"},
        "spec": {"minAvailable": min_available, "selector": {"matchLabels": {"app": "db"}}},
        "status": {"currentHealthy": 99, "desiredHealthy": 0, "disruptionsAllowed": 0, "expectedPods": 0}
    }))
    .unwrap()
}

#[tokio::test]
async fn generation_and_status_subresource_rules() {
    let sim = SimServer::start().await.unwrap();
    let pdbs: Api<PodDisruptionBudget> = Api::default_namespaced(sim.client());
    let created = pdbs.create(&PostParams::default(), &pdb(2)).await.unwrap();
    assert_eq!(created.metadata.generation, Some(1));
    assert!(created.status.is_none(), "status in a create is ignored when status is a subresource");

    let labelled = pdbs
        .patch("db", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {"a": "b"}}})))
        .await
        .unwrap();
    assert_eq!(labelled.metadata.generation, Some(1), "metadata changes keep the generation");

    let healthy = |p: &PodDisruptionBudget| p.status.as_ref().unwrap().current_healthy;
    let status = pdbs
        .patch_status(
            "db",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"currentHealthy": 2}, "spec": {"minAvailable": 7}})),
        )
        .await
        .unwrap();
    assert_eq!(healthy(&status), 2);
    let min = |p: &PodDisruptionBudget| p.spec.as_ref().unwrap().min_available.clone();
    assert_eq!(min(&status), min(&created), "status writes ignore everything else");
    assert_eq!(status.metadata.generation, Some(1), "status changes keep the generation");

    let changed = pdbs
        .patch(
            "db",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"minAvailable": 1}, "status": {"currentHealthy": 0}})),
        )
        .await
        .unwrap();
    assert_eq!(changed.metadata.generation, Some(2), "spec changes bump the generation");
    assert_eq!(healthy(&changed), 2, "main-resource writes ignore status");

    let mut whole = changed.clone();
    whole.status.as_mut().unwrap().current_healthy = 5;
    let replaced = pdbs.replace_status("db", &PostParams::default(), &whole).await.unwrap();
    assert_eq!(healthy(&replaced), 5);
    assert_eq!(replaced.metadata.generation, Some(2));
}

#[tokio::test]
async fn list_selects_by_label_and_paginates_with_continue() {
    let sim = SimServer::start().await.unwrap();
    let cms: Api<ConfigMap> = Api::default_namespaced(sim.client());
    for i in 0..5 {
        let tier = if i % 2 == 0 { "even" } else { "odd" };
        cms.create(&PostParams::default(), &config_map(&format!("cm-{i}"), json!({"tier": tier})))
            .await
            .unwrap();
    }
    let even = cms.list(&ListParams::default().labels("tier=even")).await.unwrap();
    assert_eq!(even.items.len(), 3);
    let not_even = cms.list(&ListParams::default().labels("tier!=even")).await.unwrap();
    assert_eq!(not_even.items.len(), 2);
    let set = cms.list(&ListParams::default().labels("tier in (odd,none)")).await.unwrap();
    assert_eq!(set.items.len(), 2);

    let first = cms.list(&ListParams::default().limit(2)).await.unwrap();
    assert_eq!(first.items.len(), 2);
    assert_eq!(first.metadata.remaining_item_count, Some(3));
    let token = first.metadata.continue_.clone().unwrap();
    let mut names: Vec<String> = first.items.iter().map(|c| c.metadata.name.clone().unwrap()).collect();
    // Writes between pages do not change the list's resourceVersion.
    cms.create(&PostParams::default(), &config_map("zz-late", json!({}))).await.unwrap();
    let second = cms.list(&ListParams::default().limit(2).continue_token(&token)).await.unwrap();
    assert_eq!(second.metadata.resource_version, first.metadata.resource_version);
    names.extend(second.items.iter().map(|c| c.metadata.name.clone().unwrap()));
    let third = cms
        .list(&ListParams::default().limit(10).continue_token(second.metadata.continue_.as_deref().unwrap()))
        .await
        .unwrap();
    assert!(third.metadata.continue_.is_none());
    names.extend(third.items.iter().map(|c| c.metadata.name.clone().unwrap()));
    assert_eq!(names, ["cm-0", "cm-1", "cm-2", "cm-3", "cm-4", "zz-late"]);

    let all_namespaces: Api<ConfigMap> = Api::all(sim.client());
    assert_eq!(all_namespaces.list(&ListParams::default()).await.unwrap().items.len(), 6);
}

#[tokio::test]
async fn exact_list_of_an_old_resource_version_is_gone() {
    let sim = SimServer::start().await.unwrap();
    let cms: Api<ConfigMap> = Api::default_namespaced(sim.client());
    let first = cms.list(&ListParams::default()).await.unwrap();
    let old = first.metadata.resource_version.unwrap();
    cms.create(&PostParams::default(), &config_map("a", json!({}))).await.unwrap();
    let exact = ListParams::default().at(&old).matching(kube::api::VersionMatch::Exact);
    assert_eq!(api_code(cms.list(&exact).await), 410);
    assert_eq!(cms.list(&ListParams::default().match_any()).await.unwrap().items.len(), 1);
}

fn crd() -> serde_json::Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "databaseclusters.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"plural": "databaseclusters", "singular": "databasecluster", "kind": "DatabaseCluster", "shortNames": ["dbc"], "categories": ["all"]},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
                "additionalPrinterColumns": [{"name": "Phase", "type": "string", "jsonPath": ".status.phase"}]
            }]
        }
    })
}

#[tokio::test]
async fn creating_a_crd_serves_its_custom_resource() {
    let sim = SimServer::start().await.unwrap();
    let client = sim.client();
    let crds: Api<DynamicObject> = common::crd_objects(client.clone());
    let created: DynamicObject = serde_json::from_value(crd()).unwrap();
    let created = crds.create(&PostParams::default(), &created).await.unwrap();
    let conditions = created.data["status"]["conditions"].as_array().unwrap();
    assert!(conditions.iter().any(|c| c["type"] == "Established" && c["status"] == "True"));

    let resources = client.list_api_group_resources("example.com/v1").await.unwrap();
    let dbc = resources.resources.iter().find(|r| r.name == "databaseclusters").unwrap();
    assert_eq!(dbc.short_names.as_deref(), Some(&["dbc".to_string()][..]));

    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("example.com", "v1", "DatabaseCluster"),
        "databaseclusters",
    );
    let dbcs: Api<DynamicObject> = Api::default_namespaced_with(client.clone(), &ar);
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "example.com/v1", "kind": "DatabaseCluster",
        "metadata": {"name": "production-postgres"},
        "spec": {"replicas": 3, "version": "15.4"},
        "status": {"phase": "Ignored"}
    }))
    .unwrap();
    let created = dbcs.create(&PostParams::default(), &obj).await.unwrap();
    assert_eq!(created.data["spec"]["replicas"], 3);
    assert!(created.data.get("status").is_none());
    let with_status = dbcs
        .patch_status(
            "production-postgres",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Creating"}})),
        )
        .await
        .unwrap();
    assert_eq!(with_status.data["status"]["phase"], "Creating");
    assert_eq!(dbcs.list(&ListParams::default()).await.unwrap().items.len(), 1);

    // Deleting the CRD stops serving the kind and removes its objects.
    crds.delete("databaseclusters.example.com", &DeleteParams::default()).await.unwrap();
    assert_eq!(api_code(dbcs.get("production-postgres").await), 404);
    assert!(client.list_api_group_resources("example.com/v1").await.is_err());
}

#[tokio::test]
async fn a_crd_whose_name_does_not_match_its_names_is_invalid() {
    let sim = SimServer::start().await.unwrap();
    let crds: Api<DynamicObject> = common::crd_objects(sim.client());
    let mut bad = crd();
    bad["metadata"]["name"] = json!("wrong.example.com");
    let bad: DynamicObject = serde_json::from_value(bad).unwrap();
    match crds.create(&PostParams::default(), &bad).await {
        Err(kube::Error::Api(s)) => {
            assert_eq!((s.code, s.reason.as_str()), (422, "Invalid"));
            let causes = s.details.unwrap().causes;
            assert_eq!(causes[0].field, "metadata.name");
        }
        other => panic!("expected 422, got {other:?}"),
    }
}

#[tokio::test]
async fn generate_name_and_dry_run() {
    let sim = SimServer::start().await.unwrap();
    let pods: Api<Pod> = Api::default_namespaced(sim.client());
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"generateName": "job-"},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]}
    }))
    .unwrap();
    let dry = pods.create(&PostParams { dry_run: true, ..Default::default() }, &pod).await.unwrap();
    assert!(dry.metadata.name.unwrap().starts_with("job-"));
    assert!(pods.list(&ListParams::default()).await.unwrap().items.is_empty());
    let created = pods.create(&PostParams::default(), &pod).await.unwrap();
    let name = created.metadata.name.unwrap();
    assert_eq!(name.len(), "job-".len() + 5);
    assert_eq!(created.status.unwrap().phase.as_deref(), Some("Pending"));
}

#[tokio::test]
async fn delete_collection_deletes_the_selected_objects() {
    let sim = SimServer::start().await.unwrap();
    let cms: Api<ConfigMap> = Api::default_namespaced(sim.client());
    for (name, tier) in [("a", "x"), ("b", "x"), ("c", "y")] {
        cms.create(&PostParams::default(), &config_map(name, json!({"tier": tier}))).await.unwrap();
    }
    let deleted = cms
        .delete_collection(&DeleteParams::default(), &ListParams::default().labels("tier=x"))
        .await
        .unwrap();
    let names: Vec<String> =
        deleted.left().unwrap().items.into_iter().filter_map(|c| c.metadata.name).collect();
    assert_eq!(names, ["a", "b"]);
    let left: Vec<String> = cms
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|c| c.metadata.name)
        .collect();
    assert_eq!(left, ["c"]);
    let log = sim.request_log();
    assert_eq!(log.iter().filter(|r| r.verb == "deletecollection").count(), 1);
}

#[tokio::test]
async fn built_in_kinds_are_defaulted_as_by_the_apiserver() {
    let sim = SimServer::start().await.unwrap();
    let services: Api<k8s_openapi::api::core::v1::Service> = Api::default_namespaced(sim.client());
    let svc =
        serde_json::from_value(json!({"metadata": {"name": "db"}, "spec": {"ports": [{"port": 5432}]}}))
            .unwrap();
    let created = services.create(&PostParams::default(), &svc).await.unwrap();
    let spec = created.spec.unwrap();
    assert_eq!(spec.type_.as_deref(), Some("ClusterIP"));
    let ip = spec.cluster_ip.unwrap();
    assert!(ip.starts_with("10.96."), "{ip}");
    let port = &spec.ports.unwrap()[0];
    assert_eq!(port.protocol.as_deref(), Some("TCP"));
    // The allocated address survives a merge patch that does not mention it.
    let patched = services
        .patch("db", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {"a": "b"}}})))
        .await
        .unwrap();
    assert_eq!(patched.spec.unwrap().cluster_ip.as_deref(), Some(ip.as_str()));

    let pods: Api<Pod> = Api::default_namespaced(sim.client());
    let pod = serde_json::from_value(
        json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "postgres:15.4"}]}}),
    )
    .unwrap();
    let created = pods.create(&PostParams::default(), &pod).await.unwrap().spec.unwrap();
    assert_eq!(created.restart_policy.as_deref(), Some("Always"));
    assert_eq!(created.containers[0].image_pull_policy.as_deref(), Some("IfNotPresent"));
}

#[tokio::test]
async fn secret_string_data_is_stored_as_data_and_unknown_fields_are_dropped() {
    let sim = SimServer::start().await.unwrap();
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::default_namespaced(sim.client());
    let request = http::Request::post("/api/v1/namespaces/default/secrets")
        .header("content-type", "application/json")
        .body(
            serde_json::to_vec(
                &json!({"metadata": {"name": "s"}, "stringData": {"password": "hunter2"}, "bogus": 1}),
            )
            .unwrap(),
        )
        .unwrap();
    let created: serde_json::Value = sim.client().request(request).await.unwrap();
    assert!(created.get("bogus").is_none() && created.get("stringData").is_none(), "{created}");
    let secret = secrets.get("s").await.unwrap();
    assert_eq!(secret.data.unwrap()["password"].0, b"hunter2");
    assert_eq!(secret.type_.as_deref(), Some("Opaque"));
}

#[tokio::test]
async fn events_are_served_as_core_and_events_k8s_io_and_both_refuse_bad_ones() {
    use k8s_openapi::api::core::v1::Event as CoreEvent;
    use k8s_openapi::api::events::v1::Event;
    let sim = dbcluster_operator::sim::SimServer::start().await.unwrap();
    let v1: kube::Api<Event> = kube::Api::default_namespaced(sim.client());
    let core: kube::Api<CoreEvent> = kube::Api::default_namespaced(sim.client());
    let event = |name: &str, extra: serde_json::Value| {
        let mut e = serde_json::json!({
            "metadata": {"name": name}, "eventTime": "2026-01-01T00:00:00.000000Z",
            "type": "Normal", "reason": "Created", "action": "Create", "note": "made it",
            "reportingController": "x/y", "reportingInstance": "i",
            "regarding": {"kind": "Pod", "name": "p", "namespace": "default"},
        });
        json_patch::merge(&mut e, &extra);
        e
    };
    v1.create(&Default::default(), &serde_json::from_value(event("p.1", serde_json::json!({}))).unwrap())
        .await
        .unwrap();
    let as_core = core.get("p.1").await.unwrap();
    assert_eq!(as_core.involved_object.name.as_deref(), Some("p"));
    assert_eq!(as_core.message.as_deref(), Some("made it"));
    let as_v1 = v1.get("p.1").await.unwrap();
    assert_eq!(as_v1.note.as_deref(), Some("made it"));

    let refused = |result: Result<Event, kube::Error>| match result {
        Err(kube::Error::Api(s)) => (s.code, s.message),
        other => panic!("expected a refusal, got {other:?}"),
    };
    let long_reason = "R".repeat(129);
    for (name, extra, field) in [
        ("a.1", serde_json::json!({"regarding": null}), "regarding"),
        ("a.2", serde_json::json!({"type": "Info"}), "type"),
        ("a.3", serde_json::json!({"reason": long_reason}), "reason"),
        // 1.28's ValidateEventCreate: through events.k8s.io/v1, eventTime is required and the
        // older API's fields must be unset.
        ("a.4", serde_json::json!({"eventTime": null}), "eventTime"),
        (
            "a.5",
            serde_json::json!({"deprecatedLastTimestamp": "2026-01-01T00:00:00Z"}),
            "deprecatedLastTimestamp",
        ),
        ("a.6", serde_json::json!({"deprecatedCount": 1}), "deprecatedCount"),
        ("a.7", serde_json::json!({"deprecatedSource": {"component": "x"}}), "deprecatedSource"),
        ("a.8", serde_json::json!({"reportingInstance": null}), "reportingInstance"),
    ] {
        let (code, message) = refused(
            v1.create(&Default::default(), &serde_json::from_value(event(name, extra)).unwrap()).await,
        );
        assert_eq!(code, 422, "{message}");
        assert!(message.contains(field), "{message}");
    }
    let core_event = |extra: serde_json::Value| {
        let mut e = serde_json::json!({
            "metadata": {"name": "c.1"}, "type": "Normal", "reason": "Created", "message": "m",
            "involvedObject": {"kind": "Pod", "name": "p", "namespace": "default"},
        });
        json_patch::merge(&mut e, &extra);
        serde_json::from_value::<CoreEvent>(e).unwrap()
    };
    for (extra, field) in [
        (
            serde_json::json!({"involvedObject": {"kind": null, "name": null, "namespace": null}}),
            "involvedObject",
        ),
        (serde_json::json!({"type": "Info"}), "type"),
        (serde_json::json!({"reason": "R".repeat(129)}), "reason"),
        // legacyValidateEvent: a core Event with an eventTime names its reporter and action.
        (serde_json::json!({"eventTime": "2026-01-01T00:00:00.000000Z"}), "reportingComponent"),
    ] {
        match core.create(&Default::default(), &core_event(extra)).await {
            Err(kube::Error::Api(s)) => assert!(s.code == 422 && s.message.contains(field), "{}", s.message),
            other => panic!("expected a refusal for {field}, got {other:?}"),
        }
    }
    core.create(&Default::default(), &core_event(serde_json::json!({}))).await.unwrap();
    // Through core/v1, the older API's times may stand beside eventTime (as the operator writes).
    let both = serde_json::json!({
        "metadata": {"name": "c.2"}, "eventTime": "2026-01-01T00:00:00.000000Z",
        "firstTimestamp": "2026-01-01T00:00:00Z", "lastTimestamp": "2026-01-01T00:00:00Z", "count": 1,
        "reportingComponent": "x/y", "reportingInstance": "i", "action": "Create",
        "source": {"component": "x/y"},
    });
    core.create(&Default::default(), &core_event(both)).await.unwrap();
}
