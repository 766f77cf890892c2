//! Jobs on the simulator's process kubelet (real processes; needs root and PostgreSQL 15's
//! binaries, as `sim_process_kubelet`): the pods a Job runs carry the labels the apiserver's Job
//! strategy put on its template, and its generated selector finds them, so `kubectl logs
//! job/<name>` shows the Job's own pod.
#![cfg(feature = "sim")]

use crate::common;

use common::postgres::*;
use common::*;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;

fn echo(text: &str) -> serde_json::Value {
    json!({"restartPolicy": "Never", "containers": [{"name": "main", "image": "postgres:15", "command": ["bash", "-c", format!("echo {text}")]}]})
}

// mirrors pkg/registry/batch/job/strategy.go (1.28) `generateSelector` and
// pkg/controller/job/job_controller.go `(*Controller).manageJob` (pods from the template, so
// labelled as it is); `kubectl logs job/<name>` selects pods with the Job's `spec.selector`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_logs_of_a_job_shows_its_own_pod() {
    let cluster = process_cluster().await;
    let pods: Api<Pod> = cluster.api();
    // A pod that sorts before the Job's and has no Job labels.
    let decoy =
        json!({"metadata": {"name": "a-decoy", "labels": {"app": "decoy"}}, "spec": echo("from-the-decoy")});
    pods.create(&PostParams::default(), &serde_json::from_value(decoy).unwrap()).await.unwrap();
    let jobs: Api<Job> = cluster.api();
    let job = json!({"metadata": {"name": "greeter"}, "spec": {"backoffLimit": 0, "template": {"spec": echo("from-the-job")}}});
    let created = jobs.create(&PostParams::default(), &serde_json::from_value(job).unwrap()).await.unwrap();
    let uid = created.metadata.uid.clone().unwrap();
    eventually_some("the Job complete", || async {
        let status = jobs.get("greeter").await.ok()?.status?;
        status.conditions?.iter().any(|c| c.type_ == "Complete" && c.status == "True").then_some(())
    })
    .await;

    let selected = pods
        .list(&ListParams::default().labels(&format!("batch.kubernetes.io/controller-uid={uid}")))
        .await
        .unwrap()
        .items;
    assert_eq!(selected.len(), 1, "the Job's selector finds its one pod");
    let labels = selected[0].metadata.labels.clone().unwrap();
    for (key, value) in [
        ("job-name", "greeter"),
        ("batch.kubernetes.io/job-name", "greeter"),
        ("controller-uid", uid.as_str()),
        ("batch.kubernetes.io/controller-uid", uid.as_str()),
    ] {
        assert_eq!(labels.get(key).map(String::as_str), Some(value), "{labels:?}");
    }
    assert_eq!(kubectl(&cluster, &["logs", "job/greeter"]).unwrap(), "from-the-job\n");
}
