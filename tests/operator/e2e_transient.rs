//! A transient failure, end to end: the API server answers the operator's status patches with 500
//! for a while; the passes fail and are retried with backoff (one aggregated Warning Event), then
//! succeed, and nothing is lost: the cluster ends Running at the new size with a fresh status.
#![cfg(feature = "sim")]

use crate::common;

use common::*;
use k8s_openapi::api::apps::v1::StatefulSet;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;

const NAME: &str = "production-postgres";

#[tokio::test(start_paused = true)]
async fn failed_status_patches_are_retried_with_backoff_until_they_succeed() {
    let cluster = TestCluster::start().await;
    let operator = cluster.start_operator().await;
    let api = cluster.clusters();
    api.create(&PostParams::default(), &sample()).await.unwrap();
    await_object(&api, NAME, "Running 3/3", |c| phase(c) == Some("Running") && ready(c) == 3).await;
    reconcile_now(&operator, &key(NAME)).await;
    assert_eq!(operator.errors(), 0);

    cluster.sim.faults().fail_next("databaseclusters/status", 4, 500);
    let scaled =
        api.patch(NAME, &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": 4}}))).await;
    let generation = scaled.unwrap().metadata.generation;
    let running =
        await_object(&api, NAME, "Running 4/4", |c| phase(c) == Some("Running") && ready(c) == 4).await;

    assert_eq!(running.status.as_ref().unwrap().observed_generation, generation);
    let sts = cluster.api::<StatefulSet>().get(NAME).await.unwrap();
    assert_eq!(sts.spec.unwrap().replicas, Some(4));
    // Three passes fail; after the third the operator tries to record the error in the status,
    // and that patch takes the fourth 500.
    assert_eq!(operator.errors(), 3, "each failed status patch failed its pass");
    let conditions = &running.status.as_ref().unwrap().conditions;
    assert!(conditions.iter().all(|c| c.type_ != "ReconcileSucceeded"), "the error's own write failed too");
    assert_eq!(operator.terminal_errors(), 0, "a 500 is retried");
    reconcile_now(&operator, &key(NAME)).await;
    assert_eq!(operator.handles.queue.num_requeues(&key(NAME)), 0, "success resets the backoff");
    let warnings = cluster.events_with_reason(NAME, "ReconcileError").await;
    assert_eq!(warnings.len(), 1, "repeated identical errors are one Event: {warnings:?}");
    assert_eq!(warnings[0].type_.as_deref(), Some("Warning"));
    let status_failures = cluster
        .sim
        .request_log()
        .iter()
        .filter(|r| r.resource == "databaseclusters" && r.subresource.as_deref() == Some("status"))
        .count();
    assert!(status_failures >= 5, "the failed patches were retried");
    operator.stop().await;
}
