//! The cache's indexes kept by an informer against the simulated API server: by namespace and by
//! controller owner UID, after add, update, owner change and delete; and a schemaless
//! (`DynamicObject`) informer.
#![cfg(feature = "sim")]

use std::sync::Arc;
use std::time::Duration;

use dbcluster_operator::runtime::ObjectKey;
use dbcluster_operator::runtime::cache::{Cache, CacheWriter, Indexes};
use dbcluster_operator::runtime::informer::Informer;
use dbcluster_operator::runtime::reflector::ReflectorConfig;
use dbcluster_operator::sim::SimServer;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
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

/// Creates a Secret in `default` to own ConfigMaps and returns its uid: an ownerReference to a uid
/// that does not exist would have its dependent garbage collected, as on a real cluster.
async fn owner(client: &kube::Client, name: &str) -> String {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "default");
    let secret: Secret = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    secrets.create(&PostParams::default(), &secret).await.unwrap().metadata.uid.unwrap()
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
    let caught_up = informer.wait_for(|s| s.synced && s.last_resource_version.as_deref() == Some(&rv));
    tokio::time::timeout(Duration::from_secs(30), caught_up).await.expect("the informer caught up");
}

#[tokio::test]
async fn namespace_and_controller_owner_indexes_follow_add_update_owner_change_and_delete() {
    let sim = SimServer::start().await.unwrap();
    let default: Api<ConfigMap> = Api::namespaced(sim.client(), "default");
    let system: Api<ConfigMap> = Api::namespaced(sim.client(), "kube-system");
    let writer = CacheWriter::default().with_namespace_index().with_owner_index();
    let informer =
        Informer::with_writer(Api::<ConfigMap>::all(sim.client()), ReflectorConfig::default(), writer);
    informer.start();
    informer.synced().await;
    let cache: &Cache<ConfigMap> = informer.cache();
    assert_eq!(cache.indexes(), Indexes { namespace: true, controller_owner: true, label: None });
    let (uid1, uid2, other) = (
        owner(&sim.client(), "ctl").await,
        owner(&sim.client(), "ctl2").await,
        owner(&sim.client(), "other").await,
    );

    // Add: two children of uid1 (one also has a non-controller owner), one in another namespace.
    default.create(&PostParams::default(), &owned("x", Some(&uid1), Some(&other))).await.unwrap();
    default.create(&PostParams::default(), &owned("y", Some(&uid1), None)).await.unwrap();
    let z = system.create(&PostParams::default(), &owned("z", None, None)).await.unwrap();
    synced_to(&informer, &z).await;
    assert_eq!(sorted_names(cache.list_namespace("default")), ["x", "y"]);
    assert_eq!(sorted_names(cache.list_namespace("kube-system")), ["z"]);
    assert_eq!(sorted_names(cache.children_of(&uid1)), ["x", "y"]);
    assert!(cache.children_of(&other).is_empty(), "only the controller owner is indexed");

    // Update without an owner change: the indexes stay, and hand out the new state.
    let y = default
        .patch("y", &PatchParams::default(), &Patch::Merge(json!({"data": {"k": "v"}})))
        .await
        .unwrap();
    synced_to(&informer, &y).await;
    let children = cache.children_of(&uid1);
    let y_cached = children.iter().find(|c| c.name_any() == "y").unwrap();
    assert_eq!(y_cached.data.as_ref().unwrap()["k"], "v");

    // Owner change: y moves from uid1 to uid2.
    let y = default
        .patch(
            "y",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"ownerReferences": [
                {"apiVersion": "v1", "kind": "Secret", "name": "ctl2", "uid": uid2, "controller": true}
            ]}})),
        )
        .await
        .unwrap();
    synced_to(&informer, &y).await;
    assert_eq!(sorted_names(cache.children_of(&uid1)), ["x"]);
    assert_eq!(sorted_names(cache.children_of(&uid2)), ["y"]);

    // Delete: gone from both indexes.
    default.delete("x", &DeleteParams::default()).await.unwrap();
    system.delete("z", &DeleteParams::default()).await.unwrap();
    let last = default.create(&PostParams::default(), &owned("w", None, None)).await.unwrap();
    synced_to(&informer, &last).await;
    assert!(cache.children_of(&uid1).is_empty());
    assert!(cache.list_namespace("kube-system").is_empty());
    assert_eq!(sorted_names(cache.list_namespace("default")), ["w", "y"]);
    assert!(cache.get(&ObjectKey::namespaced("default", "x")).is_none());
    assert_eq!(cache.len(), 2);
}

#[tokio::test]
async fn a_dynamic_object_informer_caches_schemaless_objects() {
    let sim = SimServer::start().await.unwrap();
    let typed: Api<ConfigMap> = Api::namespaced(sim.client(), "default");
    let uid = owner(&sim.client(), "ctl").await;
    let a = typed.create(&PostParams::default(), &owned("a", Some(&uid), None)).await.unwrap();
    let resource = ApiResource::erase::<ConfigMap>(&());
    let informer = Informer::new(Api::<DynamicObject>::namespaced_with(sim.client(), "default", &resource));
    informer.start();
    informer.synced().await;
    synced_to(&informer, &a).await;
    let cached = informer.cache().get(&ObjectKey::namespaced("default", "a")).unwrap();
    assert_eq!(cached.metadata.uid, a.metadata.uid);
    assert!(cached.metadata.managed_fields.is_none());
    assert_eq!(sorted_names(informer.cache().children_of(&uid)), ["a"]);
}
