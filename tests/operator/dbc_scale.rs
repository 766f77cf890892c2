//! The DatabaseCluster CRD's scale subresource: `kubectl scale dbc <name> --replicas=N` (a patch of
//! `…/scale`) sets `spec.replicas`, and the Scale's status reads `status.replicas`.
#![cfg(feature = "sim")]

use crate::common;

use common::*;
use kube::api::{Patch, PatchParams, PostParams};

#[tokio::test]
async fn scaling_a_database_cluster_sets_its_replicas() {
    let cluster = TestCluster::start().await;
    let api = cluster.clusters();
    api.create(&PostParams::default(), &sample()).await.unwrap();
    let scale = api.get_scale("production-postgres").await.unwrap();
    assert_eq!(scale.spec.and_then(|s| s.replicas), Some(3));
    let patch = serde_json::json!({"spec": {"replicas": 5}});
    api.patch_scale("production-postgres", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    assert_eq!(api.get("production-postgres").await.unwrap().spec.replicas, 5);
    let zero = serde_json::json!({"spec": {"replicas": 0}});
    api.patch_scale("production-postgres", &PatchParams::default(), &Patch::Merge(&zero)).await.unwrap();
    assert_eq!(api.get("production-postgres").await.unwrap().spec.replicas, 0, "0 hibernates");
}
