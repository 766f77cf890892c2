//! `kubectl dbc psql` on real PostgreSQL: with the operator running a one-instance cluster on the
//! process kubelet, the plugin (installed as `kubectl-dbc` on `PATH`, run by kubectl 1.30+) opens
//! `psql` in the primary through `kubectl exec`, as the superuser over the pod's local socket
//! (its `PGHOST` and `PGUSER`), and prints what psql prints; psql's failure is the plugin's.
#![cfg(feature = "sim")]

use crate::common;

use std::process::Stdio;

use common::postgres::*;
use common::*;
use kube::api::{Patch, PatchParams};

const NAME: &str = "production-postgres";

/// `kubectl dbc ARGS` with the plugin from `bin` on `PATH` (stdin not a terminal).
async fn kubectl_dbc(
    cluster: &TestCluster,
    home: &std::path::Path,
    bin: &std::path::Path,
    args: &[&str],
) -> std::process::Output {
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let run =
        kubectl_command(cluster, home).arg("dbc").args(args).env("PATH", path).stdin(Stdio::null()).output();
    within_limit("kubectl dbc to end", REAL_WAIT, run).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_dbc_psql_runs_psql_in_the_primary_as_the_superuser() {
    let cluster = process_cluster().await;
    let _operator = cluster.start_operator().await;
    let mut db = sample();
    db.spec.replicas = 1;
    cluster.clusters().patch(NAME, &PatchParams::apply("kubectl"), &Patch::Apply(&db)).await.unwrap();
    let running = await_streaming(&cluster, NAME, 1, None).await;
    let primary = running.status.and_then(|s| s.current_primary).unwrap();

    let (home, bin) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let install = tokio::process::Command::new(env!("CARGO_BIN_EXE_dbcluster-operator"))
        .args(["install-plugin", "--dir", bin.path().to_str().unwrap()])
        .output()
        .await
        .unwrap();
    assert!(install.status.success(), "{}", String::from_utf8_lossy(&install.stderr));

    let sql = "select current_user, 1, inet_server_addr() is null";
    let out = kubectl_dbc(&cluster, home.path(), bin.path(), &["psql", NAME, "--", "-tA", "-c", sql]).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(stdout.trim(), "postgres|1|t", "the superuser, over the local socket, in {primary}");

    let out =
        kubectl_dbc(&cluster, home.path(), bin.path(), &["psql", NAME, "--", "-c", "select nope"]).await;
    assert!(!out.status.success(), "psql's failure is the plugin's");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("column \"nope\" does not exist"), "{stderr}");
}
