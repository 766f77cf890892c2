//! The archiver's last failure, kept in the run directory so that `/status` can report it:
//! `instance wal-archive` writes it when an upload fails and removes it when one succeeds (each
//! call is its own process, started by PostgreSQL's archiver, one at a time). Its message is the
//! store's, already scrubbed of the credentials.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The file's name in `$DBC_RUN`.
pub const FAILURE_FILE: &str = "wal-archive-failure.json";

/// One failed upload.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ArchiveFailure {
    /// The WAL file.
    pub wal: String,
    /// When (RFC 3339).
    pub time: String,
    /// Why (no secrets).
    pub error: String,
}

/// The failure file in `run_dir`.
pub fn failure_path(run_dir: &Path) -> PathBuf {
    run_dir.join(FAILURE_FILE)
}

/// Records `failure` (written whole, then renamed into place).
pub fn record_failure(run_dir: &Path, failure: &ArchiveFailure) -> std::io::Result<()> {
    let tmp = run_dir.join(format!(".{FAILURE_FILE}.tmp"));
    std::fs::write(&tmp, serde_json::to_vec(failure).map_err(std::io::Error::other)?)?;
    std::fs::rename(tmp, failure_path(run_dir))
}

/// Forgets the last failure (an upload succeeded).
pub fn clear_failure(run_dir: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(failure_path(run_dir)) {
        Err(error) if error.kind() != std::io::ErrorKind::NotFound => Err(error),
        _ => Ok(()),
    }
}

/// The last failure recorded, if any (an unreadable file counts as none).
pub fn last_failure(run_dir: &Path) -> Option<ArchiveFailure> {
    serde_json::from_slice(&std::fs::read(failure_path(run_dir)).ok()?).ok()
}

/// The archiver as `/status` reports it: PostgreSQL's `pg_stat_archiver` and the last failure
/// recorded by `instance wal-archive` (present only while archiving fails).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ArchiverReport {
    /// Files archived since the statistics were reset.
    pub archived_count: i64,
    /// The last file archived.
    pub last_archived_wal: Option<String>,
    /// When (RFC 3339, UTC).
    pub last_archived_time: Option<String>,
    /// Failed attempts since the statistics were reset.
    pub failed_count: i64,
    /// The last file that failed.
    pub last_failed_wal: Option<String>,
    /// When (RFC 3339, UTC).
    pub last_failed_time: Option<String>,
    /// The failure `instance wal-archive` recorded last, until an upload succeeds.
    pub failure: Option<ArchiveFailure>,
    /// WAL files waiting in `pg_wal/archive_status` to be archived.
    pub pending: i64,
}

impl ArchiverReport {
    /// Whether archiving fails now: the last attempt failed.
    pub fn failing(&self) -> bool {
        match (&self.last_failed_time, &self.last_archived_time) {
            (Some(failed), Some(archived)) => failed > archived,
            (Some(_), None) => true,
            (None, _) => false,
        }
    }
}

const RFC3339: &str = "'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"'";

/// `pg_stat_archiver` when archiving is on (`None` when `archive_mode` is off, or on a standby,
/// which does not archive with `archive_mode=on`).
pub async fn read_archiver(
    client: &tokio_postgres::Client,
    run_dir: &Path,
) -> Result<Option<ArchiverReport>, tokio_postgres::Error> {
    let query = format!(
        "SELECT archived_count, last_archived_wal, to_char(last_archived_time AT TIME ZONE 'UTC', {RFC3339}), \
         failed_count, last_failed_wal, to_char(last_failed_time AT TIME ZONE 'UTC', {RFC3339}), \
         (SELECT count(*) FROM pg_ls_archive_statusdir() WHERE name LIKE '%.ready') \
         FROM pg_stat_archiver WHERE current_setting('archive_mode') <> 'off' AND NOT pg_is_in_recovery()"
    );
    let Some(row) = client.query_opt(&query, &[]).await? else { return Ok(None) };
    let report = ArchiverReport {
        archived_count: row.get(0),
        last_archived_wal: row.get(1),
        last_archived_time: row.get(2),
        failed_count: row.get(3),
        last_failed_wal: row.get(4),
        last_failed_time: row.get(5),
        pending: row.get(6),
        failure: None,
    };
    let failure = report.failing().then(|| last_failure(run_dir)).flatten();
    Ok(Some(ArchiverReport { failure, ..report }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_is_kept_until_an_upload_succeeds() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(last_failure(dir.path()), None);
        let failure = ArchiveFailure {
            wal: "000000010000000000000003".into(),
            time: "2026-01-01T00:00:00Z".into(),
            error: "timeout".into(),
        };
        record_failure(dir.path(), &failure).unwrap();
        assert_eq!(last_failure(dir.path()), Some(failure));
        clear_failure(dir.path()).unwrap();
        clear_failure(dir.path()).unwrap();
        assert_eq!(last_failure(dir.path()), None);
    }

    #[test]
    fn archiving_fails_while_the_last_attempt_failed() {
        let at = |t: &str| Some(t.to_owned());
        let report = |archived, failed| ArchiverReport {
            last_archived_time: archived,
            last_failed_time: failed,
            ..ArchiverReport::default()
        };
        assert!(!report(None, None).failing());
        assert!(report(None, at("2026-01-01T00:00:01.000000Z")).failing());
        assert!(report(at("2026-01-01T00:00:00.000000Z"), at("2026-01-01T00:00:01.000000Z")).failing());
        assert!(!report(at("2026-01-01T00:00:02.000000Z"), at("2026-01-01T00:00:01.000000Z")).failing());
    }
}
