//! The seed's walkthrough, end to end on the simulated cluster (its StatefulSet controller and
//! kubelet make pods ready one by one): apply the sample → Provisioning with 0 ready → pods ready
//! one by one (still Provisioning) → Running 3/3; replicas 5 → Scaling → Running 5/5; 15.4 → 15.5 → Upgrading while
//! the pods roll → Running with currentVersion 15.5; delete → the children are garbage collected.
#![cfg(feature = "sim")]

use crate::common;

use std::time::Duration;

use common::*;
use dbcluster_operator::databasecluster::api::types::DatabaseCluster;
use dbcluster_operator::sim::SimConfig;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Secret, Service};
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::json;

const NAME: &str = "production-postgres";

/// What `kubectl get dbc -w` shows: phase, ready replicas, current version.
type Row = (String, i32, String);

fn row(cluster: &DatabaseCluster) -> Row {
    let status = cluster.status.clone().unwrap_or_default();
    (
        phase(cluster).unwrap_or_default().to_owned(),
        status.ready_replicas,
        status.current_version.unwrap_or_default(),
    )
}

fn rows(expected: &[(&str, i32, &str)]) -> Vec<Row> {
    expected.iter().map(|(p, r, v)| (p.to_string(), *r, v.to_string())).collect()
}

/// Reads the cluster every poll interval until `done`, and returns every distinct row seen in
/// order (consecutive repeats collapsed), as a `-w` watcher would list them.
async fn rows_until(
    api: &Api<DatabaseCluster>,
    what: &str,
    done: impl Fn(&DatabaseCluster) -> bool,
) -> Vec<Row> {
    let seen: std::cell::RefCell<Vec<Row>> = Default::default();
    eventually(what, WAIT_LIMIT, || async {
        let Some(cluster) = api.get_opt(NAME).await.unwrap() else { return Err(seen.borrow().clone()) };
        let current = row(&cluster);
        if seen.borrow().last() != Some(&current) {
            seen.borrow_mut().push(current);
        }
        if done(&cluster) { Ok(()) } else { Err(seen.borrow().clone()) }
    })
    .await;
    seen.into_inner()
}

fn kubectl() -> PatchParams {
    PatchParams { field_manager: Some("kubectl-patch".into()), ..PatchParams::default() }
}

#[tokio::test(start_paused = true)]
async fn the_seeds_walkthrough_step_by_step() {
    let cluster = TestCluster::start_with(SimConfig {
        pod_ready_delay: Duration::from_secs(5),
        ..SimConfig::default()
    })
    .await;
    let operator = cluster.start_operator().await;
    let api = cluster.clusters();

    // kubectl apply -f manifests/samples/databasecluster.yaml
    let apply = PatchParams::apply("kubectl-client-side-apply");
    api.patch(NAME, &apply, &Patch::Apply(&sample())).await.unwrap();
    let provisioning =
        rows_until(&api, "Running 3/3", |c| phase(c) == Some("Running") && ready(c) == 3).await;
    assert_eq!(
        provisioning.into_iter().skip_while(|r| r.0.is_empty()).collect::<Vec<_>>(),
        rows(&[
            ("Provisioning", 0, ""),
            ("Provisioning", 1, ""),
            ("Provisioning", 2, ""),
            ("Running", 3, "15.4")
        ])
    );
    let passes_to_running = operator.passes();
    assert!(passes_to_running <= 20, "{passes_to_running} passes from apply to Running 3/3");
    let running = api.get(NAME).await.unwrap();
    assert_eq!(condition(&running, "Ready"), Some(("True".into(), "AllReplicasReady".into())));
    assert_eq!(condition(&running, "Degraded"), Some(("False".into(), "ReplicasReady".into())));
    assert_eq!(running.status.as_ref().unwrap().observed_generation, running.metadata.generation);

    // Scale up: Scaling (not Degraded: no instance was lost) while the new pods start, then 5/5.
    api.patch(NAME, &kubectl(), &Patch::Merge(json!({"spec": {"replicas": 5}}))).await.unwrap();
    let scaling = rows_until(&api, "Running 5/5", |c| phase(c) == Some("Running") && ready(c) == 5).await;
    assert_eq!(
        scaling.into_iter().skip_while(|r| r.0 == "Running").collect::<Vec<_>>(),
        rows(&[("Scaling", 3, "15.4"), ("Scaling", 4, "15.4"), ("Running", 5, "15.4")])
    );

    // Minor upgrade: Upgrading throughout the roll (ready dips as each pod restarts), then
    // Running with the new currentVersion.
    api.patch(NAME, &kubectl(), &Patch::Merge(json!({"spec": {"version": "15.5"}}))).await.unwrap();
    let upgrade = rows_until(&api, "Running on 15.5", |c| {
        phase(c) == Some("Running") && c.status.as_ref().unwrap().current_version.as_deref() == Some("15.5")
    })
    .await;
    let (last, rolling) = upgrade.split_last().unwrap();
    assert_eq!(last, &("Running".to_owned(), 5, "15.5".to_owned()));
    let rolling: Vec<_> = rolling.iter().skip_while(|r| r.0 == "Running").collect();
    assert!(!rolling.is_empty(), "the upgrade was never visible");
    assert!(
        rolling.iter().all(|r| r.0 == "Upgrading" && r.2 == "15.4"),
        "every row during the roll is Upgrading from 15.4: {rolling:?}"
    );
    assert!(rolling.iter().any(|r| r.1 < 5), "no pod restarted during the roll: {rolling:?}");
    let upgraded = api.get(NAME).await.unwrap();
    assert_eq!(condition(&upgraded, "Upgrading"), Some(("False".into(), "UpgradeComplete".into())));
    let sts = cluster.api::<StatefulSet>().get(NAME).await.unwrap();
    let image = sts.spec.unwrap().template.spec.unwrap().containers[0].image.clone();
    assert_eq!(image.as_deref(), Some("postgres:15.5"));

    // The story as Events.
    let expected = [
        "CreatedService",
        "CreatedSecret",
        "CreatedStatefulSet",
        "ScalingUp",
        "UpgradeStarted",
        "UpgradeCompleted",
    ];
    let reasons = await_event_reasons(&cluster, NAME, &expected).await;
    // Four Services (headless, -rw, -ro, -r) and seven Secrets (superuser, app, replication, the
    // instances' status token; the CA, the server's and the replication client's certificates).
    let times = |reason: &str| match reason {
        "CreatedService" => 4,
        "CreatedSecret" => 7,
        _ => 1,
    };
    for expected in expected {
        let seen = reasons.iter().filter(|r| *r == expected).count();
        assert_eq!(seen, times(expected), "{expected} in {reasons:?}");
    }

    // kubectl delete: the garbage collector removes every child.
    api.delete(NAME, &DeleteParams::default()).await.unwrap();
    await_absent(&api, NAME, "the DatabaseCluster deleted").await;
    await_absent(&cluster.api::<StatefulSet>(), NAME, "the StatefulSet collected").await;
    await_absent(&cluster.api::<Service>(), NAME, "the Service collected").await;
    await_absent(&cluster.api::<Secret>(), "production-postgres-app", "the Secret collected").await;
    operator.stop().await;
}
