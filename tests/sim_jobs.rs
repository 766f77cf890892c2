//! The simulated Job and CronJob controllers through the `kube` client, on a paused clock:
//! Jobs complete after `job_duration` (or fail when told to), CronJobs create Jobs on their
//! schedule and keep their status and history limits.
#![cfg(feature = "sim")]

mod common;

use std::time::Duration;

use dbcluster_operator::sim::{SimConfig, SimServer};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use kube::api::{Api, ListParams, PostParams, WatchEvent, WatchParams};
use serde_json::json;

fn job_spec() -> serde_json::Value {
    json!({"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "backup", "image": "postgres:15.4"}]}}})
}

fn condition(job: &Job, kind: &str) -> bool {
    job.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == kind && c.status == "True"))
}

/// Waits (re-watching when the server ends a watch) until some object of `api` satisfies `done`.
async fn await_any<K>(api: &Api<K>, done: impl Fn(&K) -> bool) -> K
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let list = api.list(&ListParams::default()).await.unwrap();
    if let Some(found) = list.items.iter().find(|o| done(o)) {
        return found.clone();
    }
    let mut rv = list.metadata.resource_version.unwrap();
    common::within_limit("an object satisfying the condition", Duration::from_secs(3600), async {
        loop {
            let mut stream = api.watch(&WatchParams::default(), &rv).await.unwrap().boxed();
            while let Some(event) = stream.try_next().await.unwrap() {
                match event {
                    WatchEvent::Added(o) | WatchEvent::Modified(o) => {
                        if done(&o) {
                            return o;
                        }
                        rv = o.meta().resource_version.clone().unwrap();
                    }
                    WatchEvent::Bookmark(b) => rv = b.metadata.resource_version,
                    WatchEvent::Deleted(o) => rv = o.meta().resource_version.clone().unwrap(),
                    WatchEvent::Error(e) => panic!("watch error {e:?}"),
                }
            }
        }
    })
    .await
}

async fn start() -> SimServer {
    SimServer::start_with(SimConfig { job_duration: Duration::from_secs(30), ..SimConfig::default() })
        .await
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_job_completes_after_the_job_duration() {
    let sim = start().await;
    let jobs: Api<Job> = Api::default_namespaced(sim.client());
    let job: Job = serde_json::from_value(json!({"metadata": {"name": "once"}, "spec": job_spec()})).unwrap();
    let started = tokio::time::Instant::now();
    jobs.create(&PostParams::default(), &job).await.unwrap();
    let done = await_any(&jobs, |j| condition(j, "Complete")).await;
    assert!(started.elapsed() >= Duration::from_secs(30));
    let status = done.status.unwrap();
    assert_eq!(status.succeeded, Some(1));
    assert!(status.start_time.is_some() && status.completion_time.is_some());
}

#[tokio::test(start_paused = true)]
async fn an_injected_failure_fails_the_next_job() {
    let sim = start().await;
    sim.faults().fail_next_jobs(1);
    let jobs: Api<Job> = Api::default_namespaced(sim.client());
    let job: Job =
        serde_json::from_value(json!({"metadata": {"name": "doomed"}, "spec": job_spec()})).unwrap();
    jobs.create(&PostParams::default(), &job).await.unwrap();
    let failed = await_any(&jobs, |j| condition(j, "Failed")).await;
    assert_eq!(failed.status.unwrap().failed, Some(1));
}

#[tokio::test(start_paused = true)]
async fn a_cron_job_runs_on_schedule_and_keeps_its_history_limit() {
    let sim = start().await;
    let cron_jobs: Api<CronJob> = Api::default_namespaced(sim.client());
    let jobs: Api<Job> = Api::default_namespaced(sim.client());
    let cj: CronJob = serde_json::from_value(json!({
        "metadata": {"name": "backup"},
        "spec": {
            "schedule": "*/5 * * * *",
            "successfulJobsHistoryLimit": 1,
            "jobTemplate": {"metadata": {"labels": {"app": "backup"}}, "spec": job_spec()}
        }
    }))
    .unwrap();
    cron_jobs.create(&PostParams::default(), &cj).await.unwrap();

    let first = await_any(&jobs, |j| condition(j, "Complete")).await;
    let first_name = first.metadata.name.clone().unwrap();
    assert!(first_name.starts_with("backup-"));
    assert_eq!(first.metadata.labels.unwrap().get("app").map(String::as_str), Some("backup"));
    let owner = &first.metadata.owner_references.unwrap()[0];
    assert_eq!(owner.kind, "CronJob");

    await_any(&cron_jobs, |c| {
        c.status.as_ref().is_some_and(|s| s.last_successful_time.is_some() && s.last_schedule_time.is_some())
    })
    .await;

    // A later run completes, and the history limit of one leaves one completed Job.
    await_any(&jobs, |j| condition(j, "Complete") && j.metadata.name.as_deref() != Some(first_name.as_str()))
        .await;
    let completed: Vec<String> = jobs
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|j| condition(j, "Complete"))
        .filter_map(|j| j.metadata.name)
        .collect();
    assert_eq!(completed.len(), 1, "{completed:?}");
    assert!(!completed.contains(&first_name));
}

#[tokio::test(start_paused = true)]
async fn the_server_refuses_what_batch_validation_refuses() {
    let sim = start().await;
    let cron_jobs: Api<CronJob> = Api::default_namespaced(sim.client());
    let cron_job = |name: &str, schedule: &str, policy: &str| -> CronJob {
        let mut spec = job_spec();
        spec["template"]["spec"]["restartPolicy"] = json!(policy);
        serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"schedule": schedule, "timeZone": "Etc/UTC", "jobTemplate": {"spec": spec}}
        }))
        .unwrap()
    };
    let refused = |error: kube::Error| match error {
        kube::Error::Api(status) => (status.code, status.message),
        other => panic!("{other}"),
    };
    for (name, schedule, policy, field) in [
        ("bad-schedule", "99 99 99 99 99", "Never", "spec.schedule"),
        (&"a".repeat(53)[..], "@daily", "Never", "metadata.name"),
        ("restarts", "@daily", "Always", "spec.jobTemplate.spec.template.spec.restartPolicy"),
    ] {
        let error =
            cron_jobs.create(&PostParams::default(), &cron_job(name, schedule, policy)).await.unwrap_err();
        let (code, message) = refused(error);
        assert_eq!(code, 422, "{message}");
        assert!(message.contains(field), "{message}");
    }
    cron_jobs.create(&PostParams::default(), &cron_job("fine", "@daily", "OnFailure")).await.unwrap();

    // A Job's pod template is immutable.
    let jobs: Api<Job> = Api::default_namespaced(sim.client());
    let job: Job = serde_json::from_value(json!({"metadata": {"name": "once"}, "spec": job_spec()})).unwrap();
    jobs.create(&PostParams::default(), &job).await.unwrap();
    let change =
        json!({"spec": {"template": {"spec": {"containers": [{"name": "backup", "image": "postgres:16"}]}}}});
    let error = jobs
        .patch("once", &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&change))
        .await
        .unwrap_err();
    let (code, message) = refused(error);
    assert_eq!(code, 422);
    assert!(message.contains("spec.template") && message.contains("field is immutable"), "{message}");
}
