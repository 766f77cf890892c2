//! The simulated CronJob controller, after 1.28's `pkg/controller/cronjob/cronjob_controllerv2.go`
//! (`sync`, `syncCronJob`, `cleanupFinishedJobs`) and `utils.go` (`mostRecentScheduleTime`,
//! `getJobFromTemplate2`). Each pass, for each CronJob not being deleted:
//!
//! 1. Its Jobs are those whose controller is a CronJob of its name (`getJobsToBeReconciled`).
//!    A finished Job in `status.active` leaves it; a finished Job not in it moves
//!    `lastSuccessfulTime` up to its `completionTime` (so that happens one pass later, and never
//!    moves back); an unfinished Job not in it stays out (1.28 only warns `UnexpectedJob`); a
//!    reference to a Job that no longer exists is dropped.
//! 2. Unless suspended, the most recent scheduled time not after now, since `lastScheduleTime`
//!    (or the creation) and within `startingDeadlineSeconds`, is due, unless it is already
//!    `lastScheduleTime`, or is more than `startingDeadlineSeconds` late. `Forbid` waits while
//!    `active` is not empty (and records nothing, so the run starts late once the Job finishes);
//!    `Replace` deletes the active Jobs first. The Job `<cronjob>-<scheduled minutes since the
//!    epoch>` is made from the template (its labels and annotations, plus
//!    `batch.kubernetes.io/cronjob-scheduled-timestamp`, beta and on in 1.28), owned by the
//!    CronJob; it joins `active` and its time becomes `lastScheduleTime`.
//! 3. Finished Jobs beyond `successfulJobsHistoryLimit` / `failedJobsHistoryLimit`, oldest
//!    `startTime` first, are deleted in the background.
//!
//! Schedules are UTC (`spec.timeZone` is validated, not applied).

use jiff::{SignedDuration, Timestamp};
use serde_json::{Value, json};

use crate::sim::controllers::cron::Schedule;
use crate::sim::controllers::jobs::{finished, stamp};
use crate::sim::controllers::{controller_of, create_with_status, is_deleting, write_status};
use crate::sim::ops::{self, DeleteOptions, Propagation};
use crate::sim::state::State;

/// One pass over every CronJob; returns when the next one is due.
pub fn sync_all(state: &mut State, now: Timestamp) -> Option<Timestamp> {
    let cron_jobs: Vec<Value> =
        state.store.list("cronjobs.batch", None).filter(|c| !is_deleting(c)).cloned().collect();
    cron_jobs.into_iter().filter_map(|cj| sync(state, &cj, now)).min()
}

fn meta<'a>(obj: &'a Value, field: &str) -> &'a str {
    obj["metadata"][field].as_str().unwrap_or_default()
}

fn time(value: &Value) -> Option<Timestamp> {
    value.as_str()?.parse().ok()
}

/// `sync`: `syncCronJob`, then `cleanupFinishedJobs`, then one status write if anything changed.
fn sync(state: &mut State, cj: &Value, now: Timestamp) -> Option<Timestamp> {
    let (ns, name) = (meta(cj, "namespace"), meta(cj, "name"));
    let jobs: Vec<Value> = state
        .store
        .list("jobs.batch", Some(ns))
        .filter(|j| controller_of(j, "CronJob") == Some(name))
        .cloned()
        .collect();
    let mut status = cj["status"].clone();
    if !status.is_object() {
        status = json!({});
    }
    reconcile_jobs(state, &mut status, &jobs);
    let schedule = cj["spec"]["schedule"].as_str().and_then(Schedule::parse);
    if cj["spec"]["suspend"] != true
        && let Some(schedule) = &schedule
    {
        schedule_job(state, cj, &mut status, schedule, now);
    }
    cleanup_finished_jobs(state, cj, &mut status, &jobs);
    if status["active"].as_array().is_some_and(Vec::is_empty) {
        status.as_object_mut().map(|s| s.remove("active"));
    }
    if status != cj["status"] && !(status == json!({}) && cj["status"].is_null()) {
        write_status(state, "batch", "cronjobs", cj, status);
    }
    schedule?.next_after(now)
}

fn uid_in(list: &Value, uid: &str) -> bool {
    list.as_array().is_some_and(|refs| refs.iter().any(|r| r["uid"] == uid))
}

fn remove_uid(status: &mut Value, uid: &str) {
    if let Some(refs) = status["active"].as_array_mut() {
        refs.retain(|r| r["uid"] != uid);
    }
}

/// `syncCronJob`'s first half: the active list and `lastSuccessfulTime` from the Jobs seen.
fn reconcile_jobs(state: &State, status: &mut Value, jobs: &[Value]) {
    for job in jobs {
        let uid = meta(job, "uid");
        match (uid_in(&status["active"], uid), finished(job)) {
            (true, Some(_)) => remove_uid(status, uid),
            (false, Some(_)) => {
                let completed = time(&job["status"]["completionTime"]);
                if completed.is_some_and(|c| time(&status["lastSuccessfulTime"]).is_none_or(|last| c > last))
                {
                    status["lastSuccessfulTime"] = job["status"]["completionTime"].clone();
                }
            }
            // In the list and running, or unexpected: left as it is.
            _ => {}
        }
    }
    let gone: Vec<String> = status["active"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| jobs.iter().all(|j| j["metadata"]["uid"] != r["uid"]))
        .filter(|r| {
            let (ns, name) =
                (r["namespace"].as_str().unwrap_or_default(), r["name"].as_str().unwrap_or_default());
            state.store.get("jobs.batch", ns, name).is_none()
        })
        .filter_map(|r| r["uid"].as_str().map(String::from))
        .collect();
    for uid in gone {
        remove_uid(status, &uid);
    }
}

/// 1.28 `mostRecentScheduleTime`: the latest scheduled time not after `now` since `earliest`,
/// found from the first two times after `earliest` as the controller does (it steps back one
/// interval from its estimate and walks forward, so irregular schedules come out exact too).
pub fn most_recent_schedule_time(
    schedule: &Schedule,
    earliest: Timestamp,
    now: Timestamp,
) -> Option<Timestamp> {
    let t1 = schedule.next_after(earliest)?;
    if now < t1 {
        return None;
    }
    let t2 = schedule.next_after(t1)?;
    if now < t2 {
        return Some(t1);
    }
    let interval = t2.as_second() - t1.as_second();
    if interval < 1 {
        return None;
    }
    let missed = (now.as_second() - t1.as_second()) / interval + 1;
    let potential_earliest = t1.checked_add(SignedDuration::from_secs((missed - 2) * interval)).ok()?;
    let mut recent = None;
    let mut next = schedule.next_after(potential_earliest);
    while let Some(t) = next.filter(|t| *t <= now) {
        recent = Some(t);
        next = schedule.next_after(t);
    }
    recent
}

/// `syncCronJob`'s second half: starts the Job of the most recent scheduled time, if due.
fn schedule_job(state: &mut State, cj: &Value, status: &mut Value, schedule: &Schedule, now: Timestamp) {
    let deadline = cj["spec"]["startingDeadlineSeconds"].as_i64().map(SignedDuration::from_secs);
    let mut earliest = time(&status["lastScheduleTime"])
        .or_else(|| time(&cj["metadata"]["creationTimestamp"]))
        .unwrap_or(now);
    if let Some(window) = deadline.and_then(|d| now.checked_sub(d).ok()) {
        earliest = earliest.max(window);
    }
    let Some(scheduled) = most_recent_schedule_time(schedule, earliest, now) else { return };
    if deadline.and_then(|d| scheduled.checked_add(d).ok()).is_some_and(|latest| latest < now) {
        // Missed its starting deadline (`MissSchedule`).
        return;
    }
    let (ns, cj_name) = (meta(cj, "namespace"), meta(cj, "name"));
    let job_name = format!("{cj_name}-{}", scheduled.as_second() / 60);
    let named =
        status["active"].as_array().is_some_and(|refs| refs.iter().any(|r| r["name"] == job_name.as_str()));
    if named || time(&status["lastScheduleTime"]) == Some(scheduled) {
        return;
    }
    let active: Vec<Value> = status["active"].as_array().cloned().unwrap_or_default();
    match cj["spec"]["concurrencyPolicy"].as_str() {
        Some("Forbid") if !active.is_empty() => return,
        Some("Replace") => {
            for reference in &active {
                if let Some(name) = reference["name"].as_str() {
                    delete_job(state, ns, name);
                }
                remove_uid(status, reference["uid"].as_str().unwrap_or_default());
            }
        }
        _ => {}
    }
    let template = &cj["spec"]["jobTemplate"];
    let mut annotations = template["metadata"]["annotations"].as_object().cloned().unwrap_or_default();
    annotations.insert("batch.kubernetes.io/cronjob-scheduled-timestamp".into(), json!(stamp(scheduled)));
    let mut metadata = json!({
        "name": job_name, "namespace": ns, "annotations": annotations,
        "ownerReferences": [{"apiVersion": "batch/v1", "kind": "CronJob", "name": cj_name, "uid": meta(cj, "uid"), "controller": true, "blockOwnerDeletion": true}],
    });
    if let Some(labels) = template["metadata"]["labels"].as_object() {
        metadata["labels"] = json!(labels);
    }
    let job =
        json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata, "spec": template["spec"]});
    // A refusal (`AlreadyExists` included) records nothing, as in 1.28.
    let Some(created) = create_with_status(state, "batch", "jobs", Some(ns), job, None) else { return };
    let reference = json!({
        "apiVersion": "batch/v1", "kind": "Job", "namespace": ns, "name": created["metadata"]["name"],
        "uid": created["metadata"]["uid"], "resourceVersion": created["metadata"]["resourceVersion"],
    });
    match status["active"].as_array_mut() {
        Some(refs) => refs.push(reference),
        None => status["active"] = json!([reference]),
    }
    status["lastScheduleTime"] = json!(stamp(scheduled));
}

/// `deleteJob`: a background deletion.
fn delete_job(state: &mut State, ns: &str, name: &str) {
    let Some(kind) = state.registry.get("batch", "v1", "jobs") else { return };
    let opts = DeleteOptions { propagation: Propagation::Background, ..Default::default() };
    if let Err(e) = ops::delete(state, &kind, Some(ns), name, &opts) {
        tracing::debug!(job = %name, error = %e.message, "simulated CronJob controller could not delete a Job");
    }
}

/// `cleanupFinishedJobs` / `removeOldestJobs`: the oldest finished Jobs (by `startTime`, those
/// without one last, then by name) beyond each history limit are deleted.
fn cleanup_finished_jobs(state: &mut State, cj: &Value, status: &mut Value, jobs: &[Value]) {
    for (outcome, field) in [(true, "successfulJobsHistoryLimit"), (false, "failedJobsHistoryLimit")] {
        let Some(limit) = cj["spec"][field].as_i64() else { continue };
        let mut done: Vec<&Value> = jobs.iter().filter(|j| finished(j) == Some(outcome)).collect();
        done.sort_by_key(|j| {
            (time(&j["status"]["startTime"]).is_none(), time(&j["status"]["startTime"]), meta(j, "name"))
        });
        let excess = done.len().saturating_sub(limit.max(0) as usize);
        for job in done.into_iter().take(excess) {
            delete_job(state, meta(job, "namespace"), meta(job, "name"));
            remove_uid(status, meta(job, "uid"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    // mirrors pkg/controller/cronjob/utils.go (1.28): `mostRecentScheduleTime`, as its
    // `TestMostRecentScheduleTime` cases: nothing before the first time, the first time before the
    // second, and the latest time for a regular and an irregular schedule.
    #[test]
    fn the_most_recent_schedule_time() {
        let every_5 = Schedule::parse("*/5 * * * *").unwrap();
        let earliest = ts("2026-01-05T10:00:00Z");
        assert_eq!(most_recent_schedule_time(&every_5, earliest, ts("2026-01-05T10:04:59Z")), None);
        assert_eq!(
            most_recent_schedule_time(&every_5, earliest, ts("2026-01-05T10:05:00Z")),
            Some(ts("2026-01-05T10:05:00Z"))
        );
        assert_eq!(
            most_recent_schedule_time(&every_5, earliest, ts("2026-01-05T10:31:00Z")),
            Some(ts("2026-01-05T10:30:00Z"))
        );
        // Weekdays at 06:30, 10:30 and 14:30; 2026-01-02 is a Friday.
        let office = Schedule::parse("30 6-16/4 * * 1-5").unwrap();
        assert_eq!(
            most_recent_schedule_time(&office, ts("2026-01-02T16:30:00Z"), ts("2026-01-05T15:00:00Z")),
            Some(ts("2026-01-05T14:30:00Z"))
        );
        assert_eq!(
            most_recent_schedule_time(&office, ts("2026-01-02T14:30:00Z"), ts("2026-01-05T11:00:00Z")),
            Some(ts("2026-01-05T10:30:00Z"))
        );
    }
}
