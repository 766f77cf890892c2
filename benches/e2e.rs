//! `cargo bench --bench e2e`: the whole operator, as its own process (the built binary's `run`
//! against the simulator's kubeconfig, 4 workers), bringing N DatabaseClusters spread over 20
//! namespaces to Running on the simulator (timer kubelet) in this process; then 60 s at rest (the
//! operator's CPU and passes at rest are printed: a settled cluster is looked at every 30 s);
//! then the operator restarted once. One row per N and operator, printed as a Markdown table:
//!
//! - time to all Running, and p50/p99 of each cluster's create-to-Running time;
//! - the simulator's CPU seconds (this process) and the operator's CPU seconds, peak RSS and RSS
//!   at the end of the rest (`/proc/PID/stat`, `/proc/PID/status` `VmHWM`, `VmRSS`);
//! - the operator's API writes per cluster by verb and resource (the simulator's request log,
//!   less the bench's own creates), and the change events the watch streams sent;
//! - writes during the rest (must be 0); after the restart: writes (must be 0) and the time until
//!   the new process has made a pass of every cluster (its `/metrics`), and its peak RSS by then
//!   (the caches filled from one list, without the creation burst's history).
//!
//! Settings by environment: `E2E_SIZES` (default `100,1000,5000`), `E2E_REST_SECS` (default 60),
//! `E2E_ANCHOR` (path of the kube-runtime anchor binary built from `benches/anchors`, which takes
//! the same `run` flags; measured after the operator at each size, in the same run, as the
//! baseline), `E2E_OPERATOR` (path of the operator binary to measure instead of the one this
//! bench was built with, which has the simulator in it: the image's build,
//! `cargo build --profile dist --no-default-features --features jemalloc`, is what ships).
//!
//! The simulator's CPU is this process's: the simulator, plus the bench's own creates and its
//! watch of the clusters' status (small beside the simulator's share).

#![allow(unsafe_code, reason = "libc: kill of the operator process group")]

use std::collections::{BTreeMap, HashMap};
use std::net::{SocketAddr, TcpListener};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dbcluster_operator::databasecluster::api::types::{self, DatabaseCluster, DatabaseClusterSpec};
use dbcluster_operator::sim::{RequestRecord, SimConfig, SimServer};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ObjectMeta, PostParams, WatchEvent, WatchParams};
use parking_lot::Mutex;

const NAMESPACES: usize = 20;
const ALL_RUNNING_LIMIT: Duration = Duration::from_secs(1800);

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// User and system CPU seconds of a process (`/proc/PID/stat` fields 14 and 15).
fn cpu_seconds(pid: &str) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> =
        stat.rsplit_once(") ").map(|(_, rest)| rest.split(' ').collect()).unwrap_or_default();
    let ticks: f64 = fields.get(11..13).map_or(0.0, |f| f.iter().filter_map(|t| t.parse::<f64>().ok()).sum());
    // USER_HZ is 100 on Linux.
    ticks / 100.0
}

/// A size in KiB from `/proc/PID/status`: `VmHWM` (peak resident set) or `VmRSS` (now).
fn status_kib(pid: &str, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn free_addr() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
    listener.local_addr().expect("a bound socket has an address")
}

/// The operator under test, as a child process.
struct OperatorProcess {
    child: Child,
    metrics: SocketAddr,
}

impl OperatorProcess {
    fn start(binary: &Path, kubeconfig: &Path) -> OperatorProcess {
        let metrics = free_addr();
        let child = Command::new(binary)
            .arg("run")
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(["--workers", "4", "--metrics-addr", &metrics.to_string()])
            .args(["--health-addr", &free_addr().to_string()])
            .args(["--debug-addr", &free_addr().to_string()])
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            // A group of its own, so that `stop` reaches a wrapper's children too (a profiler
            // given as `E2E_ANCHOR` runs the operator under it).
            .process_group(0)
            .spawn()
            .expect("the operator binary starts");
        OperatorProcess { child, metrics }
    }

    fn pid(&self) -> String {
        self.child.id().to_string()
    }

    /// Reconcile passes so far, from `/metrics` (0 until it answers).
    async fn passes(&self) -> u64 {
        self.counter("controller_runtime_reconcile_total").await
    }

    /// The sum of a counter over its label sets, from `/metrics` (0 until it answers).
    async fn counter(&self, name: &str) -> u64 {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let Ok(mut stream) = tokio::net::TcpStream::connect(self.metrics).await else { return 0 };
        let request = "GET /metrics HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n";
        if stream.write_all(request.as_bytes()).await.is_err() {
            return 0;
        }
        let mut text = String::new();
        let _ = stream.read_to_string(&mut text).await;
        text.lines()
            .filter(|l| l.strip_prefix(name).is_some_and(|rest| rest.starts_with('{')))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>() as u64
    }

    /// SIGTERM to the child's process group (the operator, or a wrapper and the operator under
    /// it), then wait for the child's exit.
    fn stop(mut self) {
        if let Ok(pid) = i32::try_from(self.child.id())
            && pid > 1
        {
            // SAFETY: signalling the process group of the child this bench started (its own
            // group, led by it) and has not yet reaped.
            unsafe { libc::kill(-pid, libc::SIGTERM) };
        }
        let _ = self.child.wait();
    }
}

/// Whether a request is a write the operator made (the bench creates only the CRD, namespaces
/// and DatabaseClusters).
fn operator_write(r: &RequestRecord) -> bool {
    let write = matches!(r.verb.as_str(), "create" | "update" | "patch" | "delete" | "deletecollection");
    let bench = r.verb == "create"
        && matches!(r.resource.as_str(), "databaseclusters" | "namespaces" | "customresourcedefinitions")
        && r.subresource.is_none();
    write && !bench
}

fn by_verb_and_resource(log: &[RequestRecord]) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for r in log.iter().filter(|r| operator_write(r)) {
        let resource = match &r.subresource {
            Some(sub) => format!("{}/{sub}", r.resource),
            None => r.resource.clone(),
        };
        *counts.entry(format!("{} {resource}", r.verb)).or_default() += 1;
    }
    counts
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

/// One measured run.
struct Row {
    operator: String,
    clusters: usize,
    all_running: Duration,
    passes: u64,
    errors: u64,
    p50: Duration,
    p99: Duration,
    sim_cpu: f64,
    operator_cpu: f64,
    peak_rss_kib: u64,
    rss_at_rest_kib: u64,
    restart_peak_rss_kib: u64,
    writes: BTreeMap<String, usize>,
    watch_events: u64,
    writes_at_rest: usize,
    restart_passes: u64,
    restart_writes: usize,
    resync: Duration,
}

fn cluster(name: String, namespace: String) -> DatabaseCluster {
    DatabaseCluster {
        metadata: ObjectMeta { name: Some(name), namespace: Some(namespace), ..ObjectMeta::default() },
        spec: DatabaseClusterSpec {
            replicas: 3,
            version: "15".into(),
            storage_size: "1Gi".into(),
            ..DatabaseClusterSpec::default()
        },
        status: None,
    }
}

fn is_running(c: &DatabaseCluster) -> bool {
    c.status.as_ref().and_then(|s| s.phase).is_some_and(|p| p.as_str() == "Running")
}

/// Records when each cluster is first seen Running, from a watch of every namespace.
async fn watch_running(client: kube::Client, running: Arc<Mutex<HashMap<String, Instant>>>) {
    let api: Api<DatabaseCluster> = Api::all(client);
    let mut rv = "0".to_string();
    loop {
        let Ok(stream) = api.watch(&WatchParams::default().timeout(290), &rv).await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let mut stream = stream.boxed();
        while let Ok(Some(event)) = stream.try_next().await {
            match event {
                WatchEvent::Added(c) | WatchEvent::Modified(c) => {
                    rv = c.metadata.resource_version.clone().unwrap_or(rv);
                    if is_running(&c) {
                        let key = format!(
                            "{}/{}",
                            c.metadata.namespace.unwrap_or_default(),
                            c.metadata.name.unwrap_or_default()
                        );
                        running.lock().entry(key).or_insert_with(Instant::now);
                    }
                }
                WatchEvent::Bookmark(b) => rv = b.metadata.resource_version,
                WatchEvent::Error(_) => rv = "0".to_string(),
                WatchEvent::Deleted(_) => {}
            }
        }
    }
}

/// A simulator with the CRD and the bench's namespaces, and a kubeconfig for it in `dir`.
async fn prepare_simulator(dir: &Path) -> (SimServer, PathBuf) {
    let sim = SimServer::start_with(SimConfig::default()).await.expect("the simulator starts");
    let client = sim.client();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.create(&PostParams::default(), &types::crd()).await.expect("the CRD is accepted");
    let namespaces: Api<Namespace> = Api::all(client);
    for i in 0..NAMESPACES {
        let ns = Namespace {
            metadata: ObjectMeta { name: Some(format!("bench-{i}")), ..ObjectMeta::default() },
            ..Namespace::default()
        };
        namespaces.create(&PostParams::default(), &ns).await.expect("namespace");
    }
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(&kubeconfig, sim.kubeconfig_yaml()).expect("write the kubeconfig");
    (sim, kubeconfig)
}

/// Creates `n` clusters over the namespaces, 16 at a time; when each was created, by key.
async fn create_clusters(client: &kube::Client, n: usize) -> HashMap<String, Instant> {
    futures::stream::iter(0..n)
        .map(|i| {
            let client = client.clone();
            async move {
                let ns = format!("bench-{}", i % NAMESPACES);
                let name = format!("db-{i}");
                let api: Api<DatabaseCluster> = Api::namespaced(client, &ns);
                let at = Instant::now();
                api.create(&PostParams::default(), &cluster(name.clone(), ns.clone()))
                    .await
                    .expect("create a cluster");
                (format!("{ns}/{name}"), at)
            }
        })
        .buffer_unordered(16)
        .collect()
        .await
}

/// The operator restarted over `n` Running clusters: how long until it passed every cluster,
/// its passes, its peak RSS, and the writes it made (beyond the `before` in the log).
async fn measure_restart(
    binary: &Path,
    kubeconfig: &Path,
    sim: &SimServer,
    (label, n): (&str, usize),
    before: usize,
) -> (Duration, u64, u64, usize) {
    let restarted = OperatorProcess::start(binary, kubeconfig);
    let restart_at = Instant::now();
    while restarted.passes().await < n as u64 {
        assert!(
            restart_at.elapsed() < ALL_RUNNING_LIMIT,
            "{label}: no pass of every cluster after the restart"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let resync = restart_at.elapsed();
    // Let the passes that were queued finish before counting.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let restart_passes = restarted.passes().await;
    let restart_peak_rss_kib = status_kib(&restarted.pid(), "VmHWM");
    let restart_writes = sim.request_log().iter().filter(|r| operator_write(r)).count() - before;
    restarted.stop();
    (resync, restart_passes, restart_peak_rss_kib, restart_writes)
}

async fn measure(binary: &Path, label: &str, n: usize, rest: Duration) -> Row {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (sim, kubeconfig) = prepare_simulator(dir.path()).await;
    let client = sim.client();
    let running = Arc::new(Mutex::new(HashMap::new()));
    let watcher = tokio::spawn(watch_running(client.clone(), running.clone()));
    let self_pid = std::process::id().to_string();
    let sim_cpu_before = cpu_seconds(&self_pid);
    let operator = OperatorProcess::start(binary, &kubeconfig);
    let start = Instant::now();
    let created = create_clusters(&client, n).await;
    while running.lock().len() < n {
        assert!(
            start.elapsed() < ALL_RUNNING_LIMIT,
            "{label}: not all {n} clusters Running within the limit"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let all_running = start.elapsed();
    let sim_cpu = cpu_seconds(&self_pid) - sim_cpu_before;
    let operator_cpu = cpu_seconds(&operator.pid());
    let passes = operator.passes().await;
    let errors = operator.counter("controller_runtime_reconcile_errors_total").await;
    let log = sim.request_log();
    let writes = by_verb_and_resource(&log);
    let watch_events = sim.watch_events_sent();
    let mut times: Vec<Duration> = {
        let running = running.lock();
        created.iter().filter_map(|(k, at)| Some(running.get(k)?.duration_since(*at))).collect()
    };
    times.sort();
    let first_running = running.lock().values().min().map(|t| t.duration_since(start));
    let last_created = created.values().max().map(|t| t.duration_since(start));
    eprintln!(
        "{label} {n}: last created after {last_created:?}, first Running after {first_running:?}, all after {all_running:?}"
    );

    let before_rest = log.iter().filter(|r| operator_write(r)).count();
    let sim_cpu_rest_start = cpu_seconds(&self_pid);
    let (operator_cpu_rest_start, passes_rest_start) =
        (cpu_seconds(&operator.pid()), operator.passes().await);
    tokio::time::sleep(rest).await;
    // At rest the operator looks at each cluster with instances again every 30 s (its instances'
    // `/status`; here nothing listens at the timer kubelet's pod addresses, so each is a refused
    // connection).
    let (operator_cpu_rest, passes_rest) =
        (cpu_seconds(&operator.pid()) - operator_cpu_rest_start, operator.passes().await - passes_rest_start);
    eprintln!(
        "{label} {n}: at rest for {rest:?}: simulator CPU {:.2} s; operator CPU {operator_cpu_rest:.2} s over {passes_rest} passes",
        cpu_seconds(&self_pid) - sim_cpu_rest_start
    );
    let after_rest = sim.request_log().iter().filter(|r| operator_write(r)).count();
    let peak_rss_kib = status_kib(&operator.pid(), "VmHWM");
    let rss_at_rest_kib = status_kib(&operator.pid(), "VmRSS");
    operator.stop();

    let (resync, restart_passes, restart_peak_rss_kib, restart_writes) =
        measure_restart(binary, &kubeconfig, &sim, (label, n), after_rest).await;
    watcher.abort();
    sim.shutdown().await;
    Row {
        operator: label.to_string(),
        clusters: n,
        all_running,
        passes,
        errors,
        p50: percentile(&times, 0.5),
        p99: percentile(&times, 0.99),
        sim_cpu,
        operator_cpu,
        peak_rss_kib,
        rss_at_rest_kib,
        restart_peak_rss_kib,
        writes,
        watch_events,
        writes_at_rest: after_rest - before_rest,
        restart_passes,
        restart_writes,
        resync,
    }
}

fn print(rows: &[Row]) {
    println!(
        "\n| operator | clusters | all Running | passes (errors) | p50 | p99 | sim CPU s | operator CPU s | CPU ms/cluster | peak RSS MiB | RSS KiB/cluster: peak, at rest, restarted | writes/cluster | watch events | writes at rest | restart: passes, writes, resync |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for r in rows {
        let n = r.clusters as f64;
        let total: usize = r.writes.values().sum();
        println!(
            "| {} | {} | {:.1} s | {} ({}) | {:.2} s | {:.2} s | {:.1} | {:.2} | {:.2} | {:.1} | {:.1}, {:.1}, {:.1} | {:.1} | {} | {} | {}, {}, {:.1} s |",
            r.operator,
            r.clusters,
            r.all_running.as_secs_f64(),
            r.passes,
            r.errors,
            r.p50.as_secs_f64(),
            r.p99.as_secs_f64(),
            r.sim_cpu,
            r.operator_cpu,
            r.operator_cpu * 1000.0 / n,
            r.peak_rss_kib as f64 / 1024.0,
            r.peak_rss_kib as f64 / n,
            r.rss_at_rest_kib as f64 / n,
            r.restart_peak_rss_kib as f64 / n,
            total as f64 / n,
            r.watch_events,
            r.writes_at_rest,
            r.restart_passes,
            r.restart_writes,
            r.resync.as_secs_f64(),
        );
    }
    println!("\nWrites per cluster by verb and resource:");
    for r in rows {
        let per: Vec<String> =
            r.writes.iter().map(|(k, v)| format!("{k} {:.2}", *v as f64 / r.clusters as f64)).collect();
        println!("- {} at {}: {}", r.operator, r.clusters, per.join(", "));
    }
}

fn main() {
    // `cargo bench` passes `--bench`; this harness takes its settings from the environment.
    let sizes: Vec<usize> = std::env::var("E2E_SIZES")
        .unwrap_or_else(|_| "100,1000,5000".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let rest = Duration::from_secs(env_or("E2E_REST_SECS", 60));
    let ours = std::env::var_os("E2E_OPERATOR")
        .map_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_dbcluster-operator")), PathBuf::from);
    let anchor = std::env::var_os("E2E_ANCHOR").map(PathBuf::from);
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("a tokio runtime");
    let mut rows = Vec::new();
    for n in sizes {
        rows.push(runtime.block_on(measure(&ours, "dbcluster-operator", n, rest)));
        if let Some(anchor) = &anchor {
            rows.push(runtime.block_on(measure(anchor, "kube-runtime anchor", n, rest)));
        }
        print(&rows);
    }
}
