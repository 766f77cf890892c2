//! `dbcluster-operator demo`, the binary a new user runs: it prints how to point kubectl at it and
//! writes the kubeconfig; the operator runs in process against the simulated cluster, so the live
//! table shows the sample reach Running 3/3; Ctrl-C stops it cleanly.
#![cfg(feature = "sim")]

use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};

#[tokio::test]
async fn the_demo_shows_the_sample_reach_running_then_stops_on_ctrl_c() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("demo.kubeconfig");
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_dbcluster-operator"))
        .args(["demo", "--kubeconfig-out", kubeconfig.to_str().unwrap()])
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let rows = async {
        let mut rows = Vec::new();
        let mut told_how_to_use_kubectl = false;
        while let Some(line) = lines.next_line().await.unwrap() {
            told_how_to_use_kubectl |= line.contains("export KUBECONFIG=");
            if let Some(row) = line.strip_prefix("production-postgres") {
                let cells: Vec<String> = row.split_whitespace().map(String::from).collect();
                let running = cells.len() >= 3 && cells[..3] == ["Running", "3", "15.4"];
                rows.push(cells);
                if running {
                    assert!(told_how_to_use_kubectl, "the instructions come before the table");
                    return rows;
                }
            }
        }
        panic!("the demo ended before Running 3/3: {rows:?}");
    };
    let rows =
        tokio::time::timeout(Duration::from_secs(60), rows).await.expect("Running 3/3 within a minute");
    assert!(rows.iter().any(|r| r.first().map(String::as_str) == Some("Provisioning")), "{rows:?}");
    assert!(kubeconfig.exists());

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
