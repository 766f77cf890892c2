//! The `demo` command: in process (start, kubeconfig usable by kubectl, the table) and as the
//! binary a new user runs (prints how to use kubectl, shows the sample, stops cleanly on Ctrl-C).

use std::net::SocketAddr;
use std::process::Stdio;

use dbcluster_operator::sim::demo::{Demo, DemoOptions};
use tokio::io::{AsyncBufReadExt, BufReader};

#[tokio::test]
async fn the_demo_installs_the_crd_and_sample_and_kubectl_sees_them() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("nested/demo.kubeconfig");
    let options =
        DemoOptions { addr: SocketAddr::from(([127, 0, 0, 1], 0)), kubeconfig_out: kubeconfig.clone() };
    let demo = Demo::start(&options).await.unwrap();
    assert!(demo.instructions(&kubeconfig).contains(&format!("export KUBECONFIG={}", kubeconfig.display())));

    let out = tokio::process::Command::new("kubectl")
        .args(["get", "dbc"])
        .env("KUBECONFIG", &kubeconfig)
        .env("HOME", dir.path())
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("production-postgres"), "{stdout}");

    let mut table = Vec::new();
    demo.watch_until(async {}, &mut table).await.unwrap();
    let table = String::from_utf8(table).unwrap();
    let mut lines = table.lines();
    let header: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["NAME", "PHASE", "READY", "VERSION", "AGE"]);
    assert!(lines.next().unwrap().starts_with("production-postgres"));
}

#[tokio::test]
async fn the_demo_binary_prints_instructions_and_the_sample_then_stops_on_ctrl_c() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("demo.kubeconfig");
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_dbcluster-operator"))
        .args(["demo", "--kubeconfig-out", kubeconfig.to_str().unwrap()])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut seen = Vec::new();
    while let Some(line) = lines.next_line().await.unwrap() {
        let done = line.starts_with("production-postgres");
        seen.push(line);
        if done {
            break;
        }
    }
    assert!(seen.iter().any(|l| l.contains("kubectl get databaseclusters")), "{seen:?}");
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
