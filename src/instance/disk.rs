//! Room on the data volume. PostgreSQL cannot go on when its volume is full: a failed WAL write
//! stops the server (PANIC), and a restart would stop again at once. So the manager treats a data
//! volume with less than [`FULL_BELOW`] free as full, whatever the server does:
//!
//! - it does not start the server while the volume is full; it waits, looking every
//!   [`LOOK_EVERY`], and starts it once the volume has room (say, grown through `storageSize`);
//! - `/status` answers `507 Insufficient Storage` with [`describe`]'s sentence, so the operator
//!   reports the instance as out of space instead of as crashing;
//! - `/readyz` fails (no client is sent to a server that cannot write) while `/healthz` passes
//!   as long as the server is not running, so that the kubelet does not restart a manager that
//!   waits on purpose.

use std::path::Path;
use std::time::Duration;

/// Below this many free bytes the volume counts as full: two WAL segments, the least a server
/// needs to write its next segment and a checkpoint.
pub const FULL_BELOW: u64 = 32 * 1024 * 1024;

/// How often a manager waiting for room looks at the volume again.
pub const LOOK_EVERY: Duration = Duration::from_secs(2);

/// A filesystem's room, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Space {
    /// Bytes an unprivileged process may still write.
    pub available: u64,
    /// The filesystem's size.
    pub total: u64,
}

impl Space {
    /// Whether the volume counts as full (see the module docs).
    pub fn is_full(&self) -> bool {
        self.available < FULL_BELOW
    }
}

/// The room on the filesystem holding `path` (or its nearest existing ancestor: the data
/// directory may not exist yet on a fresh volume).
pub fn space(path: &Path) -> std::io::Result<Space> {
    let existing = path.ancestors().find(|p| p.exists()).unwrap_or(Path::new("/"));
    let stats = rustix::fs::statvfs(existing)?;
    Ok(Space {
        available: stats.f_bavail.saturating_mul(stats.f_frsize),
        total: stats.f_blocks.saturating_mul(stats.f_frsize),
    })
}

/// Whether the data volume under `pgdata` is full now; an unreadable volume is not called full
/// (the server's own errors say more).
pub fn full(pgdata: &Path) -> Option<Space> {
    space(pgdata).ok().filter(Space::is_full)
}

/// One sentence for the log and `/status`.
pub fn describe(space: &Space) -> String {
    let mib = |bytes: u64| bytes as f64 / (1024.0 * 1024.0);
    format!(
        "the data volume is full ({:.1} MiB free of {:.1} MiB): PostgreSQL stays stopped until it has {} MiB free; grow spec.storageSize",
        mib(space.available),
        mib(space.total),
        FULL_BELOW / (1024 * 1024)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_volume_is_full_below_two_wal_segments() {
        let space = |available| Space { available, total: 256 << 20 };
        assert!(space(0).is_full());
        assert!(space(FULL_BELOW - 1).is_full());
        assert!(!space(FULL_BELOW).is_full());
        let text = describe(&space(1 << 20));
        assert!(text.contains("1.0 MiB free of 256.0 MiB") && text.contains("storageSize"), "{text}");
    }

    #[test]
    fn the_room_of_a_path_not_made_yet_is_its_parents() {
        let dir = tempfile::tempdir().unwrap();
        let here = space(dir.path()).unwrap();
        let below = space(&dir.path().join("pgdata/not/yet")).unwrap();
        assert_eq!(here.total, below.total);
        assert!(here.total > 0);
    }
}
