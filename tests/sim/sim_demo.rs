//! The `demo` command in process: start, a kubeconfig kubectl can use, the table. The binary a new
//! user runs is driven by tests/e2e_demo.rs.
#![cfg(feature = "sim")]

use std::net::SocketAddr;

use dbcluster_operator::cli::demo::{Demo, DemoOptions};

#[tokio::test]
async fn the_demo_installs_the_crd_and_sample_and_kubectl_sees_them() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("nested/demo.kubeconfig");
    let options = DemoOptions {
        addr: SocketAddr::from(([127, 0, 0, 1], 0)),
        kubeconfig_out: kubeconfig.clone(),
        kubernetes_version: Default::default(),
        kubelet: dbcluster_operator::sim::KubeletKind::Timer,
    };
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

    // The view the key `s` prints: the status command's, framed; no operator runs here.
    let view = demo.status_view("default", "production-postgres", "http://127.0.0.1:9").await;
    assert!(view.starts_with("── status of default/production-postgres"), "{view}");
    assert!(view.contains("Cluster:   default/production-postgres"), "{view}");
    assert!(view.contains("operator unreachable ("), "{view}");
    let missing = demo.status_view("default", "nope", "http://127.0.0.1:9").await;
    assert!(missing.contains("DatabaseCluster default/nope not found"), "{missing}");

    let mut table = Vec::new();
    demo.watch_until(async {}, &mut table).await.unwrap();
    let table = String::from_utf8(table).unwrap();
    let mut lines = table.lines();
    let header: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["NAMESPACE", "NAME", "PHASE", "READY", "STATUS", "PRIMARY", "VERSION", "AGE"]);
    let row: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(row[..2], ["default", "production-postgres"], "{row:?}");
}
