//! A container's sandbox, set up between `fork` and `exec` (as root): its own mount, PID and UTS
//! namespaces, the pod's files bind-mounted where the container expects them, then the pod's user.
//!
//! The spawned process is a small *init* (the forked child, which never execs): it enters new
//! namespaces, makes every mount private (nothing propagates to the host), bind-mounts the binds in
//! order, remounts `/` read-only for `readOnlyRootFilesystem`, then forks the container's
//! process, which becomes PID 1 of the new PID namespace, drops to `runAsUser`/`runAsGroup` with
//! the supplementary groups (`fsGroup`…), changes to `workingDir` and execs. The init forwards
//! SIGTERM/SIGINT/SIGHUP/SIGQUIT/SIGUSR1/SIGUSR2 to it and exits with its status (128 + signal when
//! killed). Why: when PID 1 of a PID namespace dies the kernel kills every process in it, and both
//! the init and PID 1 ask for SIGKILL when their parent dies (`PR_SET_PDEATHSIG`): so SIGKILL to
//! the init, or the simulator dying however abruptly, leaves no process behind.
//!
//! Exec probes and hooks run [`Sandbox::join`]ed: in the container's mount namespace (through
//! `/proc/<init>/ns/mnt`), as the container's user.
//!
//! Only async-signal-safe calls happen after `fork`: every string is prepared before.

#![allow(unsafe_code, reason = "libc: namespaces, mounts and identity switches between fork and exec")]

use std::ffi::CString;
use std::os::fd::RawFd;
use std::path::Path;
use std::sync::atomic::{AtomicI32, Ordering};

/// A bind mount: a host path shown at a path in the container.
#[derive(Debug, Clone)]
pub struct Bind {
    /// The host file or directory.
    pub source: CString,
    /// Where the container sees it.
    pub target: CString,
    /// Whether the container may only read it.
    pub read_only: bool,
}

impl Bind {
    /// A bind of `source` on `target`.
    pub fn new(source: &Path, target: &Path, read_only: bool) -> Option<Bind> {
        Some(Bind { source: c_path(source)?, target: c_path(target)?, read_only })
    }
}

/// Who the container's processes run as.
#[derive(Debug, Clone, Default)]
pub struct Identity {
    /// `runAsUser` (0 when unset).
    pub uid: u32,
    /// `runAsGroup` (the uid's group when unset).
    pub gid: u32,
    /// Supplementary groups: `fsGroup`, `supplementalGroups`.
    pub groups: Vec<libc::gid_t>,
    /// `workingDir`.
    pub working_dir: Option<CString>,
}

/// Everything the init needs, prepared before `fork`.
#[derive(Debug, Clone)]
pub struct Sandbox {
    /// The pod's hostname.
    pub hostname: CString,
    /// Bind mounts, in order (later ones may lie inside earlier ones).
    pub binds: Vec<Bind>,
    /// `readOnlyRootFilesystem`.
    pub read_only_root: bool,
    /// The container's user.
    pub identity: Identity,
}

/// A path as a C string (`None` for a path with a NUL byte).
pub fn c_path(path: &Path) -> Option<CString> {
    CString::new(path.as_os_str().as_encoded_bytes()).ok()
}

/// The most binds one container may have.
const MAX_BINDS: usize = 64;

/// `/proc/self/fd/<fd>` as a C string, built without allocating (after `fork`).
struct FdPath([u8; 32]);

impl FdPath {
    fn new(fd: libc::c_int) -> Self {
        let mut buf = [0u8; 32];
        let prefix = b"/proc/self/fd/";
        buf[..prefix.len()].copy_from_slice(prefix);
        let mut digits = [0u8; 12];
        let (mut n, mut len) = (fd.max(0) as u32, 0);
        loop {
            digits[len] = b'0' + (n % 10) as u8;
            len += 1;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        for i in 0..len {
            buf[prefix.len() + i] = digits[len - 1 - i];
        }
        FdPath(buf)
    }

    fn as_ptr(&self) -> *const libc::c_char {
        self.0.as_ptr().cast()
    }
}

/// The PID the init forwards signals to (a copy per forked init).
static CONTAINER_PID: AtomicI32 = AtomicI32::new(0);

extern "C" fn forward_signal(signal: libc::c_int) {
    let pid = CONTAINER_PID.load(Ordering::Relaxed);
    if pid > 0 {
        // SAFETY: kill is async-signal-safe.
        unsafe { libc::kill(pid, signal) };
    }
}

fn check(result: libc::c_int) -> std::io::Result<()> {
    if result < 0 { Err(std::io::Error::last_os_error()) } else { Ok(()) }
}

/// Dies with the parent (the init, or the simulator's thread that spawned it).
///
/// # Safety
/// Only between `fork` and `exec`.
unsafe fn die_with_parent(expected_parent: libc::pid_t) -> std::io::Result<()> {
    // SAFETY: prctl and getppid are async-signal-safe.
    unsafe {
        check(libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0))?;
        if expected_parent > 0 && libc::getppid() != expected_parent {
            libc::_exit(137);
        }
    }
    Ok(())
}

/// Switches to `identity`'s groups, group, user and working directory.
///
/// # Safety
/// Only between `fork` and `exec`.
unsafe fn become_identity(identity: &Identity) -> std::io::Result<()> {
    // SAFETY: setgroups, setgid, setuid and chdir are async-signal-safe; the pointers live in
    // `identity`, which outlives the call.
    unsafe {
        check(libc::setgroups(identity.groups.len(), identity.groups.as_ptr()))?;
        check(libc::setgid(identity.gid))?;
        check(libc::setuid(identity.uid))?;
        if let Some(dir) = &identity.working_dir {
            check(libc::chdir(dir.as_ptr()))?;
        }
    }
    Ok(())
}

/// Makes the bind mount at `target` read-only (a bind is made writable, then remounted).
///
/// # Safety
/// As [`Sandbox::enter`]: only between `fork` and `exec`; `mount` is async-signal-safe.
unsafe fn remount_read_only(target: &std::ffi::CStr) -> std::io::Result<()> {
    let flags = libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY;
    // SAFETY: `target` is a valid C string for the duration of the call; the rest are null.
    check(unsafe {
        libc::mount(std::ptr::null(), target.as_ptr(), std::ptr::null(), flags, std::ptr::null())
    })
}

impl Sandbox {
    /// The `pre_exec` of a container's process: namespaces, mounts, the init, the identity.
    ///
    /// # Safety
    /// Only as a `pre_exec` hook (between `fork` and `exec` of a process spawned as root).
    pub unsafe fn enter(&self) -> std::io::Result<()> {
        // SAFETY: every call below is async-signal-safe, and every pointer comes from `self`.
        unsafe {
            let spawner = libc::getppid();
            die_with_parent(spawner)?;
            check(libc::unshare(libc::CLONE_NEWNS | libc::CLONE_NEWPID | libc::CLONE_NEWUTS))?;
            let root = c"/";
            check(libc::mount(
                std::ptr::null(),
                root.as_ptr(),
                std::ptr::null(),
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            ))?;
            check(libc::sethostname(self.hostname.as_ptr(), self.hostname.as_bytes().len()))?;
            // Every source is opened before the first bind: a bind (of `/tmp`, say) may hide the
            // path of a later source, never the inode an open descriptor holds.
            if self.binds.len() > MAX_BINDS {
                return Err(std::io::Error::other("too many volume mounts"));
            }
            let mut sources = [0 as libc::c_int; MAX_BINDS];
            for (slot, bind) in sources.iter_mut().zip(&self.binds) {
                *slot = libc::open(bind.source.as_ptr(), libc::O_PATH | libc::O_CLOEXEC);
                check(*slot)?;
            }
            for (fd, bind) in sources.iter().zip(&self.binds) {
                let source = FdPath::new(*fd);
                let flags = libc::MS_BIND | libc::MS_REC;
                check(libc::mount(
                    source.as_ptr(),
                    bind.target.as_ptr(),
                    std::ptr::null(),
                    flags,
                    std::ptr::null(),
                ))?;
                if bind.read_only {
                    remount_read_only(&bind.target)?;
                }
            }
            // Last: a bind made from a read-only mount would be read-only too.
            if self.read_only_root {
                remount_read_only(root)?;
            }
            match libc::fork() {
                -1 => Err(std::io::Error::last_os_error()),
                0 => {
                    become_identity(&self.identity)?;
                    // After the identity: changing credentials clears the parent-death signal.
                    // The parent of a PID namespace's PID 1 is outside it (getppid says 0).
                    die_with_parent(0)?;
                    Ok(())
                }
                child => {
                    // The init never execs: close what it inherited (above all the write end of
                    // the pipe on which the spawner waits for the container's exec to happen).
                    libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32);
                    CONTAINER_PID.store(child, Ordering::Relaxed);
                    for signal in [
                        libc::SIGTERM,
                        libc::SIGINT,
                        libc::SIGHUP,
                        libc::SIGQUIT,
                        libc::SIGUSR1,
                        libc::SIGUSR2,
                    ] {
                        let mut action: libc::sigaction = std::mem::zeroed();
                        action.sa_sigaction = forward_signal as *const () as libc::sighandler_t;
                        action.sa_flags = libc::SA_RESTART;
                        libc::sigemptyset(&mut action.sa_mask);
                        libc::sigaction(signal, &action, std::ptr::null_mut());
                    }
                    let mut status: libc::c_int = 0;
                    loop {
                        let waited = libc::waitpid(child, &mut status, 0);
                        if waited == child {
                            break;
                        }
                        if waited < 0 && *libc::__errno_location() != libc::EINTR {
                            libc::_exit(255);
                        }
                    }
                    let code = if libc::WIFEXITED(status) {
                        libc::WEXITSTATUS(status)
                    } else {
                        128 + libc::WTERMSIG(status)
                    };
                    libc::_exit(code)
                }
            }
        }
    }

    /// The `pre_exec` of an exec probe or hook: the container's mount namespace (`mount_ns`, an
    /// open `/proc/<init>/ns/mnt`) and identity.
    ///
    /// # Safety
    /// Only as a `pre_exec` hook, with `mount_ns` open in the parent.
    pub unsafe fn join(mount_ns: RawFd, identity: &Identity) -> std::io::Result<()> {
        // SAFETY: setns and the identity calls are async-signal-safe.
        unsafe {
            let spawner = libc::getppid();
            check(libc::setns(mount_ns, libc::CLONE_NEWNS))?;
            become_identity(identity)?;
            die_with_parent(spawner)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptor_paths_are_built_without_allocating() {
        let path = FdPath::new(1234);
        // SAFETY: FdPath always ends in NUL bytes.
        let text = unsafe { std::ffi::CStr::from_ptr(path.as_ptr()) };
        assert_eq!(text.to_str().unwrap(), "/proc/self/fd/1234");
        let zero = FdPath::new(0);
        // SAFETY: as above.
        assert_eq!(unsafe { std::ffi::CStr::from_ptr(zero.as_ptr()) }.to_str().unwrap(), "/proc/self/fd/0");
    }
}
