//! Drift, end to end: the operator corrects a hand edit of a field it owns, recreates a deleted
//! child, keeps what users and other controllers add, and never changes the app Secret's
//! password — not across passes, not across a restart of the operator.
#![cfg(feature = "sim")]

use crate::common;

use common::*;
use dbcluster_operator::databasecluster::api::types::DatabaseCluster;
use dbcluster_operator::databasecluster::specs::services::ROLE_LABEL;
use dbcluster_operator::runtime::ObjectKey;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Secret, Service};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

const NAME: &str = "production-postgres";
/// The pod-template annotation `kubectl rollout restart` sets.
const RESTARTED_AT: &str = "kubectl.kubernetes.io/restartedAt";

fn replicas(sts: &StatefulSet) -> Option<i32> {
    sts.spec.as_ref()?.replicas
}

fn user_patch() -> PatchParams {
    PatchParams { field_manager: Some("kubectl-edit".into()), ..PatchParams::default() }
}

/// Writes to the StatefulSet logged since `from`.
fn statefulset_writes(cluster: &TestCluster, from: usize) -> usize {
    cluster.writes()[from..].iter().filter(|r| r.resource == "statefulsets").count()
}

#[tokio::test(start_paused = true)]
async fn a_hand_edit_of_replicas_is_corrected_and_a_users_annotation_is_kept() {
    let cluster = TestCluster::start().await;
    let operator = cluster.start_operator().await;
    cluster.clusters().create(&PostParams::default(), &sample()).await.unwrap();
    let statefulsets = cluster.api::<StatefulSet>();
    await_object(&statefulsets, NAME, "the StatefulSet", |sts| replicas(sts) == Some(3)).await;
    reconcile_now(&operator, &key(NAME)).await;

    // An annotation alone is someone else's field: the operator writes nothing.
    let writes_before = cluster.writes().len();
    // (and `kubectl rollout restart`'s annotation on the pod template, another manager's field).
    let annotate = Patch::Merge(json!({
        "metadata": {"annotations": {"team.example.com/owner": "payments"}},
        "spec": {"template": {"metadata": {"annotations": {RESTARTED_AT: "2026-11-29T17:00:00Z"}}}}
    }));
    statefulsets.patch(NAME, &user_patch(), &annotate).await.unwrap();
    let cache = operator.handles.statefulsets.cache();
    await_cached(cache, &key(NAME), "the annotation in the operator's cache", |sts| {
        let annotations = sts.expand().unwrap().metadata.annotations;
        annotations.is_some_and(|a| a.contains_key("team.example.com/owner"))
    })
    .await;
    reconcile_now(&operator, &key(NAME)).await;
    assert_eq!(statefulset_writes(&cluster, writes_before + 1), 0, "an annotation caused a write");

    // Replicas are the operator's: a hand edit is undone, and the annotation survives the write.
    let scale = Patch::Merge(json!({"spec": {"replicas": 7}}));
    statefulsets.patch(NAME, &user_patch(), &scale).await.unwrap();
    let corrected =
        await_object(&statefulsets, NAME, "replicas back to 3", |sts| replicas(sts) == Some(3)).await;
    let annotations = corrected.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(annotations.get("team.example.com/owner").map(String::as_str), Some("payments"));
    let template = corrected.spec.unwrap().template.metadata.unwrap();
    assert!(template.annotations.unwrap_or_default().contains_key(RESTARTED_AT), "the restart was reverted");
    let owner = &corrected.metadata.owner_references.unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.controller, owner.block_owner_deletion),
        ("DatabaseCluster", Some(true), Some(true))
    );
    let writes = cluster.writes();
    let correction = writes.iter().rev().find(|r| r.resource == "statefulsets" && r.verb == "patch").unwrap();
    assert_eq!(correction.subresource, None);

    // A child deleted by hand comes back.
    let services = cluster.api::<Service>();
    let uid = services.get(NAME).await.unwrap().metadata.uid;
    services.delete(NAME, &DeleteParams::default()).await.unwrap();
    await_object(&services, NAME, "the Service recreated", |svc| svc.metadata.uid != uid).await;
    operator.stop().await;
}

fn password(secret: &Secret) -> Vec<u8> {
    secret.data.as_ref().unwrap()["password"].0.clone()
}

#[tokio::test(start_paused = true)]
async fn the_password_never_changes_across_passes_edits_and_restarts() {
    let cluster = TestCluster::start().await;
    let operator = cluster.start_operator().await;
    let clusters = cluster.clusters();
    clusters.create(&PostParams::default(), &sample()).await.unwrap();
    let secrets = cluster.api::<Secret>();
    let secret = await_object(&secrets, "production-postgres-app", "the app Secret", |_| true).await;
    let original = password(&secret);
    assert_eq!(original.len(), 32);
    let keys: Vec<_> = secret.data.as_ref().unwrap().keys().cloned().collect();
    assert_eq!(
        keys,
        [
            "ca.crt",
            "dbname",
            "host",
            "jdbc-uri",
            "password",
            "pgpass",
            "port",
            "sslmode",
            "sslrootcert",
            "uri",
            "username"
        ]
    );

    // More passes, from a spec change and from explicit requeues.
    let scale = Patch::Merge(json!({"spec": {"replicas": 4}}));
    clusters.patch(NAME, &PatchParams::default(), &scale).await.unwrap();
    await_object(&cluster.api::<StatefulSet>(), NAME, "4 replicas", |sts| replicas(sts) == Some(4)).await;
    reconcile_now(&operator, &key(NAME)).await;
    assert_eq!(password(&secrets.get("production-postgres-app").await.unwrap()), original);

    // A user's label on the Secret is kept, and still nothing rewrites the password.
    let label = Patch::Merge(json!({"metadata": {"labels": {"backup.example.com/include": "true"}}}));
    secrets.patch("production-postgres-app", &user_patch(), &label).await.unwrap();
    reconcile_now(&operator, &key(NAME)).await;

    // A new operator process reads the password back instead of drawing a new one.
    operator.stop().await;
    let restarted = cluster.start_operator().await;
    reconcile_now(&restarted, &key(NAME)).await;
    let after = secrets.get("production-postgres-app").await.unwrap();
    assert_eq!(password(&after), original);
    assert_eq!(
        after.metadata.labels.unwrap().get("backup.example.com/include").map(String::as_str),
        Some("true")
    );
    let live: DatabaseCluster = clusters.get(NAME).await.unwrap();
    assert!(phase(&live).is_some());
    restarted.stop().await;
}

/// Writes to Services logged since `from`.
fn service_writes(cluster: &TestCluster, from: usize) -> usize {
    cluster.writes()[from..].iter().filter(|r| r.resource == "services").count()
}

/// The Services are cached as text (`Compact`): drift is still found in their spec and labels,
/// and still not in a user's annotation or label.
#[tokio::test(start_paused = true)]
async fn a_hand_edit_of_a_services_selector_is_corrected_and_a_users_label_is_kept() {
    const RW: &str = "production-postgres-rw";
    let cluster = TestCluster::start().await;
    let operator = cluster.start_operator().await;
    cluster.clusters().create(&PostParams::default(), &sample()).await.unwrap();
    let services = cluster.api::<Service>();
    let selector = |svc: &Service| svc.spec.as_ref().and_then(|s| s.selector.clone()).unwrap_or_default();
    let served = await_object(&services, RW, "the rw Service", |_| true).await;
    let owned_selector = selector(&served);
    reconcile_now(&operator, &key(NAME)).await;

    // A user's label and annotation: someone else's fields, no write.
    let writes_before = cluster.writes().len();
    let mark = Patch::Merge(json!({"metadata": {
        "labels": {"team.example.com/tier": "gold"},
        "annotations": {"team.example.com/owner": "payments"},
    }}));
    services.patch(RW, &user_patch(), &mark).await.unwrap();
    let cache = operator.handles.services.cache();
    let rw = ObjectKey::namespaced("default", RW);
    await_cached(cache, &rw, "the label in the operator's cache", |svc| {
        svc.expand().unwrap().metadata.labels.unwrap_or_default().contains_key("team.example.com/tier")
    })
    .await;
    reconcile_now(&operator, &key(NAME)).await;
    assert_eq!(service_writes(&cluster, writes_before + 1), 0, "a user's label or annotation caused a write");

    // The selector is the operator's: a hand edit is undone, the user's label survives.
    let retarget = Patch::Merge(json!({"spec": {"selector": {ROLE_LABEL: "replica"}}}));
    services.patch(RW, &user_patch(), &retarget).await.unwrap();
    let corrected =
        await_object(&services, RW, "the selector restored", |svc| selector(svc) == owned_selector).await;
    let labels = corrected.metadata.labels.unwrap_or_default();
    assert_eq!(labels.get("team.example.com/tier").map(String::as_str), Some("gold"));
    operator.stop().await;
}
