//! One container's processes: starting it in its sandbox with its log file, watching it with its
//! probes, stopping it (`preStop`, SIGTERM, the grace period, SIGKILL) and restarting it with
//! back-off.
//!
//! Rules:
//! 1. A container that exits is restarted when the pod's `restartPolicy` says so (`Always`; or
//!    `OnFailure` and a non-zero exit): the first restart at once, then after 10 s, 20 s, 40 s …
//!    capped at 300 s (waiting `CrashLoopBackOff` meanwhile); a run of 10 minutes resets the
//!    back-off. Each restart increments `restartCount`, and the run that ended is `lastState`.
//! 2. A failed liveness or startup probe stops the container as a deletion would, then rule 1.
//! 3. Stopping runs the `preStop` exec hook (within the grace period), sends SIGTERM, waits for the
//!    rest of the grace period, then SIGKILLs the whole sandbox.
//! 4. A container's stdout and stderr go to one file per run (`<n>.log`, `n` = its restart count),
//!    which `kubectl logs` reads (`--previous` is the run before).
//! 5. A configuration that cannot be built (a missing Secret…) leaves the container waiting,
//!    `CreateContainerConfigError`, retried with the same back-off.
//! 6. A run that ended is `terminated` with its `exitCode`, `reason` `Completed` (0) or `Error`
//!    (`OOMKilled` never: no memory limit is enforced), and `message`: what the run wrote to its
//!    `terminationMessagePath` (default `/dev/termination-log`, a fresh empty file per run bound
//!    there; at most 4096 bytes), or, with `terminationMessagePolicy: FallbackToLogsOnError`, a
//!    failed run that wrote none gets its log's last 80 lines, at most 2048 bytes — as a real
//!    kubelet reports them.

#![allow(unsafe_code, reason = "libc: the sandbox pre_exec hook, kill of the container init")]

use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::sim::kubelet::Node;
use crate::sim::kubelet::probes::{self, ExecContext, Probe, Tally};
use crate::sim::kubelet::sandbox::Sandbox;
use crate::sim::kubelet::status::ContainerState;
use crate::sim::meta;
use crate::sim::nodes::Reachable;

/// Everything needed to start one run of a container, built fresh before each run.
#[derive(Debug, Clone)]
pub struct Launch {
    /// The program (looked up on the container's `PATH`).
    pub program: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// The environment.
    pub env: Vec<(String, String)>,
    /// Namespaces, mounts and user.
    pub sandbox: Arc<Sandbox>,
    /// The startup probe.
    pub startup: Option<Probe>,
    /// The readiness probe.
    pub readiness: Option<Probe>,
    /// The liveness probe.
    pub liveness: Option<Probe>,
    /// The `preStop` exec hook's command.
    pub pre_stop: Option<Vec<String>>,
    /// The host file bound on the container's `terminationMessagePath`.
    pub termination_file: PathBuf,
    /// `terminationMessagePolicy: FallbackToLogsOnError`.
    pub fallback_to_logs: bool,
}

/// Rule 6: the most read from `terminationMessagePath`.
const MESSAGE_FILE_LIMIT: usize = 4096;
/// Rule 6: the most lines of the log taken as the message.
const MESSAGE_LOG_LINES: usize = 80;
/// Rule 6: the most bytes of the log taken as the message.
const MESSAGE_LOG_LIMIT: usize = 2048;

/// The last `limit` bytes of `text` (cut at a character boundary), as text.
fn last_bytes(text: &[u8], limit: usize) -> String {
    let text = String::from_utf8_lossy(text);
    let mut from = text.len().saturating_sub(limit);
    while !text.is_char_boundary(from) {
        from += 1;
    }
    text[from..].to_owned()
}

/// Rule 6, from what the run left: its termination file's bytes and its log's.
pub fn termination_message(file: &[u8], log: &[u8], code: i32, fallback_to_logs: bool) -> Option<String> {
    if !file.is_empty() {
        let cut = &file[..file.len().min(MESSAGE_FILE_LIMIT)];
        return Some(String::from_utf8_lossy(cut).into_owned());
    }
    if fallback_to_logs && code != 0 && !log.is_empty() {
        let lines = crate::sim::kubelet::logs::tail(log, Some(MESSAGE_LOG_LINES));
        return Some(last_bytes(&lines, MESSAGE_LOG_LIMIT));
    }
    None
}

/// A started run: the sandbox's init process.
#[derive(Debug)]
pub struct Run {
    child: tokio::process::Child,
    /// The init's pid (its mount namespace is the container's).
    pub init_pid: i32,
    node: Arc<Node>,
    log: PathBuf,
}

impl Run {
    fn signal(&self, signal: libc::c_int) {
        // 0 (a child reaped before its pid was read) must never reach kill(2): kill(0, _) is the
        // caller's whole process group.
        if self.init_pid > 1 {
            // SAFETY: signalling our own child, which has not been reaped while `self` lives.
            unsafe { libc::kill(self.init_pid, signal) };
        }
    }

    /// Waits for the run to end; its exit code (128 + signal when killed).
    pub async fn wait(&mut self) -> i32 {
        let status = self.child.wait().await;
        self.node.forget_process(self.init_pid);
        match status {
            Ok(s) => s
                .code()
                .unwrap_or_else(|| 128 + std::os::unix::process::ExitStatusExt::signal(&s).unwrap_or(9)),
            Err(_) => 255,
        }
    }

    /// Rule 6: the terminated state of this run, which ended with `code`.
    pub fn terminated(&self, launch: &Launch, code: i32, started_at: &str) -> ContainerState {
        let file = std::fs::read(&launch.termination_file).unwrap_or_default();
        let log = std::fs::read(&self.log).unwrap_or_default();
        ContainerState::Terminated {
            exit_code: code,
            reason: if code == 0 { "Completed".into() } else { "Error".into() },
            message: termination_message(&file, &log, code, launch.fallback_to_logs),
            started_at: started_at.to_owned(),
            finished_at: meta::now(),
        }
    }

    /// Rule 3: preStop, SIGTERM, grace, SIGKILL; the exit code.
    pub async fn stop(&mut self, grace: Duration, pre_stop: Option<&[String]>, ctx: &ExecContext) -> i32 {
        let deadline = Instant::now() + grace;
        if let Some(command) = pre_stop {
            let left = deadline.saturating_duration_since(Instant::now());
            if let Err(e) = probes::exec(command, ctx, left.max(Duration::from_secs(1))).await {
                tracing::info!(error = %e, "preStop hook failed");
            }
        }
        self.signal(libc::SIGTERM);
        match tokio::time::timeout_at(deadline, self.child.wait()).await {
            Ok(_) => {}
            Err(_) => self.signal(libc::SIGKILL),
        }
        self.wait().await
    }
}

/// Starts one run, its output appended to `log`.
pub fn start(node: &Arc<Node>, launch: &Launch, log: &PathBuf) -> std::io::Result<Run> {
    if let Some(parent) = log.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let file = std::fs::OpenOptions::new().create(true).append(true).open(log)?;
    let out: OwnedFd = file.try_clone()?.into();
    let err: OwnedFd = file.into();
    let mut cmd = tokio::process::Command::new(&launch.program);
    cmd.args(&launch.args)
        .env_clear()
        .envs(launch.env.iter().map(|(k, v)| (k, v)))
        .stdin(std::process::Stdio::null())
        .stdout(out)
        .stderr(err)
        .process_group(0)
        .kill_on_drop(true);
    let sandbox = launch.sandbox.clone();
    // SAFETY: `enter` only makes async-signal-safe calls on data prepared before the fork.
    unsafe { cmd.pre_exec(move || sandbox.enter()) };
    let child = cmd.spawn()?;
    let init_pid = child.id().map_or(0, |p| p as i32);
    node.remember_process(init_pid);
    Ok(Run { child, init_pid, node: node.clone(), log: log.clone() })
}

/// The back-off before restart number `restarts` (0-based): 0, 10 s, 20 s … 300 s.
pub fn back_off(restarts: u32) -> Duration {
    if restarts == 0 {
        return Duration::ZERO;
    }
    let secs = 10u64.saturating_mul(1u64 << (restarts - 1).min(5));
    Duration::from_secs(secs.min(300))
}

/// What ended a run.
#[derive(Debug)]
pub enum Ending {
    /// The process exited by itself.
    Exited(i32),
    /// A probe failed; the run was stopped.
    Unhealthy(i32, String),
    /// The pod is being deleted; the run was stopped.
    Terminated(i32),
}

/// Watches a running container with its probes until it exits, fails a probe, or `stop` fires;
/// `on_change(started, ready)` reports probe verdicts. No probe runs while the node is lost
/// (`reachable`): its kubelet is as frozen as its pods.
pub async fn watch_run(
    run: &mut Run,
    launch: &Launch,
    ctx: &ExecContext,
    grace: impl Fn() -> Duration,
    stop: &CancellationToken,
    on_change: &(dyn Fn(bool, bool) + Send + Sync),
    reachable: &Reachable,
) -> Ending {
    let started_at = Instant::now();
    let verdict = probe_until_unhealthy(launch, ctx, started_at, on_change, reachable);
    tokio::select! {
        code = run.wait() => Ending::Exited(code),
        (reason, probe_grace) = verdict => {
            let code = run.stop(probe_grace.unwrap_or_else(&grace), launch.pre_stop.as_deref(), ctx).await;
            Ending::Unhealthy(code, reason)
        }
        _ = stop.cancelled() => {
            let code = run.stop(grace(), launch.pre_stop.as_deref(), ctx).await;
            Ending::Terminated(code)
        }
    }
}

/// Probe rules 1–3: returns why the container must be restarted, with the failing probe's own
/// grace period if it has one (probe rule 7); it never returns otherwise.
async fn probe_until_unhealthy(
    launch: &Launch,
    ctx: &ExecContext,
    started_at: Instant,
    on_change: &(dyn Fn(bool, bool) + Send + Sync),
    reachable: &Reachable,
) -> (String, Option<Duration>) {
    if let Some(probe) = &launch.startup {
        tokio::time::sleep_until(started_at + probe.initial_delay).await;
        let mut tally = Tally::default();
        loop {
            reachable.wait().await;
            let result = probes::attempt(&probe.action, ctx, probe.timeout).await;
            match tally.record(result.is_ok(), probe) {
                Some(true) => break,
                Some(false) => {
                    let reason = format!("Startup probe failed: {}", result.err().unwrap_or_default());
                    return (reason, probe.termination_grace);
                }
                None => tokio::time::sleep(probe.period).await,
            }
        }
    }
    on_change(true, launch.readiness.is_none());
    let readiness = async {
        let Some(probe) = &launch.readiness else { return std::future::pending::<()>().await };
        tokio::time::sleep_until(started_at + probe.initial_delay).await;
        let mut tally = Tally::default();
        let mut ticker = probes::ticker(probe.period);
        loop {
            ticker.tick().await;
            reachable.wait().await;
            let result = probes::attempt(&probe.action, ctx, probe.timeout).await;
            if let Some(ready) = tally.record(result.is_ok(), probe) {
                on_change(true, ready);
                tally = Tally::default();
            }
        }
    };
    let liveness = async {
        let Some(probe) = &launch.liveness else {
            return std::future::pending::<(String, Option<Duration>)>().await;
        };
        tokio::time::sleep_until(started_at + probe.initial_delay).await;
        let mut tally = Tally::default();
        let mut ticker = probes::ticker(probe.period);
        loop {
            ticker.tick().await;
            reachable.wait().await;
            let result = probes::attempt(&probe.action, ctx, probe.timeout).await;
            if tally.record(result.is_ok(), probe) == Some(false) {
                let reason = format!("Liveness probe failed: {}", result.err().unwrap_or_default());
                return (reason, probe.termination_grace);
            }
        }
    };
    tokio::select! {
        () = readiness => unreachable!("the readiness loop never ends"),
        reason = liveness => reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn back_off_doubles_from_ten_seconds_to_five_minutes() {
        let secs: Vec<u64> = (0..8).map(|n| back_off(n).as_secs()).collect();
        assert_eq!(secs, [0, 10, 20, 40, 80, 160, 300, 300]);
    }

    #[test]
    fn the_message_is_the_file_else_the_failed_runs_log_tail_when_asked() {
        assert_eq!(termination_message(b"why", b"log\n", 0, false).as_deref(), Some("why"));
        assert_eq!(termination_message(b"why", b"log\n", 1, true).as_deref(), Some("why"));
        assert_eq!(termination_message(b"", b"log\n", 1, false), None);
        assert_eq!(termination_message(b"", b"log\n", 0, true), None, "only a failed run");
        assert_eq!(termination_message(b"", b"a\nb\n", 1, true).as_deref(), Some("a\nb\n"));
        let long_file = vec![b'x'; 5000];
        assert_eq!(termination_message(&long_file, b"", 1, true).unwrap().len(), 4096);
        let many: String = (0..100).map(|n| format!("{n}\n")).collect();
        let tail = termination_message(b"", many.as_bytes(), 1, true).unwrap();
        assert!(tail.starts_with("20\n") && tail.ends_with("99\n"), "the last 80 lines: {tail}");
        let wide = "é".repeat(3000);
        let cut = termination_message(b"", wide.as_bytes(), 1, true).unwrap();
        assert!(cut.len() <= 2048 && cut.chars().all(|c| c == 'é'), "at most 2048 bytes, whole characters");
    }
}
