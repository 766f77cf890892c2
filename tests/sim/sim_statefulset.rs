//! The simulated StatefulSet controller and kubelet through the `kube` client, on a paused
//! clock: ordered creation and readiness after `pod_ready_delay`, status fields, PVCs, scale
//! down from the highest ordinal, rolling update from the highest ordinal honouring
//! `partition`, and garbage collection of the pods with their StatefulSet.
#![cfg(feature = "sim")]

use crate::common;

use std::time::Duration;

use dbcluster_operator::sim::{SimConfig, SimServer};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use serde_json::json;

const DELAY: Duration = Duration::from_secs(5);

async fn start() -> SimServer {
    SimServer::start_with(SimConfig { pod_ready_delay: DELAY, ..SimConfig::default() }).await.unwrap()
}

fn stateful_set(replicas: i32) -> StatefulSet {
    serde_json::from_value(json!({
        "metadata": {"name": "db"},
        "spec": {
            "replicas": replicas,
            "serviceName": "db-headless",
            "selector": {"matchLabels": {"app": "db"}},
            "template": {
                "metadata": {"labels": {"app": "db"}},
                "spec": {"containers": [{"name": "postgres", "image": "postgres:15.4"}]}
            },
            "volumeClaimTemplates": [{
                "metadata": {"name": "data"},
                "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
            }]
        }
    }))
    .unwrap()
}

/// `sts` with its claim template naming the StorageClass `class`.
fn with_claim_class(mut sts: StatefulSet, class: &str) -> StatefulSet {
    let template = &mut sts.spec.as_mut().unwrap().volume_claim_templates.as_mut().unwrap()[0];
    template.spec.as_mut().unwrap().storage_class_name = Some(class.into());
    sts
}

fn ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// A pod event as `ADDED db-0`, `READY db-0`, `DELETED db-2` (other modifications are skipped).
fn describe(e: &WatchEvent<Pod>) -> Option<String> {
    match e {
        WatchEvent::Added(p) => Some(format!("ADDED {}", p.metadata.name.as_deref()?)),
        WatchEvent::Modified(p) if ready(p) => Some(format!("READY {}", p.metadata.name.as_deref()?)),
        WatchEvent::Deleted(p) => Some(format!("DELETED {}", p.metadata.name.as_deref()?)),
        _ => None,
    }
}

/// Collects `n` described pod events from a watch starting at `rv`.
async fn pod_events(pods: &Api<Pod>, rv: &str, n: usize) -> Vec<String> {
    let mut stream = pods.watch(&WatchParams::default().disable_bookmarks(), rv).await.unwrap().boxed();
    let mut seen = Vec::new();
    common::within("the pod watch events", async {
        while seen.len() < n {
            let e = stream.try_next().await.unwrap().expect("watch ended");
            seen.extend(describe(&e));
        }
    })
    .await;
    seen
}

/// Waits until the StatefulSet's status satisfies `done`; returns it.
async fn await_sts(sts: &Api<StatefulSet>, done: impl Fn(&StatefulSet) -> bool) -> StatefulSet {
    let current = sts.get("db").await.unwrap();
    if done(&current) {
        return current;
    }
    let rv = current.metadata.resource_version.unwrap();
    let mut stream = sts.watch(&WatchParams::default().disable_bookmarks(), &rv).await.unwrap().boxed();
    common::within("the StatefulSet's status", async {
        loop {
            if let Some(WatchEvent::Modified(s) | WatchEvent::Added(s)) = stream.try_next().await.unwrap()
                && done(&s)
            {
                return s;
            }
        }
    })
    .await
}

fn status(s: &StatefulSet) -> &k8s_openapi::api::apps::v1::StatefulSetStatus {
    s.status.as_ref().unwrap()
}

async fn list_rv(pods: &Api<Pod>) -> String {
    pods.list(&ListParams::default()).await.unwrap().metadata.resource_version.unwrap()
}

#[tokio::test(start_paused = true)]
async fn pods_are_created_in_order_each_after_the_previous_is_ready() {
    let sim = start().await;
    let sts: Api<StatefulSet> = Api::default_namespaced(sim.client());
    let pods: Api<Pod> = Api::default_namespaced(sim.client());
    let rv = list_rv(&pods).await;
    let started = tokio::time::Instant::now();
    sts.create(&PostParams::default(), &stateful_set(3)).await.unwrap();
    let events = pod_events(&pods, &rv, 6).await;
    assert_eq!(events, ["ADDED db-0", "READY db-0", "ADDED db-1", "READY db-1", "ADDED db-2", "READY db-2"]);
    assert!(started.elapsed() >= DELAY * 3);

    let done = await_sts(&sts, |s| status(s).ready_replicas == Some(3)).await;
    let st = status(&done);
    assert_eq!((st.replicas, st.updated_replicas, st.current_replicas), (3, Some(3), Some(3)));
    assert_eq!(st.current_revision, st.update_revision);
    assert_eq!(st.observed_generation, Some(1));

    let pod = pods.get("db-1").await.unwrap();
    let labels = pod.metadata.labels.unwrap();
    assert_eq!(labels.get("controller-revision-hash"), st.update_revision.as_ref());
    assert_eq!(pod.spec.as_ref().unwrap().hostname.as_deref(), Some("db-1"));
    let owner = &pod.metadata.owner_references.unwrap()[0];
    assert_eq!((owner.kind.as_str(), owner.controller), ("StatefulSet", Some(true)));

    let pvcs: Api<PersistentVolumeClaim> = Api::default_namespaced(sim.client());
    let pvc = pvcs.get("data-db-2").await.unwrap();
    assert_eq!(pvc.status.unwrap().phase.as_deref(), Some("Bound"));
}

#[tokio::test(start_paused = true)]
async fn scale_down_removes_the_highest_ordinals_first() {
    let sim = start().await;
    let sts: Api<StatefulSet> = Api::default_namespaced(sim.client());
    let pods: Api<Pod> = Api::default_namespaced(sim.client());
    sts.create(&PostParams::default(), &stateful_set(3)).await.unwrap();
    await_sts(&sts, |s| status(s).ready_replicas == Some(3)).await;
    let rv = list_rv(&pods).await;
    sts.patch("db", &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": 1}}))).await.unwrap();
    assert_eq!(pod_events(&pods, &rv, 2).await, ["DELETED db-2", "DELETED db-1"]);
    let done = await_sts(&sts, |s| status(s).replicas == 1).await;
    assert_eq!(status(&done).observed_generation, Some(2));
}

#[tokio::test(start_paused = true)]
async fn rolling_update_goes_from_the_highest_ordinal_down_to_the_partition() {
    let sim = start().await;
    let sts: Api<StatefulSet> = Api::default_namespaced(sim.client());
    let pods: Api<Pod> = Api::default_namespaced(sim.client());
    sts.create(&PostParams::default(), &stateful_set(3)).await.unwrap();
    let before = await_sts(&sts, |s| status(s).ready_replicas == Some(3)).await;
    let old_revision = status(&before).current_revision.clone().unwrap();

    let rv = list_rv(&pods).await;
    let change = json!({"spec": {
        "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 1}},
        "template": {"spec": {"containers": [{"name": "postgres", "image": "postgres:15.6"}]}}
    }});
    sts.patch("db", &PatchParams::default(), &Patch::Merge(change)).await.unwrap();
    let events = pod_events(&pods, &rv, 6).await;
    assert_eq!(
        events,
        ["DELETED db-2", "ADDED db-2", "READY db-2", "DELETED db-1", "ADDED db-1", "READY db-1"]
    );
    let partial =
        await_sts(&sts, |s| status(s).updated_replicas == Some(2) && status(s).ready_replicas == Some(3))
            .await;
    let st = status(&partial);
    assert_eq!(st.current_revision.as_deref(), Some(old_revision.as_str()), "the rollout is not complete");
    assert_ne!(st.update_revision.as_deref(), Some(old_revision.as_str()));
    let image = |p: &Pod| p.spec.as_ref().unwrap().containers[0].image.clone().unwrap();
    assert_eq!(image(&pods.get("db-0").await.unwrap()), "postgres:15.4", "below the partition");
    assert_eq!(image(&pods.get("db-1").await.unwrap()), "postgres:15.6");

    let finish = json!({"spec": {"updateStrategy": {"rollingUpdate": {"partition": 0}}}});
    sts.patch("db", &PatchParams::default(), &Patch::Merge(finish)).await.unwrap();
    let done = await_sts(&sts, |s| {
        status(s).current_revision == status(s).update_revision && status(s).updated_replicas == Some(3)
    })
    .await;
    assert_eq!(status(&done).ready_replicas, Some(3));
    assert_eq!(image(&pods.get("db-0").await.unwrap()), "postgres:15.6");
}

/// With `OnDelete` a real 1.28 controller replaces deleted pods at the update revision but never
/// advances `currentRevision` (`completeRollingUpdate` in
/// pkg/controller/statefulset/stateful_set_utils.go acts for `RollingUpdate` only), so a roll
/// can be judged finished only from the pods.
#[tokio::test(start_paused = true)]
async fn on_delete_replaces_pods_at_the_update_revision_and_keeps_the_current_revision() {
    let sim = start().await;
    let sts: Api<StatefulSet> = Api::default_namespaced(sim.client());
    let pods: Api<Pod> = Api::default_namespaced(sim.client());
    let mut set = stateful_set(2);
    set.spec.as_mut().unwrap().update_strategy =
        Some(serde_json::from_value(json!({"type": "OnDelete"})).unwrap());
    sts.create(&PostParams::default(), &set).await.unwrap();
    let before = await_sts(&sts, |s| status(s).ready_replicas == Some(2)).await;
    let old_revision = status(&before).current_revision.clone().unwrap();
    assert_eq!(status(&before).update_revision.as_deref(), Some(old_revision.as_str()));

    let change = json!({"spec": {"template": {"spec": {"containers": [{"name": "postgres", "image": "postgres:15.6"}]}}}});
    sts.patch("db", &PatchParams::default(), &Patch::Merge(change)).await.unwrap();
    let changed = await_sts(&sts, |s| status(s).observed_generation == Some(2)).await;
    let new_revision = status(&changed).update_revision.clone().unwrap();
    assert_ne!(new_revision, old_revision);
    assert_eq!(status(&changed).updated_replicas, Some(0), "OnDelete replaces no pod by itself");

    for name in ["db-1", "db-0"] {
        pods.delete(name, &DeleteParams::default()).await.unwrap();
        let revision = |p: &Pod| p.metadata.labels.as_ref().unwrap()["controller-revision-hash"].clone();
        common::eventually(
            "the pod replaced at the update revision and ready",
            Duration::from_secs(60),
            || async {
                let pod = pods.get_opt(name).await.unwrap();
                match pod.filter(|p| {
                    ready(p) && revision(p) == new_revision && p.metadata.deletion_timestamp.is_none()
                }) {
                    Some(p) => Ok(p),
                    None => Err(()),
                }
            },
        )
        .await;
    }
    let done =
        await_sts(&sts, |s| status(s).updated_replicas == Some(2) && status(s).ready_replicas == Some(2))
            .await;
    let st = status(&done);
    assert_eq!(st.current_revision.as_deref(), Some(old_revision.as_str()), "never advanced with OnDelete");
    assert_eq!(st.update_revision.as_deref(), Some(new_revision.as_str()));
    assert_eq!((st.replicas, st.current_replicas), (2, Some(0)));
}

#[tokio::test(start_paused = true)]
async fn deleting_the_statefulset_collects_its_pods() {
    let sim = start().await;
    let sts: Api<StatefulSet> = Api::default_namespaced(sim.client());
    let pods: Api<Pod> = Api::default_namespaced(sim.client());
    sts.create(&PostParams { ..Default::default() }, &stateful_set(2)).await.unwrap();
    await_sts(&sts, |s| status(s).ready_replicas == Some(2)).await;
    let rv = list_rv(&pods).await;
    sts.delete("db", &DeleteParams::default()).await.unwrap();
    let mut deleted = pod_events(&pods, &rv, 2).await;
    deleted.sort();
    assert_eq!(deleted, ["DELETED db-0", "DELETED db-1"]);
}

#[tokio::test(start_paused = true)]
async fn volume_claim_templates_are_immutable_and_claims_grow_but_never_shrink() {
    let sim = start().await;
    let sts: Api<StatefulSet> = Api::default_namespaced(sim.client());
    sts.create(&PostParams::default(), &stateful_set(1)).await.unwrap();
    await_sts(&sts, |s| status(s).ready_replicas == Some(1)).await;

    let bigger = json!({"spec": {"volumeClaimTemplates": [{
        "metadata": {"name": "data"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "2Gi"}}}
    }]}});
    match sts.patch("db", &PatchParams::default(), &Patch::Merge(bigger)).await {
        Err(kube::Error::Api(s)) => {
            assert_eq!(s.code, 422);
            assert!(s.message.contains("updates to statefulset spec for fields other than"), "{}", s.message);
        }
        other => panic!("expected 422, got {other:?}"),
    }

    let pvcs: Api<PersistentVolumeClaim> = Api::default_namespaced(sim.client());
    let grow = json!({"spec": {"resources": {"requests": {"storage": "2Gi"}}}});
    let grown = pvcs.patch("data-db-0", &PatchParams::default(), &Patch::Merge(grow)).await.unwrap();
    let asked = tokio::time::Instant::now();
    let rv = grown.metadata.resource_version.unwrap();
    let mut stream = pvcs.watch(&WatchParams::default().disable_bookmarks(), &rv).await.unwrap().boxed();
    // The resize's own steps (the resizer's annotation, `Resizing`, `FileSystemResizePending`)
    // come first, with the old capacity; then the capacity grows, to exactly what was asked.
    common::within("the grown PVC's capacity", async {
        loop {
            if let Some(WatchEvent::Modified(p)) = stream.try_next().await.unwrap() {
                let capacity = p.status.unwrap().capacity.unwrap();
                if capacity["storage"].0 != "1Gi" {
                    assert_eq!(capacity["storage"].0, "2Gi");
                    break;
                }
            }
        }
    })
    .await;
    // A resize takes time, as a CSI resizer's does: never less than the simulator's delay.
    let took = asked.elapsed();
    assert!(took >= SimConfig::default().volume_expand_delay, "expanded after {took:?}");
    let shrink = json!({"spec": {"resources": {"requests": {"storage": "1Gi"}}}});
    match pvcs.patch("data-db-0", &PatchParams::default(), &Patch::Merge(shrink)).await {
        Err(kube::Error::Api(s)) => assert_eq!(s.code, 422),
        other => panic!("expected 422, got {other:?}"),
    }
}

/// The resize admission: a claim of a class without `allowVolumeExpansion` (`fixed`) may not grow
/// (403, the apiserver's words), while one of the default class (`standard`) may.
#[tokio::test(start_paused = true)]
async fn only_a_class_that_allows_expansion_lets_a_claim_grow() {
    let sim = start().await;
    let pvcs: Api<PersistentVolumeClaim> = Api::default_namespaced(sim.client());
    let claim = |name: &str, class: &str| -> PersistentVolumeClaim {
        serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"storageClassName": class, "accessModes": ["ReadWriteOnce"],
                     "resources": {"requests": {"storage": "1Gi"}}}
        }))
        .unwrap()
    };
    for (name, class) in [("fixed-claim", "fixed"), ("standard-claim", "standard")] {
        pvcs.create(&PostParams::default(), &claim(name, class)).await.unwrap();
        common::eventually("the claim bound", Duration::from_secs(30), || async {
            let phase = pvcs.get(name).await.unwrap().status.and_then(|s| s.phase);
            if phase.as_deref() == Some("Bound") { Ok(()) } else { Err(phase) }
        })
        .await;
    }
    let grow = json!({"spec": {"resources": {"requests": {"storage": "2Gi"}}}});
    match pvcs.patch("fixed-claim", &PatchParams::default(), &Patch::Merge(&grow)).await {
        Err(kube::Error::Api(s)) => {
            assert_eq!((s.code, s.reason.as_str()), (403, "Forbidden"));
            assert_eq!(
                s.message,
                "persistentvolumeclaims \"fixed-claim\" is forbidden: only dynamically provisioned pvc can be resized and the storageclass that provisions the pvc must support resize"
            );
        }
        other => panic!("expected 403, got {other:?}"),
    }
    let unchanged = pvcs.get("fixed-claim").await.unwrap();
    assert_eq!(unchanged.spec.unwrap().resources.unwrap().requests.unwrap()["storage"].0, "1Gi");
    pvcs.patch("standard-claim", &PatchParams::default(), &Patch::Merge(&grow)).await.unwrap();
    common::eventually("the standard claim's capacity", Duration::from_secs(30), || async {
        let capacity = pvcs.get("standard-claim").await.unwrap().status.and_then(|s| s.capacity);
        let storage = capacity.as_ref().and_then(|c| c.get("storage")).map(|q| q.0.clone());
        if storage.as_deref() == Some("2Gi") { Ok(()) } else { Err(storage) }
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn a_name_too_long_for_the_revision_label_gets_no_pods_and_a_failed_create_event() {
    let sim = start().await;
    let sets: Api<StatefulSet> = Api::default_namespaced(sim.client());
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::default_namespaced(sim.client());
    let pods: Api<Pod> = Api::default_namespaced(sim.client());
    let named = |name: &str| {
        let mut sts = stateful_set(1);
        sts.metadata.name = Some(name.to_owned());
        sts
    };
    // 53 characters plus `-` and the hash exceed the 63 characters of a label value.
    let long = "a".repeat(53);
    sets.create(&PostParams::default(), &named(&long)).await.unwrap();
    let failed = common::eventually("a FailedCreate event", Duration::from_secs(60), || async {
        let list = events.list(&ListParams::default()).await.unwrap();
        let reasons: Vec<_> = list.items.iter().map(|e| e.reason.clone()).collect();
        list.items.into_iter().find(|e| e.reason.as_deref() == Some("FailedCreate")).ok_or(reasons)
    })
    .await;
    assert_eq!(failed.type_.as_deref(), Some("Warning"));
    assert_eq!(failed.involved_object.name.as_deref(), Some(long.as_str()));
    let message = failed.message.unwrap_or_default();
    assert!(message.contains("must be no more than 63 characters"), "{message}");
    assert!(pods.list(&ListParams::default()).await.unwrap().items.is_empty(), "no pods");

    // 52 characters fit: the pod is created.
    let fits = "b".repeat(52);
    sets.create(&PostParams::default(), &named(&fits)).await.unwrap();
    common::eventually("the pod of a 52-character StatefulSet", Duration::from_secs(60), || async {
        pods.get_opt(&format!("{fits}-0")).await.unwrap().ok_or("no pod yet")
    })
    .await;
}

/// `persistentVolumeClaimRetentionPolicy` (beta, on by default in 1.28): with `Delete`/`Delete` a
/// scale down takes the removed pods' claims with them and deleting the set takes the rest; with
/// no policy (`Retain`) every claim outlives both.
#[tokio::test(start_paused = true)]
async fn claims_follow_the_retention_policy() {
    let sim = start().await;
    let sts: Api<StatefulSet> = Api::default_namespaced(sim.client());
    let pvcs: Api<PersistentVolumeClaim> = Api::default_namespaced(sim.client());
    let mut deleting = stateful_set(3);
    deleting.spec.as_mut().unwrap().persistent_volume_claim_retention_policy =
        Some(serde_json::from_value(json!({"whenDeleted": "Delete", "whenScaled": "Delete"})).unwrap());
    sts.create(&PostParams::default(), &deleting).await.unwrap();
    let mut kept = stateful_set(2);
    kept.metadata.name = Some("kept".into());
    sts.create(&PostParams::default(), &kept).await.unwrap();
    let ready = |n: i32| move |s: &StatefulSet| s.status.as_ref().and_then(|s| s.ready_replicas) == Some(n);
    common::await_object(&sts, "db", "db ready", ready(3)).await;
    common::await_object(&sts, "kept", "kept ready", |s| {
        s.status.as_ref().and_then(|s| s.ready_replicas) == Some(2)
    })
    .await;
    let owners = |claim: &PersistentVolumeClaim| -> Vec<String> {
        claim.metadata.owner_references.iter().flatten().map(|r| format!("{}/{}", r.kind, r.name)).collect()
    };
    let claim = pvcs.get("data-db-0").await.unwrap();
    assert_eq!(owners(&claim), ["StatefulSet/db"], "whenDeleted: Delete");
    assert!(owners(&pvcs.get("data-kept-0").await.unwrap()).is_empty(), "Retain: no owner");

    for name in ["db", "kept"] {
        sts.patch(name, &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": 1}})))
            .await
            .unwrap();
    }
    common::await_absent(&pvcs, "data-db-2", "the scaled-away claim data-db-2 deleted").await;
    common::await_absent(&pvcs, "data-db-1", "the scaled-away claim data-db-1 deleted").await;
    await_sts(&sts, |s| status(s).replicas == 1).await;
    common::await_object(&sts, "kept", "kept scaled", |s| s.status.as_ref().is_some_and(|s| s.replicas == 1))
        .await;
    assert!(pvcs.get("data-kept-1").await.is_ok(), "Retain keeps a scaled-away claim");
    assert_eq!(owners(&pvcs.get("data-db-0").await.unwrap()), ["StatefulSet/db"]);

    for name in ["db", "kept"] {
        sts.delete(name, &DeleteParams::default()).await.unwrap();
    }
    common::await_absent(&pvcs, "data-db-0", "the set's last claim deleted with it").await;
    common::await_absent(&sts, "kept", "the kept set deleted").await;
    let left = common::names(&pvcs).await;
    assert_eq!(left, ["data-kept-0", "data-kept-1"], "Retain keeps every claim");
}

#[tokio::test(start_paused = true)]
async fn a_settled_statefulset_is_not_written_again_and_a_deleted_pod_comes_back() {
    let sim = start().await;
    let sts: Api<StatefulSet> = Api::default_namespaced(sim.client());
    let pods: Api<Pod> = Api::default_namespaced(sim.client());
    sts.create(&PostParams::default(), &stateful_set(3)).await.unwrap();
    await_sts(&sts, |s| status(s).ready_replicas == Some(3)).await;
    // Not a wait for a condition: one kubelet delay for writes already due, then ten in which no
    // object may change (that nothing happens only time can show; the clock is paused).
    tokio::time::sleep(DELAY).await;
    let settled = list_rv(&pods).await;
    tokio::time::sleep(DELAY * 10).await;
    assert_eq!(list_rv(&pods).await, settled, "no object changed once the StatefulSet was settled");
    // The controllers react to the pod's deletion alone: the StatefulSet is reconciled again.
    pods.delete("db-1", &DeleteParams::default()).await.unwrap();
    await_sts(&sts, |s| status(s).ready_replicas == Some(2)).await;
    await_sts(&sts, |s| status(s).ready_replicas == Some(3)).await;
}

#[tokio::test(start_paused = true)]
async fn a_claim_is_pending_until_a_volume_is_bound_to_it() {
    let sim = start().await;
    let sts: Api<StatefulSet> = Api::default_namespaced(sim.client());
    let pvcs: Api<PersistentVolumeClaim> = Api::default_namespaced(sim.client());
    let unbindable = with_claim_class(stateful_set(1), "no-such-class");
    sts.create(&PostParams::default(), &unbindable).await.unwrap();
    let pending = common::await_object(&pvcs, "data-db-0", "the claim", |_| true).await;
    let status = pending.status.unwrap();
    assert_eq!(status.phase.as_deref(), Some("Pending"), "no volume, so not Bound");
    assert!(status.capacity.is_none());
    assert!(pending.spec.unwrap().volume_name.is_none());

    let mut bindable = stateful_set(1);
    bindable.metadata.name = Some("bound".into());
    sts.create(&PostParams::default(), &bindable).await.unwrap();
    let bound =
        common::await_object(&pvcs, "data-bound-0", "the claim bound", |c: &PersistentVolumeClaim| {
            c.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound")
        })
        .await;
    assert!(bound.spec.unwrap().volume_name.is_some_and(|v| v.starts_with("pvc-")));
    assert_eq!(pvcs.get("data-db-0").await.unwrap().status.unwrap().phase.as_deref(), Some("Pending"));
}

#[tokio::test(start_paused = true)]
async fn a_claim_template_the_api_server_refuses_makes_no_claim_and_no_pod() {
    let sim = start().await;
    let sts: Api<StatefulSet> = Api::default_namespaced(sim.client());
    let bad_class = with_claim_class(stateful_set(1), "Fast_SSD");
    sts.create(&PostParams::default(), &bad_class).await.unwrap();
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::default_namespaced(sim.client());
    let refused = common::eventually("a FailedCreate event", Duration::from_secs(30), || async {
        let list = events.list(&ListParams::default()).await.unwrap().items;
        list.into_iter().find(|e| e.reason.as_deref() == Some("FailedCreate")).ok_or(())
    })
    .await;
    let message = refused.message.unwrap_or_default();
    assert!(
        message.starts_with("create Claim data-db-0 for Pod db-0 in StatefulSet db failed error:"),
        "{message}"
    );
    assert!(message.contains("spec.storageClassName"), "{message}");
    let pods: Api<Pod> = Api::default_namespaced(sim.client());
    let pvcs: Api<PersistentVolumeClaim> = Api::default_namespaced(sim.client());
    assert!(pods.get_opt("db-0").await.unwrap().is_none());
    assert!(pvcs.get_opt("data-db-0").await.unwrap().is_none());
}
