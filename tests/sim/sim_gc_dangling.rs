//! The simulated garbage collector deletes an object created with an ownerReference to an owner
//! that was deleted, as the kube-controller-manager does (a controller reading a stale cache may
//! create a child just after its owner was deleted).
#![cfg(feature = "sim")]

use crate::common;

use dbcluster_operator::sim::SimServer;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;

fn owned(name: &str, owner_uid: &str) -> Secret {
    serde_json::from_value(json!({"metadata": {"name": name, "ownerReferences": [{
        "apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner_uid, "controller": true
    }]}}))
    .unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_child_created_after_its_owner_was_deleted_is_collected() {
    let sim = SimServer::start().await.unwrap();
    let config_maps: Api<ConfigMap> = Api::default_namespaced(sim.client());
    let secrets: Api<Secret> = Api::default_namespaced(sim.client());
    let mut owner = ConfigMap::default();
    owner.metadata.name = Some("owner".into());
    let owner = config_maps.create(&PostParams::default(), &owner).await.unwrap();
    let uid = owner.metadata.uid.unwrap();
    secrets.create(&PostParams::default(), &owned("kept", &uid)).await.unwrap();
    config_maps.delete("owner", &DeleteParams::default()).await.unwrap();
    secrets.create(&PostParams::default(), &owned("late", &uid)).await.unwrap();
    for name in ["kept", "late"] {
        common::await_absent(&secrets, name, &format!("{name} to be collected")).await;
    }
}
