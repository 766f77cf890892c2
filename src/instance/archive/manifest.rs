//! A base backup in the object store, as the store holds it, and the pure reading of what
//! PostgreSQL says about it.
//!
//! A backup `<name>` (its UTC start time, `20261207T101500Z`) is two objects under the
//! destination's path: `base/<name>/data.tar[.gz]`, the `pg_basebackup -Ft` stream as it left the
//! server, and `base/<name>/backup.json`, the [`BackupManifest`], written last and only once every
//! WAL segment from the backup's start to its end is in the archive. A backup without its
//! manifest is incomplete and never used; one whose data does not match the manifest's checksum is
//! refused when restored.

use serde::{Deserialize, Serialize};

/// The folder of the base backups under the destination's path.
pub const BASE_DIR: &str = "base";
/// The manifest's object name within a backup's folder.
pub const MANIFEST_FILE: &str = "backup.json";
/// The size of a WAL segment (PostgreSQL's default; the backup program checks the server's).
pub const WAL_SEGMENT_BYTES: u64 = 16 * 1024 * 1024;

/// What a complete base backup is, written beside its data as `backup.json`.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct BackupManifest {
    /// The backup's name: its UTC start time.
    pub name: String,
    /// When it started (RFC 3339, UTC).
    pub start_time: String,
    /// When it ended: the earliest point it can be restored to.
    pub end_time: String,
    /// The WAL position where replay must start.
    pub start_lsn: String,
    /// The WAL position replay must reach for the backup to be consistent.
    pub end_lsn: String,
    /// The timeline it was taken on.
    pub timeline: u32,
    /// The first WAL segment it needs from the archive.
    pub start_wal: String,
    /// The last.
    pub end_wal: String,
    /// The server's system identifier.
    pub system_identifier: String,
    /// The server's version.
    pub postgres_version: String,
    /// The data object's name within the backup's folder.
    pub data_object: String,
    /// How the data object is compressed (`gzip` or `none`).
    pub compression: String,
    /// Bytes of the data object as stored.
    pub size_bytes: u64,
    /// The SHA-256 (hex) of the data object as stored.
    pub sha256: String,
    /// The host it was taken from (a standby's Service when one answered).
    pub source: String,
}

impl BackupManifest {
    /// The manifest's object name.
    pub fn object_name(name: &str) -> String {
        format!("{BASE_DIR}/{name}/{MANIFEST_FILE}")
    }

    /// The data object's full name.
    pub fn data_object_name(&self) -> String {
        format!("{BASE_DIR}/{}/{}", self.name, self.data_object)
    }
}

/// `X/Y` (PostgreSQL's text form of an LSN) as a number.
pub fn parse_lsn(text: &str) -> Option<u64> {
    let (high, low) = text.trim().split_once('/')?;
    let high = u64::from_str_radix(high, 16).ok()?;
    let low = u64::from_str_radix(low, 16).ok()?;
    (high <= u64::from(u32::MAX) && low <= u64::from(u32::MAX)).then_some((high << 32) | low)
}

/// The name of the WAL segment holding the byte at `lsn` on `timeline`.
pub fn segment_of(timeline: u32, lsn: u64) -> String {
    let segment = lsn / WAL_SEGMENT_BYTES;
    let per_log = (1_u64 << 32) / WAL_SEGMENT_BYTES;
    format!("{timeline:08X}{:08X}{:08X}", segment / per_log, segment % per_log)
}

/// The segments from `first` to `last` (both names on the same timeline), in order.
pub fn segments_between(first: &str, last: &str) -> Vec<String> {
    let number = |name: &str| -> Option<(u32, u64)> {
        let timeline = u32::from_str_radix(name.get(..8)?, 16).ok()?;
        let log = u64::from_str_radix(name.get(8..16)?, 16).ok()?;
        let seg = u64::from_str_radix(name.get(16..24)?, 16).ok()?;
        Some((timeline, log * ((1 << 32) / WAL_SEGMENT_BYTES) + seg))
    };
    let (Some((timeline, from)), Some((_, to))) = (number(first), number(last)) else { return Vec::new() };
    (from..=to).map(|n| segment_of(timeline, n * WAL_SEGMENT_BYTES)).collect()
}

/// What `pg_basebackup --verbose` says about the WAL a backup needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackupWal {
    /// `write-ahead log start point: X/Y on timeline N`.
    pub start_lsn: String,
    /// N.
    pub timeline: u32,
    /// `write-ahead log end point: X/Y`.
    pub end_lsn: String,
}

impl BackupWal {
    /// From pg_basebackup's log; `None` when a line is missing.
    pub fn from_log(log: &str) -> Option<BackupWal> {
        let after = |marker: &str| log.lines().find_map(|line| Some(line.split_once(marker)?.1.trim()));
        let start = after("write-ahead log start point:")?;
        let (start_lsn, timeline) = start.split_once(" on timeline ")?;
        let end_lsn = after("write-ahead log end point:")?;
        parse_lsn(start_lsn)?;
        parse_lsn(end_lsn)?;
        Some(BackupWal {
            start_lsn: start_lsn.to_owned(),
            timeline: timeline.trim().parse().ok()?,
            end_lsn: end_lsn.to_owned(),
        })
    }

    /// The first and last segments the backup needs from the archive (the end point itself is
    /// the first byte not needed, so the last segment holds the byte before it).
    pub fn segments(&self) -> (String, String) {
        let start = parse_lsn(&self.start_lsn).unwrap_or_default();
        let end = parse_lsn(&self.end_lsn).unwrap_or_default().saturating_sub(1).max(start);
        (segment_of(self.timeline, start), segment_of(self.timeline, end))
    }
}

/// A backup's name for a start at `time`: `YYYYMMDDTHHMMSSZ` in UTC.
pub fn backup_name(time: jiff::Timestamp) -> String {
    time.strftime("%Y%m%dT%H%M%SZ").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lsns_and_segments() {
        assert_eq!(parse_lsn("0/2000028"), Some(0x200_0028));
        assert_eq!(parse_lsn("1/0"), Some(1 << 32));
        assert_eq!(parse_lsn("x/0"), None);
        assert_eq!(segment_of(1, 0x200_0028), "000000010000000000000002");
        assert_eq!(segment_of(2, (1 << 32) + 0x300_0000), "000000020000000100000003");
        assert_eq!(
            segments_between("0000000100000000000000FE", "000000010000000100000001"),
            [
                "0000000100000000000000FE",
                "0000000100000000000000FF",
                "000000010000000100000000",
                "000000010000000100000001"
            ]
        );
    }

    #[test]
    fn the_wal_a_backup_needs_comes_from_pg_basebackups_log() {
        let log = "pg_basebackup: initiating base backup, waiting for checkpoint to complete\n\
                   pg_basebackup: checkpoint completed\n\
                   pg_basebackup: write-ahead log start point: 0/5000028 on timeline 3\n\
                   pg_basebackup: write-ahead log end point: 0/6000000\n\
                   pg_basebackup: base backup completed\n";
        let wal = BackupWal::from_log(log).unwrap();
        assert_eq!(wal.timeline, 3);
        assert_eq!(
            wal.segments(),
            ("000000030000000000000005".to_owned(), "000000030000000000000005".to_owned()),
            "an end exactly on a segment boundary needs nothing of the next segment"
        );
        assert!(BackupWal::from_log("pg_basebackup: checkpoint completed").is_none());
    }

    #[test]
    fn names_are_utc_start_times() {
        let time: jiff::Timestamp = "2026-12-07T10:15:00Z".parse().unwrap();
        assert_eq!(backup_name(time), "20261207T101500Z");
        assert_eq!(BackupManifest::object_name("20261207T101500Z"), "base/20261207T101500Z/backup.json");
    }
}
