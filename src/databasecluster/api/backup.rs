//! What a user writes about backups and restores (`spec.backup`, `spec.backupSchedule`,
//! `spec.bootstrap`), what the operator records about them (`status.backups`,
//! `status.restoredFrom`), and the checks the CRD cannot make.
//!
//! The CRD's patterns are a first filter; [`validate_backup`] then parses the schedule with the
//! maintained `croner` crate, restricted to what a Kubernetes CronJob accepts (five fields, names,
//! `*`, `?`, lists, ranges, steps and the `@daily`-style macros; none of croner's `L`, `W`, `#`
//! extensions; days of the week 0 (Sunday) to 6 in ranges that run forwards, as the API server's
//! parser reads them, where croner also takes 7 and `MON-SUN`), so that an impossible schedule
//! such as `99 99 99 99 99` becomes `Ready=False, InvalidSpec` with the parser's message instead
//! of a CronJob the API server refuses.
//!
//! `spec.backupSchedule` (the seed's field) is kept as a deprecated alias of
//! `spec.backup.schedule`: it is read, never rewritten. Setting both to different schedules is an
//! invalid spec.

use std::str::FromStr;

use croner::Cron;
use croner::parser::{CronParser, Seconds, Year};
use jiff::Timestamp;
use jiff::tz::TimeZone;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::databasecluster::api::object_store::{
    ObjectStoreError, ObjectStoreSpec, ValidObjectStore, WalArchiveSpec, validate_object_store,
};
use crate::databasecluster::api::recovery::{
    ONE_BOOTSTRAP_MESSAGE, ONE_BOOTSTRAP_RULE, RecoverySpec, RecoverySpecError, validate_recovery,
};
use crate::databasecluster::api::types::{DatabaseClusterSpec, STORAGE_CLASS_PATTERN};
use crate::databasecluster::api::validation::{STORAGE_CLASS_PROBLEM, StorageSize, is_storage_class_name};

/// The CRD's first filter on a schedule: a macro, or five fields of cron characters.
pub const SCHEDULE_PATTERN: &str =
    r"^(@(annually|yearly|monthly|weekly|daily|midnight|hourly)|([0-9A-Za-z*?,/-]+\s+){4}[0-9A-Za-z*?,/-]+)$";
/// The size of the backup volume when `spec.backup.storageSize` is not set.
pub const DEFAULT_BACKUP_STORAGE_SIZE: &str = "10Gi";
/// A backup's name: its UTC start time, e.g. `20261201T103000Z` (sorts as time does).
pub const BACKUP_NAME_PATTERN: &str = r"^[0-9]{8}T[0-9]{6}Z$";
/// What `spec.bootstrap.fromBackup.backup` may say instead of a name: the newest complete backup.
pub const LATEST: &str = "latest";
/// Message of the CEL rules that keep `spec.bootstrap` as it was at creation.
pub const BOOTSTRAP_IMMUTABLE_MESSAGE: &str =
    "bootstrap is immutable: it is only read when the cluster is created";

/// Scheduled and on-demand physical backups of the cluster into its backup volume.
#[derive(Deserialize, Serialize, schemars::JsonSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct BackupSpec {
    /// Cron schedule in UTC: five fields (minute hour day-of-month month day-of-week) or a macro
    /// such as `@daily`. Without it only on-demand backups run (annotation
    /// `databases.madmmas.dev/backup-now=<token>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = SCHEDULE_PATTERN), length(max = 128))]
    pub schedule: Option<String>,

    /// Which backups to keep; pruned by the backup Job after each success. Without it every
    /// backup is kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retention: Option<RetentionSpec>,

    /// Size of the backup volume `<name>-backups` (default `10Gi`), a Kubernetes quantity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        regex(
            pattern = r"^(0*[1-9][0-9]*(\.[0-9]+)?|0*\.[0-9]*[1-9][0-9]*)(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$"
        ),
        length(max = 32)
    )]
    pub storage_size: Option<String>,

    /// StorageClass of the backup volume (the cluster's default class when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253), regex(pattern = STORAGE_CLASS_PATTERN))]
    pub storage_class_name: Option<String>,

    /// Suspends scheduled backups (on-demand backups still run).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub suspend: bool,

    /// An object store (S3 or S3-compatible) that WAL is archived to continuously, for restores
    /// to any point in time (docs/backup.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object_store: Option<ObjectStoreSpec>,

    /// Continuous WAL archiving to `objectStore`: on by default when a store is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wal_archive: Option<WalArchiveSpec>,
}

/// Which backups survive pruning: a backup is kept when either rule keeps it.
#[derive(Deserialize, Serialize, schemars::JsonSchema, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct RetentionSpec {
    /// Keep the newest N complete backups.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1000))]
    pub keep_last: Option<i32>,
    /// Keep the backups started within this duration: a number and `m`, `h` or `d`, e.g. `7d`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[1-9][0-9]{0,5}(m|h|d)$"))]
    pub keep_newer_than: Option<String>,
    /// With `objectStore`: keep every base backup and WAL needed to restore to any point in this
    /// window back from now (a number and `m`, `h` or `d`, e.g. `30d`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[1-9][0-9]{0,5}(m|h|d)$"))]
    pub recovery_window: Option<String>,
}

/// How a new cluster gets its first data; read once, at creation.
#[derive(Deserialize, Serialize, kube::KubeSchema, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = kube::core::Rule::new(ONE_BOOTSTRAP_RULE).message(ONE_BOOTSTRAP_MESSAGE))]
pub struct BootstrapSpec {
    /// Start the primary from a backup of another cluster in the same namespace instead of
    /// `initdb`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_backup: Option<FromBackup>,
    /// Start the primary from another cluster's object store, replayed to a point in time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovery: Option<RecoverySpec>,
}

/// The backup a new cluster starts from.
#[derive(Deserialize, Serialize, schemars::JsonSchema, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct FromBackup {
    /// The DatabaseCluster whose backup volume (`<cluster>-backups`) holds the backup.
    #[schemars(regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"), length(min = 1, max = 63))]
    pub cluster: String,
    /// The backup's name (its UTC start time, as in `status.backups.last.name`), or `latest`.
    #[schemars(regex(pattern = r"^(latest|[0-9]{8}T[0-9]{6}Z)$"))]
    pub backup: String,
}

/// What the operator knows about the cluster's backups.
#[derive(Deserialize, Serialize, schemars::JsonSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct BackupsStatus {
    /// The last successful backup, as its Job reported it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last: Option<BackupRecord>,
    /// The newest backup Job observed and how it stands (so each start and end is reported once).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_job: Option<BackupJobRecord>,
    /// The last `databases.madmmas.dev/backup-now` token a backup was started for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_on_demand_token: Option<String>,
    /// With WAL archiving: the last WAL file the primary archived to the object store.
    #[serde(default, rename = "lastArchivedWAL", skip_serializing_if = "Option::is_none")]
    pub last_archived_wal: Option<String>,
    /// When it was archived.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_archived_time: Option<Time>,
    /// With an object store: the earliest time a point-in-time restore can reach (the end of the
    /// oldest complete base backup there), as the last backup Job found it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_recoverability_point: Option<Time>,
}

/// One complete backup.
#[derive(Deserialize, Serialize, schemars::JsonSchema, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct BackupRecord {
    /// The backup's directory in the backup volume: its UTC start time.
    pub name: String,
    /// When pg_basebackup started.
    pub start_time: Time,
    /// When the backup was complete.
    pub end_time: Time,
    /// Bytes on the backup volume (compressed).
    pub size_bytes: i64,
}

/// A backup Job and its state.
#[derive(Deserialize, Serialize, schemars::JsonSchema, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct BackupJobRecord {
    /// The Job's name.
    pub name: String,
    /// `Running`, `Succeeded` or `Failed`.
    pub state: String,
}

/// Which backup a restored cluster started from.
#[derive(Deserialize, Serialize, schemars::JsonSchema, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct RestoredFrom {
    /// The source cluster (`fromBackup`), or the source's object store destination (`recovery`).
    pub cluster: String,
    /// The backup's name; `latest` when the source cluster was gone and instance 0 chose the
    /// newest complete backup in the volume itself.
    pub backup: String,
}

/// A backup configuration the operator can act on.
#[derive(Clone, Debug, PartialEq)]
pub struct ValidBackup {
    /// The schedule as written (after the alias), if scheduled backups are asked for.
    pub schedule: Option<Schedule>,
    /// Keep the newest N.
    pub keep_last: Option<u32>,
    /// Keep those newer than this many seconds.
    pub keep_newer_than_seconds: Option<u64>,
    /// Size of the backup volume.
    pub storage: StorageSize,
    /// StorageClass of the backup volume.
    pub storage_class_name: Option<String>,
    /// Scheduled backups suspended.
    pub suspend: bool,
    /// The object store and WAL archiving, if a store is set.
    pub object_store: Option<ValidObjectStore>,
    /// Seconds of `retention.recoveryWindow`, if set.
    pub recovery_window_seconds: Option<u64>,
}

/// A parsed cron schedule and its text.
#[derive(Clone, Debug)]
pub struct Schedule {
    text: String,
    cron: Cron,
}

impl PartialEq for Schedule {
    fn eq(&self, other: &Self) -> bool {
        self.text == other.text
    }
}

impl Schedule {
    /// Parses a schedule as a Kubernetes CronJob reads it (see the module docs).
    pub fn parse(text: &str) -> Result<Schedule, BackupSpecError> {
        let invalid = |reason: String| BackupSpecError::InvalidSchedule { schedule: text.to_owned(), reason };
        let trimmed = text.trim();
        if !trimmed.starts_with('@') {
            let fields: Vec<&str> = trimmed.split_whitespace().collect();
            if fields.len() != 5 {
                return Err(invalid(format!("expected 5 fields, found {}", fields.len())));
            }
            if let Some(bad) = fields.iter().find(|f| has_cron_extension(f)) {
                return Err(invalid(format!("field {bad:?} uses a cron extension CronJobs do not accept")));
            }
            weekday_problem(fields[4]).map_or(Ok(()), |problem| Err(invalid(problem)))?;
        }
        // robfig/cron, which reads a CronJob's schedule, takes `*/1` for a star, as it takes `*`
        // (a star day field leaves the other to decide); croner takes only `*` and `?`.
        let starred: Vec<String> = trimmed
            .split_whitespace()
            .map(|field| {
                let items =
                    field.split(',').map(|item| if matches!(item, "*/1" | "?/1") { "*" } else { item });
                items.collect::<Vec<_>>().join(",")
            })
            .collect();
        let parser = CronParser::builder().seconds(Seconds::Disallowed).year(Year::Disallowed).build();
        let cron = parser.parse(&starred.join(" ")).map_err(|error| invalid(error.to_string()))?;
        Ok(Schedule { text: text.to_owned(), cron })
    }

    /// The schedule as written (what the CronJob gets).
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The first scheduled time strictly after `after` (UTC), if there is one.
    pub fn next_after(&self, after: Timestamp) -> Option<Timestamp> {
        let zoned = after.to_zoned(TimeZone::UTC);
        self.cron.find_next_occurrence(&zoned, false).ok().map(|next| next.timestamp())
    }
}

/// What a CronJob refuses in a day-of-week field that croner reads: a day 7 (croner's second
/// Sunday), or a range that runs backwards (`MON-SUN` is 1-0 there).
fn weekday_problem(field: &str) -> Option<String> {
    let day = |text: &str| {
        WEEKDAYS.iter().position(|d| d.eq_ignore_ascii_case(text)).or_else(|| text.parse::<usize>().ok())
    };
    for item in field.split(',') {
        let range = item.split('/').next().unwrap_or_default();
        if matches!(range, "*" | "?") {
            continue;
        }
        let (first, last) = range.split_once('-').unwrap_or((range, range));
        let (Some(first), Some(last)) = (day(first), day(last)) else { continue };
        if first.max(last) > 6 {
            return Some(format!(
                "day of the week {} is out of range: CronJobs number the days 0 (Sunday) to 6 (Saturday)",
                first.max(last)
            ));
        }
        if first > last {
            return Some(format!(
                "day-of-week range {range:?} runs backwards: CronJobs number the days 0 (Sunday) to 6 (Saturday)"
            ));
        }
    }
    None
}

/// Whether a cron field uses croner's extensions (`L`, `W`, `#`, `+`) rather than only numbers,
/// month and weekday names, `*`, `?`, `,`, `-` and `/`.
fn has_cron_extension(field: &str) -> bool {
    let named = |part: &str| MONTHS.iter().chain(&WEEKDAYS).any(|n| n.eq_ignore_ascii_case(part));
    field.split([',', '-', '/']).any(|part| part.chars().any(char::is_alphabetic) && !named(part))
        || field.contains(['#', '+'])
}

/// The month names a cron field may use, January first.
const MONTHS: [&str; 12] =
    ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"];

/// The weekday names a cron field may use, Sunday (0) first.
const WEEKDAYS: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];

/// Why a backup or bootstrap setting cannot be acted on (shown in the `Ready` condition).
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum BackupSpecError {
    /// The schedule does not parse.
    #[error("spec.backup.schedule {schedule:?} is not a valid cron schedule: {reason}")]
    InvalidSchedule {
        /// The schedule as written.
        schedule: String,
        /// The parser's message.
        reason: String,
    },
    /// `backupSchedule` and `backup.schedule` disagree.
    #[error(
        "spec.backupSchedule {alias:?} (deprecated) and spec.backup.schedule {schedule:?} differ: set only spec.backup.schedule"
    )]
    ConflictingSchedules {
        /// The deprecated field.
        alias: String,
        /// The new field.
        schedule: String,
    },
    /// The backup volume's size is not a quantity.
    #[error("spec.backup.storageSize {0:?} is not a positive Kubernetes quantity such as 10Gi")]
    InvalidStorageSize(String),
    /// The backup volume's StorageClass is not a StorageClass name.
    #[error("spec.backup.storageClassName {0:?} {STORAGE_CLASS_PROBLEM}")]
    InvalidStorageClass(String),
    /// The retention duration does not parse.
    #[error("spec.backup.retention.keepNewerThan {0:?} is not a duration such as 30m, 12h or 7d")]
    InvalidRetention(String),
    /// The object store or WAL archiving settings are unusable.
    #[error(transparent)]
    ObjectStore(#[from] ObjectStoreError),
    /// `recoveryWindow` does not parse.
    #[error("spec.backup.retention.recoveryWindow {0:?} is not a duration such as 30m, 12h or 7d")]
    InvalidRecoveryWindow(String),
    /// The cluster names itself as its restore source.
    #[error(
        "spec.bootstrap.fromBackup.cluster {0:?} is this cluster: a cluster cannot start from its own backups"
    )]
    SelfRestore(String),
    /// `spec.bootstrap.recovery` cannot be acted on.
    #[error(transparent)]
    Recovery(#[from] RecoverySpecError),
}

/// The effective backup configuration of a spec: `None` when neither `backup` nor
/// `backupSchedule` is set (no backup volume, no CronJob, no on-demand backups).
pub fn validate_backup(spec: &DatabaseClusterSpec) -> Result<Option<ValidBackup>, BackupSpecError> {
    let backup = spec.backup.clone();
    let alias = spec.backup_schedule.clone();
    if backup.is_none() && alias.is_none() {
        return Ok(None);
    }
    let backup = backup.unwrap_or_default();
    let schedule_text = match (&backup.schedule, alias) {
        (Some(schedule), Some(alias)) if *schedule != alias => {
            return Err(BackupSpecError::ConflictingSchedules { alias, schedule: schedule.clone() });
        }
        (Some(schedule), _) => Some(schedule.clone()),
        (None, alias) => alias,
    };
    let schedule = schedule_text.as_deref().map(Schedule::parse).transpose()?;
    let size = backup.storage_size.as_deref().unwrap_or(DEFAULT_BACKUP_STORAGE_SIZE);
    let storage =
        StorageSize::parse(size).ok_or_else(|| BackupSpecError::InvalidStorageSize(size.to_owned()))?;
    if let Some(class) = backup.storage_class_name.as_ref().filter(|class| !is_storage_class_name(class)) {
        return Err(BackupSpecError::InvalidStorageClass(class.clone()));
    }
    let object_store = validate_object_store(backup.object_store.as_ref(), backup.wal_archive.as_ref())?;
    let retention = backup.retention.unwrap_or_default();
    let recovery_window_seconds = retention
        .recovery_window
        .as_deref()
        .map(|text| {
            parse_duration(text).ok_or_else(|| BackupSpecError::InvalidRecoveryWindow(text.to_owned()))
        })
        .transpose()?;
    let keep_newer_than_seconds = retention
        .keep_newer_than
        .as_deref()
        .map(|text| parse_duration(text).ok_or_else(|| BackupSpecError::InvalidRetention(text.to_owned())))
        .transpose()?;
    Ok(Some(ValidBackup {
        schedule,
        keep_last: retention.keep_last.and_then(|n| u32::try_from(n).ok()).filter(|n| *n > 0),
        keep_newer_than_seconds,
        storage,
        storage_class_name: backup.storage_class_name,
        suspend: backup.suspend,
        object_store,
        recovery_window_seconds,
    }))
}

/// Checks `spec.bootstrap` of the cluster named `name`.
pub fn validate_bootstrap(name: &str, spec: &DatabaseClusterSpec) -> Result<(), BackupSpecError> {
    let Some(bootstrap) = &spec.bootstrap else { return Ok(()) };
    if bootstrap.from_backup.as_ref().is_some_and(|from| from.cluster == name) {
        return Err(BackupSpecError::SelfRestore(name.to_owned()));
    }
    if let Some(recovery) = &bootstrap.recovery {
        let own = spec.backup.as_ref().and_then(|b| b.object_store.as_ref());
        validate_recovery(recovery, own)?;
    }
    Ok(())
}

/// Seconds in `30m`, `12h` or `7d`.
fn parse_duration(text: &str) -> Option<u64> {
    let unit = match text.chars().last()? {
        'm' => 60,
        'h' => 3600,
        'd' => 86_400,
        _ => return None,
    };
    let number = &text[..text.len() - 1];
    if number.is_empty() || !number.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    u64::from_str(number).ok()?.checked_mul(unit).filter(|s| *s > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec_with(backup: Option<BackupSpec>, alias: Option<&str>) -> DatabaseClusterSpec {
        DatabaseClusterSpec {
            backup_schedule: alias.map(String::from),
            backup,
            ..crate::databasecluster::fixtures::spec(1, "15", "1Gi")
        }
    }

    fn scheduled(schedule: &str) -> Option<BackupSpec> {
        Some(BackupSpec { schedule: Some(schedule.into()), ..BackupSpec::default() })
    }

    fn ts(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    #[test]
    fn standard_schedules_and_macros_parse_and_give_the_next_time() {
        let every_minute = Schedule::parse("* * * * *").unwrap();
        assert_eq!(every_minute.next_after(ts("2026-01-01T10:03:30Z")), Some(ts("2026-01-01T10:04:00Z")));
        let daily = Schedule::parse("@daily").unwrap();
        assert_eq!(daily.next_after(ts("2026-01-01T00:00:00Z")), Some(ts("2026-01-02T00:00:00Z")));
        let weekdays = Schedule::parse("30 2 * * MON-FRI").unwrap();
        assert_eq!(weekdays.next_after(ts("2026-01-03T00:00:00Z")), Some(ts("2026-01-05T02:30:00Z")));
        for ok in
            ["*/15 0-6 1,15 JAN-JUN ?", "0 0 * * 0", "0 0 * * 1-6/2", "@hourly", "@yearly", "5 4 * * sun"]
        {
            Schedule::parse(ok).unwrap_or_else(|e| panic!("{ok}: {e}"));
        }
    }

    #[test]
    fn day_of_month_and_day_of_week_combine_as_a_cronjob_combines_them() {
        let next = |schedule: &str, after: &str| Schedule::parse(schedule).unwrap().next_after(ts(after));
        // Either restricted field is enough when both are (2026-01-02 is a Friday, the 5th a Monday).
        assert_eq!(next("0 0 1 * 1", "2026-01-01T00:00:00Z"), Some(ts("2026-01-05T00:00:00Z")));
        // A `?` or `*` leaves the other field to decide.
        assert_eq!(next("0 0 1,15 * ?", "2026-01-02T00:00:00Z"), Some(ts("2026-01-15T00:00:00Z")));
        assert_eq!(next("0 0 * * 1", "2026-01-01T00:00:00Z"), Some(ts("2026-01-05T00:00:00Z")));
        // A stepped `*/2` is restricted: odd days or Sundays; `*/1` is a star: Mondays only.
        assert_eq!(next("0 0 */2 * 0", "2026-01-01T00:00:00Z"), Some(ts("2026-01-03T00:00:00Z")));
        assert_eq!(next("0 0 */1 * 1", "2026-01-01T00:00:00Z"), Some(ts("2026-01-05T00:00:00Z")));
    }

    #[test]
    fn days_of_the_week_are_0_to_6_forwards_as_a_cronjob_reads_them() {
        for (bad, problem) in [
            ("0 0 * * 7", "day of the week 7 is out of range"),
            ("0 0 * * 5-7", "day of the week 7 is out of range"),
            ("0 0 * * 1,7", "day of the week 7 is out of range"),
            ("0 0 * * MON-SUN", "day-of-week range \"MON-SUN\" runs backwards"),
            ("0 0 * * 6-0", "day-of-week range \"6-0\" runs backwards"),
        ] {
            let error = Schedule::parse(bad).unwrap_err().to_string();
            assert!(error.contains(problem), "{bad}: {error}");
        }
    }

    #[test]
    fn impossible_schedules_are_refused_with_the_parsers_message() {
        for bad in ["99 99 99 99 99", "61 * * * *", "* 24 * * *", "* * 32 * *", "* * * 13 *", "0 0 * * 8"] {
            let error = Schedule::parse(bad).unwrap_err();
            let BackupSpecError::InvalidSchedule { reason, .. } = &error else { panic!("{error:?}") };
            assert!(!reason.is_empty(), "{bad}");
            assert!(error.to_string().contains(bad), "{error}");
        }
    }

    #[test]
    fn cron_extensions_and_wrong_field_counts_are_refused() {
        for bad in
            ["0 0 L * *", "0 0 15W * *", "0 0 * * 5#2", "0 0 0 * * *", "* * * *", "@reboot", "@every 1h"]
        {
            assert!(Schedule::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_deprecated_alias_is_read_and_may_not_contradict_the_new_field() {
        let from_alias = validate_backup(&spec_with(None, Some("@daily"))).unwrap().unwrap();
        assert_eq!(from_alias.schedule.unwrap().as_str(), "@daily");
        let same = validate_backup(&spec_with(scheduled("@daily"), Some("@daily"))).unwrap().unwrap();
        assert_eq!(same.schedule.unwrap().as_str(), "@daily");
        let conflict = validate_backup(&spec_with(scheduled("@hourly"), Some("@daily"))).unwrap_err();
        assert!(matches!(conflict, BackupSpecError::ConflictingSchedules { .. }), "{conflict:?}");
        assert_eq!(validate_backup(&spec_with(None, None)).unwrap(), None);
    }

    #[test]
    fn defaults_and_retention_parse() {
        let backup = BackupSpec {
            retention: Some(RetentionSpec {
                keep_last: Some(3),
                keep_newer_than: Some("7d".into()),
                recovery_window: None,
            }),
            ..BackupSpec::default()
        };
        let valid = validate_backup(&spec_with(Some(backup), None)).unwrap().unwrap();
        assert_eq!(valid.schedule, None);
        assert_eq!(valid.storage.as_str(), "10Gi");
        assert_eq!((valid.keep_last, valid.keep_newer_than_seconds), (Some(3), Some(7 * 86_400)));
        assert_eq!(parse_duration("30m"), Some(1800));
        assert_eq!(parse_duration("0h"), None);
        assert_eq!(parse_duration("h"), None);
        assert_eq!(parse_duration("5s"), None);
        let bad = BackupSpec {
            retention: Some(RetentionSpec {
                keep_last: None,
                keep_newer_than: Some("soon".into()),
                recovery_window: None,
            }),
            ..BackupSpec::default()
        };
        assert!(matches!(
            validate_backup(&spec_with(Some(bad), None)),
            Err(BackupSpecError::InvalidRetention(_))
        ));
    }

    #[test]
    fn a_cluster_cannot_restore_from_itself() {
        let mut spec = spec_with(None, None);
        spec.bootstrap = Some(BootstrapSpec {
            from_backup: Some(FromBackup { cluster: "pg".into(), backup: LATEST.into() }),
            recovery: None,
        });
        assert_eq!(validate_bootstrap("pg", &spec), Err(BackupSpecError::SelfRestore("pg".into())));
        assert_eq!(validate_bootstrap("restored", &spec), Ok(()));
    }
}
