//! The recovery target of `spec.bootstrap.recovery` and the pure decisions about it: which base
//! backup to start from, and the PostgreSQL settings that replay the archive to the target.
//!
//! The backup is the one named, or for `latest` the newest complete backup that can reach the
//! target: for a time, the newest that ended at or before it; for an LSN, the newest whose end
//! point is at or before it; for a transaction id, a restore point's name, `immediate` or no
//! target, the newest of all. A target no backup can reach is an error that says the first
//! recoverability point.

use jiff::Timestamp;

use super::manifest::{BackupManifest, parse_lsn};

/// The variables the recovery Job sets (none of them secret).
pub const ENV_BACKUP: &str = "DBC_RESTORE_BACKUP";
/// The target time (RFC 3339).
pub const ENV_TARGET_TIME: &str = "DBC_RECOVERY_TARGET_TIME";
/// The target LSN.
pub const ENV_TARGET_LSN: &str = "DBC_RECOVERY_TARGET_LSN";
/// The target transaction id.
pub const ENV_TARGET_XID: &str = "DBC_RECOVERY_TARGET_XID";
/// The target restore point's name.
pub const ENV_TARGET_NAME: &str = "DBC_RECOVERY_TARGET_NAME";
/// `true`: stop as soon as the backup is consistent.
pub const ENV_TARGET_IMMEDIATE: &str = "DBC_RECOVERY_TARGET_IMMEDIATE";

/// Where replay stops.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// The end of the archive.
    Latest,
    /// The last commit at or before this time.
    Time(Timestamp),
    /// This WAL position.
    Lsn(String),
    /// This transaction's commit.
    Xid(String),
    /// The restore point of this name (`pg_create_restore_point`).
    Name(String),
    /// The end of the base backup.
    Immediate,
}

impl Target {
    /// From `lookup` (the environment): at most one target is set (the CRD and the operator
    /// check it); a value that does not parse is an error.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Target, String> {
        let get = |name: &str| lookup(name).filter(|v| !v.is_empty());
        if let Some(time) = get(ENV_TARGET_TIME) {
            return time.parse().map(Target::Time).map_err(|e| format!("target time {time:?}: {e}"));
        }
        if let Some(lsn) = get(ENV_TARGET_LSN) {
            return parse_lsn(&lsn).map(|_| Target::Lsn(lsn.clone())).ok_or(format!("target lsn {lsn:?}"));
        }
        if let Some(xid) = get(ENV_TARGET_XID) {
            return Ok(Target::Xid(xid));
        }
        if let Some(name) = get(ENV_TARGET_NAME) {
            return Ok(Target::Name(name));
        }
        Ok(if get(ENV_TARGET_IMMEDIATE).as_deref() == Some("true") {
            Target::Immediate
        } else {
            Target::Latest
        })
    }

    /// The `recovery_target*` settings (besides `restore_command`).
    pub fn settings(&self) -> Vec<(&'static str, String)> {
        let mut settings = match self {
            Target::Latest => Vec::new(),
            // PostgreSQL's own form: its GUC check refuses RFC 3339's `T` and `Z`.
            Target::Time(time) => {
                vec![("recovery_target_time", time.strftime("%Y-%m-%d %H:%M:%S%.f+00").to_string())]
            }
            Target::Lsn(lsn) => vec![("recovery_target_lsn", lsn.clone())],
            Target::Xid(xid) => vec![("recovery_target_xid", xid.clone())],
            Target::Name(name) => vec![("recovery_target_name", name.clone())],
            Target::Immediate => vec![("recovery_target", "immediate".to_owned())],
        };
        settings.push(("recovery_target_action", "promote".to_owned()));
        settings
    }

    /// Whether `backup` ends at or before the target (can reach it).
    fn reachable_from(&self, backup: &BackupManifest) -> bool {
        match self {
            Target::Time(time) => backup.end_time.parse::<Timestamp>().is_ok_and(|end| end <= *time),
            Target::Lsn(lsn) => match (parse_lsn(&backup.end_lsn), parse_lsn(lsn)) {
                (Some(end), Some(target)) => end <= target,
                _ => false,
            },
            _ => true,
        }
    }
}

/// The backup to start from (see the module docs); `backups` oldest first.
pub fn choose<'a>(
    backups: &'a [BackupManifest],
    requested: &str,
    target: &Target,
) -> Result<&'a BackupManifest, String> {
    let first = || {
        backups.first().map_or("there is no complete backup in the store".to_owned(), |b| {
            format!("the first recoverability point is {} (the end of backup {})", b.end_time, b.name)
        })
    };
    if requested != "latest" {
        let backup = backups
            .iter()
            .find(|b| b.name == requested)
            .ok_or_else(|| format!("backup {requested} is not in the store (or incomplete)"))?;
        return if target.reachable_from(backup) {
            Ok(backup)
        } else {
            Err(format!(
                "backup {requested} ends at {} ({}), after the recovery target",
                backup.end_time, backup.end_lsn
            ))
        };
    }
    backups
        .iter()
        .rev()
        .find(|b| target.reachable_from(b))
        .ok_or_else(|| format!("no base backup ends before the recovery target {target:?}: {}", first()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn backup(name: &str, end_time: &str, end_lsn: &str) -> BackupManifest {
        BackupManifest {
            name: name.into(),
            start_time: end_time.into(),
            end_time: end_time.into(),
            start_lsn: end_lsn.into(),
            end_lsn: end_lsn.into(),
            timeline: 1,
            start_wal: String::new(),
            end_wal: String::new(),
            system_identifier: String::new(),
            postgres_version: String::new(),
            data_object: "data.tar.gz".into(),
            compression: "gzip".into(),
            size_bytes: 0,
            sha256: String::new(),
            source: String::new(),
        }
    }

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let pairs: Vec<(String, String)> = pairs.iter().map(|(k, v)| ((*k).into(), (*v).into())).collect();
        move |name| pairs.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
    }

    #[test]
    fn the_newest_backup_that_reaches_the_target_is_chosen() {
        let backups = [
            backup("20261207T100000Z", "2026-12-07T10:00:10Z", "0/3000100"),
            backup("20261207T110000Z", "2026-12-07T11:00:10Z", "0/5000100"),
        ];
        let at = |t: &str| Target::Time(t.parse().unwrap());
        assert_eq!(choose(&backups, "latest", &at("2026-12-07T10:30:00Z")).unwrap().name, "20261207T100000Z");
        assert_eq!(choose(&backups, "latest", &at("2026-12-07T12:00:00Z")).unwrap().name, "20261207T110000Z");
        assert_eq!(choose(&backups, "latest", &Target::Latest).unwrap().name, "20261207T110000Z");
        assert_eq!(
            choose(&backups, "latest", &Target::Lsn("0/4000000".into())).unwrap().name,
            "20261207T100000Z"
        );
        let early = choose(&backups, "latest", &at("2026-12-07T09:00:00Z")).unwrap_err();
        assert!(early.contains("first recoverability point is 2026-12-07T10:00:10Z"), "{early}");
        let late = choose(&backups, "20261207T110000Z", &at("2026-12-07T10:30:00Z")).unwrap_err();
        assert!(late.contains("after the recovery target"), "{late}");
        assert!(
            choose(&backups, "20261201T000000Z", &Target::Latest).unwrap_err().contains("not in the store")
        );
        assert!(choose(&[], "latest", &Target::Latest).unwrap_err().contains("no complete backup"));
    }

    #[test]
    fn targets_come_from_the_environment_and_become_settings() {
        assert_eq!(Target::from_lookup(env(&[])).unwrap(), Target::Latest);
        let time = Target::from_lookup(env(&[(ENV_TARGET_TIME, "2026-12-07T10:00:00Z")])).unwrap();
        let fraction =
            Target::from_lookup(env(&[(ENV_TARGET_TIME, "2026-12-07T11:00:00.25+01:00")])).unwrap();
        assert_eq!(fraction.settings()[0].1, "2026-12-07 10:00:00.25+00");
        assert_eq!(
            time.settings(),
            [
                ("recovery_target_time", "2026-12-07 10:00:00+00".to_owned()),
                ("recovery_target_action", "promote".to_owned())
            ]
        );
        assert!(Target::from_lookup(env(&[(ENV_TARGET_LSN, "nope")])).is_err());
        let xid = Target::from_lookup(env(&[(ENV_TARGET_XID, "742")])).unwrap();
        assert_eq!(xid.settings()[0], ("recovery_target_xid", "742".to_owned()));
        let immediate = Target::from_lookup(env(&[(ENV_TARGET_IMMEDIATE, "true")])).unwrap();
        assert_eq!(immediate.settings()[0], ("recovery_target", "immediate".to_owned()));
        assert_eq!(Target::Latest.settings().len(), 1);
    }
}
