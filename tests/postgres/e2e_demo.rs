//! `dbcluster-operator demo`, the binary a new user runs: it prints how to point kubectl at it,
//! where the operator's endpoints and log are, and writes the kubeconfig; the operator runs in
//! process against the simulated cluster under the same manager as `run`, so the live table shows
//! the sample reach Running 3/3 while `/metrics`, `/healthz`, `/readyz` and `/debug/*` answer and
//! the log file fills (text, no colours), and the `status` command it prints shows the cluster
//! with the operator's view, as does the key `s` in the demo itself; Ctrl-C stops it cleanly. By default on a host with
//! root and PostgreSQL 15 it runs the sample as real PostgreSQL (the process kubelet) and prints
//! how to connect with `psql`, which works as printed, and `status` shows each standby streaming
//! with its lag.
#![cfg(feature = "sim")]

use crate::common;

use std::net::SocketAddr;
use std::process::Stdio;
use std::time::Duration;

use common::http_get;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

/// The address of the first `http://ADDR/...` on the line starting with `label`.
fn address_after(lines: &[String], label: &str) -> SocketAddr {
    let line = lines.iter().find(|l| l.starts_with(label)).unwrap_or_else(|| panic!("{label} in {lines:?}"));
    let url = line.split_whitespace().find_map(|w| w.strip_prefix("http://")).unwrap();
    url.split('/').next().unwrap().parse().unwrap()
}

#[tokio::test]
async fn the_demo_shows_the_sample_reach_running_serves_the_endpoints_and_stops_on_ctrl_c() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("demo.kubeconfig");
    let log_file = dir.path().join("logs/demo.log");
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_dbcluster-operator"))
        .args(["demo", "--kubelet", "timer", "--kubeconfig-out", kubeconfig.to_str().unwrap()])
        .args(["--log-file", log_file.to_str().unwrap()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut keys = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let output = async {
        let (mut before_table, mut rows) = (Vec::new(), Vec::new());
        while let Some(line) = lines.next_line().await.unwrap() {
            if let Some(row) = line.strip_prefix("default") {
                // NAMESPACE NAME PHASE READY STATUS PRIMARY VERSION AGE (empty cells vanish)
                let cells: Vec<String> = row.split_whitespace().map(String::from).collect();
                let running = cells.len() >= 3
                    && cells[..3] == ["production-postgres", "Running", "3/3"]
                    && cells.iter().any(|c| c == "15.4");
                rows.push(cells);
                if running {
                    return (before_table, rows);
                }
            } else if rows.is_empty() {
                before_table.push(line);
            }
        }
        panic!("the demo ended before Running 3/3: {before_table:?} {rows:?}");
    };
    let (before_table, rows) = common::within_limit("Running 3/3", Duration::from_secs(60), output).await;
    assert!(rows.iter().any(|r| r.get(1).map(String::as_str) == Some("Provisioning")), "{rows:?}");
    let unique: std::collections::HashSet<_> = rows.iter().map(|r| r[..r.len() - 1].to_vec()).collect();
    assert_eq!(unique.len(), rows.len(), "no row repeats the one before but for AGE: {rows:?}");
    assert!(kubeconfig.exists());
    assert_eq!(
        before_table.first().map(String::as_str),
        Some("Kubelet: the timer kubelet, as asked: pods turn Ready on a timer and run nothing")
    );
    assert!(before_table.iter().any(|l| l.contains("export KUBECONFIG=")), "{before_table:?}");
    let log_line = format!("Operator log:     {}", log_file.display());
    assert!(before_table.contains(&log_line), "{before_table:?}");

    assert_endpoints_as_printed(&before_table).await;

    // The operator's log, in the file named at start, as plain text.
    let log = std::fs::read_to_string(&log_file).unwrap();
    assert!(log.contains("serving /metrics"), "{log}");
    assert!(log.contains("INFO"), "{log}");
    assert!(!log.contains('\u{1b}'), "no ANSI colours: {log}");

    // The demo's operator holds the Lease `run` takes, so a second operator pointed at the demo
    // waits as a standby and says so instead of acting beside it.
    assert!(log.contains("became leader"), "{log}");
    a_run_beside_the_demo_waits_as_a_standby(&kubeconfig).await;

    assert_status_command_as_printed(&before_table).await;

    // A key press: `s` prints the sample's status between the rows, the operator's view included.
    keys.write_all(b"s").await.unwrap();
    let block = common::within_limit("the status view after `s`", Duration::from_secs(30), async {
        let mut block = Vec::new();
        while let Some(line) = lines.next_line().await.unwrap() {
            if line.starts_with("── status of default/production-postgres") || !block.is_empty() {
                let end = !block.is_empty() && !line.is_empty() && line.chars().all(|c| c == '─');
                block.push(line);
                if end {
                    return block;
                }
            }
        }
        panic!("the demo ended before the status view: {block:?}");
    })
    .await;
    let block = block.join("\n");
    assert!(block.contains("Phase:     Running") && block.contains("Ready:     3/3"), "{block}");
    assert!(block.contains("Operator:") && block.contains("last pass triggered by: "), "{block}");
    let header = next_line(&mut lines).await;
    assert!(header.starts_with("NAMESPACE"), "the table's header again after the view: {header}");

    let pid = child.id().unwrap().to_string();
    let signalled = tokio::process::Command::new("kill").args(["-INT", &pid]).status().await.unwrap();
    assert!(signalled.success());
    let mut rest = Vec::new();
    while let Some(line) = lines.next_line().await.unwrap() {
        rest.push(line);
    }
    assert!(child.wait().await.unwrap().success());
    assert_eq!(rest.last().map(String::as_str), Some("stopped"), "{rest:?}");
}

/// How long the standbys may take to show as streaming once the cluster is Running, and how often
/// `status` is run meanwhile (each run is a process and a few API calls).
const REPLICATION_LIMIT: Duration = Duration::from_secs(60);
const STATUS_POLL: Duration = Duration::from_millis(500);

/// The next line of the demo's output, within 30 s.
async fn next_line(lines: &mut tokio::io::Lines<BufReader<tokio::process::ChildStdout>>) -> String {
    let next = common::within_limit("the next line", Duration::from_secs(30), lines.next_line()).await;
    next.unwrap().expect("a line")
}

/// The resident set size of process `pid`, in kB.
fn rss_kb(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// Runs `command` with bash, kubectl pointed at the demo; its stdout, or its stderr on failure.
fn shell(command: &str, kubeconfig: &std::path::Path, home: &std::path::Path) -> Result<String, String> {
    let out = std::process::Command::new("bash")
        .args(["-c", command])
        .env("KUBECONFIG", kubeconfig)
        .env("HOME", home)
        .env("PGCONNECT_TIMEOUT", "5")
        .output()
        .unwrap();
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn by_default_the_demo_runs_real_postgres_and_prints_how_to_connect_with_psql() {
    common::postgres::require_postgres();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("demo.kubeconfig");
    let log_file = dir.path().join("demo.log");
    let started = std::time::Instant::now();
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_dbcluster-operator"))
        .args(["demo", "--kubeconfig-out", kubeconfig.to_str().unwrap()])
        .args(["--log-file", log_file.to_str().unwrap()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let pid = child.id().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut seen = Vec::new();
    let mut rss_at_first_row = None;
    let reading = async {
        while let Some(line) = lines.next_line().await.unwrap() {
            // NAMESPACE NAME PHASE READY STATUS PRIMARY VERSION AGE
            let cells: Vec<&str> = line.split_whitespace().collect();
            if cells.starts_with(&["default", "production-postgres"]) && rss_at_first_row.is_none() {
                rss_at_first_row = Some(rss_kb(pid));
            }
            let running = cells.starts_with(&["default", "production-postgres", "Running", "3/3"]);
            seen.push(line);
            if running {
                return (started.elapsed(), rss_kb(pid));
            }
        }
        panic!("the demo ended before Running 3/3: {seen:?}");
    };
    let (elapsed, rss_running) =
        common::within_limit("Running 3/3 with real PostgreSQL", common::postgres::REAL_WAIT, reading).await;
    let rss_start = rss_at_first_row.unwrap();
    // The README's figures (run with --nocapture).
    eprintln!(
        "demo: Running 3/3 after {elapsed:.1?}; demo process RSS {} kB at the first row, {rss_running} kB at Running 3/3 ({} kB per instance)",
        rss_start,
        rss_running.saturating_sub(rss_start) / 3
    );
    let first = seen.first().unwrap();
    assert!(first.starts_with("Kubelet: the process kubelet: pods run as local processes"), "{seen:?}");

    // Once Running, how to connect, as a command line to paste.
    let command = within_lines(&mut lines, &mut seen, |l| l.trim_start().starts_with("PGPASSWORD=")).await;
    assert!(seen.iter().any(|l| l.starts_with("Connect with psql from this host")), "{seen:?}");
    let services = within_lines(&mut lines, &mut seen, |l| l.starts_with("Services from this host:")).await;
    for service in
        ["production-postgres-rw 127.", "production-postgres-ro 127.", "production-postgres-r 127."]
    {
        assert!(services.contains(service), "every Service's address: {services}");
    }
    let command = command.trim().to_owned();
    assert!(
        command.contains("kubectl get secret production-postgres-app") && command.contains("base64 -d"),
        "{command}"
    );
    let home = dir.path();
    assert_eq!(shell(&format!("{command} -X -tA -c 'select 1'"), &kubeconfig, home), Ok("1".into()));

    // The password reaches psql through kubectl, never the demo's output or log.
    let password = shell(
        "kubectl get secret production-postgres-app -o jsonpath='{.data.password}' | base64 -d",
        &kubeconfig,
        home,
    )
    .unwrap();
    assert!(password.len() >= 16, "a generated password");
    let log = std::fs::read_to_string(&log_file).unwrap();
    assert!(!log.contains(&password), "the password is not in the log");
    assert!(!seen.iter().any(|l| l.contains(&password)), "the password is not printed");
    assert!(log.contains("kubelet chosen"), "{log}");

    let text = await_standbys_streaming_in_status(&seen).await;
    assert!(text.lines().any(|l| l.contains(" primary ") && l.contains(" lag=-")), "{text}");

    signal_and_finish(&mut child, lines).await;
}

/// `run` with the demo's kubeconfig logs that another operator holds the lease and that it
/// waits, and it never becomes leader while the demo runs.
async fn a_run_beside_the_demo_waits_as_a_standby(kubeconfig: &std::path::Path) {
    let mut run = tokio::process::Command::new(env!("CARGO_BIN_EXE_dbcluster-operator"))
        .args(["run", "--kubeconfig", kubeconfig.to_str().unwrap()])
        .args([
            "--metrics-addr",
            "127.0.0.1:0",
            "--debug-addr",
            "127.0.0.1:0",
            "--health-addr",
            "127.0.0.1:0",
        ])
        .env("RUST_LOG", "info")
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut log = BufReader::new(run.stderr.take().unwrap()).lines();
    let mut seen = Vec::new();
    let waiting = async {
        while let Some(line) = log.next_line().await.unwrap() {
            seen.push(line.clone());
            if line.contains("waiting as a standby") {
                return line;
            }
        }
        panic!("run ended first: {seen:?}");
    };
    let line = common::within_limit("run to wait as a standby", Duration::from_secs(30), waiting).await;
    assert!(line.contains("holder="), "names the operator that holds the lease: {line}");
    assert!(!seen.iter().any(|l| l.contains("became leader")), "{seen:?}");
    run.kill().await.unwrap();
}

/// Reads lines (recording them in `seen`) until one matches; that line.
async fn within_lines(
    lines: &mut tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
    seen: &mut Vec<String>,
    matches: impl Fn(&str) -> bool,
) -> String {
    let found = async {
        while let Some(line) = lines.next_line().await.unwrap() {
            seen.push(line.clone());
            if matches(&line) {
                return line;
            }
        }
        panic!("the demo ended first: {seen:?}");
    };
    common::within_limit("the line", common::postgres::REAL_WAIT, found).await
}

/// SIGINT, then the demo prints `stopped` and exits 0.
async fn signal_and_finish(
    child: &mut tokio::process::Child,
    mut lines: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
) {
    let pid = child.id().unwrap().to_string();
    let signalled = tokio::process::Command::new("kill").args(["-INT", &pid]).status().await.unwrap();
    assert!(signalled.success());
    let mut rest = Vec::new();
    let finished = async {
        while let Some(line) = lines.next_line().await.unwrap() {
            rest.push(line);
        }
        child.wait().await.unwrap()
    };
    let status = common::within_limit("the demo to stop", common::postgres::REAL_WAIT, finished).await;
    assert!(status.success());
    assert_eq!(rest.last().map(String::as_str), Some("stopped"), "{rest:?}");
}

/// The endpoints `run` serves, at the addresses printed before the table.
async fn assert_endpoints_as_printed(before_table: &[String]) {
    let metrics = address_after(before_table, "Operator metrics:");
    let probes = address_after(before_table, "Operator probes:");
    assert!(metrics.ip().is_loopback() && metrics.port() != 0, "{metrics}");
    assert_eq!(http_get(probes, "/healthz").await.0, 200);
    assert_eq!(http_get(probes, "/readyz").await.0, 200);
    let (status, _, body) = http_get(metrics, "/metrics").await;
    assert_eq!(status, 200);
    assert!(body.contains("controller_runtime_reconcile_total{controller=\"databasecluster\""), "{body}");
    let (_, _, queue) = http_get(metrics, "/debug/queue").await;
    assert!(queue.contains("default/production-postgres"), "{queue}");
    let (_, _, cache) = http_get(metrics, "/debug/cache").await;
    assert!(cache.contains("databaseclusters"), "{cache}");
}

/// The `status` command printed at start works against the demo, the operator's view included.
async fn assert_status_command_as_printed(before_table: &[String]) {
    let command = before_table.iter().find_map(|l| l.strip_prefix("Status:")).expect("a Status: line");
    let words: Vec<&str> = command.split_whitespace().collect();
    assert_eq!(words[1], "status", "{command}");
    assert!(
        std::path::Path::new(words[0]).is_file(),
        "the program's own path, runnable as printed: {command}"
    );
    let output = tokio::process::Command::new(words[0]).args(&words[1..]).output().await.unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{text} {}", String::from_utf8_lossy(&output.stderr));
    assert!(
        text.contains("Cluster:   default/production-postgres") && text.contains("Ready:     3/3"),
        "{text}"
    );
    assert!(text.contains("StatefulSet  production-postgres") && text.contains("ready 3/3"), "{text}");
    assert!(text.contains("state: idle") || text.contains("state: waiting"), "the operator's view: {text}");
}

/// Runs the `status` command printed at start (in `seen`) until it shows both standbys
/// streaming from the primary, with their lag in bytes (the operator reads it from the
/// primary's `pg_stat_replication`); its output.
async fn await_standbys_streaming_in_status(seen: &[String]) -> String {
    let status = seen.iter().find_map(|l| l.strip_prefix("Status:")).expect("a Status: line");
    let words: Vec<String> = status.split_whitespace().skip(1).map(String::from).collect();
    common::eventually_every("two standbys streaming in `status`", REPLICATION_LIMIT, STATUS_POLL, || {
        let words = words.clone();
        async move {
            let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_dbcluster-operator"))
                .args(&words)
                .output()
                .await
                .unwrap();
            let text = String::from_utf8_lossy(&output.stdout).into_owned();
            let streaming =
                text.lines().filter(|l| l.contains(" replica ") && l.contains(" B (streaming")).count();
            if streaming == 2 { Ok(text) } else { Err(text) }
        }
    })
    .await
}
