//! Freezing a container's processes (SIGSTOP) and thawing them (SIGCONT), as a hung pod or a
//! lost node leaves them: stopped, not killed.
//!
//! Which processes: a container's sandbox init stays in the simulator's PID namespace and made a
//! new one for its children (`sandbox`), so the container's processes are the init itself (a
//! child of this process) and every process whose `/proc/<pid>/ns/pid` is the init's
//! `/proc/<init>/ns/pid_for_children`. Never anything else: a namespace equal to this process's
//! own (`/proc/self/ns/pid`: the init made none) selects nothing, this process and pids 0, 1 and
//! below are never signalled, and an init that is not this process's child is left alone.

#![allow(unsafe_code, reason = "libc: kill of the processes of a container this simulator started")]

/// The PID namespace link `which` (`pid`, `pid_for_children`) of process `pid`.
fn namespace(pid: &str, which: &str) -> Option<std::path::PathBuf> {
    std::fs::read_link(format!("/proc/{pid}/ns/{which}")).ok()
}

/// The parent of process `pid`, from `/proc/<pid>/status`.
fn parent_of(pid: i32) -> Option<i32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status.lines().find_map(|l| l.strip_prefix("PPid:"))?.trim().parse().ok()
}

/// The processes of the container whose sandbox init is `init` (see the module doc): empty
/// when `init` is not a container init this process started.
pub fn container_processes(init: i32) -> Vec<i32> {
    let me = std::process::id() as i32;
    if init <= 1 || init == me || parent_of(init) != Some(me) {
        return Vec::new();
    }
    let (Some(own), Some(theirs)) =
        (namespace("self", "pid"), namespace(&init.to_string(), "pid_for_children"))
    else {
        return Vec::new();
    };
    if own == theirs {
        return Vec::new();
    }
    let mut pids = vec![init];
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else { continue };
        if pid <= 1 || pid == me || pid == init {
            continue;
        }
        let ns = namespace(&pid.to_string(), "pid");
        if ns.as_ref() == Some(&theirs) && ns.as_ref() != Some(&own) {
            pids.push(pid);
        }
    }
    pids
}

/// Sends `signal` to each of `pids` (real pids above 1 only).
fn signal_all(pids: &[i32], signal: libc::c_int) {
    for &pid in pids.iter().filter(|pid| **pid > 1) {
        // SAFETY: kill(2) on a positive pid found by `container_processes`; no memory involved.
        unsafe { libc::kill(pid, signal) };
    }
}

/// Stops every process of the containers whose inits are `inits`. Looks again after each
/// round, so that a process forked meanwhile is stopped too (a few rounds at most).
pub fn freeze(inits: &[i32]) {
    let mut stopped = std::collections::HashSet::new();
    for _ in 0..4 {
        let found: Vec<i32> = inits
            .iter()
            .flat_map(|init| container_processes(*init))
            .filter(|p| !stopped.contains(p))
            .collect();
        if found.is_empty() {
            break;
        }
        signal_all(&found, libc::SIGSTOP);
        stopped.extend(found);
    }
}

/// Resumes every process of the containers whose inits are `inits`.
pub fn thaw(inits: &[i32]) {
    let pids: Vec<i32> = inits.iter().flat_map(|init| container_processes(*init)).collect();
    signal_all(&pids, libc::SIGCONT);
}

/// Whether process `pid` is stopped (`T` in `/proc/<pid>/stat`).
pub fn is_stopped(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| stat.rsplit_once(')').map(|(_, rest)| rest.trim_start().starts_with('T')))
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Child, Command};
    use std::time::{Duration, Instant};

    /// A stand-in for a sandbox init: `unshare --pid --fork` stays in this PID namespace and
    /// runs its child in a new one, as the init does.
    fn sandboxed(script: &str) -> Child {
        Command::new("unshare").args(["--pid", "--fork", "--kill-child", "sh", "-c", script]).spawn().unwrap()
    }

    /// Waits until `init`'s namespace holds `n` processes besides it.
    fn processes_of(init: i32, n: usize) -> Vec<i32> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let pids = container_processes(init);
            if pids.len() > n || Instant::now() > deadline {
                return pids;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits (at most 10 s) for `condition`: a signal takes effect when its target next runs.
    fn until(what: &str, condition: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !condition() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    #[test]
    fn freezing_a_container_stops_its_processes_and_nothing_outside_it() {
        if !crate::sim::kubelet::is_root() {
            eprintln!("needs root for PID namespaces; the process kubelet's tests run as root");
            return;
        }
        let mut a = sandboxed("sleep 300 & sleep 300 & wait");
        let mut b = sandboxed("sleep 300 & wait");
        let (a_init, b_init) = (a.id() as i32, b.id() as i32);
        let in_a = processes_of(a_init, 3);
        let in_b = processes_of(b_init, 2);
        assert!(in_a.len() >= 4, "init, sh and two sleeps: {in_a:?}");
        assert!(in_a.iter().all(|p| !in_b.contains(p)), "the sibling's processes are its own");
        freeze(&[a_init]);
        until("every process of the frozen container stopped", || in_a.iter().all(|p| is_stopped(*p)));
        assert!(in_b.iter().all(|p| !is_stopped(*p)), "the sibling container keeps running");
        assert!(!is_stopped(std::process::id() as i32), "the simulator keeps running");
        let outside = Command::new("true").status().unwrap();
        assert!(outside.success(), "a new process outside the container runs");
        thaw(&[a_init]);
        until("every process thawed", || in_a.iter().all(|p| !is_stopped(*p)));
        for child in [&mut a, &mut b] {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    #[test]
    fn nothing_is_selected_without_a_namespace_of_its_own_or_for_a_stranger() {
        assert!(container_processes(0).is_empty());
        assert!(container_processes(1).is_empty());
        assert!(container_processes(-1).is_empty());
        assert!(container_processes(std::process::id() as i32).is_empty(), "never this process");
        let mut plain = Command::new("sleep").arg("30").spawn().unwrap();
        assert!(
            container_processes(plain.id() as i32).is_empty(),
            "a child sharing our namespace selects nothing"
        );
        let _ = plain.kill();
        let _ = plain.wait();
    }
}
