//! The `run` subcommand as users meet it: flag parsing, help text, one-sentence errors with a
//! non-zero exit, and a clean exit 0 on SIGTERM with the lease released (the binary itself,
//! against the simulated API server).
#![cfg(feature = "sim")]

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use clap::Parser;
use dbcluster_operator::cli::{LogFormat, RunArgs};
use dbcluster_operator::databasecluster::api::types::crd;
use dbcluster_operator::sim::SimServer;
use dbcluster_operator::sim::kubelet::addresses::{Range, allocate};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::PostParams;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

const BINARY: &str = env!("CARGO_BIN_EXE_dbcluster-operator");

fn parse(args: &[&str]) -> Result<RunArgs, clap::Error> {
    RunArgs::try_parse_from(std::iter::once("run").chain(args.iter().copied()))
}

#[test]
fn flags_parse_with_controller_runtime_like_defaults() {
    let args = parse(&[]).unwrap();
    assert_eq!(args.workers, 4);
    assert_eq!(args.metrics_addr.to_string(), "0.0.0.0:8080");
    assert_eq!(args.health_addr.to_string(), "0.0.0.0:8081");
    assert_eq!(args.debug_addr.to_string(), "127.0.0.1:8082", "debug endpoints on loopback by default");
    assert!(args.leader_elect, "on by default, so that two operators never act at once");
    assert!(!parse(&["--leader-elect=false"]).unwrap().leader_elect);
    assert!(!args.metrics_secure, "open unless asked (the Deployment asks)");
    assert_eq!(args.leader_election_id, "dbcluster-operator");
    assert_eq!(args.log_format, LogFormat::Text);
    assert_eq!(args.shutdown_timeout, Duration::from_secs(30));
    assert_eq!((args.kubeconfig, args.context, args.namespace), (None, None, None));

    let args = parse(&[
        "--kubeconfig=/tmp/kc",
        "--context",
        "kind-kind",
        "-n",
        "prod",
        "--workers",
        "8",
        "--leader-elect",
        "--leader-election-namespace",
        "ops",
        "--log-format",
        "json",
        "--shutdown-timeout",
        "1m 30s",
        "--metrics-secure",
    ])
    .unwrap();
    assert!(args.metrics_secure);
    assert_eq!(args.kubeconfig.as_deref(), Some(Path::new("/tmp/kc")));
    assert_eq!(args.context.as_deref(), Some("kind-kind"));
    assert_eq!(args.namespace.as_deref(), Some("prod"));
    assert_eq!(args.workers, 8);
    assert!(args.leader_elect);
    assert_eq!(args.leader_election_namespace.as_deref(), Some("ops"));
    assert_eq!(args.log_format, LogFormat::Json);
    assert_eq!(args.shutdown_timeout, Duration::from_secs(90));
    assert_eq!(parse(&["--shutdown-timeout", "500ms"]).unwrap().shutdown_timeout, Duration::from_millis(500));
    assert_eq!(parse(&["--shutdown-timeout", "45"]).unwrap().shutdown_timeout, Duration::from_secs(45));
    let secure = parse(&["--metrics-secure", "--metrics-cert-dir", "/etc/tls"]).unwrap();
    assert_eq!(secure.metrics_cert_dir.as_deref(), Some(Path::new("/etc/tls")));
    assert_eq!(parse(&[]).unwrap().metrics_cert_dir, None, "self-signed unless a directory is given");

    for bad in [
        &["--workers", "0"][..],
        &["--shutdown-timeout", "soon"],
        &["--log-format", "yaml"],
        &["--metrics-addr", "localhost"],
        &["--metrics-cert-dir", "/etc/tls"],
        &["--unknown"],
    ] {
        assert!(parse(bad).is_err(), "{bad:?} was accepted");
    }
}

/// With the `sim` feature (the default) the binary offers `demo`, with `run`'s endpoint flags and a
/// log file; `.ci/run` checks that the image's build (`--no-default-features`) does not.
#[tokio::test]
async fn the_default_build_offers_demo_with_endpoints_and_a_log_file() {
    let top = Command::new(BINARY).arg("--help").output().await.unwrap();
    assert!(String::from_utf8(top.stdout).unwrap().lines().any(|l| l.trim_start().starts_with("demo ")));
    let output = Command::new(BINARY).args(["demo", "--help"]).output().await.unwrap();
    assert!(output.status.success());
    let help = String::from_utf8(output.stdout).unwrap();
    for flag in
        ["--addr", "--kubeconfig-out", "--metrics-addr", "--health-addr", "--log-file", "target/demo.log"]
    {
        assert!(help.contains(flag), "demo help lacks {flag:?}:\n{help}");
    }
}

#[tokio::test]
async fn help_explains_every_flag_the_config_order_and_signals() {
    let output = Command::new(BINARY).args(["run", "--help"]).output().await.unwrap();
    assert!(output.status.success());
    let help = String::from_utf8(output.stdout).unwrap();
    for flag in [
        "--kubeconfig",
        "--context",
        "--namespace",
        "--workers",
        "--metrics-addr",
        "--health-addr",
        "--leader-elect",
        "--leader-election-namespace",
        "--leader-election-id",
        "--log-format",
        "--shutdown-timeout",
        "--metrics-secure",
        "--metrics-cert-dir",
        "RUST_LOG",
        "listens on every interface",
        "--kubeconfig, $KUBECONFIG, the in-cluster service account, ~/.kube/config",
        "SIGTERM",
    ] {
        assert!(help.contains(flag), "help lacks {flag:?}:\n{help}");
    }
}

/// Runs the binary with a clean environment and returns (exit code, stderr).
async fn run_binary(args: &[&str], home: &Path) -> (Option<i32>, String) {
    let output = Command::new(BINARY)
        .arg("run")
        .args(args)
        .args(["--metrics-addr", "127.0.0.1:0", "--health-addr", "127.0.0.1:0"])
        .env_remove("KUBECONFIG")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("KUBERNETES_SERVICE_PORT")
        .env_remove("RUST_LOG")
        .env("HOME", home)
        .output()
        .await
        .unwrap();
    (output.status.code(), String::from_utf8(output.stderr).unwrap())
}

/// The stderr of a failed start is exactly one line, `error: …`.
fn one_error_line(stderr: &str) -> &str {
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "expected one line, got:\n{stderr}");
    lines[0].strip_prefix("error: ").unwrap_or_else(|| panic!("not an error line: {stderr}"))
}

fn kubeconfig_for(dir: &Path, server: &str) -> String {
    let yaml = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {server}\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\ncurrent-context: c\nusers:\n- name: u\n  user: {{}}\n"
    );
    let path = dir.join("kubeconfig");
    std::fs::write(&path, yaml).unwrap();
    path.to_str().unwrap().to_string()
}

#[tokio::test]
async fn an_unreachable_cluster_is_one_sentence_and_a_non_zero_exit() {
    let dir = tempfile::tempdir().unwrap();
    // An address leased for this test alone, where nothing listens (a port found free on
    // 127.0.0.1 could be taken by another listener before the binary connects).
    let lease = allocate(Range::Pods).unwrap();
    let closed = std::net::SocketAddr::from((lease.ip, 80));
    let kubeconfig = kubeconfig_for(dir.path(), &format!("http://{closed}"));
    let (code, stderr) = run_binary(&["--kubeconfig", &kubeconfig], dir.path()).await;
    assert_eq!(code, Some(1));
    let message = one_error_line(&stderr);
    assert!(
        message.starts_with(&format!("cannot reach the Kubernetes API server at http://{closed}:")),
        "{message}"
    );
    assert!(message.contains("refused") && message.ends_with("that the cluster is running"), "{message}");
}

#[tokio::test]
async fn missing_configuration_says_where_it_looked() {
    let home = tempfile::tempdir().unwrap();
    let (code, stderr) = run_binary(&[], home.path()).await;
    assert_eq!(code, Some(1));
    assert!(one_error_line(&stderr).starts_with("no cluster configured: pass --kubeconfig, set $KUBECONFIG"));

    let (code, stderr) = run_binary(&["--kubeconfig", "/nonexistent/kubeconfig"], home.path()).await;
    assert_eq!(code, Some(1));
    assert!(one_error_line(&stderr).starts_with("cannot use the kubeconfig /nonexistent/kubeconfig: "));

    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = kubeconfig_for(dir.path(), "http://127.0.0.1:1");
    let (code, stderr) = run_binary(&["--kubeconfig", &kubeconfig, "--context", "nope"], home.path()).await;
    assert_eq!(code, Some(1));
    assert!(one_error_line(&stderr).contains("nope"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_crd_says_to_apply_it() {
    let sim = SimServer::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = kubeconfig_for(dir.path(), &sim.base_url());
    let (code, stderr) = run_binary(&["--kubeconfig", &kubeconfig], dir.path()).await;
    assert_eq!(code, Some(1));
    let message = one_error_line(&stderr);
    assert!(message.ends_with("run `kubectl apply -f manifests/crd.yaml`"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_certificate_says_which_file() {
    let sim = SimServer::start().await.unwrap();
    let crds: Api<CustomResourceDefinition> = Api::all(sim.client());
    crds.create(&PostParams::default(), &crd()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("kubeconfig"), sim.kubeconfig_yaml()).unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    let args = [
        "--kubeconfig",
        kubeconfig.to_str().unwrap(),
        "--metrics-secure",
        "--metrics-cert-dir",
        "/nonexistent",
    ];
    let (code, stderr) = run_binary(&args, dir.path()).await;
    assert_eq!(code, Some(1));
    let last = stderr.lines().last().unwrap_or_default();
    assert_eq!(
        last,
        "error: cannot serve TLS (--metrics-secure): cannot read /nonexistent/tls.crt: No such file or directory (os error 2)"
    );
}

/// A simulated cluster with the CRD, its kubeconfig in a temporary directory, and `run` started on
/// it with loopback endpoints, `args` and stderr piped.
async fn run_on_sim(args: &[&str]) -> (SimServer, tempfile::TempDir, tokio::process::Child) {
    let sim = SimServer::start().await.unwrap();
    let crds: Api<CustomResourceDefinition> = Api::all(sim.client());
    crds.create(&PostParams::default(), &crd()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("kubeconfig"), sim.kubeconfig_yaml()).unwrap();
    let child = Command::new(BINARY)
        .arg("run")
        .arg("--kubeconfig")
        .arg(dir.path().join("kubeconfig"))
        .args([
            "--metrics-addr",
            "127.0.0.1:0",
            "--health-addr",
            "127.0.0.1:0",
            "--debug-addr",
            "127.0.0.1:0",
        ])
        .args(args)
        .env("RUST_LOG", "info")
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    (sim, dir, child)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_releases_the_lease_and_exits_zero() {
    let (sim, _dir, mut child) =
        run_on_sim(&["--log-format", "json", "--leader-elect", "--leader-election-id", "cli-test"]).await;
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    // The kubeconfig's namespace (`default`) holds the lease; wait until this replica leads.
    while let Some(line) = lines.next_line().await.unwrap() {
        let entry: serde_json::Value =
            serde_json::from_str(&line).unwrap_or_else(|_| panic!("not JSON: {line}"));
        if entry["message"] == "became leader" {
            break;
        }
    }
    let leases: Api<Lease> = Api::namespaced(sim.client(), "default");
    let holder = leases.get("cli-test").await.unwrap().spec.unwrap().holder_identity;
    assert!(holder.is_some());

    let pid = child.id().unwrap().to_string();
    assert!(Command::new("kill").args(["-TERM", &pid]).status().await.unwrap().success());
    let status = tokio::time::timeout(Duration::from_secs(20), child.wait()).await.unwrap().unwrap();
    assert_eq!(status.code(), Some(0));
    let mut rest = Vec::new();
    while let Some(line) = lines.next_line().await.unwrap() {
        rest.push(line);
    }
    assert!(rest.iter().any(|l| l.contains("released the lease")), "{rest:#?}");
    let spec = leases.get("cli-test").await.unwrap().spec.unwrap();
    assert_eq!(spec.holder_identity, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_logs_to_a_pipe_carry_no_colour_codes() {
    let (_sim, _dir, mut child) = run_on_sim(&["--log-format", "text"]).await;
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut seen = Vec::new();
    let wait = async {
        while let Some(line) = lines.next_line().await.unwrap() {
            let done = line.contains("serving /healthz");
            seen.push(line);
            if done {
                break;
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(20), wait).await.expect("the startup log lines");
    assert!(seen.iter().any(|l| l.contains(" INFO ")), "{seen:#?}");
    assert!(seen.iter().all(|l| !l.contains('\x1b')), "no ANSI escapes: {seen:#?}");
    child.kill().await.unwrap();
}
