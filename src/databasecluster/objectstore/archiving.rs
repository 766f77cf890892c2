//! `ContinuousArchiving`, `status.backups.lastArchivedWAL` / `lastArchivedTime` and the Events of
//! archiving that fails and recovers, decided purely from what the primary's instance manager
//! reports ([`ArchiverReport`], read each pass with its `/status`).
//!
//! - archiving not configured: the condition is removed;
//! - the primary not observed this pass: everything stays as recorded (an unreachable primary is
//!   not known to fail to archive; failover has its own conditions);
//! - the last attempt failed: `False`, reason `ArchivingFailing`, the store's message (scrubbed of
//!   the credentials by the instance) and how many files wait; a Warning Event when it flips;
//! - else: `True`, reason `Archiving`, once a file was archived (`Unknown`, `NoWALArchivedYet`
//!   before); a Normal Event `ArchivingRecovered` when it flips back from `False`.
//!
//! The condition's message does not change with each archived file, so a healthy cluster's status
//! is not rewritten for every segment; `lastArchivedWAL` is, at most once a pass.

use std::str::FromStr;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::databasecluster::api::types::DatabaseClusterStatus;
use crate::databasecluster::controller::events::{EventNote, EventType};
use crate::databasecluster::controller::status::{ConditionSetter, find_condition};
use crate::instance::archive::state::ArchiverReport;

/// The condition's type.
pub const CONTINUOUS_ARCHIVING: &str = "ContinuousArchiving";
/// Reason: the last attempt failed.
pub const ARCHIVING_FAILING: &str = "ArchivingFailing";
/// Reason: files are archived.
pub const ARCHIVING: &str = "Archiving";
/// Reason: archiving is on and nothing was archived yet.
pub const NO_WAL_ARCHIVED_YET: &str = "NoWALArchivedYet";
/// Event reason when archiving starts failing.
pub const ARCHIVING_FAILED_EVENT: &str = "ArchivingFailed";
/// Event reason when it works again.
pub const ARCHIVING_RECOVERED_EVENT: &str = "ArchivingRecovered";

/// What the pass knows about archiving.
#[derive(Clone, Copy, Debug)]
pub struct Archiving<'a> {
    /// WAL archiving is configured.
    pub enabled: bool,
    /// The destination, for the messages.
    pub destination: &'a str,
    /// The primary's report this pass (`None`: not observed).
    pub report: Option<&'a ArchiverReport>,
}

/// Folds `archiving` into `status`; returns the Events of a change from `previous`.
pub fn apply_archiving(
    status: &mut DatabaseClusterStatus,
    previous: Option<&DatabaseClusterStatus>,
    archiving: Archiving<'_>,
    generation: Option<i64>,
    now: Timestamp,
) -> Vec<EventNote> {
    if !archiving.enabled {
        status.conditions.retain(|c| c.type_ != CONTINUOUS_ARCHIVING);
        return Vec::new();
    }
    let Some(report) = archiving.report else { return Vec::new() };
    let was = previous.and_then(|p| find_condition(p, CONTINUOUS_ARCHIVING)).map(|c| c.status.clone());
    let mut conditions = ConditionSetter::new(std::mem::take(&mut status.conditions), generation, now);
    let mut events = Vec::new();
    let (state, reason, message) = if report.failing() {
        let wal = report.last_failed_wal.as_deref().unwrap_or("a WAL file");
        let why = report.failure.as_ref().map_or("see the primary's log", |f| f.error.as_str());
        let message = format!(
            "archiving {wal} to {} fails: {why}; {} WAL file(s) wait on the primary",
            archiving.destination, report.pending
        );
        if was.as_deref() != Some("False") {
            events.push(EventNote::new(
                EventType::Warning,
                ARCHIVING_FAILED_EVENT,
                "ArchiveWAL",
                message.clone(),
            ));
        }
        ("False", ARCHIVING_FAILING, message)
    } else if report.last_archived_wal.is_some() {
        if was.as_deref() == Some("False") {
            let note = format!("WAL is archived to {} again", archiving.destination);
            events.push(EventNote::new(EventType::Normal, ARCHIVING_RECOVERED_EVENT, "ArchiveWAL", note));
        }
        ("True", ARCHIVING, format!("WAL is archived continuously to {}", archiving.destination))
    } else {
        ("Unknown", NO_WAL_ARCHIVED_YET, format!("no WAL file was archived to {} yet", archiving.destination))
    };
    conditions.set(CONTINUOUS_ARCHIVING, state, reason, message);
    status.conditions = conditions.into_inner();
    if let Some(wal) = &report.last_archived_wal {
        let backups = status.backups.get_or_insert_default();
        backups.last_archived_wal = Some(wal.clone());
        let time = report.last_archived_time.as_deref().and_then(|t| Timestamp::from_str(t).ok());
        backups.last_archived_time = time.map(|t| Time(Timestamp::from_second(t.as_second()).unwrap_or(t)));
    }
    events
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::instance::archive::state::ArchiveFailure;

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + second).unwrap()
    }

    fn healthy(wal: &str, second: i64) -> ArchiverReport {
        ArchiverReport {
            archived_count: 3,
            last_archived_wal: Some(wal.into()),
            last_archived_time: Some(at(second).to_string()),
            ..ArchiverReport::default()
        }
    }

    fn failing(after: &ArchiverReport) -> ArchiverReport {
        ArchiverReport {
            last_failed_wal: Some("000000010000000000000005".into()),
            last_failed_time: Some(at(100).to_string()),
            pending: 2,
            failure: Some(ArchiveFailure {
                wal: "000000010000000000000005".into(),
                time: at(100).to_string(),
                error: "object store: connection refused".into(),
            }),
            ..after.clone()
        }
    }

    fn pass(
        previous: &DatabaseClusterStatus,
        report: Option<&ArchiverReport>,
    ) -> (DatabaseClusterStatus, Vec<EventNote>) {
        let mut status = previous.clone();
        let archiving = Archiving { enabled: true, destination: "s3://bkt/db", report };
        let events = apply_archiving(&mut status, Some(previous), archiving, Some(1), at(200));
        (status, events)
    }

    fn condition(status: &DatabaseClusterStatus) -> (String, String, String) {
        let c = find_condition(status, CONTINUOUS_ARCHIVING).unwrap();
        (c.status.clone(), c.reason.clone(), c.message.clone())
    }

    #[test]
    fn a_failure_flips_the_condition_with_the_stores_message_and_one_warning_then_recovers() {
        let start = DatabaseClusterStatus::default();
        let (status, events) = pass(&start, Some(&ArchiverReport::default()));
        assert_eq!(condition(&status).1, NO_WAL_ARCHIVED_YET);
        assert!(events.is_empty());
        let ok = healthy("000000010000000000000004", 50);
        let (status, events) = pass(&status, Some(&ok));
        assert_eq!((condition(&status).0.as_str(), events.len()), ("True", 0));
        let backups = status.backups.clone().unwrap();
        assert_eq!(backups.last_archived_wal.as_deref(), Some("000000010000000000000004"));
        assert_eq!(backups.last_archived_time, Some(Time(at(50))));

        let (status, events) = pass(&status, Some(&failing(&ok)));
        let (state, reason, message) = condition(&status);
        assert_eq!((state.as_str(), reason.as_str()), ("False", ARCHIVING_FAILING));
        assert!(
            message.contains("connection refused") && message.contains("2 WAL file(s) wait"),
            "{message}"
        );
        assert_eq!(events.len(), 1);
        assert_eq!(
            (events[0].type_, events[0].reason.as_str()),
            (EventType::Warning, ARCHIVING_FAILED_EVENT)
        );
        let (status, events) = pass(&status, Some(&failing(&ok)));
        assert!(events.is_empty(), "reported once");
        let (status, events) = pass(&status, None);
        assert_eq!(condition(&status).0, "False", "an unobserved primary changes nothing");
        assert!(events.is_empty());

        let back = healthy("000000010000000000000007", 150);
        let (status, events) = pass(&status, Some(&back));
        assert_eq!(condition(&status).1, ARCHIVING);
        assert_eq!(events.iter().map(|e| e.reason.as_str()).collect::<Vec<_>>(), [ARCHIVING_RECOVERED_EVENT]);
    }

    #[test]
    fn without_archiving_the_condition_goes() {
        let (mut status, _) =
            pass(&DatabaseClusterStatus::default(), Some(&healthy("000000010000000000000001", 1)));
        let off = Archiving { enabled: false, destination: "", report: None };
        apply_archiving(&mut status, None, off, Some(1), at(0));
        assert!(find_condition(&status, CONTINUOUS_ARCHIVING).is_none());
    }
}
