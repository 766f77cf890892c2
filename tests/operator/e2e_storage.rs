//! Storage growth, end to end on the timer kubelet: a larger `storageSize` grows every instance's
//! claim (request and capacity) while the StatefulSet's immutable template keeps the old size,
//! with `Resizing` True until the volumes have grown and then False; on a StorageClass that does
//! not allow expansion (`fixed`), `Resizing=False, ExpansionNotSupported` says why, one Warning
//! Event is published, and the refused patch is not retried. `pvcRetention: Delete` deletes the
//! volumes of removed instances and of a deleted cluster, never of a hibernated one.
#![cfg(feature = "sim")]

use crate::common;

use std::time::Duration;

use common::*;
use dbcluster_operator::databasecluster::api::types::DatabaseCluster;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;

const NAME: &str = "production-postgres";
const FIXED: &str = "fixed-postgres";

fn storage(
    quantities: Option<
        &std::collections::BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
    >,
) -> Option<String> {
    quantities?.get("storage").map(|q| q.0.clone())
}

async fn grow(cluster: &TestCluster, name: &str) {
    let patch = json!({"spec": {"storageSize": "2Gi"}});
    cluster.clusters().patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_larger_storage_size_grows_every_claim_and_a_fixed_class_says_why() {
    let cluster = TestCluster::start().await;
    let operator = cluster.start_operator().await;
    let api = cluster.clusters();
    api.create(&PostParams::default(), &sample()).await.unwrap();
    await_object(&api, NAME, "Running 3/3", |c| phase(c) == Some("Running") && ready(c) == 3).await;
    assert_eq!(condition(&api.get(NAME).await.unwrap(), "Resizing"), None, "no resize before a growth");

    grow(&cluster, NAME).await;
    let resizing = |status: &str, reason: &str| {
        let want = Some((status.to_owned(), reason.to_owned()));
        move |c: &DatabaseCluster| condition(c, "Resizing") == want
    };
    await_object(&api, NAME, "Resizing=True", resizing("True", "ResizeInProgress")).await;
    await_object(&api, NAME, "Resizing=False", resizing("False", "ResizeComplete")).await;
    let pvcs: Api<PersistentVolumeClaim> = cluster.api();
    for ordinal in 0..3 {
        let claim = pvcs.get(&format!("data-{NAME}-{ordinal}")).await.unwrap();
        let request = storage(claim.spec.and_then(|s| s.resources).and_then(|r| r.requests).as_ref());
        let capacity = storage(claim.status.and_then(|s| s.capacity).as_ref());
        assert_eq!((request.as_deref(), capacity.as_deref()), (Some("2Gi"), Some("2Gi")), "claim {ordinal}");
    }
    let sts: Api<StatefulSet> = cluster.api();
    let template = sts.get(NAME).await.unwrap().spec.unwrap().volume_claim_templates.unwrap();
    let template_size =
        storage(template[0].spec.clone().and_then(|s| s.resources).and_then(|r| r.requests).as_ref());
    assert_eq!(template_size.as_deref(), Some("1Gi"), "the immutable template keeps its size");

    // A class without allowVolumeExpansion: the condition says why, once, and nothing retries.
    let mut fixed = sample();
    fixed.metadata.name = Some(FIXED.into());
    fixed.spec.replicas = 1;
    fixed.spec.storage_class_name = Some("fixed".into());
    api.create(&PostParams::default(), &fixed).await.unwrap();
    await_object(&api, FIXED, "Running 1/1", |c| phase(c) == Some("Running") && ready(c) == 1).await;
    grow(&cluster, FIXED).await;
    let refused =
        await_object(&api, FIXED, "ExpansionNotSupported", resizing("False", "ExpansionNotSupported")).await;
    let message =
        &refused.status.unwrap().conditions.into_iter().find(|c| c.type_ == "Resizing").unwrap().message;
    assert!(message.contains("must support resize"), "{message}");
    await_event_reasons(&cluster, FIXED, &["ExpansionNotSupported"]).await;
    let claim = format!("data-{FIXED}-0");
    let claim_patches = || {
        cluster
            .writes()
            .iter()
            .filter(|r| r.resource == "persistentvolumeclaims" && r.name.as_deref() == Some(claim.as_str()))
            .count()
    };
    assert_eq!(claim_patches(), 1, "one refused patch");
    tokio::time::sleep(Duration::from_secs(60)).await;
    reconcile_now(&operator, &key(FIXED)).await;
    assert_eq!(claim_patches(), 1, "the refused growth is not retried");
    let warnings = cluster.events_about(FIXED).await;
    let warnings = warnings.iter().filter(|e| e.reason.as_deref() == Some("ExpansionNotSupported")).count();
    assert_eq!(warnings, 1, "one Warning Event");
    let request = storage(
        pvcs.get(&claim).await.unwrap().spec.and_then(|s| s.resources).and_then(|r| r.requests).as_ref(),
    );
    assert_eq!(request.as_deref(), Some("1Gi"));
    assert_eq!(operator.errors(), 0);
    operator.stop().await;
}

/// `pvcRetention: Delete`: a scale down deletes the removed instances' volumes, hibernation
/// (zero replicas) keeps every volume, and deleting the cluster deletes the rest; the default
/// (`Retain`) is covered where clusters are re-created over their kept volumes (e2e_topology).
#[tokio::test(start_paused = true)]
async fn pvc_retention_delete_follows_scale_down_and_deletion_but_not_hibernation() {
    let cluster = TestCluster::start().await;
    let operator = cluster.start_operator().await;
    let api = cluster.clusters();
    let mut db = sample();
    db.spec.pvc_retention = Some(dbcluster_operator::databasecluster::api::types::PvcRetention::Delete);
    api.create(&PostParams::default(), &db).await.unwrap();
    await_object(&api, NAME, "Running 3/3", |c| phase(c) == Some("Running") && ready(c) == 3).await;
    let pvcs: Api<PersistentVolumeClaim> = cluster.api();
    let claim = |ordinal: usize| format!("data-{NAME}-{ordinal}");
    let scale = |replicas: i32| json!({"spec": {"replicas": replicas}});

    api.patch(NAME, &PatchParams::default(), &Patch::Merge(scale(2))).await.unwrap();
    await_absent(&pvcs, &claim(2), "the removed instance's volume deleted").await;
    let uids = || async {
        let mut uids = Vec::new();
        for ordinal in 0..2 {
            uids.push(pvcs.get_opt(&claim(ordinal)).await.unwrap().and_then(|c| c.metadata.uid));
        }
        uids
    };
    let before = uids().await;
    api.patch(NAME, &PatchParams::default(), &Patch::Merge(scale(0))).await.unwrap();
    await_object(&api, NAME, "Hibernated", |c| phase(c) == Some("Hibernated")).await;
    api.patch(NAME, &PatchParams::default(), &Patch::Merge(scale(2))).await.unwrap();
    await_object(&api, NAME, "Running 2/2 again", |c| phase(c) == Some("Running") && ready(c) == 2).await;
    assert_eq!(uids().await, before, "hibernation kept the same volumes (none deleted and re-created)");

    api.delete(NAME, &Default::default()).await.unwrap();
    for ordinal in 0..2 {
        await_absent(&pvcs, &claim(ordinal), "the volumes deleted with the cluster").await;
    }
    assert_eq!(operator.errors(), 0);
    operator.stop().await;
}

/// A claim that is not bound (its StorageClass does not exist) keeps its request, which the API
/// server would refuse to change: the growth waits for it, and nothing is patched or retried.
#[tokio::test(start_paused = true)]
async fn an_unbound_claim_is_not_grown_until_it_is_bound() {
    let cluster = TestCluster::start().await;
    let operator = cluster.start_operator().await;
    let api = cluster.clusters();
    let mut unbindable = sample();
    unbindable.spec.replicas = 1;
    unbindable.spec.storage_class_name = Some("no-such-class".into());
    api.create(&PostParams::default(), &unbindable).await.unwrap();
    let pvcs: Api<PersistentVolumeClaim> = cluster.api();
    let claim = format!("data-{NAME}-0");
    await_object(&pvcs, &claim, "the claim, Pending", |c: &PersistentVolumeClaim| {
        c.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Pending")
    })
    .await;

    // The API server refuses to change an unbound claim's request.
    let patch = Patch::Merge(json!({"spec": {"resources": {"requests": {"storage": "2Gi"}}}}));
    let refused = pvcs.patch(&claim, &PatchParams::default(), &patch).await.unwrap_err();
    assert!(refused.to_string().contains("except resources.requests for bound claims"), "{refused}");
    let claim_writes =
        || cluster.writes().iter().filter(|r| r.name.as_deref() == Some(claim.as_str())).count();
    let before = claim_writes();

    grow(&cluster, NAME).await;
    let waiting = await_object(&api, NAME, "Resizing=True", |c: &DatabaseCluster| {
        condition(c, "Resizing") == Some(("True".into(), "ResizeInProgress".into()))
    })
    .await;
    let message =
        waiting.status.unwrap().conditions.into_iter().find(|c| c.type_ == "Resizing").unwrap().message;
    assert!(message.contains(&claim), "{message}");
    tokio::time::sleep(Duration::from_secs(60)).await;
    reconcile_now(&operator, &key(NAME)).await;
    assert_eq!(claim_writes(), before, "no patch of an unbound claim");
    assert_eq!(operator.errors(), 0);
    operator.stop().await;
}
