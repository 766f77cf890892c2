//! Informer event fan-out against the simulated API server: every handler sees every event,
//! updates carry the old state, key mappers wake every owner involved, a late handler is caught up,
//! and a panicking handler does not stop the others.
#![cfg(feature = "sim")]

use std::sync::Arc;

use dbcluster_operator::runtime::ObjectKey;
use dbcluster_operator::runtime::informer::{Informer, InformerEvent};
use dbcluster_operator::sim::SimServer;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Resource;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use parking_lot::Mutex;
use serde_json::json;

fn config_map(name: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}, "data": {"v": "1"}})).unwrap()
}

/// `ADDED a`, `UPDATED a gen-changed=false`, `DELETED a`.
fn describe(event: &InformerEvent<ConfigMap>) -> String {
    let name = event.object().metadata.name.clone().unwrap_or_default();
    match event {
        InformerEvent::Added(_) => format!("ADDED {name}"),
        InformerEvent::Updated { old, new } => {
            assert_ne!(old.metadata.resource_version, new.metadata.resource_version);
            format!(
                "UPDATED {name} data {}->{}",
                old.data.as_ref().unwrap()["v"],
                new.data.as_ref().unwrap()["v"]
            )
        }
        InformerEvent::Deleted(_) => format!("DELETED {name}"),
    }
}

fn recorder(informer: &Informer<ConfigMap>) -> Arc<Mutex<Vec<String>>> {
    let log = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&log);
    informer.add_handler(move |event: &InformerEvent<ConfigMap>| sink.lock().push(describe(event)));
    log
}

async fn synced_to(informer: &Informer<ConfigMap>, obj: &impl Resource) {
    let rv = obj.meta().resource_version.clone().unwrap();
    let caught_up = informer.wait_for(|s| s.synced && s.last_resource_version.as_deref() == Some(&rv));
    tokio::time::timeout(std::time::Duration::from_secs(30), caught_up)
        .await
        .expect("the informer caught up");
}

#[tokio::test]
async fn two_handlers_see_every_event_in_the_same_order_with_the_old_state_on_updates() {
    let sim = SimServer::start().await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(sim.client(), "default");
    api.create(&PostParams::default(), &config_map("before")).await.unwrap();
    let informer = Informer::new(Api::namespaced(sim.client(), "default"));
    let first = recorder(&informer);
    let second = recorder(&informer);
    informer.start();
    informer.synced().await;

    api.create(&PostParams::default(), &config_map("a")).await.unwrap();
    api.patch("a", &PatchParams::default(), &Patch::Merge(json!({"data": {"v": "2"}}))).await.unwrap();
    api.delete("before", &DeleteParams::default()).await.unwrap();
    let last = api.create(&PostParams::default(), &config_map("b")).await.unwrap();
    synced_to(&informer, &last).await;

    let expected = ["ADDED before", "ADDED a", "UPDATED a data 1->2", "DELETED before", "ADDED b"];
    assert_eq!(*first.lock(), expected);
    assert_eq!(*second.lock(), expected);
    let stats = informer.stats();
    assert_eq!((stats.added, stats.updated, stats.deleted, stats.objects), (3, 1, 1, 2));
}

#[tokio::test]
async fn a_key_mapper_wakes_the_old_and_the_new_owner_when_the_owner_changes() {
    let sim = SimServer::start().await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(sim.client(), "default");
    let informer = Informer::new(Api::namespaced(sim.client(), "default"));
    let keys = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&keys);
    informer.add_key_mapper(
        |cm: &ConfigMap| {
            let ns = cm.metadata.namespace.clone().unwrap_or_default();
            cm.metadata
                .owner_references
                .iter()
                .flatten()
                .filter(|o| o.controller == Some(true))
                .map(|o| ObjectKey::namespaced(&ns, &o.name))
                .collect::<Vec<_>>()
        },
        move |key, _origin, _event: &_| sink.lock().push(key.to_string()),
    );
    informer.start();
    informer.synced().await;

    // Owners that exist: a dependent of a uid that does not exist is garbage collected.
    let mut uids = Vec::new();
    for owner in ["one", "two"] {
        uids.push(api.create(&PostParams::default(), &config_map(owner)).await.unwrap().metadata.uid);
    }
    let owned_by = |name: &str, uid: &Option<String>| {
        json!({"metadata": {"ownerReferences": [
            {"apiVersion": "v1", "kind": "ConfigMap", "name": name, "uid": uid, "controller": true}
        ]}})
    };
    let mut child = config_map("child");
    child.metadata.owner_references =
        serde_json::from_value(owned_by("one", &uids[0])["metadata"]["ownerReferences"].clone()).unwrap();
    api.create(&PostParams::default(), &child).await.unwrap();
    let moved =
        api.patch("child", &PatchParams::default(), &Patch::Merge(owned_by("two", &uids[1]))).await.unwrap();
    synced_to(&informer, &moved).await;
    assert_eq!(*keys.lock(), ["default/one", "default/two", "default/one"]);
}

#[tokio::test]
async fn a_handler_added_after_start_is_told_about_the_cached_objects_first() {
    let sim = SimServer::start().await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(sim.client(), "default");
    api.create(&PostParams::default(), &config_map("a")).await.unwrap();
    let informer = Informer::new(Api::namespaced(sim.client(), "default"));
    informer.start();
    informer.synced().await;
    let late = recorder(&informer);
    let b = api.create(&PostParams::default(), &config_map("b")).await.unwrap();
    synced_to(&informer, &b).await;
    assert_eq!(*late.lock(), ["ADDED a", "ADDED b"]);
}

#[tokio::test]
async fn a_panicking_handler_is_counted_and_the_others_still_run() {
    let sim = SimServer::start().await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(sim.client(), "default");
    let informer = Informer::new(Api::namespaced(sim.client(), "default"));
    informer.add_handler(|_: &InformerEvent<ConfigMap>| panic!("a buggy handler"));
    let log = recorder(&informer);
    informer.start();
    informer.synced().await;
    let a = api.create(&PostParams::default(), &config_map("a")).await.unwrap();
    synced_to(&informer, &a).await;
    assert_eq!(*log.lock(), ["ADDED a"]);
    assert_eq!(informer.stats().handler_panics, 1);
}

#[tokio::test]
async fn managed_fields_are_not_cached_and_updates_report_generation_changes() {
    let sim = SimServer::start().await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(sim.client(), "default");
    let informer = Informer::new(Api::namespaced(sim.client(), "default"));
    let generation_changes = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&generation_changes);
    informer
        .add_handler(move |event: &InformerEvent<ConfigMap>| sink.lock().push(event.generation_changed()));
    informer.start();
    informer.synced().await;
    let created = api.create(&PostParams::default(), &config_map("a")).await.unwrap();
    let relabelled = api
        .patch("a", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {"x": "y"}}})))
        .await
        .unwrap();
    synced_to(&informer, &relabelled).await;
    assert!(created.metadata.managed_fields.is_some(), "the server does send managedFields");
    let cached = informer.cache().get(&ObjectKey::namespaced("default", "a")).unwrap();
    assert!(cached.metadata.managed_fields.is_none());
    assert_eq!(cached.metadata.labels.as_ref().unwrap()["x"], "y");
    // A ConfigMap has no generation: a metadata-only update is not a generation change.
    assert_eq!(*generation_changes.lock(), [true, false]);
}

#[tokio::test]
async fn a_label_selected_informer_sees_objects_enter_and_leave_the_selection() {
    use dbcluster_operator::runtime::cache::strip_managed_fields;
    use dbcluster_operator::runtime::reflector::ReflectorConfig;
    let sim = SimServer::start().await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(sim.client(), "default");
    let informer = Informer::with_config(
        Api::namespaced(sim.client(), "default"),
        ReflectorConfig { label_selector: Some("app=db".into()), ..ReflectorConfig::default() },
        Arc::new(strip_managed_fields::<ConfigMap>),
    );
    let log = recorder(&informer);
    informer.start();
    informer.synced().await;
    api.create(&PostParams::default(), &config_map("a")).await.unwrap();
    let label = |value: Option<&str>| Patch::Merge(json!({"metadata": {"labels": {"app": value}}}));
    api.patch("a", &PatchParams::default(), &label(Some("db"))).await.unwrap();
    let left = api.patch("a", &PatchParams::default(), &label(None)).await.unwrap();
    synced_to(&informer, &left).await;
    assert_eq!(*log.lock(), ["ADDED a", "DELETED a"]);
    assert!(informer.cache().is_empty());
}
