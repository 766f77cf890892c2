//! What the backup Jobs say, turned into status, conditions and Events; pure.
//!
//! Every fact comes from a Job's real outcome (its `Complete`/`Failed` condition) and from its
//! pod's termination message (the manifest `scripts/backup.sh` writes), never from the schedule:
//!
//! - `status.backups.last` and `status.lastBackupTime`: the newest succeeded Job whose manifest
//!   was read (a Job whose pod is gone still moves `lastBackupTime`, from its completion time).
//! - `LastBackupSucceeded`: the newest finished Job; `False` carries the Job's reason (e.g.
//!   `BackoffLimitExceeded`, `DeadlineExceeded`) and the script's message.
//! - `BackupsHealthy`: `False` when the newest finished backup failed (`LastBackupFailed`) or
//!   when two scheduled runs have passed since the last success (`BackupOverdue`); `Unknown`
//!   before the first backup; otherwise `True`.
//! - Events: `BackupStarted` when a new Job appears, `BackupSucceeded` / `BackupFailed`
//!   (Warning) when it finishes, each once (the newest Job and its state are recorded in
//!   `status.backups.lastJob`).
//!
//! Without backups configured both conditions are removed.

use jiff::Timestamp;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde::Deserialize;

use crate::databasecluster::api::backup::{
    BackupJobRecord, BackupRecord, BackupsStatus, Schedule, ValidBackup,
};
use crate::databasecluster::api::types::DatabaseClusterStatus;
use crate::databasecluster::cache::forms::PodForm;
use crate::databasecluster::controller::events::{EventNote, EventType};
use crate::databasecluster::controller::status::ConditionSetter;

/// Condition: whether the newest finished backup succeeded.
pub const LAST_BACKUP_SUCCEEDED: &str = "LastBackupSucceeded";
/// Condition: whether backups are being taken as configured.
pub const BACKUPS_HEALTHY: &str = "BackupsHealthy";

/// How a backup Job stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JobOutcome {
    /// Not finished.
    Running,
    /// `Complete`.
    Succeeded,
    /// `Failed`, with the Job condition's reason and message.
    Failed {
        /// E.g. `BackoffLimitExceeded`.
        reason: String,
        /// The Job condition's message.
        message: String,
    },
}

impl JobOutcome {
    fn as_str(&self) -> &'static str {
        match self {
            JobOutcome::Running => "Running",
            JobOutcome::Succeeded => "Succeeded",
            JobOutcome::Failed { .. } => "Failed",
        }
    }
}

/// What `scripts/backup.sh` (or, with an object store, `instance base-backup`) reports about a
/// complete backup.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    /// The backup's directory name.
    pub name: String,
    /// Start, `YYYY-MM-DDTHH:MM:SSZ`.
    pub start_time: Timestamp,
    /// End.
    pub end_time: Timestamp,
    /// Bytes.
    pub size_bytes: i64,
    /// The host it was taken from.
    #[serde(default)]
    pub source: String,
    /// With an object store: the end of the oldest backup kept there after this one.
    #[serde(default)]
    pub first_recoverability_point: Option<Timestamp>,
}

/// One backup Job as far as status is concerned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobView {
    /// The Job's name.
    pub name: String,
    /// When it started (or was created), for ordering.
    pub started: Timestamp,
    /// When it finished.
    pub finished: Option<Timestamp>,
    /// How it stands.
    pub outcome: JobOutcome,
    /// Its pod's termination message.
    pub message: Option<String>,
}

impl JobView {
    /// The manifest in the termination message of a succeeded Job.
    pub fn manifest(&self) -> Option<Manifest> {
        match self.outcome {
            JobOutcome::Succeeded => serde_json::from_str(self.message.as_deref()?).ok(),
            _ => None,
        }
    }
}

/// A Job and its pod (the pod the Job controls, if still there) as a [`JobView`].
pub fn job_view<P: PodForm>(job: &Job, pod: Option<&P>) -> JobView {
    let status = job.status.as_ref();
    let finished_condition = status.and_then(|s| s.conditions.as_ref()).and_then(|c| {
        c.iter().find(|c| (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True")
    });
    let outcome = match finished_condition {
        Some(c) if c.type_ == "Complete" => JobOutcome::Succeeded,
        Some(c) => JobOutcome::Failed {
            reason: c.reason.clone().unwrap_or_else(|| "Failed".to_owned()),
            message: c.message.clone().unwrap_or_default(),
        },
        None => JobOutcome::Running,
    };
    let started = status
        .and_then(|s| s.start_time.as_ref())
        .or(job.metadata.creation_timestamp.as_ref())
        .map(|t| t.0)
        .unwrap_or(Timestamp::UNIX_EPOCH);
    let finished = status
        .and_then(|s| s.completion_time.as_ref())
        .map(|t| t.0)
        .or_else(|| finished_condition.and_then(|c| c.last_transition_time.as_ref()).map(|t| t.0));
    JobView {
        name: job.metadata.name.clone().unwrap_or_default(),
        started,
        finished,
        outcome,
        message: pod.and_then(termination_message),
    }
}

/// The backup container's termination message, once it terminated.
fn termination_message<P: PodForm>(pod: &P) -> Option<String> {
    let status = pod.status()?;
    let container = status
        .container_statuses
        .as_ref()?
        .iter()
        .find(|c| c.name == "backup" || c.name == "restore" || c.name == "upgrade")?;
    let message = container.state.as_ref()?.terminated.as_ref()?.message.as_ref()?;
    (!message.trim().is_empty()).then(|| message.clone())
}

/// The backup part of the status after observing `jobs` (newest last not required).
#[derive(Debug)]
pub struct Observation {
    /// `status.backups`.
    pub backups: BackupsStatus,
    /// `status.lastBackupTime`.
    pub last_backup_time: Option<Time>,
    /// Events implied by the change from the previous status.
    pub events: Vec<EventNote>,
}

/// Folds the observed Jobs into `status` (backups, lastBackupTime, the two conditions) and
/// returns the Events the change implies. `backup` is `None` when backups are not configured.
pub fn apply_backup_status(
    status: &mut DatabaseClusterStatus,
    previous: Option<&DatabaseClusterStatus>,
    backup: Option<&ValidBackup>,
    jobs: &[JobView],
    generation: Option<i64>,
    now: Timestamp,
) -> Vec<EventNote> {
    let Some(backup) = backup else {
        status.conditions.retain(|c| c.type_ != LAST_BACKUP_SUCCEEDED && c.type_ != BACKUPS_HEALTHY);
        return Vec::new();
    };
    let old = previous.and_then(|p| p.backups.clone()).unwrap_or_default();
    let observation = observe(&old, previous.and_then(|p| p.last_backup_time.clone()), jobs);
    let mut conditions = ConditionSetter::new(std::mem::take(&mut status.conditions), generation, now);
    let newest_finished = newest(jobs, |j| j.outcome != JobOutcome::Running);
    match newest_finished {
        Some(job) => {
            let (state, reason, message) = last_backup_condition(job);
            conditions.set(LAST_BACKUP_SUCCEEDED, state, reason, message);
        }
        None if previous.and_then(|p| find(p, LAST_BACKUP_SUCCEEDED)).is_none() => conditions.set(
            LAST_BACKUP_SUCCEEDED,
            "Unknown",
            "NoBackupYet",
            "No backup has finished yet".to_owned(),
        ),
        None => {}
    }
    let (state, reason, message) = health(
        newest_finished,
        observation.last_backup_time.as_ref().map(|t| t.0),
        backup,
        status_created(previous, now),
        now,
    );
    conditions.set(BACKUPS_HEALTHY, state, reason, message);
    status.conditions = conditions.into_inner();
    status.backups = Some(observation.backups);
    status.last_backup_time = observation.last_backup_time;
    observation.events
}

fn find<'a>(
    status: &'a DatabaseClusterStatus,
    type_: &str,
) -> Option<&'a k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    status.conditions.iter().find(|c| c.type_ == type_)
}

/// When the backup conditions were first set (the start of the schedule's clock for overdue).
fn status_created(previous: Option<&DatabaseClusterStatus>, now: Timestamp) -> Timestamp {
    previous.and_then(|p| find(p, BACKUPS_HEALTHY)).map(|c| c.last_transition_time.0).unwrap_or(now)
}

fn newest(jobs: &[JobView], keep: impl Fn(&JobView) -> bool) -> Option<&JobView> {
    jobs.iter().filter(|j| keep(j)).max_by(|a, b| (a.started, &a.name).cmp(&(b.started, &b.name)))
}

/// Folds the Jobs into the recorded backups and the Events the change implies.
pub fn observe(old: &BackupsStatus, last_backup_time: Option<Time>, jobs: &[JobView]) -> Observation {
    let mut backups = old.clone();
    let succeeded_before = last_backup_time.as_ref().map(|t| t.0);
    let mut last_backup_time = last_backup_time;
    let mut events = Vec::new();

    if let Some(job) = newest(jobs, |j| j.outcome == JobOutcome::Succeeded) {
        let manifest = job.manifest();
        let finished = manifest.as_ref().map(|m| m.end_time).or(job.finished);
        if let Some(finished) = finished
            && last_backup_time.as_ref().is_none_or(|t| t.0 < finished)
        {
            last_backup_time = Some(Time(finished));
        }
        if let Some(point) = manifest.as_ref().and_then(|m| m.first_recoverability_point) {
            backups.first_recoverability_point = Some(Time(point));
        }
        if let Some(m) = manifest
            && backups.last.as_ref().is_none_or(|last| last.name < m.name)
        {
            backups.last = Some(BackupRecord {
                name: m.name,
                start_time: Time(m.start_time),
                end_time: Time(m.end_time),
                size_bytes: m.size_bytes,
            });
        }
    }

    if let Some(job) = newest(jobs, |_| true) {
        let record = BackupJobRecord { name: job.name.clone(), state: job.outcome.as_str().to_owned() };
        let seen = old.last_job.as_ref();
        // A Job other than the recorded one is new unless it finished before the last success
        // known (an older Job that is newest again because newer ones were deleted).
        let new_job = seen.is_none_or(|s| s.name != record.name)
            && (job.finished.is_none() || succeeded_before.is_none_or(|t| job.finished > Some(t)));
        if new_job {
            events.push(EventNote::new(
                EventType::Normal,
                "BackupStarted",
                "Backup",
                format!("Backup Job {} started", job.name),
            ));
        }
        let finished_now = job.outcome != JobOutcome::Running
            && (new_job || seen.is_some_and(|s| s.state == JobOutcome::Running.as_str()));
        if finished_now {
            events.push(finished_event(job));
        }
        backups.last_job = Some(record);
    }
    Observation { backups, last_backup_time, events }
}

fn finished_event(job: &JobView) -> EventNote {
    let (state, reason, message) = last_backup_condition(job);
    let _ = reason;
    if state == "True" {
        EventNote::new(EventType::Normal, "BackupSucceeded", "Backup", message)
    } else {
        EventNote::new(EventType::Warning, "BackupFailed", "Backup", message)
    }
}

/// `LastBackupSucceeded` for a finished Job: status, reason, message.
fn last_backup_condition(job: &JobView) -> (&'static str, &str, String) {
    match &job.outcome {
        JobOutcome::Failed { reason, message } => {
            let detail = job.message.as_deref().unwrap_or(message);
            ("False", reason.as_str(), format!("Backup Job {} failed: {detail}", job.name))
        }
        _ => {
            let message = match job.manifest() {
                Some(m) => format!(
                    "Backup {} ({} bytes, from {}) completed by Job {}",
                    m.name, m.size_bytes, m.source, job.name
                ),
                None => format!("Backup Job {} completed", job.name),
            };
            ("True", "BackupSucceeded", message)
        }
    }
}

/// `BackupsHealthy`: status, reason, message.
fn health(
    newest_finished: Option<&JobView>,
    last_success: Option<Timestamp>,
    backup: &ValidBackup,
    since: Timestamp,
    now: Timestamp,
) -> (&'static str, &'static str, String) {
    if let Some(job) = newest_finished
        && let JobOutcome::Failed { .. } = job.outcome
    {
        return ("False", "LastBackupFailed", format!("The last backup (Job {}) failed", job.name));
    }
    if let Some(schedule) = backup.schedule.as_ref().filter(|_| !backup.suspend)
        && let Some(deadline) = overdue_after(schedule, last_success.unwrap_or(since))
        && now > deadline
    {
        return (
            "False",
            "BackupOverdue",
            format!("No backup has succeeded since two scheduled runs ({}) were due", schedule.as_str()),
        );
    }
    match last_success {
        None => ("Unknown", "NoBackupYet", "No backup has succeeded yet".to_owned()),
        Some(_) if backup.suspend => ("True", "Suspended", "Scheduled backups are suspended".to_owned()),
        Some(t) => ("True", "BackupsCurrent", format!("The last backup succeeded at {t}")),
    }
}

/// The time after which backups are overdue: the second scheduled run after `since`, plus a
/// minute for the Job to run.
pub fn overdue_after(schedule: &Schedule, since: Timestamp) -> Option<Timestamp> {
    let second = schedule.next_after(schedule.next_after(since)?)?;
    second.checked_add(jiff::SignedDuration::from_secs(60)).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::databasecluster::api::validation::StorageSize;

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(1_790_000_000 + second).unwrap()
    }

    fn manifest(name: &str, start: i64, end: i64) -> String {
        format!(
            r#"{{"name":"{name}","startTime":"{}","endTime":"{}","sizeBytes":4096,"postgresVersion":"15.4","systemIdentifier":"1","timeline":1,"walStart":"0/2000028","walEnd":"0/2000100","source":"pg-ro.default.svc"}}"#,
            Timestamp::from_second(at(start).as_second()).unwrap(),
            Timestamp::from_second(at(end).as_second()).unwrap()
        )
    }

    fn job(name: &str, started: i64, outcome: JobOutcome, message: Option<String>) -> JobView {
        let finished = (outcome != JobOutcome::Running).then(|| at(started + 30));
        JobView { name: name.into(), started: at(started), finished, outcome, message }
    }

    fn failed(message: &str) -> JobOutcome {
        JobOutcome::Failed { reason: "BackoffLimitExceeded".into(), message: message.into() }
    }

    fn scheduled(schedule: &str) -> ValidBackup {
        ValidBackup {
            schedule: Some(Schedule::parse(schedule).unwrap()),
            keep_last: None,
            keep_newer_than_seconds: None,
            storage: StorageSize::parse("1Gi").unwrap(),
            storage_class_name: None,
            suspend: false,
            object_store: None,
            recovery_window_seconds: None,
        }
    }

    fn condition<'a>(status: &'a DatabaseClusterStatus, type_: &str) -> (&'a str, &'a str) {
        let c = find(status, type_).unwrap_or_else(|| panic!("{type_} is set"));
        (c.status.as_str(), c.reason.as_str())
    }

    fn reasons(events: &[EventNote]) -> Vec<&str> {
        events.iter().map(|e| e.reason.as_str()).collect()
    }

    /// Runs one observation on top of `previous`, as a pass would.
    fn pass(
        previous: &DatabaseClusterStatus,
        backup: &ValidBackup,
        jobs: &[JobView],
        now: Timestamp,
    ) -> (DatabaseClusterStatus, Vec<EventNote>) {
        let mut status = previous.clone();
        let events = apply_backup_status(&mut status, Some(previous), Some(backup), jobs, Some(1), now);
        (status, events)
    }

    #[test]
    fn a_success_records_the_manifest_and_each_transition_is_reported_once() {
        let backup = scheduled("0 * * * *");
        let empty = DatabaseClusterStatus::default();
        let (status, events) = pass(&empty, &backup, &[], at(0));
        assert!(events.is_empty());
        assert_eq!(condition(&status, LAST_BACKUP_SUCCEEDED), ("Unknown", "NoBackupYet"));
        assert_eq!(condition(&status, BACKUPS_HEALTHY), ("Unknown", "NoBackupYet"));

        let running = [job("pg-backup-1", 10, JobOutcome::Running, None)];
        let (status, events) = pass(&status, &backup, &running, at(11));
        assert_eq!(reasons(&events), ["BackupStarted"]);
        let (status, events) = pass(&status, &backup, &running, at(12));
        assert!(events.is_empty(), "nothing new, nothing said");

        let done =
            [job("pg-backup-1", 10, JobOutcome::Succeeded, Some(manifest("20260922T000010Z", 10, 40)))];
        let (status, events) = pass(&status, &backup, &done, at(50));
        assert_eq!(reasons(&events), ["BackupSucceeded"]);
        assert_eq!(condition(&status, LAST_BACKUP_SUCCEEDED), ("True", "BackupSucceeded"));
        assert_eq!(condition(&status, BACKUPS_HEALTHY), ("True", "BackupsCurrent"));
        let last = status.backups.as_ref().unwrap().last.as_ref().unwrap();
        assert_eq!((last.name.as_str(), last.size_bytes), ("20260922T000010Z", 4096));
        assert_eq!(status.last_backup_time, Some(Time(at(40))));
        let (_, events) = pass(&status, &backup, &done, at(60));
        assert!(events.is_empty());
    }

    #[test]
    fn a_failure_carries_the_jobs_reason_and_a_later_success_flips_it_back() {
        let backup = scheduled("* * * * *");
        let ok = job("pg-backup-1", 0, JobOutcome::Succeeded, Some(manifest("20260922T000000Z", 0, 5)));
        let (status, _) = pass(&DatabaseClusterStatus::default(), &backup, std::slice::from_ref(&ok), at(10));
        let bad = job(
            "pg-backup-2",
            60,
            failed("Job has reached the specified backoff limit"),
            Some("no instance answers at pg-ro pg-rw".into()),
        );
        let (status, events) = pass(&status, &backup, &[ok.clone(), bad.clone()], at(100));
        assert_eq!(reasons(&events), ["BackupStarted", "BackupFailed"]);
        assert_eq!(events[1].type_, EventType::Warning);
        assert!(events[1].note.contains("no instance answers"), "{}", events[1].note);
        assert_eq!(condition(&status, LAST_BACKUP_SUCCEEDED), ("False", "BackoffLimitExceeded"));
        assert!(find(&status, LAST_BACKUP_SUCCEEDED).unwrap().message.contains("no instance answers"));
        assert_eq!(condition(&status, BACKUPS_HEALTHY), ("False", "LastBackupFailed"));
        assert_eq!(status.backups.as_ref().unwrap().last.as_ref().unwrap().name, "20260922T000000Z", "kept");

        let again =
            job("pg-backup-3", 120, JobOutcome::Succeeded, Some(manifest("20260922T000200Z", 120, 130)));
        let (status, events) = pass(&status, &backup, &[ok, bad, again], at(140));
        assert_eq!(reasons(&events), ["BackupStarted", "BackupSucceeded"]);
        assert_eq!(condition(&status, LAST_BACKUP_SUCCEEDED), ("True", "BackupSucceeded"));
        assert_eq!(condition(&status, BACKUPS_HEALTHY), ("True", "BackupsCurrent"));
        assert_eq!(status.backups.unwrap().last.unwrap().name, "20260922T000200Z");
    }

    #[test]
    fn backups_are_overdue_after_two_missed_runs_and_conditions_go_with_the_configuration() {
        let backup = scheduled("0 * * * *");
        let (status, _) = pass(&DatabaseClusterStatus::default(), &backup, &[], at(0));
        let (status, _) = pass(&status, &backup, &[], at(2 * 3600 + 120));
        assert_eq!(condition(&status, BACKUPS_HEALTHY), ("False", "BackupOverdue"));
        let mut off = status.clone();
        apply_backup_status(&mut off, Some(&status), None, &[], Some(1), at(3 * 3600));
        assert!(find(&off, LAST_BACKUP_SUCCEEDED).is_none() && find(&off, BACKUPS_HEALTHY).is_none());
    }

    #[test]
    fn an_older_job_that_is_newest_again_is_not_reported_again() {
        let backup = scheduled("* * * * *");
        let old = job("pg-backup-now", 0, JobOutcome::Succeeded, Some(manifest("20260922T000000Z", 0, 5)));
        let newer = job("pg-backup-1", 60, JobOutcome::Succeeded, Some(manifest("20260922T000100Z", 60, 65)));
        let (status, _) = pass(&DatabaseClusterStatus::default(), &backup, &[old.clone(), newer], at(100));
        // The CronJob and its Jobs are deleted: the on-demand Job is the newest left.
        let (status, events) = pass(&status, &backup, &[old], at(200));
        assert!(events.is_empty(), "{:?}", reasons(&events));
        assert_eq!(status.backups.unwrap().last.unwrap().name, "20260922T000100Z");
    }

    #[test]
    fn a_succeeded_job_without_its_pod_still_moves_the_last_backup_time() {
        let backup = scheduled("@daily");
        let done = [job("pg-backup-1", 0, JobOutcome::Succeeded, None)];
        let (status, events) = pass(&DatabaseClusterStatus::default(), &backup, &done, at(60));
        assert_eq!(reasons(&events), ["BackupStarted", "BackupSucceeded"]);
        assert_eq!(status.last_backup_time, Some(Time(at(30))));
        assert_eq!(status.backups.unwrap().last, None, "no manifest, no name");
    }
}
