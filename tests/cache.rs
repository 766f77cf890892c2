//! The cache's indexes kept by an informer against the simulated API server: by namespace and by
//! controller owner UID, after add, update, owner change and delete; and a schemaless
//! (`DynamicObject`) informer.

use std::sync::Arc;

use dbcluster_operator::runtime::ObjectKey;
use dbcluster_operator::runtime::cache::Cache;
use dbcluster_operator::runtime::informer::Informer;
use dbcluster_operator::sim::SimServer;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, DynamicObject};
use kube::{Resource, ResourceExt};
use serde_json::json;

/// A ConfigMap with a controller owner (`controller: true`) and, optionally, another owner.
fn owned(name: &str, controller_uid: Option<&str>, other_uid: Option<&str>) -> ConfigMap {
    let mut owners = Vec::new();
    if let Some(uid) = other_uid {
        owners.push(json!({"apiVersion": "v1", "kind": "Secret", "name": "other", "uid": uid}));
    }
    if let Some(uid) = controller_uid {
        owners.push(
            json!({"apiVersion": "v1", "kind": "Secret", "name": "ctl", "uid": uid, "controller": true}),
        );
    }
    serde_json::from_value(json!({"metadata": {"name": name, "ownerReferences": owners}})).unwrap()
}

fn sorted_names<K: Resource>(objs: Vec<Arc<K>>) -> Vec<String> {
    let mut names: Vec<String> = objs.iter().map(|o| o.meta().name.clone().unwrap_or_default()).collect();
    names.sort();
    names
}

async fn synced_to<K>(informer: &Informer<K>, obj: &impl Resource)
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
{
    let rv = obj.meta().resource_version.clone().unwrap();
    informer.wait_for(|s| s.synced && s.last_resource_version.as_deref() == Some(&rv)).await;
}

#[tokio::test]
async fn namespace_and_controller_owner_indexes_follow_add_update_owner_change_and_delete() {
    let sim = SimServer::start().await.unwrap();
    let default: Api<ConfigMap> = Api::namespaced(sim.client(), "default");
    let system: Api<ConfigMap> = Api::namespaced(sim.client(), "kube-system");
    let informer = Informer::new(Api::<ConfigMap>::all(sim.client()));
    informer.start();
    informer.synced().await;
    let cache: &Cache<ConfigMap> = informer.cache();

    // Add: two children of uid-1 (one also has a non-controller owner), one in another namespace.
    default.create(&PostParams::default(), &owned("x", Some("uid-1"), Some("uid-9"))).await.unwrap();
    default.create(&PostParams::default(), &owned("y", Some("uid-1"), None)).await.unwrap();
    let z = system.create(&PostParams::default(), &owned("z", Some("uid-1"), None)).await.unwrap();
    synced_to(&informer, &z).await;
    assert_eq!(sorted_names(cache.list_namespace("default")), ["x", "y"]);
    assert_eq!(sorted_names(cache.list_namespace("kube-system")), ["z"]);
    assert_eq!(sorted_names(cache.children_of("uid-1")), ["x", "y", "z"]);
    assert!(cache.children_of("uid-9").is_empty(), "only the controller owner is indexed");

    // Update without an owner change: the indexes stay, and hand out the new state.
    let y = default
        .patch("y", &PatchParams::default(), &Patch::Merge(json!({"data": {"k": "v"}})))
        .await
        .unwrap();
    synced_to(&informer, &y).await;
    let children = cache.children_of("uid-1");
    let y_cached = children.iter().find(|c| c.name_any() == "y").unwrap();
    assert_eq!(y_cached.data.as_ref().unwrap()["k"], "v");

    // Owner change: y moves from uid-1 to uid-2.
    let y = default
        .patch(
            "y",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"ownerReferences": [
                {"apiVersion": "v1", "kind": "Secret", "name": "ctl2", "uid": "uid-2", "controller": true}
            ]}})),
        )
        .await
        .unwrap();
    synced_to(&informer, &y).await;
    assert_eq!(sorted_names(cache.children_of("uid-1")), ["x", "z"]);
    assert_eq!(sorted_names(cache.children_of("uid-2")), ["y"]);

    // Delete: gone from both indexes.
    default.delete("x", &DeleteParams::default()).await.unwrap();
    system.delete("z", &DeleteParams::default()).await.unwrap();
    let last = default.create(&PostParams::default(), &owned("w", None, None)).await.unwrap();
    synced_to(&informer, &last).await;
    assert!(cache.children_of("uid-1").is_empty());
    assert!(cache.list_namespace("kube-system").is_empty());
    assert_eq!(sorted_names(cache.list_namespace("default")), ["w", "y"]);
    assert!(cache.get(&ObjectKey::namespaced("default", "x")).is_none());
    assert_eq!(cache.len(), 2);
}

#[tokio::test]
async fn a_dynamic_object_informer_caches_schemaless_objects() {
    let sim = SimServer::start().await.unwrap();
    let typed: Api<ConfigMap> = Api::namespaced(sim.client(), "default");
    let a = typed.create(&PostParams::default(), &owned("a", Some("uid-1"), None)).await.unwrap();
    let resource = ApiResource::erase::<ConfigMap>(&());
    let informer = Informer::new(Api::<DynamicObject>::namespaced_with(sim.client(), "default", &resource));
    informer.start();
    informer.synced().await;
    synced_to(&informer, &a).await;
    let cached = informer.cache().get(&ObjectKey::namespaced("default", "a")).unwrap();
    assert_eq!(cached.metadata.uid, a.metadata.uid);
    assert!(cached.metadata.managed_fields.is_none());
    assert_eq!(sorted_names(informer.cache().children_of("uid-1")), ["a"]);
}
