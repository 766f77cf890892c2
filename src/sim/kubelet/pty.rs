//! Pseudo-terminals for `kubectl exec -t`: the pair a container runtime allocates when an exec
//! asks for a TTY (containerd's `console.NewPty`), its window size, and the controlling terminal
//! the command takes.
//!
//! Contract: [`open`] returns the master (kept by the kubelet: what the command writes is read
//! there, what the client types is written there) and the slave (the command's stdin, stdout and
//! stderr). [`take_controlling_terminal`] runs in the command's `pre_exec`: a new session whose
//! controlling terminal is its stdin, so `^C` reaches the foreground job and `/dev/tty` opens, as
//! in a container. [`resize`] applies a resize the client sent (`TIOCSWINSZ`, which signals
//! `SIGWINCH` to the foreground job).

#![allow(unsafe_code, reason = "libc: openpty, TIOCSWINSZ, setsid and TIOCSCTTY")]

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// The two ends of a pseudo-terminal.
#[derive(Debug)]
pub struct Pty {
    /// The kubelet's end.
    pub master: OwnedFd,
    /// The command's end (its standard streams).
    pub slave: OwnedFd,
}

fn check(result: libc::c_int) -> std::io::Result<libc::c_int> {
    if result < 0 { Err(std::io::Error::last_os_error()) } else { Ok(result) }
}

/// A terminal size as `TIOCSWINSZ` takes it.
fn window(width: u16, height: u16) -> libc::winsize {
    libc::winsize { ws_row: height, ws_col: width, ws_xpixel: 0, ws_ypixel: 0 }
}

/// A new pseudo-terminal (both ends close-on-exec: the command gets the slave as its standard
/// streams, which are inherited whatever the flag).
pub fn open() -> std::io::Result<Pty> {
    let (mut master, mut slave) = (-1, -1);
    // SAFETY: openpty writes the two descriptors it opens into the given pointers; the name,
    // termios and winsize pointers may be null.
    check(unsafe {
        libc::openpty(&mut master, &mut slave, std::ptr::null_mut(), std::ptr::null(), std::ptr::null())
    })?;
    // SAFETY: both descriptors were just opened by openpty and are owned by nothing else.
    let pty = unsafe { Pty { master: OwnedFd::from_raw_fd(master), slave: OwnedFd::from_raw_fd(slave) } };
    for fd in [&pty.master, &pty.slave] {
        // SAFETY: fcntl on a descriptor this function owns.
        check(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC) })?;
    }
    Ok(pty)
}

/// Sets the terminal's size (columns, rows).
pub fn resize(master: &impl AsRawFd, width: u16, height: u16) -> std::io::Result<()> {
    let size = window(width, height);
    // SAFETY: TIOCSWINSZ reads one winsize from the pointer, which lives for the call.
    check(unsafe { libc::ioctl(master.as_raw_fd(), libc::TIOCSWINSZ, &size) })?;
    Ok(())
}

/// The `pre_exec` step of a command on a terminal: a new session, its stdin (the slave) as the
/// session's controlling terminal.
///
/// # Safety
/// Only as a `pre_exec` hook (between `fork` and `exec`); setsid and ioctl are
/// async-signal-safe.
pub unsafe fn take_controlling_terminal() -> std::io::Result<()> {
    // SAFETY: async-signal-safe calls on the child's own descriptors.
    unsafe {
        check(libc::setsid())?;
        check(libc::ioctl(0, libc::TIOCSCTTY, 0))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_terminal_takes_the_size_it_is_given() {
        let pty = open().unwrap();
        resize(&pty.master, 120, 40).unwrap();
        let mut size = window(0, 0);
        // SAFETY: TIOCGWINSZ writes one winsize into the pointer, which lives for the call.
        let got = unsafe { libc::ioctl(pty.slave.as_raw_fd(), libc::TIOCGWINSZ, &mut size) };
        assert_eq!(got, 0);
        assert_eq!((size.ws_col, size.ws_row), (120, 40));
    }
}
