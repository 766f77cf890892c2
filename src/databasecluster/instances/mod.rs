//! Talking to the instances (the I/O edge): what each one says about itself, and the few commands
//! the operator gives them. Everything is decided elsewhere
//! ([`crate::databasecluster::instances::topology`], [`crate::databasecluster::instances::roll`],
//! [`crate::databasecluster::instances::passwords`]).
//!
//! The operator never logs in to PostgreSQL. Each pod runs the instance manager
//! ([`crate::instance`]), which serves on the pod's `status` port (8000):
//! - `GET /status`: the instance's report ([`Report`], the one wire type both sides use), which
//!   [`InstanceFacts::from_report`] turns into what the decisions read;
//! - `POST /promote`, `/checkpoint`, `/reload`, `/slots`: the commands
//!   ([`crate::instance::commands`]), run by the manager over its local socket.
//!
//! Every request carries `Authorization: Bearer <token>` (the `<name>-status-token` Secret, which
//! the pods mount) and is bounded in time ([`client`]): an unreachable instance (a pod IP the
//! operator's host cannot route to, say behind a partition) costs one short wait, and the pass
//! goes on with the instance reported as `unknown` and why in its status; a pod whose address
//! refuses (the simulator's timer kubelet: nothing listens) costs a round trip. A pass asks its
//! instances all at once. Requests are plain HTTP: the token and the reports cross the pod
//! network in the clear until the managers serve TLS (a later change).

pub mod client;
pub mod passwords;
pub mod roll;
pub mod storage;
pub mod topology;

use std::collections::BTreeMap;

pub use crate::instance::commands::SlotChanges;
pub use crate::instance::status::{Refused, Report, Slot, Standby};
pub use client::{Access, InstanceError, StatusToken, Target};

/// What an instance says about itself: its [`Report`], with the LSNs as byte positions.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct InstanceFacts {
    /// `pg_is_in_recovery()`: a standby.
    pub in_recovery: bool,
    /// `server_version`, e.g. `15.4`.
    pub version: String,
    /// The configuration hash in the file on disk (`pg_file_settings`), i.e. what a reload applies.
    pub config_hash_on_disk: Option<String>,
    /// The configuration hash in force.
    pub config_hash_applied: Option<String>,
    /// On a standby: how far WAL was received (`pg_last_wal_receive_lsn()`, in bytes); `None` when
    /// it has not streamed since it started, and on a primary.
    pub received_lsn: Option<i64>,
    /// On a standby: how far WAL was replayed (`pg_last_wal_replay_lsn()`, in bytes).
    pub replay_lsn: Option<i64>,
    /// Where its control file's last checkpoint (or restartpoint) starts, in bytes: for a primary
    /// shut down cleanly and started as a standby, its shutdown checkpoint, its last WAL record.
    pub checkpoint_lsn: Option<i64>,
    /// On a primary: its standbys as `pg_stat_replication` lists them.
    pub standbys: Vec<Standby>,
    /// On a primary: its physical replication slots.
    pub slots: Vec<Slot>,
    /// The lines of its configuration files that PostgreSQL would not apply, a change that waits
    /// for a restart aside (`pg_file_settings`, which reads the files on disk as they are now).
    pub refused_settings: Vec<Refused>,
    /// Per login (`superuser`, `replication`, `app`): the version of the mounted Secret it applied
    /// ([`crate::instance::status::credential_version`]).
    pub credentials: BTreeMap<String, String>,
    /// On a primary archiving WAL: the archiver's state.
    pub archiver: Option<crate::instance::archive::state::ArchiverReport>,
}

impl InstanceFacts {
    /// The facts of `report`; an LSN that does not read as one counts as unknown.
    pub fn from_report(report: Report) -> InstanceFacts {
        let lsn = |text: &Option<String>| text.as_deref().and_then(lsn_bytes);
        InstanceFacts {
            in_recovery: report.in_recovery,
            received_lsn: lsn(&report.received_lsn),
            replay_lsn: lsn(&report.replayed_lsn),
            checkpoint_lsn: lsn(&report.checkpoint_lsn),
            version: report.version,
            config_hash_on_disk: report.file_settings.hash_on_disk,
            config_hash_applied: report.file_settings.hash_applied.filter(|h| !h.is_empty()),
            standbys: report.standbys,
            slots: report.slots,
            refused_settings: report.file_settings.refused,
            credentials: report.credentials,
            archiver: report.archiver,
        }
    }
}

/// An LSN as PostgreSQL writes it (`16/B374D848`: two hexadecimal halves) as a byte position.
pub fn lsn_bytes(text: &str) -> Option<i64> {
    let (high, low) = text.trim().split_once('/')?;
    let (high, low) = (u32::from_str_radix(high, 16).ok()?, u32::from_str_radix(low, 16).ok()?);
    i64::try_from((u64::from(high) << 32) | u64::from(low)).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::instance::status::FileSettings;

    #[test]
    fn lsns_read_as_byte_positions() {
        let cases = [
            ("0/0", Some(0)),
            ("0/3000060", Some(0x0300_0060)),
            ("16/B374D848", Some(0x16_B374_D848)),
            ("1/0", Some(1 << 32)),
            (" 0/10 ", Some(16)),
            ("FFFFFFFF/FFFFFFFF", None),
            ("0-10", None),
            ("x/10", None),
            ("", None),
        ];
        for (text, want) in cases {
            assert_eq!(lsn_bytes(text), want, "{text:?}");
        }
    }

    #[test]
    fn a_report_becomes_the_facts_the_decisions_read() {
        let report = Report {
            role: "standby".into(),
            in_recovery: true,
            version: "15.4".into(),
            received_lsn: Some("0/3000100".into()),
            replayed_lsn: Some("0/3000060".into()),
            checkpoint_lsn: Some("0/2000028".into()),
            file_settings: FileSettings {
                hash_on_disk: Some("abc".into()),
                hash_applied: Some(String::new()),
                refused: vec![Refused { name: "work_mem".into(), setting: "lots".into(), error: "e".into() }],
            },
            credentials: BTreeMap::from([("app".into(), "0123".into())]),
            ..Report::default()
        };
        let facts = InstanceFacts::from_report(report);
        assert!(facts.in_recovery);
        assert_eq!(facts.version, "15.4");
        assert_eq!((facts.received_lsn, facts.replay_lsn), (Some(0x0300_0100), Some(0x0300_0060)));
        assert_eq!(facts.checkpoint_lsn, Some(0x0200_0028));
        assert_eq!(facts.config_hash_on_disk.as_deref(), Some("abc"));
        assert_eq!(facts.config_hash_applied, None, "an empty hash in force is no hash");
        assert_eq!(facts.refused_settings.len(), 1);
        assert_eq!(facts.credentials["app"], "0123");
    }
}
