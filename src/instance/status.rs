//! `/status`: what this instance says about itself, as JSON (read over the local socket within
//! [`STATUS_LIMIT`]): its role under the record, whether it is in recovery, timeline, system
//! identifier, LSNs (current on a primary; received and replayed on a standby; the last
//! checkpoint's), each standby's replication state, sync state and lag as the primary sees it,
//! its physical slots, whether a changed parameter waits for a restart, the `pg_file_settings`
//! verdict (the configuration hash on disk and in force, the lines PostgreSQL refuses), the
//! versions of the mounted Secrets it applied ([`credential_version`]) and the data directory's
//! size.
//!
//! [`Report`] is the wire type of both sides: the manager serialises it, the operator
//! (`databasecluster::instances`) deserialises it. Fields the operator does not know yet are
//! ignored, and a field a newer manager leaves out takes its default, so the two may be upgraded
//! one after the other.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use hmac::{Hmac, KeyInit, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

use super::decide::Role;
use super::local::{ClientError, Local, STATUS_LIMIT};

/// The custom parameter carrying the configuration's hash (the operator's `dbcluster.config_hash`).
pub const CONFIG_HASH_PARAMETER: &str = "dbcluster.config_hash";

/// The whole report.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Report {
    /// `primary` or `standby`, as the record says.
    pub role: String,
    /// `pg_is_in_recovery()`.
    pub in_recovery: bool,
    /// `server_version`.
    pub version: String,
    /// The last checkpoint's timeline.
    pub timeline: i32,
    /// The data's system identifier (decimal).
    pub system_identifier: String,
    /// `pg_current_wal_lsn()` on a primary.
    pub current_lsn: Option<String>,
    /// `pg_last_wal_receive_lsn()` on a standby.
    pub received_lsn: Option<String>,
    /// `pg_last_wal_replay_lsn()` on a standby.
    pub replayed_lsn: Option<String>,
    /// Where the last checkpoint (or restartpoint) starts.
    pub checkpoint_lsn: Option<String>,
    /// A parameter changed in the files waits for a restart.
    pub pending_restart: bool,
    /// The `pg_file_settings` verdict.
    pub file_settings: FileSettings,
    /// On a primary: `pg_stat_replication`.
    pub standbys: Vec<Standby>,
    /// On a primary: physical replication slots.
    pub slots: Vec<Slot>,
    /// Bytes under `PGDATA` (`None` when the walk did not finish in time).
    pub data_directory_bytes: Option<u64>,
    /// Per login (`superuser`, `replication`, `app`): the [`credential_version`] of the mounted
    /// Secret this instance applied (on a primary: the role's password; on a standby: its
    /// password file). Never a password.
    pub credentials: BTreeMap<String, String>,
    /// On a primary archiving WAL to an object store: the archiver's state.
    pub archiver: Option<super::archive::state::ArchiverReport>,
}

/// The configuration files as PostgreSQL reads them now.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct FileSettings {
    /// The hash in the file on disk (what a reload applies).
    pub hash_on_disk: Option<String>,
    /// The hash in force.
    pub hash_applied: Option<String>,
    /// Lines PostgreSQL would not apply (a change waiting for a restart aside).
    pub refused: Vec<Refused>,
}

/// One refused line.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Refused {
    /// The parameter as written.
    pub name: String,
    /// The value as written.
    pub setting: String,
    /// PostgreSQL's reason.
    pub error: String,
}

/// One standby as the primary sees it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Standby {
    /// `application_name`: the standby's pod.
    pub name: String,
    /// `state` (`streaming`, `catchup`…).
    pub state: String,
    /// `sync_state` (`sync`, `quorum`, `potential`, `async`).
    pub sync_state: String,
    /// Bytes between the primary's current position and the standby's replay.
    pub lag_bytes: i64,
    /// `replay_lag` in seconds, when known.
    pub lag_seconds: Option<f64>,
}

/// One physical slot.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Slot {
    /// Its name.
    pub name: String,
    /// A standby streams over it.
    pub active: bool,
}

const FACTS: &str = "WITH files AS (SELECT seqno, name, setting, error FROM pg_file_settings), \
    refused AS (SELECT f.seqno, coalesce(f.name, '') AS name, coalesce(f.setting, '') AS setting, f.error \
    FROM files f LEFT JOIN pg_settings s ON s.name = f.name \
    WHERE f.error IS NOT NULL AND NOT coalesce(s.pending_restart, false)) \
    SELECT pg_is_in_recovery(), current_setting('server_version'), \
    (SELECT timeline_id FROM pg_control_checkpoint()), (SELECT system_identifier::text FROM pg_control_system()), \
    CASE WHEN pg_is_in_recovery() THEN NULL ELSE pg_current_wal_lsn()::text END, \
    pg_last_wal_receive_lsn()::text, pg_last_wal_replay_lsn()::text, \
    (SELECT checkpoint_lsn::text FROM pg_control_checkpoint()), \
    EXISTS (SELECT FROM pg_settings WHERE pending_restart), \
    (SELECT setting FROM files WHERE name = $1 ORDER BY seqno DESC LIMIT 1), current_setting($1, true), \
    ARRAY(SELECT name FROM refused ORDER BY seqno), ARRAY(SELECT setting FROM refused ORDER BY seqno), \
    ARRAY(SELECT error FROM refused ORDER BY seqno)";

const STANDBYS: &str = "SELECT application_name, coalesce(state, ''), coalesce(sync_state, ''), \
    coalesce(pg_wal_lsn_diff(pg_current_wal_lsn(), replay_lsn), 0)::bigint, \
    extract(epoch FROM replay_lag)::float8 FROM pg_stat_replication ORDER BY application_name";

const SLOTS: &str =
    "SELECT slot_name::text, active FROM pg_replication_slots WHERE slot_type = 'physical' ORDER BY 1";

/// How many hex digits of the keyed hash a [`credential_version`] keeps (64 bits).
const VERSION_DIGITS: usize = 16;

/// The version of a login's Secret as both sides name it: HMAC-SHA-256 of the user name and the
/// password, keyed with the status token, cut to `VERSION_DIGITS` hex digits. It says whether
/// two sides hold the same password without revealing it; the key keeps a weak password chosen
/// by a user (`spec.appSecretName`) from being guessed offline by whoever reads the cluster's
/// status without the token.
pub fn credential_version(token: &str, username: &str, password: &str) -> String {
    // An HMAC takes a key of any length: `new_from_slice` cannot fail for it.
    let Ok(mut mac) = <Hmac<Sha256> as KeyInit>::new_from_slice(token.as_bytes()) else {
        return String::new();
    };
    mac.update(username.as_bytes());
    mac.update(&[0]);
    mac.update(password.as_bytes());
    let digest = mac.finalize().into_bytes();
    let mut hex = String::with_capacity(VERSION_DIGITS);
    for byte in digest.iter().take(VERSION_DIGITS / 2) {
        hex.push_str(&format!("{byte:02x}"));
    }
    hex
}

/// Reads the report from the local server (the data directory's size walked beside it).
pub async fn report(local: &Local, role: Role, pgdata: &Path, run_dir: &Path) -> Result<Report, ClientError> {
    let size = tokio::task::spawn_blocking({
        let pgdata = pgdata.to_owned();
        move || directory_bytes(&pgdata)
    });
    let mut report = local
        .with(STATUS_LIMIT, |c| async move {
            let mut report = read(&c).await?;
            report.archiver = super::archive::state::read_archiver(&c, run_dir).await?;
            Ok(report)
        })
        .await?;
    report.role = role.as_str().to_owned();
    // The walk ran beside the queries; a slow disk leaves the size out rather than the answer late.
    report.data_directory_bytes =
        tokio::time::timeout(Duration::from_millis(500), size).await.ok().and_then(Result::ok);
    Ok(report)
}

async fn read(client: &tokio_postgres::Client) -> Result<Report, tokio_postgres::Error> {
    let row = client.query_one(FACTS, &[&CONFIG_HASH_PARAMETER]).await?;
    let (names, settings, errors): (Vec<String>, Vec<String>, Vec<String>) =
        (row.get(11), row.get(12), row.get(13));
    let refused = names
        .into_iter()
        .zip(settings)
        .zip(errors)
        .map(|((name, setting), error)| Refused { name, setting, error })
        .collect();
    let mut report = Report {
        in_recovery: row.get(0),
        version: row.get::<_, String>(1).split_whitespace().next().unwrap_or_default().to_owned(),
        timeline: row.get(2),
        system_identifier: row.get(3),
        current_lsn: row.get(4),
        received_lsn: row.get(5),
        replayed_lsn: row.get(6),
        checkpoint_lsn: row.get(7),
        pending_restart: row.get(8),
        file_settings: FileSettings {
            hash_on_disk: row.get(9),
            hash_applied: row.get::<_, Option<String>>(10).filter(|s| !s.is_empty()),
            refused,
        },
        ..Report::default()
    };
    if !report.in_recovery {
        report.standbys = client
            .query(STANDBYS, &[])
            .await?
            .iter()
            .map(|r| Standby {
                name: r.get(0),
                state: r.get(1),
                sync_state: r.get(2),
                lag_bytes: r.get(3),
                lag_seconds: r.get(4),
            })
            .collect();
        report.slots = client
            .query(SLOTS, &[])
            .await?
            .iter()
            .map(|r| Slot { name: r.get(0), active: r.get(1) })
            .collect();
    }
    Ok(report)
}

/// The bytes of the regular files under `dir` (files that vanish during the walk are skipped).
pub fn directory_bytes(dir: &Path) -> u64 {
    let mut total = 0;
    let mut pending = vec![dir.to_owned()];
    while let Some(dir) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for entry in entries.flatten() {
            match entry.metadata() {
                Ok(meta) if meta.is_dir() => pending.push(entry.path()),
                Ok(meta) => total += meta.len(),
                Err(_) => {}
            }
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_data_directory_size_counts_every_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("base/1")).unwrap();
        std::fs::write(dir.path().join("PG_VERSION"), "15\n").unwrap();
        std::fs::write(dir.path().join("base/1/1259"), vec![0u8; 8192]).unwrap();
        assert_eq!(directory_bytes(dir.path()), 8195);
        assert_eq!(directory_bytes(&dir.path().join("missing")), 0);
    }

    #[test]
    fn the_report_serialises_with_its_field_names() {
        let report = Report { role: "primary".into(), timeline: 2, ..Report::default() };
        let json = serde_json::to_value(&report).unwrap();
        for field in [
            "role",
            "timeline",
            "system_identifier",
            "current_lsn",
            "standbys",
            "file_settings",
            "pending_restart",
        ] {
            assert!(json.get(field).is_some(), "{field} in {json}");
        }
        assert_eq!(json["role"], "primary");
        let back: Report = serde_json::from_value(json).unwrap();
        assert_eq!(back, report, "the operator reads what the manager writes");
        let sparse: Report = serde_json::from_str(r#"{"in_recovery": true, "newer_field": 1}"#).unwrap();
        assert!(
            sparse.in_recovery && sparse.standbys.is_empty(),
            "missing fields default, unknown ones are ignored"
        );
    }

    #[test]
    fn a_credential_version_names_the_password_without_showing_it() {
        let version = credential_version("token", "app", "s3cret");
        assert_eq!(version.len(), VERSION_DIGITS);
        assert!(version.chars().all(|c| c.is_ascii_hexdigit()));
        assert_eq!(version, credential_version("token", "app", "s3cret"), "the same on both sides");
        for other in [
            credential_version("token", "app", "s3cret2"),
            credential_version("token", "app2", "s3cret"),
            credential_version("other-token", "app", "s3cret"),
            // The separator keeps user and password apart.
            credential_version("token", "apps", "3cret"),
        ] {
            assert_ne!(version, other);
        }
        assert!(!version.contains("s3cret"));
    }
}
