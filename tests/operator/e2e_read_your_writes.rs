//! Read-your-writes, end to end: with every watch event held back 500 ms by the
//! simulator, a pass right after the operator's own write would read a cache one write behind.
//! The controller waits until the caches hold the previous pass's writes, so each scale is one
//! scaling Event, no status patch meets a 409 on a stale precondition (one older than the
//! operator's own last write: only a concurrent user write may cause a 409), and no child is
//! created twice. With the Event dedupe window gone, a real repeat (a Service recreated after a
//! hand-delete) is reported again.
#![cfg(feature = "sim")]

use crate::common;

use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use common::*;
use dbcluster_operator::runtime::controller::writes::resource_version_reached;
use futures::future::BoxFuture;
use http::{Method, Request, Response};
use http_body_util::BodyExt;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Service;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::client::Body;
use parking_lot::Mutex;
use serde_json::{Value, json};

const NAME: &str = "production-postgres";

/// The notes of the Events about `NAME` with `reason`, oldest first.
async fn notes(cluster: &TestCluster, reason: &str) -> Vec<String> {
    let mut events = cluster.events_about(NAME).await;
    events.sort_by_key(|e| e.event_time.clone().map(|t| t.0));
    events.into_iter().filter(|e| e.reason.as_deref() == Some(reason)).filter_map(|e| e.note).collect()
}

/// The create requests for `resource` so far.
fn creates(cluster: &TestCluster, resource: &str) -> usize {
    cluster.writes().iter().filter(|r| r.verb == "create" && r.resource == resource).count()
}

/// One write of the operator to the DatabaseCluster (its status patches), as it went out and came
/// back: the resourceVersion it carried as a precondition, and the answer.
#[derive(Clone, Debug)]
struct ClusterWrite {
    precondition: Option<String>,
    /// The resourceVersion written, or the error status code.
    outcome: Result<String, u16>,
}

/// A client layer that records the operator's writes to the DatabaseCluster on their way to the
/// simulator (every other request passes untouched).
#[derive(Clone)]
struct Recorder {
    inner: kube::Client,
    writes: Arc<Mutex<Vec<ClusterWrite>>>,
}

impl tower_service::Service<Request<Body>> for Recorder {
    type Response = Response<Body>;
    type Error = kube::Error;
    type Future = BoxFuture<'static, Result<Response<Body>, kube::Error>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), kube::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let Recorder { inner, writes } = self.clone();
        Box::pin(async move {
            let path = request.uri().path();
            let to_cluster = path.ends_with(&format!("/databaseclusters/{NAME}"))
                || path.ends_with(&format!("/databaseclusters/{NAME}/status"));
            if !to_cluster || request.method() == Method::GET {
                return inner.send(request).await;
            }
            let (parts, body) = request.into_parts();
            let sent = body.collect().await?.to_bytes();
            let precondition = resource_version(&sent);
            let response = inner.send(Request::from_parts(parts, Body::from(sent))).await?;
            let (parts, body) = response.into_parts();
            let received = body.collect().await?.to_bytes();
            let outcome = if parts.status.is_success() {
                resource_version(&received).ok_or(0)
            } else {
                Err(parts.status.as_u16())
            };
            writes.lock().push(ClusterWrite { precondition, outcome });
            Ok(Response::from_parts(parts, Body::from(received)))
        })
    }
}

/// The `metadata.resourceVersion` of a JSON object.
fn resource_version(json: &[u8]) -> Option<String> {
    let value: Value = serde_json::from_slice(json).ok()?;
    value.pointer("/metadata/resourceVersion")?.as_str().map(str::to_owned)
}

/// The operator's 409s, split by cause: `stale` ones carried a precondition older than the
/// operator's own last acknowledged write (a pass read a cache behind its own write: what
/// read-your-writes prevents); the others carried the newest version the operator knew of, so
/// only someone else's write since (one of `user_writes`) can have caused them.
fn conflicts(writes: &[ClusterWrite], user_writes: &[String]) -> (Vec<ClusterWrite>, Vec<ClusterWrite>) {
    let mut own_latest: Option<&str> = None;
    let (mut stale, mut concurrent) = (Vec::new(), Vec::new());
    for write in writes {
        match &write.outcome {
            Ok(rv) => {
                if own_latest.is_none_or(|latest| resource_version_reached(rv, latest)) {
                    own_latest = Some(rv);
                }
            }
            Err(409) => {
                let carried = write.precondition.as_deref().unwrap_or_default();
                if own_latest.is_some_and(|latest| !resource_version_reached(carried, latest)) {
                    stale.push(write.clone());
                } else {
                    concurrent.push(write.clone());
                }
            }
            Err(_) => {}
        }
    }
    for write in &concurrent {
        let carried = write.precondition.as_deref().unwrap_or_default();
        assert!(
            user_writes.iter().any(|rv| !resource_version_reached(carried, rv)),
            "a 409 on {carried}, newer than every write of the operator, that no user write explains: {user_writes:?}"
        );
    }
    (stale, concurrent)
}

/// Sets the cluster's replicas and waits until the operator has applied them to the StatefulSet
/// and reports Running at that size; returns the resourceVersion the spec write made. The
/// operator's passes still read caches half a second behind each of its own writes.
async fn scale_to(cluster: &TestCluster, replicas: i32) -> String {
    let patch = Patch::Merge(json!({"spec": {"replicas": replicas}}));
    let written = cluster.clusters().patch(NAME, &PatchParams::default(), &patch).await.unwrap();
    let statefulsets = cluster.api::<StatefulSet>();
    await_object(&statefulsets, NAME, &format!("the StatefulSet at {replicas} replicas"), |sts| {
        sts.spec.as_ref().and_then(|s| s.replicas) == Some(replicas)
    })
    .await;
    await_running(cluster, replicas).await;
    written.metadata.resource_version.expect("a written object has a resourceVersion")
}

async fn await_running(cluster: &TestCluster, replicas: i32) {
    await_object(&cluster.clusters(), NAME, &format!("Running {replicas}/{replicas}"), |c| {
        phase(c) == Some("Running")
            && ready(c) == replicas
            && c.status.as_ref().is_some_and(|s| s.observed_generation == c.metadata.generation)
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn with_a_lagging_watch_each_scale_is_one_event_no_conflict_and_no_second_create() {
    let log = Captured::default();
    let _capture = log.start("dbcluster_operator::databasecluster::controller::reconcile=debug");
    let cluster = TestCluster::start().await;
    cluster.sim.faults().set_watch_event_latency(Duration::from_millis(500));
    let recorder = Recorder { inner: cluster.sim.client(), writes: Arc::default() };
    let operator = RunningOperator::start(kube::Client::new(recorder.clone(), "default")).await;
    cluster.track_events(&operator);
    let api = cluster.clusters();
    api.create(&PostParams::default(), &sample()).await.unwrap();
    await_object(&api, NAME, "Running 3/3", |c| phase(c) == Some("Running") && ready(c) == 3).await;

    let mut user_writes = Vec::new();
    for replicas in [4, 5, 2, 3] {
        user_writes.push(scale_to(&cluster, replicas).await);
    }
    await_running(&cluster, 3).await;
    reconcile_now(&operator, &key(NAME)).await;

    assert_eq!(
        notes(&cluster, "ScalingUp").await,
        ["Scaling from 3 to 4 replicas", "Scaling from 4 to 5 replicas", "Scaling from 2 to 3 replicas"],
        "one ScalingUp per scale up"
    );
    assert_eq!(notes(&cluster, "ScalingDown").await, ["Scaling from 5 to 2 replicas"]);
    // Each child once: the StatefulSet, four Services (headless, -rw, -ro, -r), seven Secrets
    // (superuser, app, replication, the instances' status token; the CA, the server's and the
    // replication client's certificates).
    for (resource, children) in [("statefulsets", 1), ("services", 4), ("secrets", 7)] {
        assert_eq!(creates(&cluster, resource), children, "each of the {resource} created once");
    }
    // A spec write of the test may land while a pass runs (the instances' 10 s observation
    // requeue keeps passes coming): that pass's status patch rightly meets a 409. None may carry
    // a precondition older than the operator's own last write.
    let writes = recorder.writes.lock().clone();
    let (stale, concurrent) = conflicts(&writes, &user_writes);
    assert_eq!(
        stale.len(),
        0,
        "status patches on a cache behind the operator's own writes: {stale:?} of {writes:?}"
    );
    assert_eq!(log.count("status patch conflicts"), concurrent.len(), "the recorder saw every 409");
    assert_eq!(log.count("the cache is behind the server"), 0, "a create met an existing child");
    assert_eq!(operator.errors(), 0);
    let metrics = operator.handles.metrics.encode();
    let series = |name: &str| {
        metrics.lines().find_map(|l| {
            l.strip_prefix(&format!("{name}{{controller=\"databasecluster\"}} "))?.parse::<f64>().ok()
        })
    };
    assert!(series("controller_runtime_stale_cache_waits_total").is_some_and(|n| n >= 1.0), "{metrics}");
    assert_eq!(series("controller_runtime_stale_cache_wait_timeouts_total"), Some(0.0));
    operator.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_service_recreated_after_a_hand_delete_is_reported_again() {
    let cluster = TestCluster::start().await;
    let operator = cluster.start_operator().await;
    let api = cluster.clusters();
    api.create(&PostParams::default(), &sample()).await.unwrap();
    await_object(&api, NAME, "Running 3/3", |c| phase(c) == Some("Running") && ready(c) == 3).await;
    let services = cluster.api::<Service>();
    let first = services.get(NAME).await.unwrap().metadata.uid;

    services.delete(NAME, &DeleteParams::default()).await.unwrap();
    let recreated = await_object(&services, NAME, "the Service recreated", |s| s.metadata.uid != first).await;
    assert!(recreated.metadata.uid.is_some());
    let about_the_headless = |notes: Vec<String>| -> Vec<String> {
        notes.into_iter().filter(|n| *n == format!("Created Service {NAME}")).collect()
    };
    eventually("a second CreatedService Event", WAIT_LIMIT, || async {
        let created = about_the_headless(notes(&cluster, "CreatedService").await);
        if created.len() == 2 { Ok(()) } else { Err(created) }
    })
    .await;
    reconcile_now(&operator, &key(NAME)).await;
    assert_eq!(about_the_headless(notes(&cluster, "CreatedService").await).len(), 2);
    // The four Services once each, and the deleted one again.
    assert_eq!(creates(&cluster, "services"), 5);
    operator.stop().await;
}
