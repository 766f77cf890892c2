//! `kubectl exec` on the process kubelet: which container a request names, whether it runs here,
//! and the command started in it with its standard streams. The WebSocket side is `sim::exec`.
//!
//! Rules (each has a test below or in `tests/postgres/sim_process_kubelet`):
//! 1. The options are `PodExecOptions` as the apiserver reads them from the query: `command`
//!    repeated, one argument each; `container`; `stdin`, `stdout`, `stderr`, `tty` as Go's
//!    `strconv.ParseBool` reads them. With `tty` stderr is not separate (the kubelet's
//!    `NewOptions` bypasses it: a terminal has one output). At least one stream and one command
//!    word are needed (400).
//! 2. The container is chosen as `validateContainer` (pkg/registry/core/pod/strategy.go) does: the
//!    named one (any container or init container of the pod), or the only container; a pod not
//!    bound to a node answers `pod NAME does not have a host assigned` (`streamLocation`). All 400.
//! 3. A container that is not running on this kubelet (waiting, terminated, or a pod of the timer
//!    kubelet, which runs no process) is the kubelet's `container not found ("NAME")` (`GetExec`
//!    of pkg/kubelet/kubelet_pods.go finds only running containers).
//! 4. The command runs as the container's exec probes do (`probes::in_container`: its mount
//!    namespace, environment, user, groups and working directory), `127.0.0.1` in its arguments
//!    being the pod IP (rule 6 of `pod`). It joins the container's mount namespace, not its PID
//!    namespace: it is ended (its process group, SIGKILL) when the session ends before it does, or
//!    when that run of the container ends (a container's processes die with it).
//! 5. With `tty` its stdin, stdout and stderr are one pseudo-terminal (`pty`), of which it is
//!    the session leader, and `TERM=xterm` is set (containerd's CRI `execInternal` sets it);
//!    otherwise pipes, one per stream asked for (`/dev/null` for the others).

#![allow(unsafe_code, reason = "libc: the terminal's pre_exec hook, killpg of an exec's process group")]

use std::os::fd::OwnedFd;
use std::pin::Pin;
use std::task::{Context, Poll};

use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::sim::api_error::ApiError;
use crate::sim::kubelet::Node;
use crate::sim::kubelet::probes::{self, ExecContext, InContainerError};
use crate::sim::kubelet::pty;

/// What an exec request asks for (rule 1).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ExecOptions {
    /// The command and its arguments.
    pub command: Vec<String>,
    /// The container named, if any.
    pub container: Option<String>,
    /// Whether the client sends stdin.
    pub stdin: bool,
    /// Whether the client wants stdout.
    pub stdout: bool,
    /// Whether the client wants stderr (never with `tty`).
    pub stderr: bool,
    /// Whether the command runs on a terminal.
    pub tty: bool,
}

/// Go's `strconv.ParseBool`, absent or unreadable being false.
fn parse_bool(value: &str) -> bool {
    matches!(value, "1" | "t" | "T" | "true" | "TRUE" | "True")
}

impl ExecOptions {
    /// Rule 1, from the raw query string (`command` repeats, so it is not a map).
    pub fn parse(query: Option<&str>) -> Result<Self, ApiError> {
        let mut options = ExecOptions::default();
        for (key, value) in url::form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
            match key.as_ref() {
                "command" => options.command.push(value.into_owned()),
                "container" if !value.is_empty() => options.container = Some(value.into_owned()),
                "stdin" => options.stdin = parse_bool(&value),
                "stdout" => options.stdout = parse_bool(&value),
                "stderr" => options.stderr = parse_bool(&value),
                "tty" => options.tty = parse_bool(&value),
                _ => {}
            }
        }
        options.stderr &= !options.tty;
        if !options.stdin && !options.stdout && !options.stderr {
            return Err(ApiError::bad_request("you must specify at least 1 of stdin, stdout, stderr"));
        }
        if options.command.is_empty() {
            return Err(ApiError::bad_request("you must specify at least one command for the container"));
        }
        Ok(options)
    }
}

/// Rule 2: the container the request is for.
pub fn choose_container(pod: &Value, requested: Option<&str>) -> Result<String, ApiError> {
    let name = pod["metadata"]["name"].as_str().unwrap_or_default();
    let names = |fields: &[&str]| -> Vec<String> {
        fields
            .iter()
            .flat_map(|f| pod["spec"][*f].as_array().into_iter().flatten())
            .filter_map(|c| c["name"].as_str().map(str::to_owned))
            .collect()
    };
    let chosen = match requested {
        Some(c) if names(&["initContainers", "containers", "ephemeralContainers"]).iter().any(|n| n == c) => {
            c.to_owned()
        }
        Some(c) => return Err(ApiError::bad_request(format!("container {c} is not valid for pod {name}"))),
        None => match names(&["containers"]).as_slice() {
            [one] => one.clone(),
            [] => {
                return Err(ApiError::bad_request(format!(
                    "a container name must be specified for pod {name}"
                )));
            }
            _ => {
                let all = names(&["initContainers", "containers", "ephemeralContainers"]);
                return Err(ApiError::bad_request(format!(
                    "a container name must be specified for pod {name}, choose one of: [{}]",
                    all.join(" ")
                )));
            }
        },
    };
    if pod["spec"]["nodeName"].as_str().is_none_or(str::is_empty) {
        return Err(ApiError::bad_request(format!("pod {name} does not have a host assigned")));
    }
    Ok(chosen)
}

/// Rule 3: what the kubelet says of a container it does not run.
pub fn container_not_found(container: &str) -> String {
    format!("container not found (\"{container}\")")
}

/// A running container to exec in.
#[derive(Debug, Clone)]
pub struct Target {
    ctx: ExecContext,
    pod_ip: String,
    /// Cancelled when this run of the container ends.
    pub done: tokio_util::sync::CancellationToken,
}

/// Rule 3: `container` of the pod `uid` if this node runs it now.
pub fn target(node: &Node, uid: &str, container: &str) -> Option<Target> {
    let entry = node.pod(uid)?;
    let (ctx, done) = entry.running.lock().get(container).cloned()?;
    let pod_ip = entry.model.lock().pod_ip.clone();
    Some(Target { ctx, pod_ip, done })
}

/// Why a command could not be started.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The container stopped meanwhile.
    #[error("{0}")]
    Container(#[from] InContainerError),
    /// The terminal or the process could not be made.
    #[error("exec: \"{program}\": {source}")]
    Spawn {
        /// The program.
        program: String,
        /// What the system said.
        source: std::io::Error,
    },
}

/// The output of a command: a pipe, or a terminal (which says `EIO` once the command and its
/// children have all closed it: read as the end).
pub struct Output(Pin<Box<dyn AsyncRead + Send>>);

impl std::fmt::Debug for Output {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Output")
    }
}

impl AsyncRead for Output {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.0.as_mut().poll_read(cx, buf) {
            Poll::Ready(Err(e)) if e.raw_os_error() == Some(libc::EIO) => Poll::Ready(Ok(())),
            other => other,
        }
    }
}

/// The stdin of a command.
pub type Input = Pin<Box<dyn AsyncWrite + Send>>;

/// The terminal of a command started with `tty`: what resizes it.
#[derive(Debug)]
pub struct Terminal(OwnedFd);

impl Terminal {
    /// Sets the terminal's size (columns, rows).
    pub fn resize(&self, width: u16, height: u16) {
        if let Err(e) = pty::resize(&self.0, width, height) {
            tracing::debug!(error = %e, "resizing an exec's terminal failed");
        }
    }
}

/// A started command.
pub struct Process {
    child: tokio::process::Child,
    pid: i32,
    /// Where the client's stdin goes (when it sends some).
    pub stdin: Option<Input>,
    /// stdout, or the terminal.
    pub stdout: Option<Output>,
    /// stderr (never with a terminal).
    pub stderr: Option<Output>,
    /// The terminal, with `tty`.
    pub terminal: Option<Terminal>,
}

/// Rule 6 of `pod`: `127.0.0.1` as an argument is the pod's own address.
fn own_loopback(command: &[String], pod_ip: &str) -> Vec<String> {
    command.iter().map(|a| if a == "127.0.0.1" { pod_ip.to_owned() } else { a.clone() }).collect()
}

fn file_of(fd: OwnedFd) -> tokio::fs::File {
    tokio::fs::File::from_std(std::fs::File::from(fd))
}

/// Rules 4 and 5: starts `options.command` in the container `target`.
pub fn start(target: &Target, options: &ExecOptions) -> Result<Process, StartError> {
    let ctx = &target.ctx;
    let command = own_loopback(&options.command, &target.pod_ip);
    let program = command.first().cloned().unwrap_or_default();
    let spawn_error = |source| StartError::Spawn { program: program.clone(), source };
    let (mut cmd, mount_ns) = probes::in_container(&command, ctx)?;
    cmd.kill_on_drop(true);
    let piped = |asked: bool| if asked { std::process::Stdio::piped() } else { std::process::Stdio::null() };
    let terminal = if options.tty {
        let pty = pty::open().map_err(spawn_error)?;
        let slave = |pty: &pty::Pty| pty.slave.try_clone().map(std::process::Stdio::from);
        cmd.stdin(slave(&pty).map_err(spawn_error)?)
            .stdout(slave(&pty).map_err(spawn_error)?)
            .stderr(slave(&pty).map_err(spawn_error)?);
        cmd.env("TERM", "xterm");
        // SAFETY: setsid and ioctl are async-signal-safe; they run after the container's join.
        unsafe { cmd.pre_exec(|| pty::take_controlling_terminal()) };
        Some(pty.master)
    } else {
        cmd.stdin(piped(options.stdin)).stdout(piped(options.stdout)).stderr(piped(options.stderr));
        cmd.process_group(0);
        None
    };
    let child = cmd.spawn().map_err(spawn_error)?;
    // The parent's copies of the terminal's slave go with `cmd`: the master then reads the end
    // once the command's side is closed.
    drop(cmd);
    drop(mount_ns);
    let pid = child.id().and_then(|p| i32::try_from(p).ok()).unwrap_or(0);
    let mut process = Process { pid, stdin: None, stdout: None, stderr: None, terminal: None, child };
    if let Some(master) = terminal {
        let reader = master.try_clone().map_err(spawn_error)?;
        let writer = master.try_clone().map_err(spawn_error)?;
        process.stdout = Some(Output(Box::pin(file_of(reader))));
        process.stdin = options.stdin.then(|| Box::pin(file_of(writer)) as Input);
        process.terminal = Some(Terminal(master));
    } else {
        process.stdin = process.child.stdin.take().map(|s| Box::pin(s) as Input);
        process.stdout = process.child.stdout.take().map(|s| Output(Box::pin(s)));
        process.stderr = process.child.stderr.take().map(|s| Output(Box::pin(s)));
    }
    Ok(process)
}

impl std::fmt::Debug for Process {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Process").field("pid", &self.pid).field("terminal", &self.terminal).finish()
    }
}

impl Process {
    /// Waits for the command to exit: its exit code (128 + signal when killed).
    pub async fn wait(&mut self) -> std::io::Result<i32> {
        let status = self.child.wait().await?;
        Ok(status
            .code()
            .unwrap_or_else(|| 128 + std::os::unix::process::ExitStatusExt::signal(&status).unwrap_or(9)))
    }

    /// Rule 4: ends the command and what it started, unless it has already exited.
    pub async fn kill(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) && self.pid > 1 {
            // SAFETY: the command's own process group (it leads it: `process_group(0)` or
            // `setsid`), while its leader is not reaped, so the id cannot have been reused.
            unsafe { libc::killpg(self.pid, libc::SIGKILL) };
        }
        let _ = self.child.wait().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn options_read_the_query_as_the_apiserver_does() {
        let o = ExecOptions::parse(Some(
            "command=sh&command=-c&command=exit%203&container=db&stdin=true&stdout=1&stderr=true",
        ))
        .unwrap();
        assert_eq!(o.command, ["sh", "-c", "exit 3"]);
        assert_eq!(o.container.as_deref(), Some("db"));
        assert!(o.stdin && o.stdout && o.stderr && !o.tty);
        let tty = ExecOptions::parse(Some("command=psql&stdout=true&stderr=true&tty=true")).unwrap();
        assert!(tty.tty && !tty.stderr, "a terminal has one output");
        let none = ExecOptions::parse(Some("command=ls")).unwrap_err();
        assert_eq!(
            (none.code, none.message.as_str()),
            (400, "you must specify at least 1 of stdin, stdout, stderr")
        );
        assert_eq!(ExecOptions::parse(Some("stdout=true")).unwrap_err().code, 400);
    }

    #[test]
    fn the_container_is_the_named_one_or_the_only_one_on_a_bound_pod() {
        let pod = |containers: Value, node: Value| {
            json!({"metadata": {"name": "p"}, "spec": {"nodeName": node, "containers": containers,
                   "initContainers": [{"name": "init"}]}})
        };
        let one = pod(json!([{"name": "postgres"}]), json!("node"));
        assert_eq!(choose_container(&one, None).unwrap(), "postgres");
        assert_eq!(choose_container(&one, Some("init")).unwrap(), "init");
        let wrong = choose_container(&one, Some("nope")).unwrap_err();
        assert_eq!((wrong.code, wrong.message.as_str()), (400, "container nope is not valid for pod p"));
        let two = pod(json!([{"name": "a"}, {"name": "b"}]), json!("node"));
        assert_eq!(
            choose_container(&two, None).unwrap_err().message,
            "a container name must be specified for pod p, choose one of: [init a b]"
        );
        let unbound = choose_container(&pod(json!([{"name": "a"}]), Value::Null), None).unwrap_err();
        assert_eq!((unbound.code, unbound.message.as_str()), (400, "pod p does not have a host assigned"));
    }

    #[test]
    fn the_pods_loopback_is_its_own_address() {
        let command = ["psql".to_owned(), "-h".to_owned(), "127.0.0.1".to_owned()];
        assert_eq!(own_loopback(&command, "127.10.0.7"), ["psql", "-h", "127.10.0.7"]);
    }
}
