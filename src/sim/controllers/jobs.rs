//! The simulated Job and CronJob controllers. With the timer kubelet a Job starts when first seen
//! and finishes `job_duration` later: succeeded, or failed when `Faults::fail_next_jobs` says so.
//! With the process kubelet a Job runs real pods from its template (`<job>-<suffix>`, labelled
//! `job-name` and `controller-uid`, owned by the Job): it completes when a pod succeeds, and a
//! failed pod is replaced until `backoffLimit` (default 6) failures fail the Job. A CronJob
//! creates a Job at each scheduled time (the latest missed one when several were missed),
//! honours `suspend` and `concurrencyPolicy`, keeps `active`, `lastScheduleTime` and
//! `lastSuccessfulTime`, and prunes finished Jobs beyond the history limits. Schedules follow a
//! clock that advances with `tokio::time`, so a paused test clock drives them, and that a test may
//! also move ahead ([`crate::sim::SimServer::advance_controller_clock`]) when real processes run.

use std::collections::HashMap;
use std::sync::Arc;

use jiff::{SignedDuration, Timestamp};
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::sim::KubeletKind;
use crate::sim::cluster::Cluster;
use crate::sim::controllers::cron::Schedule;
use crate::sim::controllers::{condition, create_with_status, is_deleting, owned_by, write_status};
use crate::sim::ops::{self, DeleteOptions, Propagation};
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

fn stamp(t: Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

fn finished(job: &Value) -> Option<bool> {
    let conditions = job["status"]["conditions"].as_array()?;
    conditions
        .iter()
        .find(|c| (c["type"] == "Complete" || c["type"] == "Failed") && c["status"] == "True")
        .map(|c| c["type"] == "Complete")
}

/// The Job and CronJob controllers' memory: when each running Job finishes.
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
        // Jobs first: a Job that finishes is pruned by its CronJob in the same pass.
        let job_due = self.jobs(state, now);
        let cron_due = self.cron_jobs(state, now);
        [cron_due, job_due].into_iter().flatten().min()
    }

    fn jobs(&mut self, state: &mut State, now: Instant) -> Option<Instant> {
        if self.cluster.config.kubelet == KubeletKind::Process {
            run_job_pods(state, &stamp(self.clock.now(now)));
            return None;
        }
        let running = running_jobs(state);
        let uids: Vec<String> =
            running.iter().filter_map(|j| j["metadata"]["uid"].as_str().map(String::from)).collect();
        self.finish_at.retain(|uid, _| uids.contains(uid));
        let mut next: Option<Instant> = None;
        let wall = stamp(self.clock.now(now));
        for job in running {
            let uid = job["metadata"]["uid"].as_str().unwrap_or_default().to_string();
            let due = *self.finish_at.entry(uid.clone()).or_insert(now + self.cluster.config.job_duration);
            if job["status"]["startTime"].is_null() {
                write_status(
                    state,
                    "batch",
                    "jobs",
                    &job,
                    json!({"startTime": wall, "active": 1, "ready": 0}),
                );
            }
            if due > now {
                next = Some(next.map_or(due, |n| n.min(due)));
                continue;
            }
            let Some(current) = state.store.get("jobs.batch", job_ns(&job), job_name(&job)).cloned() else {
                continue;
            };
            let start = current["status"]["startTime"].clone();
            let status = if self.cluster.faults.take_job_failure() {
                json!({
                    "startTime": start, "failed": 1, "ready": 0,
                    "conditions": [
                        condition("FailureTarget", true, "BackoffLimitExceeded", "Job has reached the specified backoff limit", &wall),
                        condition("Failed", true, "BackoffLimitExceeded", "Job has reached the specified backoff limit", &wall),
                    ],
                })
            } else {
                json!({
                    "startTime": start, "completionTime": wall, "ready": 0,
                    "succeeded": current["spec"]["completions"].as_i64().unwrap_or(1),
                    "conditions": [
                        condition("SuccessCriteriaMet", true, "CompletionsReached", "Reached expected number of succeeded pods", &wall),
                        condition("Complete", true, "CompletionsReached", "Reached expected number of succeeded pods", &wall),
                    ],
                })
            };
            write_status(state, "batch", "jobs", &current, status);
            self.finish_at.remove(&uid);
        }
        next
    }

    fn cron_jobs(&mut self, state: &mut State, now: Instant) -> Option<Instant> {
        let cron_jobs: Vec<Value> =
            state.store.list("cronjobs.batch", None).filter(|c| !is_deleting(c)).cloned().collect();
        let wall_now = self.clock.now(now);
        let mut next: Option<Instant> = None;
        for cj in cron_jobs {
            let Some(schedule) = cj["spec"]["schedule"].as_str().and_then(Schedule::parse) else { continue };
            let since = cj["status"]["lastScheduleTime"]
                .as_str()
                .or(cj["metadata"]["creationTimestamp"].as_str())
                .and_then(|t| t.parse::<Timestamp>().ok())
                .unwrap_or(wall_now);
            // The latest scheduled time not after now, if any was missed since the last run.
            let mut due = None;
            let mut t = since;
            for _ in 0..10_000 {
                match schedule.next_after(t) {
                    Some(n) if n <= wall_now => {
                        due = Some(n);
                        t = n;
                    }
                    _ => break,
                }
            }
            if let Some(at) = due
                && cj["spec"]["suspend"] != true
            {
                self.run_cron_job(state, &cj, at);
            }
            self.sync_cron_status(state, &cj, due);
            if let Some(upcoming) = schedule.next_after(due.unwrap_or(t).max(t)) {
                let when = self.clock.instant_of(upcoming);
                next = Some(next.map_or(when, |n| n.min(when)));
            }
        }
        next
    }

    fn run_cron_job(&self, state: &mut State, cj: &Value, at: Timestamp) {
        let ns = cj["metadata"]["namespace"].as_str().unwrap_or_default();
        let uid = cj["metadata"]["uid"].as_str().unwrap_or_default();
        let active: Vec<Value> = state
            .store
            .list("jobs.batch", Some(ns))
            .filter(|j| owned_by(j, uid) && finished(j).is_none())
            .cloned()
            .collect();
        match cj["spec"]["concurrencyPolicy"].as_str() {
            Some("Forbid") if !active.is_empty() => return,
            Some("Replace") => {
                if let Some(kind) = state.registry.get("batch", "v1", "jobs") {
                    let opts = DeleteOptions { propagation: Propagation::Background, ..Default::default() };
                    for j in &active {
                        let _ = ops::delete(state, &kind, Some(ns), job_name(j), &opts);
                    }
                }
            }
            _ => {}
        }
        let template = &cj["spec"]["jobTemplate"];
        let name = format!("{}-{}", cj["metadata"]["name"].as_str().unwrap_or_default(), at.as_second() / 60);
        let mut meta = template["metadata"].as_object().cloned().unwrap_or_default();
        meta.insert("name".into(), json!(name));
        meta.insert("namespace".into(), json!(ns));
        meta.insert(
            "ownerReferences".into(),
            json!([{"apiVersion": "batch/v1", "kind": "CronJob", "name": cj["metadata"]["name"], "uid": uid, "controller": true, "blockOwnerDeletion": true}]),
        );
        let mut annotations = meta.get("annotations").and_then(Value::as_object).cloned().unwrap_or_default();
        annotations.insert("batch.kubernetes.io/cronjob-scheduled-timestamp".into(), json!(stamp(at)));
        meta.insert("annotations".into(), Value::Object(annotations));
        let job =
            json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": template["spec"]});
        if state.store.get("jobs.batch", ns, &name).is_none() {
            create_with_status(state, "batch", "jobs", Some(ns), job, None);
        }
    }

    /// Keeps `active`, `lastScheduleTime`, `lastSuccessfulTime` true and prunes old Jobs.
    fn sync_cron_status(&self, state: &mut State, cj: &Value, scheduled: Option<Timestamp>) {
        let ns = cj["metadata"]["namespace"].as_str().unwrap_or_default();
        let uid = cj["metadata"]["uid"].as_str().unwrap_or_default();
        let mut jobs: Vec<Value> =
            state.store.list("jobs.batch", Some(ns)).filter(|j| owned_by(j, uid)).cloned().collect();
        jobs.sort_by_key(|j| j["metadata"]["creationTimestamp"].as_str().unwrap_or_default().to_string());
        let keep = |field: &str, default: i64| cj["spec"][field].as_i64().unwrap_or(default).max(0) as usize;
        let (keep_ok, keep_failed) =
            (keep("successfulJobsHistoryLimit", 3), keep("failedJobsHistoryLimit", 1));
        for (outcome, limit) in [(true, keep_ok), (false, keep_failed)] {
            let done: Vec<&Value> = jobs.iter().filter(|j| finished(j) == Some(outcome)).collect();
            let excess = done.len().saturating_sub(limit);
            if let Some(kind) = state.registry.get("batch", "v1", "jobs") {
                for j in done.into_iter().take(excess) {
                    let _ = ops::delete(state, &kind, Some(ns), job_name(j), &DeleteOptions::default());
                }
            }
        }
        let Some(current) = state
            .store
            .get("cronjobs.batch", ns, cj["metadata"]["name"].as_str().unwrap_or_default())
            .cloned()
        else {
            return;
        };
        let live: Vec<&Value> =
            state.store.list("jobs.batch", Some(ns)).filter(|j| owned_by(j, uid)).collect();
        let active: Vec<Value> = live
            .iter()
            .filter(|j| finished(j).is_none())
            .map(|j| json!({"apiVersion": "batch/v1", "kind": "Job", "name": j["metadata"]["name"], "namespace": ns, "uid": j["metadata"]["uid"], "resourceVersion": j["metadata"]["resourceVersion"]}))
            .collect();
        let last_success = live
            .iter()
            .filter(|j| finished(j) == Some(true))
            .filter_map(|j| j["status"]["completionTime"].as_str())
            .max()
            .map(String::from);
        let mut status = current["status"].as_object().cloned().unwrap_or_default();
        if active.is_empty() {
            status.remove("active");
        } else {
            status.insert("active".into(), json!(active));
        }
        if let Some(at) = scheduled {
            status.insert("lastScheduleTime".into(), json!(stamp(at)));
        }
        if let Some(t) = last_success {
            status.insert("lastSuccessfulTime".into(), json!(t));
        }
        write_status(state, "batch", "cronjobs", &current, Value::Object(status));
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

/// Jobs on the process kubelet: one pod at a time from the template, the outcome from its phase.
fn run_job_pods(state: &mut State, wall: &str) {
    let running = running_jobs(state);
    for job in running {
        let (ns, uid) =
            (job_ns(&job).to_owned(), job["metadata"]["uid"].as_str().unwrap_or_default().to_owned());
        let pods: Vec<Value> =
            state.store.list("pods", Some(&ns)).filter(|p| owned_by(p, &uid)).cloned().collect();
        let phase = |p: &Value| p["status"]["phase"].as_str().unwrap_or_default().to_owned();
        let succeeded = pods.iter().filter(|p| phase(p) == "Succeeded").count() as i64;
        let failed = pods.iter().filter(|p| phase(p) == "Failed").count() as i64;
        let active = pods
            .iter()
            .filter(|p| !matches!(phase(p).as_str(), "Succeeded" | "Failed") && !is_deleting(p))
            .count() as i64;
        let limit = job["spec"]["backoffLimit"].as_i64().unwrap_or(6);
        let start = job["status"]["startTime"].as_str().map_or_else(|| wall.to_owned(), str::to_owned);
        let status = if succeeded > 0 {
            json!({
                "startTime": start, "completionTime": wall, "ready": 0, "succeeded": succeeded, "failed": failed,
                "conditions": [
                    condition("SuccessCriteriaMet", true, "CompletionsReached", "Reached expected number of succeeded pods", wall),
                    condition("Complete", true, "CompletionsReached", "Reached expected number of succeeded pods", wall),
                ],
            })
        } else if failed > limit {
            json!({
                "startTime": start, "failed": failed, "ready": 0,
                "conditions": [
                    condition("FailureTarget", true, "BackoffLimitExceeded", "Job has reached the specified backoff limit", wall),
                    condition("Failed", true, "BackoffLimitExceeded", "Job has reached the specified backoff limit", wall),
                ],
            })
        } else {
            if active == 0 {
                create_job_pod(state, &job);
            }
            json!({"startTime": start, "active": 1, "ready": 0, "failed": failed})
        };
        write_status(state, "batch", "jobs", &job, status);
    }
}

fn create_job_pod(state: &mut State, job: &Value) {
    let name = job_name(job);
    let uid = job["metadata"]["uid"].as_str().unwrap_or_default();
    let template = &job["spec"]["template"];
    let mut meta = template["metadata"].as_object().cloned().unwrap_or_default();
    let mut labels = meta.get("labels").and_then(Value::as_object).cloned().unwrap_or_default();
    labels.insert("job-name".into(), json!(name));
    labels.insert("batch.kubernetes.io/job-name".into(), json!(name));
    labels.insert("controller-uid".into(), json!(uid));
    labels.insert("batch.kubernetes.io/controller-uid".into(), json!(uid));
    meta.insert("labels".into(), Value::Object(labels));
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
