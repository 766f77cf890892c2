//! The reconcile span carries the pass's trigger (`runtime::controller::causes`, rule 4): the line a pass logs
//! reads `reconcile{… trigger="<first cause>" (+N)}: …`. The log capture is per thread
//! ([`common::Captured`], which keeps tracing's per-callsite cache exact while other tests run).
#![cfg(feature = "sim")]

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use dbcluster_operator::runtime::controller::{Controller, ControllerConfig};
use dbcluster_operator::runtime::informer::Informer;
use dbcluster_operator::sim::SimServer;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

#[tokio::test]
async fn rule4_the_reconcile_span_carries_the_trigger() {
    let logs = common::Captured::default();
    let _capture = logs.start("info");
    let sim = SimServer::start().await.unwrap();
    let api: Api<ConfigMap> = Api::default_namespaced(sim.client());
    let cm = serde_json::from_value(json!({"metadata": {"name": "pg"}})).unwrap();
    api.create(&PostParams::default(), &cm).await.unwrap();
    let informer = Arc::new(Informer::new(api.clone()));
    informer.start();
    let controller = Controller::new(&informer, ControllerConfig::named("causes"));
    let stop = tokio_util::sync::CancellationToken::new();
    let stopped = stop.clone();
    tokio::spawn(controller.run(
        common::reconcile_done,
        Arc::new(()),
        async move { stopped.cancelled().await },
    ));
    let pass = |needle: String| {
        let logs = logs.clone();
        common::eventually("the pass's log line", Duration::from_secs(60), move || {
            let found = logs.count(&needle);
            async move { if found == 1 { Ok(()) } else { Err(found) } }
        })
    };
    pass("trigger=\"listed ConfigMap default/pg added rv=".into()).await;
    let patch = Patch::Merge(json!({"data": {"n": "1"}}));
    let rv =
        api.patch("pg", &PatchParams::default(), &patch).await.unwrap().metadata.resource_version.unwrap();
    // The line `common::reconcile_done` logs, its target the shared module's path in this binary.
    let common_target = format!("{}::common", module_path!().split("::").next().unwrap());
    pass(format!("trigger=\"ConfigMap default/pg modified rv={rv}\"}}: {common_target}: reconciling")).await;
    // Reconcile ids count the passes of the whole process (other tests' included): the second
    // pass of the key has a later one than its first.
    let ids: Vec<u64> = logs
        .text()
        .lines()
        .filter(|l| l.contains(&common_target))
        .map(|l| {
            let id = l.split("key=default/pg reconcile_id=").nth(1).expect("the key and the pass's id");
            id.split(' ').next().unwrap().parse().unwrap()
        })
        .collect();
    assert!(ids.len() == 2 && ids[0] < ids[1], "reconcile ids {ids:?}");
    stop.cancel();
}
