//! Probes (`exec`, `tcpSocket`, `httpGet`) with their timings, as a kubelet runs them.
//!
//! Rules (each has a test in `tests/sim_process_kubelet.rs` or below):
//! 1. The startup probe runs first, from `initialDelaySeconds` after the container started, every
//!    `periodSeconds`; until it succeeds neither liveness nor readiness runs, and
//!    `failureThreshold` consecutive failures kill the container (it restarts per the pod's policy).
//! 2. Readiness runs from `initialDelaySeconds` after the start (or at once after the startup probe
//!    succeeded, when that was later): `failureThreshold` consecutive failures make the container
//!    unready, `successThreshold` consecutive successes ready again. No readiness probe: ready
//!    once started.
//! 3. Liveness runs likewise; `failureThreshold` consecutive failures kill the container.
//! 4. Each attempt has `timeoutSeconds`: a connection not made (or an HTTP answer not read) in
//!    time fails. An exec probe still running then fails, but as containerd 1.6 runs it under a
//!    1.28 kubelet: the command's own process is killed, and the attempt then waits until every
//!    process that inherited its output has closed it, for at most the kubelet's runtime request
//!    timeout ([`RUNTIME_REQUEST_TIMEOUT`], two minutes). So a probe script whose child blocks
//!    (a `psql` against a stopped server) takes minutes to fail, not `timeoutSeconds`: a probe
//!    command must bound its own children.
//! 6. Attempts follow a ticker of `periodSeconds` (pkg/kubelet/prober/worker.go `run`): an
//!    attempt that takes longer than the period is followed at once by the next, never by a
//!    whole period more.
//! 7. A liveness or startup probe's own `terminationGracePeriodSeconds`, when set, is the grace
//!    period of the stop its failure causes, in place of the pod's (1.28's kubelet,
//!    `killContainer` with the probe's grace; the `ProbeTerminationGracePeriod` feature is GA).
//! 5. `exec` runs the command in the container's mount namespace, environment and user (so
//!    `pg_isready` finds the container's `PATH`); exit 0 succeeds. `tcpSocket` succeeds when a TCP
//!    connection opens; `httpGet` when the answer's status is 200–399, over TLS with
//!    `scheme: HTTPS` without verifying the server, as a kubelet does ([`super::probe_tls`]). Both default to the pod IP; named ports are the
//!    container's `ports[].name`.

#![allow(unsafe_code, reason = "libc: pre_exec hooks that join the sandbox, killpg of a probe")]

use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd;
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::sim::kubelet::sandbox::{Identity, Sandbox};

/// What a probe (or a lifecycle hook) does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Runs a command in the container.
    Exec(Vec<String>),
    /// Opens a TCP connection.
    Tcp(SocketAddr),
    /// Sends an HTTP GET.
    Http {
        /// Where.
        addr: SocketAddr,
        /// The request path.
        path: String,
        /// `scheme: HTTPS`: over TLS, the server not verified ([`super::probe_tls`]).
        https: bool,
    },
}

/// A probe with its timings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    /// What it does.
    pub action: Action,
    /// `initialDelaySeconds`.
    pub initial_delay: Duration,
    /// `periodSeconds`.
    pub period: Duration,
    /// `timeoutSeconds`.
    pub timeout: Duration,
    /// `successThreshold`.
    pub success_threshold: u32,
    /// `failureThreshold`.
    pub failure_threshold: u32,
    /// `terminationGracePeriodSeconds` (liveness and startup only): the grace of the stop a
    /// failure causes, instead of the pod's.
    pub termination_grace: Option<Duration>,
}

/// A port of the container by number or by name (`ports[].name`).
pub fn resolve_port(port: &Value, container: &Value) -> Option<u16> {
    if let Some(n) = port.as_u64() {
        return u16::try_from(n).ok();
    }
    let name = port.as_str()?;
    if let Ok(n) = name.parse() {
        return Some(n);
    }
    container["ports"]
        .as_array()?
        .iter()
        .find(|p| p["name"] == name)
        .and_then(|p| p["containerPort"].as_u64())
        .and_then(|n| u16::try_from(n).ok())
}

/// The action of a probe or hook handler (`exec` / `tcpSocket` / `httpGet`).
pub fn action(handler: &Value, container: &Value, pod_ip: IpAddr) -> Option<Action> {
    if let Some(command) = handler["exec"]["command"].as_array() {
        return Some(Action::Exec(command.iter().filter_map(Value::as_str).map(str::to_owned).collect()));
    }
    let host = |h: &Value| h.as_str().and_then(|h| h.parse().ok()).unwrap_or(pod_ip);
    if handler["tcpSocket"].is_object() {
        let t = &handler["tcpSocket"];
        return Some(Action::Tcp(SocketAddr::new(host(&t["host"]), resolve_port(&t["port"], container)?)));
    }
    if handler["httpGet"].is_object() {
        let h = &handler["httpGet"];
        return Some(Action::Http {
            addr: SocketAddr::new(host(&h["host"]), resolve_port(&h["port"], container)?),
            path: h["path"].as_str().unwrap_or("/").to_owned(),
            https: h["scheme"] == "HTTPS",
        });
    }
    None
}

/// A probe of the API (`readinessProbe`…) with the defaults the API gives.
pub fn parse(probe: &Value, container: &Value, pod_ip: IpAddr) -> Option<Probe> {
    let seconds = |field: &str, default: u64| Duration::from_secs(probe[field].as_u64().unwrap_or(default));
    Some(Probe {
        action: action(probe, container, pod_ip)?,
        initial_delay: seconds("initialDelaySeconds", 0),
        period: seconds("periodSeconds", 10).max(Duration::from_secs(1)),
        timeout: seconds("timeoutSeconds", 1).max(Duration::from_secs(1)),
        success_threshold: probe["successThreshold"].as_u64().unwrap_or(1).max(1) as u32,
        failure_threshold: probe["failureThreshold"].as_u64().unwrap_or(3).max(1) as u32,
        termination_grace: probe["terminationGracePeriodSeconds"].as_u64().map(Duration::from_secs),
    })
}

/// How to run an exec action inside a running container.
#[derive(Debug, Clone)]
pub struct ExecContext {
    /// The container's init process (its mount namespace is the container's).
    pub init_pid: i32,
    /// The container's environment.
    pub env: Vec<(String, String)>,
    /// The container's user and working directory.
    pub identity: Identity,
}

/// How long a 1.28 kubelet waits for one call to the container runtime (its
/// `--runtime-request-timeout` default): the bound of an exec probe whose output stays open.
pub const RUNTIME_REQUEST_TIMEOUT: Duration = Duration::from_secs(120);

/// The ticker of a probe's attempts (rule 6): the first tick at once; a tick missed while an
/// attempt ran is taken as soon as it ends.
pub fn ticker(period: Duration) -> tokio::time::Interval {
    let mut ticker = tokio::time::interval(period);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    ticker
}

/// Why a command cannot be run in a container.
#[derive(Debug, thiserror::Error)]
pub enum InContainerError {
    /// The command is empty.
    #[error("an empty command")]
    Empty,
    /// The container's init is gone.
    #[error("the container is not running: {0}")]
    NotRunning(std::io::Error),
}

/// `command` as it runs in the container (exec probes, hooks and `kubectl exec` alike): in the
/// container's mount namespace, with its environment, user, groups and working directory (see
/// `sandbox`). The caller sets the standard streams and spawns it while the returned mount
/// namespace file is open.
pub fn in_container(
    command: &[String],
    ctx: &ExecContext,
) -> Result<(tokio::process::Command, std::fs::File), InContainerError> {
    let (program, args) = command.split_first().ok_or(InContainerError::Empty)?;
    let mount_ns = std::fs::File::open(format!("/proc/{}/ns/mnt", ctx.init_pid))
        .map_err(InContainerError::NotRunning)?;
    let fd = mount_ns.as_raw_fd();
    let identity = ctx.identity.clone();
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args).env_clear().envs(ctx.env.iter().map(|(k, v)| (k, v)));
    // SAFETY: `join` only makes async-signal-safe calls; `fd` stays open while the caller holds
    // the returned file, which it does until spawn returns.
    unsafe { cmd.pre_exec(move || Sandbox::join(fd, &identity)) };
    Ok((cmd, mount_ns))
}

/// Runs `command` in the container; `Ok(())` on exit 0. After `timeout` the command's process is
/// killed and the attempt fails once its output is closed (rule 4).
pub async fn exec(command: &[String], ctx: &ExecContext, timeout: Duration) -> Result<(), String> {
    exec_bounded(command, ctx, timeout, RUNTIME_REQUEST_TIMEOUT).await
}

/// [`exec`] with the runtime's own bound `runtime_timeout` on an output left open.
async fn exec_bounded(
    command: &[String],
    ctx: &ExecContext,
    timeout: Duration,
    runtime_timeout: Duration,
) -> Result<(), String> {
    let Some(program) = command.first() else { return Err("an empty command".into()) };
    let (mut cmd, mount_ns) = in_container(command, ctx).map_err(|e| e.to_string())?;
    cmd.stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let mut child = cmd.spawn().map_err(|e| format!("exec {program}: {e}"))?;
    drop(mount_ns);
    // The runtime copies the output until every writer has closed it, as containerd does.
    let output = {
        let (stdout, stderr) = (child.stdout.take(), child.stderr.take());
        tokio::spawn(async move {
            let mut said = Vec::new();
            let drain_stdout = async {
                if let Some(mut out) = stdout {
                    let _ = tokio::io::copy(&mut out, &mut tokio::io::sink()).await;
                }
            };
            let read_stderr = async {
                if let Some(err) = stderr {
                    let _ = err.take(64 * 1024).read_to_end(&mut said).await;
                }
            };
            tokio::join!(drain_stdout, read_stderr);
            String::from_utf8_lossy(&said).trim().to_owned()
        })
    };
    let pid = child.id();
    let status = match tokio::time::timeout(timeout, child.wait()).await {
        Ok(status) => Some(status.map_err(|e| e.to_string())?),
        Err(_) => {
            // The command's own process only: its children keep running with its output.
            let _ = child.start_kill();
            None
        }
    };
    let bound = if status.is_some() { Duration::from_millis(100) } else { runtime_timeout };
    let said = tokio::time::timeout(bound, output).await.ok().and_then(Result::ok).unwrap_or_default();
    if status.is_none() {
        if let Some(pid) = pid.and_then(|pid| i32::try_from(pid).ok()) {
            // SAFETY: signalling the probe's own process group (what is left of it); its leader
            // is killed but not yet reaped, so the group's id cannot have been reused.
            unsafe { libc::killpg(pid, libc::SIGKILL) };
        }
        let _ = child.wait().await;
    }
    match status {
        Some(status) if status.success() => Ok(()),
        Some(status) => {
            Err(format!("command {command:?} exited with {}: {said}", status.code().unwrap_or(-1)))
        }
        None => Err(format!("command {:?} timed out", command.join(" "))),
    }
}

/// One attempt of `action`.
pub async fn attempt(action: &Action, ctx: &ExecContext, timeout: Duration) -> Result<(), String> {
    match action {
        Action::Exec(command) => exec(command, ctx, timeout).await,
        Action::Tcp(addr) => {
            match tokio::time::timeout(timeout, tokio::net::TcpStream::connect(addr)).await {
                Ok(Ok(_)) => Ok(()),
                Ok(Err(e)) => Err(format!("dial tcp {addr}: {e}")),
                Err(_) => Err(format!("dial tcp {addr}: i/o timeout")),
            }
        }
        Action::Http { addr, path, https } => {
            let get = async {
                let stream = tokio::net::TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
                if *https {
                    let stream = super::probe_tls::connect(stream, *addr).await?;
                    http_get(stream, addr, path).await
                } else {
                    http_get(stream, addr, path).await
                }
            };
            let scheme = if *https { "https" } else { "http" };
            match tokio::time::timeout(timeout, get).await {
                Ok(result) => result,
                Err(_) => Err(format!("Get \"{scheme}://{addr}{path}\": context deadline exceeded")),
            }
        }
    }
}

/// `GET path` over `stream`: success when the answer's status is 200–399.
async fn http_get<S>(mut stream: S, addr: &SocketAddr, path: &str) -> Result<(), String>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nUser-Agent: kube-probe/1.28\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await.map_err(|e| e.to_string())?;
    let mut head = vec![0u8; 64];
    let n = stream.read(&mut head).await.map_err(|e| e.to_string())?;
    let line = String::from_utf8_lossy(&head[..n]).to_string();
    let code: u16 =
        line.split_whitespace().nth(1).and_then(|c| c.parse().ok()).ok_or("no HTTP status line")?;
    if (200..400).contains(&code) {
        Ok(())
    } else {
        Err(format!("HTTP probe failed with statuscode: {code}"))
    }
}

/// Consecutive results of one probe, turned into its verdict by the thresholds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Tally {
    successes: u32,
    failures: u32,
}

impl Tally {
    /// Records one result; returns `Some(true)` when the success threshold is reached,
    /// `Some(false)` at the failure threshold, `None` in between.
    pub fn record(&mut self, ok: bool, probe: &Probe) -> Option<bool> {
        if ok {
            self.failures = 0;
            self.successes += 1;
            (self.successes >= probe.success_threshold).then_some(true)
        } else {
            self.successes = 0;
            self.failures += 1;
            (self.failures >= probe.failure_threshold).then_some(false)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ip() -> IpAddr {
        "127.10.0.5".parse().unwrap()
    }

    #[test]
    fn probes_take_the_apis_defaults_and_named_ports() {
        let container = json!({"ports": [{"name": "postgres", "containerPort": 5432}]});
        let probe = parse(&json!({"tcpSocket": {"port": "postgres"}}), &container, ip()).unwrap();
        assert_eq!(probe.action, Action::Tcp("127.10.0.5:5432".parse().unwrap()));
        assert_eq!((probe.period, probe.timeout), (Duration::from_secs(10), Duration::from_secs(1)));
        assert_eq!((probe.success_threshold, probe.failure_threshold), (1, 3));
        let http = parse(
            &json!({"httpGet": {"port": 8080, "path": "/healthz"}, "periodSeconds": 2}),
            &container,
            ip(),
        )
        .unwrap();
        assert_eq!(
            http.action,
            Action::Http { addr: "127.10.0.5:8080".parse().unwrap(), path: "/healthz".into(), https: false }
        );
        assert_eq!(http.period, Duration::from_secs(2));
        assert!(parse(&json!({"tcpSocket": {"port": "nope"}}), &container, ip()).is_none());
    }

    #[test]
    fn thresholds_count_consecutive_results() {
        let probe = Probe {
            action: Action::Exec(vec![]),
            initial_delay: Duration::ZERO,
            period: Duration::from_secs(1),
            timeout: Duration::from_secs(1),
            success_threshold: 2,
            failure_threshold: 3,
            termination_grace: None,
        };
        let mut tally = Tally::default();
        assert_eq!(tally.record(false, &probe), None);
        assert_eq!(tally.record(false, &probe), None);
        assert_eq!(tally.record(true, &probe), None);
        assert_eq!(tally.record(false, &probe), None, "a success resets the failures");
        assert_eq!(tally.record(false, &probe), None);
        assert_eq!(tally.record(false, &probe), Some(false));
        assert_eq!(tally.record(true, &probe), None);
        assert_eq!(tally.record(true, &probe), Some(true));
    }

    /// Rule 4, as containerd 1.6 under a 1.28 kubelet runs an exec probe (the `ExecSync` of
    /// pkg/kubelet/cri/remote/remote_runtime.go, bounded by `--runtime-request-timeout`): on
    /// `timeoutSeconds` the command's process is killed, but the attempt ends only when its output
    /// is closed, so a blocked child holds the probe; a command that bounds its children does not.
    #[tokio::test]
    async fn an_exec_probe_lasts_until_its_output_closes_whatever_its_timeout() {
        let ctx = ExecContext {
            init_pid: std::process::id() as i32,
            env: vec![("PATH".into(), "/usr/bin:/bin".into())],
            identity: Identity::default(),
        };
        let sh = |script: &str| vec!["sh".to_owned(), "-c".to_owned(), script.to_owned()];
        let second = Duration::from_secs(1);
        let timed = |script: &'static str, runtime: Duration| {
            let (ctx, command) = (ctx.clone(), sh(script));
            async move {
                let started = std::time::Instant::now();
                let result = exec_bounded(&command, &ctx, second, runtime).await;
                (result, started.elapsed())
            }
        };
        let (result, took) = timed("sleep 3; true", Duration::from_secs(30)).await;
        assert_eq!(result, Err("command \"sh -c sleep 3; true\" timed out".to_owned()));
        assert!(took >= Duration::from_millis(2900), "the child held the output for 3 s: {took:?}");
        let (result, took) = timed("sleep 30; true", Duration::from_secs(2)).await;
        assert!(result.is_err());
        assert!(took >= 2 * second && took < 10 * second, "bounded by the runtime's timeout: {took:?}");
        let (result, took) = timed("sleep 30 >/dev/null 2>&1; true", Duration::from_secs(30)).await;
        assert!(result.is_err());
        assert!(took < 2 * second, "nothing held the output: {took:?}");
        let (result, took) =
            timed("timeout -s KILL 0.5 sleep 30; echo bounded >&2; exit 3", Duration::from_secs(30)).await;
        let said = result.unwrap_err();
        assert!(said.contains("exited with 3") && said.ends_with("bounded"), "{said}");
        assert!(took < 3 * second, "{took:?}");
    }

    #[tokio::test]
    async fn tcp_and_http_probes_see_what_listens() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            loop {
                let (mut s, _) = listener.accept().await.unwrap();
                let mut buf = [0u8; 512];
                let n = s.read(&mut buf).await.unwrap();
                let ok = String::from_utf8_lossy(&buf[..n]).starts_with("GET /ok ");
                let reply =
                    if ok { "HTTP/1.1 204 No Content\r\n\r\n" } else { "HTTP/1.1 503 Unavailable\r\n\r\n" };
                let _ = s.write_all(reply.as_bytes()).await;
            }
        });
        let ctx = ExecContext { init_pid: 0, env: vec![], identity: Identity::default() };
        let t = Duration::from_secs(1);
        assert!(attempt(&Action::Tcp(addr), &ctx, t).await.is_ok());
        assert!(attempt(&Action::Http { addr, path: "/ok".into(), https: false }, &ctx, t).await.is_ok());
        let failed = attempt(&Action::Http { addr, path: "/bad".into(), https: false }, &ctx, t).await;
        assert_eq!(failed, Err("HTTP probe failed with statuscode: 503".into()));
        // A leased address where nothing listens, not a port found free (which a listener
        // elsewhere could take).
        let lease =
            crate::sim::kubelet::addresses::allocate(crate::sim::kubelet::addresses::Range::Pods).unwrap();
        let closed = std::net::SocketAddr::from((lease.ip, 80));
        assert!(attempt(&Action::Tcp(closed), &ctx, t).await.is_err());
        let https = attempt(&Action::Http { addr, path: "/ok".into(), https: true }, &ctx, t).await;
        assert!(https.is_err(), "HTTPS to a plain listener fails: {https:?}");
    }

    #[tokio::test]
    async fn https_probes_speak_tls_without_verifying_the_server() {
        // A self-signed certificate for names the probe never asks for: a kubelet checks neither.
        let served = crate::runtime::observe::tls::ServedCertificate::load(None).unwrap();
        let acceptor = served.acceptor();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            loop {
                let (tcp, _) = listener.accept().await.unwrap();
                let Ok(mut s) = acceptor.accept(tcp).await else { continue };
                let mut buf = [0u8; 512];
                let n = s.read(&mut buf).await.unwrap_or(0);
                let ok = String::from_utf8_lossy(&buf[..n]).starts_with("GET /ok ");
                let reply = if ok { "HTTP/1.1 200 OK\r\n\r\n" } else { "HTTP/1.1 503 Unavailable\r\n\r\n" };
                let _ = s.write_all(reply.as_bytes()).await;
                let _ = s.shutdown().await;
            }
        });
        let ctx = ExecContext { init_pid: 0, env: vec![], identity: Identity::default() };
        let t = Duration::from_secs(2);
        assert_eq!(attempt(&Action::Http { addr, path: "/ok".into(), https: true }, &ctx, t).await, Ok(()));
        let failed = attempt(&Action::Http { addr, path: "/bad".into(), https: true }, &ctx, t).await;
        assert_eq!(failed, Err("HTTP probe failed with statuscode: 503".into()));
        let plain = attempt(&Action::Http { addr, path: "/ok".into(), https: false }, &ctx, t).await;
        assert!(plain.is_err(), "plain HTTP to a TLS listener fails: {plain:?}");
    }
}
