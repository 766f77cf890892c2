//! The simulated Job controller, after 1.28's `pkg/controller/job/job_controller.go`
//! (`(*Controller).syncJob`, `enactJobFinished`). The apiserver has already given each Job its
//! selector and its pod template's `job-name`/`controller-uid` labels
//! ([`crate::sim::batch::generate_selector`]).
//!
//! - A Job not suspended gets `startTime` when first seen, `active`, `ready` (the active pods
//!   Ready) and `uncountedTerminatedPods: {}`; counts that are zero are left out, as the API
//!   omits them.
//! - It completes once `completions` pods succeeded and none is active: condition `Complete`
//!   (`status: "True"`, `lastProbeTime` = `lastTransitionTime`, no reason or message) and
//!   `completionTime`. Only success sets `completionTime`; 1.28 writes no `SuccessCriteriaMet`.
//! - It fails when more pods failed than `backoffLimit` (condition `Failed`, reason
//!   `BackoffLimitExceeded`) or, failing that, when it has been active `activeDeadlineSeconds`
//!   (reason `DeadlineExceeded`: its active pods are deleted and counted as failed). 1.28 writes
//!   no `FailureTarget` unless a `podFailurePolicy` matched, which the simulator does not model.
//!
//! With the timer kubelet a Job has no pods: it is active from when first seen and succeeds
//! `job_duration` later, or fails when `Faults::fail_next_jobs` says so (with the count a Job that
//! used up its `backoffLimit` shows, without the retries' back-off in between). With the process
//! kubelet a Job runs real pods from its template, one at a time (`parallelism` above 1 is not
//! modelled), owned by the Job, named `<job>-<suffix>`, labelled as the template is; a failed pod
//! is replaced at once (1.28 waits an exponential back-off from 10 s first), and pods carry no
//! `batch.kubernetes.io/job-tracking` finalizer (a pod once counted stays counted instead).
//!
//! Schedules follow a clock that advances with `tokio::time`, so a paused test clock drives
//! them, and that a test may also move ahead ([`crate::sim::SimServer::advance_controller_clock`])
//! when real processes run. The CronJob controller is [`super::cronjobs`].

use std::collections::HashMap;
use std::sync::Arc;

use jiff::{SignedDuration, Timestamp};
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::sim::KubeletKind;
use crate::sim::cluster::Cluster;
use crate::sim::controllers::{create_with_status, cronjobs, is_deleting, owned_by, write_status};
use crate::sim::ops::{self, DeleteOptions};
use crate::sim::state::State;

/// Wall-clock time that advances with `tokio::time` from the moment the controllers started, plus
/// however far a test moved it ahead.
#[derive(Debug, Clone, Copy)]
struct SimClock {
    wall: Timestamp,
    instant: Instant,
    ahead: std::time::Duration,
}

impl SimClock {
    fn now(&self, at: Instant) -> Timestamp {
        let elapsed = SignedDuration::try_from(at.duration_since(self.instant) + self.ahead)
            .unwrap_or(SignedDuration::ZERO);
        self.wall.checked_add(elapsed).unwrap_or(self.wall)
    }

    fn instant_of(&self, t: Timestamp) -> Instant {
        let ahead = t.duration_since(self.wall) - SignedDuration::try_from(self.ahead).unwrap_or_default();
        match std::time::Duration::try_from(ahead) {
            Ok(d) => self.instant + d,
            Err(_) => self.instant,
        }
    }
}

/// A time as the API writes it (RFC 3339, seconds, UTC).
pub(super) fn stamp(t: Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// `Some(true)` for a Job with `Complete=True`, `Some(false)` for `Failed=True` (1.28
/// `IsJobFinished` / `getFinishedStatus`), `None` while it runs.
pub(super) fn finished(job: &Value) -> Option<bool> {
    let conditions = job["status"]["conditions"].as_array()?;
    conditions
        .iter()
        .find(|c| (c["type"] == "Complete" || c["type"] == "Failed") && c["status"] == "True")
        .map(|c| c["type"] == "Complete")
}

/// The condition `enactJobFinished` adds: `Complete` without a reason, `Failed` with one.
fn finished_condition(failure: Option<(&str, &str)>, now: &str) -> Value {
    let mut condition = json!({
        "type": if failure.is_some() { "Failed" } else { "Complete" },
        "status": "True", "lastProbeTime": now, "lastTransitionTime": now,
    });
    if let Some((reason, message)) = failure {
        condition["reason"] = json!(reason);
        condition["message"] = json!(message);
    }
    condition
}

const BACKOFF_LIMIT_EXCEEDED: (&str, &str) =
    ("BackoffLimitExceeded", "Job has reached the specified backoff limit");
const DEADLINE_EXCEEDED: (&str, &str) = ("DeadlineExceeded", "Job was active longer than specified deadline");

/// What a Job's status says; zero counts are left out as the API's `omitempty` leaves them out.
#[derive(Debug, Default)]
struct Counts {
    active: i64,
    ready: i64,
    succeeded: i64,
    failed: i64,
}

/// The status `syncJob` writes: counts, `startTime`, and when finished its condition (and, for
/// success, `completionTime`).
fn job_status(start: &str, counts: &Counts, finish: Option<(Option<(&str, &str)>, &str)>) -> Value {
    let mut status = json!({"startTime": start, "ready": counts.ready, "uncountedTerminatedPods": {}});
    for (field, n) in [("active", counts.active), ("succeeded", counts.succeeded), ("failed", counts.failed)]
    {
        if n > 0 {
            status[field] = json!(n);
        }
    }
    if let Some((failure, now)) = finish {
        status["conditions"] = json!([finished_condition(failure, now)]);
        if failure.is_none() {
            status["completionTime"] = json!(now);
        }
    }
    status
}

/// When a Job's `activeDeadlineSeconds` runs out, counted from its `startTime`.
fn deadline(job: &Value, start: &str) -> Option<Timestamp> {
    let seconds = job["spec"]["activeDeadlineSeconds"].as_i64()?;
    start.parse::<Timestamp>().ok()?.checked_add(SignedDuration::from_secs(seconds)).ok()
}

fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    [a, b].into_iter().flatten().min()
}

/// The Job and CronJob controllers' memory: when each running Job finishes (timer kubelet).
#[derive(Debug)]
pub struct Jobs {
    cluster: Arc<Cluster>,
    clock: SimClock,
    finish_at: HashMap<String, Instant>,
}

impl Jobs {
    /// Controllers reading faults and `job_duration` from the cluster.
    pub fn new(cluster: Arc<Cluster>) -> Self {
        let clock =
            SimClock { wall: Timestamp::now(), instant: Instant::now(), ahead: std::time::Duration::ZERO };
        Self { cluster, clock, finish_at: HashMap::new() }
    }

    /// One pass of both controllers; returns when the next Job finishes or CronJob is due.
    pub fn pass(&mut self, state: &mut State, now: Instant) -> Option<Instant> {
        self.clock.ahead = self.cluster.controller_clock_ahead();
        let wall = self.clock.now(now);
        // Jobs first: a Job that finishes is counted by its CronJob in the same pass.
        let job_due = if self.cluster.config.kubelet == KubeletKind::Process {
            run_job_pods(state, wall).map(|t| self.clock.instant_of(t))
        } else {
            self.timer_jobs(state, now)
        };
        let cron_due = cronjobs::sync_all(state, wall).map(|t| self.clock.instant_of(t));
        earliest(cron_due, job_due)
    }

    /// Jobs on the timer kubelet: active when first seen, finished `job_duration` later or at
    /// their deadline.
    fn timer_jobs(&mut self, state: &mut State, now: Instant) -> Option<Instant> {
        let running = running_jobs(state);
        let uids: Vec<String> =
            running.iter().filter_map(|j| j["metadata"]["uid"].as_str().map(String::from)).collect();
        self.finish_at.retain(|uid, _| uids.contains(uid));
        let wall = stamp(self.clock.now(now));
        let mut next: Option<Instant> = None;
        for mut job in running {
            let uid = job["metadata"]["uid"].as_str().unwrap_or_default().to_string();
            let due = *self.finish_at.entry(uid.clone()).or_insert(now + self.cluster.config.job_duration);
            let active = Counts { active: 1, ..Counts::default() };
            if job["status"]["startTime"].is_null() {
                match write_status(state, "batch", "jobs", &job, job_status(&wall, &active, None)) {
                    Some(written) => job = written,
                    None => continue,
                }
            }
            let start = job["status"]["startTime"].as_str().unwrap_or(&wall).to_owned();
            let past_deadline = deadline(&job, &start).is_some_and(|d| d <= self.clock.now(now));
            let failure = if past_deadline {
                Some(DEADLINE_EXCEEDED)
            } else if due <= now {
                self.cluster.faults.take_job_failure().then_some(BACKOFF_LIMIT_EXCEEDED)
            } else {
                let at_deadline = deadline(&job, &start).map(|d| self.clock.instant_of(d));
                next = earliest(next, earliest(Some(due), at_deadline));
                continue;
            };
            let counts = match failure {
                // The pod the deadline ended is counted failed; a Job past its backoff limit
                // has seen one failure more than the limit.
                Some(DEADLINE_EXCEEDED) => Counts { failed: 1, ..Counts::default() },
                Some(_) => Counts {
                    failed: job["spec"]["backoffLimit"].as_i64().unwrap_or(6) + 1,
                    ..Counts::default()
                },
                None => Counts {
                    succeeded: job["spec"]["completions"].as_i64().unwrap_or(1),
                    ..Counts::default()
                },
            };
            write_status(state, "batch", "jobs", &job, job_status(&start, &counts, Some((failure, &wall))));
            self.finish_at.remove(&uid);
        }
        next
    }
}

/// The Jobs not finished, deleted or suspended.
fn running_jobs(state: &State) -> Vec<Value> {
    state
        .store
        .list("jobs.batch", None)
        .filter(|j| finished(j).is_none() && !is_deleting(j) && j["spec"]["suspend"] != true)
        .cloned()
        .collect()
}

/// Jobs on the process kubelet (`syncJob` over the Job's pods); returns when the next deadline
/// runs out.
fn run_job_pods(state: &mut State, now: Timestamp) -> Option<Timestamp> {
    let wall = stamp(now);
    let mut next = None;
    for job in running_jobs(state) {
        let uid = job["metadata"]["uid"].as_str().unwrap_or_default().to_owned();
        let pods: Vec<Value> =
            state.store.list("pods", Some(job_ns(&job))).filter(|p| owned_by(p, &uid)).cloned().collect();
        let phase = |p: &Value| p["status"]["phase"].as_str().unwrap_or_default().to_owned();
        // `IsPodActive` and `isPodFailed`: a pod being deleted before it succeeded counts failed.
        let active: Vec<&Value> = pods
            .iter()
            .filter(|p| !matches!(phase(p).as_str(), "Succeeded" | "Failed") && !is_deleting(p))
            .collect();
        let failed_now = pods
            .iter()
            .filter(|p| phase(p) == "Failed" || (is_deleting(p) && phase(p) != "Succeeded"))
            .count();
        let previous = |field: &str| job["status"][field].as_i64().unwrap_or(0);
        // Pods counted once stay counted when they are gone (the real controller's finalizers).
        let mut counts = Counts {
            active: active.len() as i64,
            ready: active.iter().filter(|p| is_ready(p)).count() as i64,
            succeeded: previous("succeeded")
                .max(pods.iter().filter(|p| phase(p) == "Succeeded").count() as i64),
            failed: previous("failed").max(failed_now as i64),
        };
        let start = job["status"]["startTime"].as_str().map_or_else(|| wall.clone(), str::to_owned);
        let completions = job["spec"]["completions"].as_i64().unwrap_or(1);
        let limit = job["spec"]["backoffLimit"].as_i64().unwrap_or(6);
        let job_deadline = deadline(&job, &start);
        // `syncJob`'s order: the backoff limit, then the deadline, then completion.
        let finish = if counts.failed > limit && counts.failed > previous("failed") {
            Some(Some(BACKOFF_LIMIT_EXCEEDED))
        } else if job_deadline.is_some_and(|d| d <= now) {
            Some(Some(DEADLINE_EXCEEDED))
        } else if counts.succeeded >= completions && counts.active == 0 {
            Some(None)
        } else {
            None
        };
        if finish.is_some_and(|f| f.is_some()) {
            // `deleteActivePods`: the deleted pods are counted failed.
            delete_pods(state, &active);
            counts.failed += counts.active;
            (counts.active, counts.ready) = (0, 0);
        } else if finish.is_none() {
            if counts.active == 0 {
                create_job_pod(state, &job);
                counts.active = 1;
            }
            next = [next, job_deadline].into_iter().flatten().min();
        }
        let status = job_status(&start, &counts, finish.map(|failure| (failure, wall.as_str())));
        write_status(state, "batch", "jobs", &job, status);
    }
    next
}

fn is_ready(pod: &Value) -> bool {
    pod["status"]["conditions"]
        .as_array()
        .is_some_and(|c| c.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"))
}

fn delete_pods(state: &mut State, pods: &[&Value]) {
    let Some(kind) = state.registry.get("", "v1", "pods") else { return };
    for pod in pods {
        let (ns, name) = (job_ns(pod), pod["metadata"]["name"].as_str().unwrap_or_default());
        let _ = ops::delete(state, &kind, Some(ns), name, &DeleteOptions::default());
    }
}

/// A pod from the Job's template as the controller makes it: named `<job>-<suffix>`, labelled
/// as the template is (the apiserver put the Job's labels there), owned by the Job.
fn create_job_pod(state: &mut State, job: &Value) {
    let name = job_name(job);
    let uid = job["metadata"]["uid"].as_str().unwrap_or_default();
    let template = &job["spec"]["template"];
    let mut meta = template["metadata"].as_object().cloned().unwrap_or_default();
    meta.insert("generateName".into(), json!(format!("{name}-")));
    meta.insert("namespace".into(), json!(job_ns(job)));
    meta.insert(
        "ownerReferences".into(),
        json!([{"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": uid, "controller": true, "blockOwnerDeletion": true}]),
    );
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": template["spec"]});
    create_with_status(state, "", "pods", Some(job_ns(job)), pod, None);
}

fn job_ns(job: &Value) -> &str {
    job["metadata"]["namespace"].as_str().unwrap_or_default()
}

fn job_name(job: &Value) -> &str {
    job["metadata"]["name"].as_str().unwrap_or_default()
}
