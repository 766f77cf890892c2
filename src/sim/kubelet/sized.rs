//! Volumes with a real size ([`crate::sim::SimConfig::sized_volumes`]): the directory of a bound
//! claim's volume is a `tmpfs` of the volume's capacity, so what the pods write can fill it as
//! it fills a real disk (`ENOSPC`), and growing the claim grows it online (a remount with the
//! new size: what the kubelet's `NodeExpandVolume` does for a filesystem that can grow mounted).
//!
//! A tmpfs holds only what is written (memory, not its size), and it goes with the node: every
//! mount under the node's directory is detached before the directory is removed (also for the
//! node of a simulator that died without cleaning up).

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Command;

/// Mounts a `tmpfs` of `bytes` on `dir` (an empty directory), world-writable as the hostPath
/// provisioners make volumes.
pub fn mount(dir: &Path, bytes: u64) -> Result<(), String> {
    run("mount", &["-t", "tmpfs", "-o", &format!("size={bytes},mode=0777"), "tmpfs"], dir)
}

/// Grows (or shrinks) the `tmpfs` on `dir` to `bytes` while it stays mounted; nothing when `dir`
/// is no mount point (a volume without a size).
pub fn resize(dir: &Path, bytes: u64) -> Result<(), String> {
    if !is_mount_point(dir) {
        return Ok(());
    }
    run("mount", &["-o", &format!("remount,size={bytes}")], dir)
}

/// Detaches whatever is mounted on `dir` or below it, deepest first, so that it can be removed.
pub fn unmount_below(dir: &Path) {
    let Ok(mounts) = std::fs::read_to_string("/proc/self/mounts") else { return };
    let mut points: Vec<&str> = mounts
        .lines()
        .filter_map(|line| line.split_whitespace().nth(1))
        .filter(|point| Path::new(point).starts_with(dir))
        .collect();
    points.sort_by_key(|point| std::cmp::Reverse(point.len()));
    for point in points {
        if let Err(error) = run("umount", &["-l"], Path::new(point)) {
            tracing::debug!(%error, "detaching a sized volume failed");
        }
    }
}

/// Whether `dir` is the root of a mount (its device differs from its parent's).
pub fn is_mount_point(dir: &Path) -> bool {
    let (Ok(own), Some(Ok(parent))) = (dir.metadata(), dir.parent().map(Path::metadata)) else {
        return false;
    };
    own.dev() != parent.dev()
}

fn run(program: &str, args: &[&str], dir: &Path) -> Result<(), String> {
    let output = Command::new(program)
        .args(args)
        .arg(dir)
        .output()
        .map_err(|error| format!("{program} {}: {error}", dir.display()))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!("{program} {}: {}", dir.display(), String::from_utf8_lossy(&output.stderr).trim()))
    }
}
