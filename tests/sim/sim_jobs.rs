//! The simulated Job and CronJob controllers through the `kube` client, on a paused clock:
//! Jobs complete after `job_duration` (or fail when told to, or at their deadline) with the
//! status 1.28's Job controller writes, CronJobs create Jobs on their schedule and keep their
//! status and history limits. Each test names the Kubernetes 1.28 function it mirrors.
#![cfg(feature = "sim")]

use crate::common;

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

fn status_json(job: &Job) -> serde_json::Value {
    serde_json::to_value(job.status.as_ref().expect("a status")).unwrap()
}

// mirrors pkg/registry/batch/job/strategy.go (1.28): `generateSelector` (from
// `PrepareForCreate`), and pkg/controller/job/job_controller.go: `(*Controller).syncJob` (startTime,
// active, ready, uncountedTerminatedPods) and `enactJobFinished` (`Complete` with no reason, and
// `completionTime`; 1.28 has no `SuccessCriteriaMet`).
#[tokio::test(start_paused = true)]
async fn a_job_gets_its_selector_and_completes_after_the_job_duration_as_1_28_reports_it() {
    let sim = start().await;
    let jobs: Api<Job> = Api::default_namespaced(sim.client());
    let job: Job = serde_json::from_value(json!({"metadata": {"name": "once"}, "spec": job_spec()})).unwrap();
    let started = tokio::time::Instant::now();
    let created = jobs.create(&PostParams::default(), &job).await.unwrap();
    let uid = created.metadata.uid.clone().unwrap();
    let spec = serde_json::to_value(created.spec.as_ref().unwrap()).unwrap();
    assert_eq!(spec["selector"], json!({"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}));
    assert_eq!(
        spec["template"]["metadata"]["labels"],
        json!({"controller-uid": uid, "batch.kubernetes.io/controller-uid": uid, "job-name": "once", "batch.kubernetes.io/job-name": "once"})
    );
    assert!(spec.get("podReplacementPolicy").is_none(), "an alpha gate in 1.28: {spec}");

    let running = await_any(&jobs, |j| j.status.as_ref().is_some_and(|s| s.start_time.is_some())).await;
    let status = status_json(&running);
    assert_eq!((status["active"].clone(), status["ready"].clone()), (json!(1), json!(0)), "{status}");
    assert_eq!(status["uncountedTerminatedPods"], json!({}));
    assert!(status.get("conditions").is_none() && status.get("completionTime").is_none(), "{status}");

    let done = await_any(&jobs, |j| condition(j, "Complete")).await;
    assert!(started.elapsed() >= Duration::from_secs(30));
    let status = status_json(&done);
    assert_eq!(status["succeeded"], 1);
    assert!(
        status.get("active").is_none() && status.get("failed").is_none(),
        "zero counts are omitted: {status}"
    );
    let conditions = status["conditions"].as_array().unwrap();
    assert_eq!(conditions.len(), 1, "only Complete in 1.28: {conditions:?}");
    let complete = &conditions[0];
    assert_eq!((complete["type"].as_str(), complete["status"].as_str()), (Some("Complete"), Some("True")));
    assert!(complete.get("reason").is_none() && complete.get("message").is_none(), "{complete}");
    assert_eq!(complete["lastProbeTime"], complete["lastTransitionTime"]);
    assert_eq!(status["completionTime"], complete["lastTransitionTime"]);
    let elapsed = |from: &serde_json::Value, to: &serde_json::Value| {
        let at = |t: &serde_json::Value| t.as_str().unwrap().parse::<jiff::Timestamp>().unwrap();
        at(to).duration_since(at(from)).as_secs()
    };
    assert_eq!(elapsed(&status["startTime"], &status["completionTime"]), 30);
}

// mirrors pkg/controller/job/job_controller.go (1.28): `(*Controller).syncJob`'s
// `exceedsBackoffLimit` branch: `Failed` with reason `BackoffLimitExceeded` once more pods failed
// than `backoffLimit`, no `FailureTarget` (1.28 adds it only for a podFailurePolicy) and no
// `completionTime`. The simulator's injected failure jumps to the count without the retries.
#[tokio::test(start_paused = true)]
async fn an_injected_failure_fails_the_next_job_past_its_backoff_limit() {
    let sim = start().await;
    sim.faults().fail_next_jobs(1);
    let jobs: Api<Job> = Api::default_namespaced(sim.client());
    let mut spec = job_spec();
    spec["backoffLimit"] = json!(2);
    let job: Job = serde_json::from_value(json!({"metadata": {"name": "doomed"}, "spec": spec})).unwrap();
    jobs.create(&PostParams::default(), &job).await.unwrap();
    let failed = await_any(&jobs, |j| condition(j, "Failed")).await;
    let status = status_json(&failed);
    assert_eq!(status["failed"], 3, "one more than backoffLimit 2: {status}");
    assert!(status.get("completionTime").is_none() && status.get("active").is_none(), "{status}");
    let conditions = status["conditions"].as_array().unwrap();
    assert_eq!(conditions.len(), 1, "no FailureTarget in 1.28: {conditions:?}");
    assert_eq!(conditions[0]["reason"], "BackoffLimitExceeded");
    assert_eq!(conditions[0]["message"], "Job has reached the specified backoff limit");
    assert_eq!(conditions[0]["status"], "True");
}

// mirrors pkg/controller/job/job_controller.go (1.28): `(*Controller).syncJob` with
// `pastActiveDeadline`: `Failed` with reason `DeadlineExceeded` once the Job has been active
// `activeDeadlineSeconds`, its active pod counted failed, no `completionTime`.
#[tokio::test(start_paused = true)]
async fn a_job_past_its_active_deadline_fails_with_deadline_exceeded() {
    let sim = start().await;
    let jobs: Api<Job> = Api::default_namespaced(sim.client());
    let mut spec = job_spec();
    spec["activeDeadlineSeconds"] = json!(10);
    let job: Job = serde_json::from_value(json!({"metadata": {"name": "slow"}, "spec": spec})).unwrap();
    let started = tokio::time::Instant::now();
    jobs.create(&PostParams::default(), &job).await.unwrap();
    let failed = await_any(&jobs, |j| condition(j, "Failed")).await;
    let waited = started.elapsed();
    // `startTime` is stored to the second, so the deadline counts from the start's whole second
    // (as in 1.28, whose controller reads the stored `startTime` back).
    assert!(waited >= Duration::from_secs(9) && waited <= Duration::from_secs(10), "{waited:?}");
    let status = status_json(&failed);
    assert_eq!(status["failed"], 1, "{status}");
    assert!(status.get("completionTime").is_none() && status.get("succeeded").is_none(), "{status}");
    let reason = &status["conditions"][0];
    assert_eq!(
        (reason["reason"].as_str(), reason["message"].as_str()),
        (Some("DeadlineExceeded"), Some("Job was active longer than specified deadline"))
    );
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

fn cron_job(name: &str, spec: serde_json::Value) -> CronJob {
    let mut full = json!({"schedule": "*/5 * * * *", "jobTemplate": {"spec": job_spec()}});
    full.as_object_mut().unwrap().extend(spec.as_object().unwrap().clone());
    serde_json::from_value(json!({"metadata": {"name": name}, "spec": full})).unwrap()
}

fn at(t: &str) -> jiff::Timestamp {
    t.parse().unwrap()
}

fn minutes(job: &Job) -> i64 {
    let name = job.metadata.name.as_deref().unwrap();
    name.rsplit('-').next().unwrap().parse().unwrap()
}

fn scheduled_at(job: &Job) -> jiff::Timestamp {
    at(&job.metadata.annotations.as_ref().unwrap()["batch.kubernetes.io/cronjob-scheduled-timestamp"])
}

/// The first `*/5` slot after the CronJob's creation (`mostRecentScheduleTime`'s earliest time).
fn first_slot(cj: &CronJob) -> jiff::Timestamp {
    let created = cj.metadata.creation_timestamp.as_ref().unwrap().0.as_second();
    jiff::Timestamp::from_second((created / 300 + 1) * 300).unwrap()
}

async fn jobs_of(jobs: &Api<Job>, prefix: &str) -> Vec<Job> {
    let list = jobs.list(&ListParams::default()).await.unwrap().items;
    list.into_iter().filter(|j| j.metadata.name.as_deref().is_some_and(|n| n.starts_with(prefix))).collect()
}

// mirrors pkg/controller/cronjob/cronjob_controllerv2.go (1.28): `syncCronJob` with
/// A server whose Jobs run 7 minutes (longer than a schedule's minute), and its CronJobs and Jobs.
async fn with_long_jobs() -> (SimServer, Api<CronJob>, Api<Job>) {
    let sim =
        SimServer::start_with(SimConfig { job_duration: Duration::from_secs(420), ..SimConfig::default() })
            .await
            .unwrap();
    let (cron_jobs, jobs) = (Api::default_namespaced(sim.client()), Api::default_namespaced(sim.client()));
    (sim, cron_jobs, jobs)
}

// `ForbidConcurrent`: a due run waits while `status.active` is not empty and records nothing, so
// once the running Job finishes the missed time (`mostRecentScheduleTime`) starts late, its Job
// named for the scheduled time (`getJobFromTemplate2`: `<name>-<minutes since the epoch>`).
#[tokio::test(start_paused = true)]
async fn forbid_starts_the_missed_run_late_once_the_active_job_finishes() {
    let (_sim, cron_jobs, jobs) = with_long_jobs().await;
    let cj = cron_jobs
        .create(&PostParams::default(), &cron_job("nightly", json!({"concurrencyPolicy": "Forbid"})))
        .await
        .unwrap();
    let slot = first_slot(&cj);
    let first = await_any(&jobs, |j| j.metadata.name.is_some()).await;
    assert_eq!(minutes(&first), slot.as_second() / 60);
    assert_eq!(scheduled_at(&first), slot);
    let running = await_any(&cron_jobs, |c| {
        c.status.as_ref().and_then(|s| s.active.as_ref()).is_some_and(|a| a.len() == 1)
    })
    .await;
    let reference = &running.status.as_ref().unwrap().active.as_ref().unwrap()[0];
    assert_eq!(
        (reference.kind.as_deref(), reference.name.as_deref()),
        (Some("Job"), first.metadata.name.as_deref())
    );
    assert_eq!(reference.uid, first.metadata.uid);

    // The slot 5 minutes later is due while the first Job runs (7 minutes): it waits.
    let second = await_any(&jobs, |j| {
        j.metadata.name != first.metadata.name && j.status.as_ref().is_some_and(|s| s.start_time.is_some())
    })
    .await;
    let second_slot = slot.checked_add(jiff::SignedDuration::from_mins(5)).unwrap();
    assert_eq!(minutes(&second), second_slot.as_second() / 60, "the missed run, not the next one");
    assert_eq!(scheduled_at(&second), second_slot);
    let started = second.status.as_ref().unwrap().start_time.as_ref().unwrap().0;
    assert_eq!(started.duration_since(second_slot).as_mins(), 2, "started when the first Job finished");
    let cj =
        await_any(&cron_jobs, |c| c.status.as_ref().is_some_and(|s| s.last_successful_time.is_some())).await;
    let status = cj.status.unwrap();
    assert_eq!(status.last_schedule_time.unwrap().0, second_slot);
    let first_done = jobs.get(first.metadata.name.as_deref().unwrap()).await.unwrap();
    assert_eq!(
        status.last_successful_time.map(|t| t.0),
        first_done.status.unwrap().completion_time.map(|t| t.0)
    );
}

// mirrors pkg/controller/cronjob/cronjob_controllerv2.go (1.28): `syncCronJob` with
// `ReplaceConcurrent`: the active Job is deleted (`deleteJob`, in the background) and leaves
// `status.active` before the new one is created and joins it.
#[tokio::test(start_paused = true)]
async fn replace_deletes_the_active_job_before_starting_the_next() {
    let (_sim, cron_jobs, jobs) = with_long_jobs().await;
    let cj = cron_jobs
        .create(&PostParams::default(), &cron_job("swap", json!({"concurrencyPolicy": "Replace"})))
        .await
        .unwrap();
    let slot = first_slot(&cj);
    let first = await_any(&jobs, |j| j.metadata.name.is_some()).await;
    let second = await_any(&jobs, |j| j.metadata.name != first.metadata.name).await;
    assert_eq!(minutes(&second) - minutes(&first), 5);
    assert_eq!(minutes(&first), slot.as_second() / 60);
    common::await_absent(&jobs, first.metadata.name.as_deref().unwrap(), "the replaced Job deleted").await;
    let cj = await_any(&cron_jobs, |c| {
        c.status
            .as_ref()
            .and_then(|s| s.active.as_ref())
            .is_some_and(|a| a.iter().all(|r| r.uid == second.metadata.uid))
    })
    .await;
    assert_eq!(cj.status.unwrap().active.unwrap().len(), 1);
}

// mirrors pkg/controller/cronjob/cronjob_controllerv2.go (1.28): `syncCronJob` returns before
// scheduling while `suspend` is true (no Job, no `lastScheduleTime`); once resumed,
// `mostRecentScheduleTime` finds the time missed since the creation and it runs at once, unless
// it is more than `startingDeadlineSeconds` late (`MissSchedule`), in which case the next time
// runs.
#[tokio::test(start_paused = true)]
async fn a_resumed_cron_job_runs_the_missed_time_unless_past_its_starting_deadline() {
    let sim = start().await;
    let (cron_jobs, jobs): (Api<CronJob>, Api<Job>) =
        (Api::default_namespaced(sim.client()), Api::default_namespaced(sim.client()));
    let late =
        cron_jobs.create(&PostParams::default(), &cron_job("late", json!({"suspend": true}))).await.unwrap();
    let strict = json!({"suspend": true, "startingDeadlineSeconds": 30});
    cron_jobs.create(&PostParams::default(), &cron_job("strict", strict)).await.unwrap();
    let slot = first_slot(&late);
    let created = late.metadata.creation_timestamp.as_ref().unwrap().0;
    // Simulated time: a minute past the first slot.
    tokio::time::sleep(Duration::try_from(slot.duration_since(created)).unwrap() + Duration::from_secs(60))
        .await;
    assert!(jobs_of(&jobs, "").await.is_empty(), "no Job while suspended");
    for name in ["late", "strict"] {
        let status = cron_jobs.get(name).await.unwrap().status;
        assert!(
            status.and_then(|s| s.last_schedule_time).is_none(),
            "{name}: nothing scheduled while suspended"
        );
    }
    let resume = json!({"spec": {"suspend": false}});
    for name in ["late", "strict"] {
        cron_jobs
            .patch(name, &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&resume))
            .await
            .unwrap();
    }
    let missed =
        await_any(&jobs, |j| j.metadata.name.as_deref().is_some_and(|n| n.starts_with("late-"))).await;
    assert_eq!(minutes(&missed), slot.as_second() / 60, "the missed time runs on resume");
    let cj = await_any(&cron_jobs, |c| {
        c.metadata.name.as_deref() == Some("late")
            && c.status.as_ref().is_some_and(|s| s.last_schedule_time.is_some())
    })
    .await;
    assert_eq!(cj.status.unwrap().last_schedule_time.unwrap().0, slot);
    let next =
        await_any(&jobs, |j| j.metadata.name.as_deref().is_some_and(|n| n.starts_with("strict-"))).await;
    assert_eq!(minutes(&next), slot.as_second() / 60 + 5, "too late for the missed time: the next one runs");
}
