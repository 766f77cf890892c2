//! `dbcluster-operator demo`, the binary a new user runs: it prints how to point kubectl at it,
//! where the operator's endpoints and log are, and writes the kubeconfig; the operator runs in
//! process against the simulated cluster under the same manager as `run`, so the live table shows
//! the sample reach Running 3/3 while `/metrics`, `/healthz`, `/readyz` and `/debug/*` answer and
//! the log file fills (text, no colours), and the `status` command it prints shows the cluster
//! with the operator's view; Ctrl-C stops it cleanly.
#![cfg(feature = "sim")]

mod common;

use std::net::SocketAddr;
use std::process::Stdio;
use std::time::Duration;

use common::http_get;
use tokio::io::{AsyncBufReadExt, BufReader};

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
        .args(["demo", "--kubeconfig-out", kubeconfig.to_str().unwrap()])
        .args(["--log-file", log_file.to_str().unwrap()])
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let output = async {
        let (mut before_table, mut rows) = (Vec::new(), Vec::new());
        while let Some(line) = lines.next_line().await.unwrap() {
            if let Some(row) = line.strip_prefix("default") {
                // NAMESPACE NAME PHASE READY VERSION AGE
                let cells: Vec<String> = row.split_whitespace().map(String::from).collect();
                let running =
                    cells.len() >= 4 && cells[..4] == ["production-postgres", "Running", "3/3", "15.4"];
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
    let (before_table, rows) =
        tokio::time::timeout(Duration::from_secs(60), output).await.expect("Running 3/3 within a minute");
    assert!(rows.iter().any(|r| r.get(1).map(String::as_str) == Some("Provisioning")), "{rows:?}");
    let unique: std::collections::HashSet<_> = rows.iter().map(|r| r[..r.len() - 1].to_vec()).collect();
    assert_eq!(unique.len(), rows.len(), "no row repeats the one before but for AGE: {rows:?}");
    assert!(kubeconfig.exists());
    assert!(before_table.iter().any(|l| l.contains("export KUBECONFIG=")), "{before_table:?}");
    let log_line = format!("Operator log:     {}", log_file.display());
    assert!(before_table.contains(&log_line), "{before_table:?}");

    // The endpoints `run` serves, at the addresses printed.
    let metrics = address_after(&before_table, "Operator metrics:");
    let probes = address_after(&before_table, "Operator probes:");
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

    // The operator's log, in the file named at start, as plain text.
    let log = std::fs::read_to_string(&log_file).unwrap();
    assert!(log.contains("serving /metrics"), "{log}");
    assert!(log.contains("INFO"), "{log}");
    assert!(!log.contains('\u{1b}'), "no ANSI colours: {log}");

    // The `status` command printed at start works against the demo, the operator's view included.
    let command = before_table.iter().find_map(|l| l.strip_prefix("Status:")).expect("a Status: line");
    let words: Vec<&str> = command.split_whitespace().collect();
    assert_eq!(words[..2], ["dbcluster-operator", "status"], "{command}");
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_dbcluster-operator"))
        .args(&words[1..])
        .output()
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{text} {}", String::from_utf8_lossy(&output.stderr));
    assert!(
        text.contains("Cluster:   default/production-postgres") && text.contains("Ready:     3/3"),
        "{text}"
    );
    assert!(text.contains("StatefulSet  production-postgres") && text.contains("ready 3/3"), "{text}");
    assert!(text.contains("state: idle") || text.contains("state: waiting"), "the operator's view: {text}");

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
