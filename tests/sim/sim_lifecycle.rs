//! Deletion as a real cluster does it, through the `kube` client: finalizers and
//! deletionTimestamp, ownerReference garbage collection with each propagation policy, and
//! namespace termination. Background work is awaited through watches, never slept on.
#![cfg(feature = "sim")]

use crate::common;

use dbcluster_operator::sim::SimServer;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, PropagationPolicy, WatchEvent, WatchParams,
};
use kube::core::ObjectMeta;
use serde_json::json;

fn owned_secret(name: &str, owner: &ConfigMap) -> Secret {
    serde_json::from_value(json!({
        "metadata": {
            "name": name,
            "ownerReferences": [{
                "apiVersion": "v1", "kind": "ConfigMap",
                "name": owner.metadata.name, "uid": owner.metadata.uid,
                "controller": true, "blockOwnerDeletion": true
            }]
        }
    }))
    .unwrap()
}

fn config_map(name: &str, finalizers: &[&str]) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            finalizers: Some(finalizers.iter().map(|f| f.to_string()).collect()),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// Waits until a watch of `api` from `from_rv` reports an event satisfying `done`.
async fn await_event<K>(api: &Api<K>, from_rv: &str, done: impl Fn(&WatchEvent<K>) -> bool)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let mut stream = api.watch(&WatchParams::default().disable_bookmarks(), from_rv).await.unwrap().boxed();
    common::within("the awaited watch event", async {
        while let Some(event) = stream.try_next().await.unwrap() {
            if done(&event) {
                return;
            }
        }
        panic!("the watch ended before the awaited event");
    })
    .await
}

/// Waits until a watch of `api` reports `name` deleted.
async fn await_deleted<K>(api: &Api<K>, name: &str, from_rv: &str)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    await_event(
        api,
        from_rv,
        |e| matches!(e, WatchEvent::Deleted(o) if o.meta().name.as_deref() == Some(name)),
    )
    .await
}

#[tokio::test]
async fn finalizers_keep_a_deleted_object_until_the_last_is_removed() {
    let sim = SimServer::start().await.unwrap();
    let cms: Api<ConfigMap> = Api::default_namespaced(sim.client());
    cms.create(&PostParams::default(), &config_map("held", &["example.com/a", "example.com/b"]))
        .await
        .unwrap();
    let marked = cms.delete("held", &DeleteParams::default()).await.unwrap();
    let marked = marked.left().expect("a marked object comes back as the object");
    assert!(marked.metadata.deletion_timestamp.is_some());
    let got = cms.get("held").await.unwrap();
    assert!(got.metadata.deletion_timestamp.is_some());

    // A finalizer cannot be added while deleting.
    let add = json!({"metadata": {"finalizers": ["example.com/a", "example.com/b", "example.com/c"]}});
    match cms.patch("held", &PatchParams::default(), &Patch::Merge(add)).await {
        Err(kube::Error::Api(s)) => assert_eq!(s.code, 422),
        other => panic!("expected 422, got {other:?}"),
    }
    let one = json!({"metadata": {"finalizers": ["example.com/b"]}});
    let still = cms.patch("held", &PatchParams::default(), &Patch::Merge(one)).await.unwrap();
    assert!(still.metadata.deletion_timestamp.is_some());
    let rv = still.metadata.resource_version.clone().unwrap();
    let none = json!({"metadata": {"finalizers": null}});
    cms.patch("held", &PatchParams::default(), &Patch::Merge(none)).await.unwrap();
    await_deleted(&cms, "held", &rv).await;
    assert!(cms.get_opt("held").await.unwrap().is_none());
}

#[tokio::test]
async fn background_deletion_collects_dependents() {
    let sim = SimServer::start().await.unwrap();
    let cms: Api<ConfigMap> = Api::default_namespaced(sim.client());
    let secrets: Api<Secret> = Api::default_namespaced(sim.client());
    let owner = cms.create(&PostParams::default(), &config_map("owner", &[])).await.unwrap();
    let dep = secrets.create(&PostParams::default(), &owned_secret("dep", &owner)).await.unwrap();
    let gone = cms.delete("owner", &DeleteParams::background()).await.unwrap();
    assert!(gone.is_left());
    await_deleted(&secrets, "dep", dep.metadata.resource_version.as_deref().unwrap()).await;
}

#[tokio::test]
async fn foreground_deletion_removes_dependents_before_the_owner() {
    let sim = SimServer::start().await.unwrap();
    let cms: Api<ConfigMap> = Api::default_namespaced(sim.client());
    let secrets: Api<Secret> = Api::default_namespaced(sim.client());
    let owner = cms.create(&PostParams::default(), &config_map("owner", &[])).await.unwrap();
    let mut dep = owned_secret("dep", &owner);
    dep.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    let dep_rv =
        secrets.create(&PostParams::default(), &dep).await.unwrap().metadata.resource_version.unwrap();

    let marked = cms.delete("owner", &DeleteParams::foreground()).await.unwrap().left().unwrap();
    assert!(marked.metadata.finalizers.unwrap().contains(&"foregroundDeletion".to_string()));
    let rv = marked.metadata.resource_version.unwrap();
    // The dependent is being deleted, held by its own finalizer; the owner waits for it.
    await_event(
        &secrets,
        &dep_rv,
        |e| matches!(e, WatchEvent::Modified(s) if s.metadata.deletion_timestamp.is_some()),
    )
    .await;
    assert!(cms.get("owner").await.unwrap().metadata.deletion_timestamp.is_some());
    secrets
        .patch("dep", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"finalizers": null}})))
        .await
        .unwrap();
    await_deleted(&cms, "owner", &rv).await;
}

#[tokio::test]
async fn orphan_deletion_keeps_dependents_without_the_owner_reference() {
    let sim = SimServer::start().await.unwrap();
    let cms: Api<ConfigMap> = Api::default_namespaced(sim.client());
    let secrets: Api<Secret> = Api::default_namespaced(sim.client());
    let owner = cms.create(&PostParams::default(), &config_map("owner", &[])).await.unwrap();
    let dep = secrets.create(&PostParams::default(), &owned_secret("dep", &owner)).await.unwrap();
    let dp = DeleteParams { propagation_policy: Some(PropagationPolicy::Orphan), ..Default::default() };
    cms.delete("owner", &dp).await.unwrap();
    let mut stream = secrets
        .watch(&WatchParams::default().disable_bookmarks(), dep.metadata.resource_version.as_deref().unwrap())
        .await
        .unwrap()
        .boxed();
    match stream.try_next().await.unwrap() {
        Some(WatchEvent::Modified(s)) => assert!(s.metadata.owner_references.is_none()),
        other => panic!("expected the dependent to lose its ownerReference, got {other:?}"),
    }
}

#[tokio::test]
async fn a_deleted_namespace_terminates_then_goes_with_its_contents() {
    let sim = SimServer::start().await.unwrap();
    let namespaces: Api<Namespace> = Api::all(sim.client());
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "doomed"}})).unwrap();
    namespaces.create(&PostParams::default(), &ns).await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(sim.client(), "doomed");
    cms.create(&PostParams::default(), &config_map("a", &[])).await.unwrap();
    // A finalizer on its content keeps the namespace terminating, refusing new content.
    cms.create(&PostParams::default(), &config_map("held", &["example.com/hold"])).await.unwrap();
    let marked = namespaces.delete("doomed", &DeleteParams::default()).await.unwrap().left().unwrap();
    assert_eq!(marked.status.unwrap().phase.as_deref(), Some("Terminating"));
    match cms.create(&PostParams::default(), &config_map("late", &[])).await {
        Err(kube::Error::Api(s)) => assert_eq!((s.code, s.reason.as_str()), (403, "Forbidden")),
        other => panic!("expected 403, got {other:?}"),
    }
    cms.patch("held", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"finalizers": null}})))
        .await
        .unwrap();
    await_deleted(&namespaces, "doomed", marked.metadata.resource_version.as_deref().unwrap()).await;
    assert!(cms.list(&ListParams::default()).await.unwrap().items.is_empty());
}

#[tokio::test]
async fn preconditions_on_delete_are_checked() {
    let sim = SimServer::start().await.unwrap();
    let cms: Api<ConfigMap> = Api::default_namespaced(sim.client());
    cms.create(&PostParams::default(), &config_map("a", &[])).await.unwrap();
    let dp = DeleteParams {
        preconditions: Some(kube::api::Preconditions {
            uid: Some("not-the-uid".into()),
            resource_version: None,
        }),
        ..Default::default()
    };
    match cms.delete("a", &dp).await {
        Err(kube::Error::Api(s)) => assert_eq!(s.code, 409),
        other => panic!("expected 409, got {other:?}"),
    }
}

#[tokio::test]
async fn the_default_namespace_may_not_be_deleted() {
    let sim = SimServer::start().await.unwrap();
    let namespaces: Api<Namespace> = Api::all(sim.client());
    match namespaces.delete("default", &DeleteParams::default()).await {
        Err(kube::Error::Api(s)) => assert_eq!((s.code, s.reason.as_str()), (403, "Forbidden")),
        other => panic!("expected 403, got {other:?}"),
    }
}
