//! The store's catalogue of complete base backups, and retention by `recoveryWindow`.
//!
//! To restore to any point in the window `[now - window, now]` a restore needs a base backup that
//! ended at or before that point and the WAL from that backup's start on. So [`plan`] keeps every
//! backup that ended inside the window and the newest one that ended before it (the one that
//! reaches the window's oldest point); it deletes the older backups and every WAL segment before
//! the oldest kept backup's first segment. Nothing a kept backup needs is deleted: its own data,
//! its manifest, the WAL from its start on, and every timeline history file are kept. With no
//! backup ending before the window, all are kept. A backup's manifest is deleted before its data,
//! so a half-deleted backup is never taken for a complete one.

use std::time::Duration;

use jiff::Timestamp;

use super::manifest::{BASE_DIR, BackupManifest, MANIFEST_FILE};
use super::store::{Store, StoreError};

/// The variable holding `retention.recoveryWindow` in seconds for the backup program.
pub const ENV_RECOVERY_WINDOW: &str = "DBC_RECOVERY_WINDOW_SECONDS";

/// The complete backups in a store, oldest first.
#[derive(Clone, Debug, Default)]
pub struct Catalog {
    /// Their manifests.
    pub backups: Vec<BackupManifest>,
}

fn time(text: &str) -> Option<Timestamp> {
    text.parse().ok()
}

impl Catalog {
    /// Reads every manifest under `base/`; an unreadable one is logged and left out.
    pub async fn read(store: &Store) -> Result<Catalog, StoreError> {
        let mut backups = Vec::new();
        for object in store.list(BASE_DIR).await? {
            let Some(stem) = object.strip_suffix(".gz").or(Some(object.as_str())) else { continue };
            if !stem.ends_with(&format!("/{MANIFEST_FILE}")) {
                continue;
            }
            let Some(bytes) = store.get(stem).await? else { continue };
            match serde_json::from_slice::<BackupManifest>(&bytes) {
                Ok(manifest) => backups.push(manifest),
                Err(error) => tracing::warn!(%object, %error, "unreadable backup manifest left out"),
            }
        }
        backups.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(Catalog { backups })
    }

    /// The end of the oldest complete backup: the earliest point a restore can reach.
    pub fn first_recoverability_point(&self) -> Option<String> {
        self.backups.iter().filter_map(|b| time(&b.end_time)).min().map(|t| t.to_string())
    }
}

/// What retention deletes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// The backups to delete, by name.
    pub backups: Vec<String>,
    /// WAL segments before this one (on its timeline or earlier ones) are deleted.
    pub wal_before: Option<String>,
}

/// What to delete from `catalog` for a window of `window` ending at `now` (see the module docs).
pub fn plan(catalog: &Catalog, window: Duration, now: Timestamp) -> Plan {
    let seconds = i64::try_from(window.as_secs()).unwrap_or(i64::MAX);
    let Some(oldest_point) = Timestamp::from_second(now.as_second().saturating_sub(seconds)).ok() else {
        return Plan::default();
    };
    let ended_before: Vec<&BackupManifest> =
        catalog.backups.iter().filter(|b| time(&b.end_time).is_some_and(|t| t <= oldest_point)).collect();
    let Some(reaching) = ended_before.iter().max_by(|a, b| a.name.cmp(&b.name)) else {
        return Plan::default();
    };
    let backups = ended_before.iter().filter(|b| b.name < reaching.name).map(|b| b.name.clone()).collect();
    Plan { backups, wal_before: Some(reaching.start_wal.clone()) }
}

/// Whether the archived object `name` (`wal/…`) is a segment (or a segment's backup label or
/// partial) before `first_kept`, on its timeline or an earlier one. History files never are.
pub fn wal_deletable(name: &str, first_kept: &str) -> bool {
    let file = name.rsplit('/').next().unwrap_or_default().trim_end_matches(".gz");
    let Some(segment) = file.get(..24) else { return false };
    if file.ends_with(".history") || !segment.bytes().all(|b| b.is_ascii_hexdigit()) {
        return false;
    }
    let (timeline, position) = segment.split_at(8);
    let (kept_timeline, kept_position) = first_kept.split_at(8.min(first_kept.len()));
    timeline <= kept_timeline && position < kept_position
}

/// Carries out [`plan`] on `store`; the names of the backups deleted.
pub async fn apply(
    store: &Store,
    catalog: &Catalog,
    window: Duration,
    now: Timestamp,
) -> Result<Vec<String>, StoreError> {
    let plan = plan(catalog, window, now);
    for name in &plan.backups {
        let folder = format!("{BASE_DIR}/{name}/");
        let mut objects = store.list(&folder).await?;
        // The manifest first: without it the rest is no backup.
        objects.sort_by_key(|o| !o.contains(MANIFEST_FILE));
        for object in objects {
            store.delete(&object).await?;
        }
        tracing::info!(backup = %name, "retention: backup deleted");
    }
    if let Some(first_kept) = &plan.wal_before {
        let mut deleted = 0_u64;
        for object in store.list("wal").await? {
            if wal_deletable(&object, first_kept) {
                store.delete(&object).await?;
                deleted += 1;
            }
        }
        tracing::info!(before = %first_kept, deleted, "retention: WAL deleted");
    }
    Ok(plan.backups)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn backup(name: &str, end: &str, start_wal: &str) -> BackupManifest {
        BackupManifest {
            name: name.into(),
            start_time: end.into(),
            end_time: end.into(),
            start_lsn: "0/0".into(),
            end_lsn: "0/0".into(),
            timeline: 1,
            start_wal: start_wal.into(),
            end_wal: start_wal.into(),
            system_identifier: "1".into(),
            postgres_version: "15".into(),
            data_object: "data.tar.gz".into(),
            compression: "gzip".into(),
            size_bytes: 1,
            sha256: String::new(),
            source: String::new(),
        }
    }

    fn catalog() -> Catalog {
        Catalog {
            backups: vec![
                backup("20261201T000000Z", "2026-12-01T00:01:00Z", "000000010000000000000002"),
                backup("20261202T000000Z", "2026-12-02T00:01:00Z", "000000010000000000000005"),
                backup("20261203T000000Z", "2026-12-03T00:01:00Z", "000000010000000000000009"),
                backup("20261205T000000Z", "2026-12-05T00:01:00Z", "00000002000000000000000C"),
            ],
        }
    }

    #[test]
    fn the_newest_backup_before_the_window_and_all_inside_it_are_kept() {
        let now: Timestamp = "2026-12-05T12:00:00Z".parse().unwrap();
        // The window starts 2026-12-02T12:00: the 12-02 backup reaches it.
        let plan = plan(&catalog(), Duration::from_secs(3 * 86_400), now);
        assert_eq!(plan.backups, ["20261201T000000Z"]);
        assert_eq!(plan.wal_before.as_deref(), Some("000000010000000000000005"));
        // A window older than every backup keeps everything.
        let all = super::plan(&catalog(), Duration::from_secs(30 * 86_400), now);
        assert_eq!(all, Plan::default());
        // A window inside the newest backup's life keeps that one only.
        let newest = super::plan(&catalog(), Duration::from_secs(3600), now);
        assert_eq!(newest.backups.len(), 3);
        assert_eq!(newest.wal_before.as_deref(), Some("00000002000000000000000C"));
        assert_eq!(catalog().first_recoverability_point().as_deref(), Some("2026-12-01T00:01:00Z"));
    }

    #[test]
    fn wal_before_the_oldest_kept_backup_goes_history_files_stay() {
        let kept = "00000002000000000000000C";
        assert!(wal_deletable("wal/0000000100000000/00000001000000000000000B.gz", kept));
        assert!(wal_deletable("wal/0000000200000000/00000002000000000000000B.gz", kept));
        assert!(!wal_deletable("wal/0000000200000000/00000002000000000000000C.gz", kept));
        assert!(!wal_deletable("wal/0000000100000000/00000001000000000000000D.gz", kept));
        assert!(!wal_deletable("wal/0000000300000000/00000003000000000000000A.gz", kept), "a later timeline");
        assert!(!wal_deletable("wal/00000001.history.gz", kept));
        assert!(wal_deletable("wal/000000010000000000000002.00000028.backup.gz", kept));
    }
}
