//! Sending a signal to the postmaster (a child this process spawned and has not reaped): the only
//! system call the manager makes itself. `SIGINT` is PostgreSQL's fast shutdown, `SIGHUP` a reload.
#![allow(unsafe_code, reason = "kill(2) has no safe wrapper among the dependencies: one call, below")]

/// A signal the manager sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Signal {
    /// Fast shutdown.
    FastShutdown,
    /// Re-read the configuration files (what `pg_reload_conf()` does, without a session: it works
    /// while the server does not accept connections yet).
    Reload,
}

impl Signal {
    fn number(self) -> libc::c_int {
        match self {
            Signal::FastShutdown => libc::SIGINT,
            Signal::Reload => libc::SIGHUP,
        }
    }
}

/// Sends `signal` to the process `pid`; refuses pids that are not a single process (0, 1, or
/// anything that does not fit `pid_t`, which `kill(2)` would read as a group or as every process).
pub fn send(pid: u32, signal: Signal) -> std::io::Result<()> {
    let pid = libc::pid_t::try_from(pid).ok().filter(|p| *p > 1).ok_or_else(|| {
        std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("refusing to signal pid {pid}"))
    })?;
    // SAFETY: kill(2) takes plain integers and touches no memory of this process; `pid` is a
    // positive single process id (checked above): the caller's unreaped child.
    let sent = unsafe { libc::kill(pid, signal.number()) };
    if sent == 0 { Ok(()) } else { Err(std::io::Error::last_os_error()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_and_broadcast_pids_are_refused() {
        for pid in [0, 1, u32::MAX] {
            assert_eq!(send(pid, Signal::FastShutdown).unwrap_err().kind(), std::io::ErrorKind::InvalidInput);
        }
    }

    #[tokio::test]
    async fn a_child_receives_the_signal() {
        let mut child = tokio::process::Command::new("sleep").arg("30").kill_on_drop(true).spawn().unwrap();
        send(child.id().unwrap(), Signal::FastShutdown).unwrap();
        let status =
            tokio::time::timeout(std::time::Duration::from_secs(10), child.wait()).await.unwrap().unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(libc::SIGINT));
    }
}
