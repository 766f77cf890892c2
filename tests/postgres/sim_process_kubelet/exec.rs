//! `kubectl exec` (kubectl 1.30+, WebSocket `v5.channel.k8s.io`) against the process kubelet:
//! the command runs in the container as its own processes do, stdin reaches it, stdout, stderr
//! and the exit code come back; a terminal with `-t`; the apiserver's refusals and RBAC's.

use super::*;

use dbcluster_operator::sim::version::KubernetesVersion;
use dbcluster_operator::sim::{KubeletKind, RequestRecord, SimConfig};
use std::process::Stdio;
use tokio::io::AsyncWriteExt;

/// `kubectl exec` with `stdin` written then closed: (exit code, stdout, stderr).
async fn exec(cluster: &TestCluster, args: &[&str], stdin: &[u8]) -> (i32, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let mut child = kubectl_command(cluster, dir.path())
        .arg("exec")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    input.write_all(stdin).await.unwrap();
    drop(input);
    let out = within_limit("kubectl exec to end", REAL_WAIT, child.wait_with_output()).await.unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code().unwrap_or(-1), text(&out.stdout), text(&out.stderr))
}

async fn running_shell(cluster: &TestCluster) {
    let pods = create_pod(
        cluster,
        "shell",
        json!({
            "securityContext": {"runAsUser": 1234, "runAsGroup": 2345},
            // `sleep` as PID 1 ignores SIGTERM: a deletion takes the whole grace period.
            "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": "main", "image": "postgres:15", "workingDir": "/scratch",
                "command": ["sleep", "infinity"],
                "env": [{"name": "WHO", "value": "the shell"}, {"name": "GREETING", "value": "hello from $(WHO)"}],
                "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}],
            }],
            "volumes": [{"name": "scratch", "emptyDir": {}}],
        }),
    )
    .await;
    await_pod(&pods, "shell", "shell Ready", ready).await;
}

/// A process cluster whose API server says it is `1.<minor>`: the machine's kubectl dispatcher
/// then runs kubectl 1.<minor> against it (1.28 speaks SPDY, 1.30+ WebSocket v5).
async fn cluster_of(minor: u32) -> TestCluster {
    require_postgres();
    let kubernetes_version = KubernetesVersion::new(minor);
    TestCluster::start_with(SimConfig {
        kubelet: KubeletKind::Process,
        kubernetes_version,
        ..SimConfig::default()
    })
    .await
}

/// kubelet `exec` rules 1, 4 and 5; `sim::exec` rules 2–4; `session` rules 1–4: over SPDY
/// (kubectl 1.28, a POST: `create`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_1_28_execs_over_spdy() {
    let cluster = cluster_of(28).await;
    kubectl_exec_runs_in_the_container(&cluster, "create").await;
}

/// The same over WebSocket `v5.channel.k8s.io` (kubectl 1.32, a GET: `get`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_1_32_execs_over_websocket() {
    let cluster = cluster_of(32).await;
    kubectl_exec_runs_in_the_container(&cluster, "get").await;
}

/// stdin reaches the command, stdout, stderr and the exit code come back, the command has the
/// container's environment, user and directory; refusals read as the apiserver's; the request
/// log has `verb` on `pods/exec`.
async fn kubectl_exec_runs_in_the_container(cluster: &TestCluster, verb: &str) {
    running_shell(cluster).await;
    let (code, out, err) = exec(cluster, &["-i", "shell", "--", "cat"], b"line one\nline two\n").await;
    assert_eq!((code, out.as_str(), err.as_str()), (0, "line one\nline two\n", ""), "stdin reaches cat");

    let script = "echo out; echo err >&2; exit 3";
    let (code, out, err) = exec(cluster, &["shell", "--", "sh", "-c", script], b"").await;
    assert_eq!((code, out.as_str()), (3, "out\n"), "{err}");
    assert!(err.starts_with("err\n") && err.contains("command terminated with exit code 3"), "{err}");

    let who = "echo \"$GREETING|$(id -u):$(id -g)|$(pwd)\"; test -w /scratch";
    let (code, out, err) = exec(cluster, &["shell", "-c", "main", "--", "sh", "-c", who], b"").await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "hello from the shell|1234:2345|/scratch\n", "the container's env, user and dir");

    let (code, _, err) = exec(cluster, &["shell", "--", "no-such-program"], b"").await;
    assert_ne!(code, 0);
    assert!(err.contains("no-such-program"), "{err}");

    let (code, _, err) = exec(cluster, &["shell", "-c", "nope", "--", "true"], b"").await;
    assert_ne!(code, 0);
    assert!(err.contains("container nope is not valid for pod shell"), "{err}");

    let execs: Vec<RequestRecord> =
        cluster.sim.request_log().into_iter().filter(|r| r.subresource.as_deref() == Some("exec")).collect();
    // The first five execs were served; the refused one (a 400 before any upgrade) makes kubectl
    // 1.30+ fall back to SPDY, a POST.
    let verbs: Vec<&str> = execs.iter().map(|r| r.verb.as_str()).collect();
    assert_eq!(verbs[..5], [verb; 5], "{execs:?}");
}

/// kubelet `exec` rule 3: a container that does not run answers the kubelet's `container not found`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_in_a_container_that_does_not_run_is_container_not_found() {
    for minor in [28, 32] {
        container_not_found(&cluster_of(minor).await).await;
    }
}

async fn container_not_found(cluster: &TestCluster) {
    let pods =
        create_pod(cluster, "web", json!({"containers": [{"name": "web", "image": "nginx:1.25"}]})).await;
    await_pod(&pods, "web", "ErrImagePull", |p| {
        p["status"]["containerStatuses"][0]["state"]["waiting"]["reason"] == "ErrImagePull"
    })
    .await;
    let (code, _, err) = exec(cluster, &["web", "--", "true"], b"").await;
    assert_ne!(code, 0);
    assert!(err.contains("container not found (\"web\")"), "{err}");
}

/// `sim::exec` rule 1: exec is refused to a user without `get` and `create` on `pods/exec`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_needs_get_and_create_on_pods_exec() {
    for minor in [28, 32] {
        exec_is_authorized(&cluster_of(minor).await).await;
    }
}

async fn exec_is_authorized(cluster: &TestCluster) {
    running_shell(cluster).await;
    let user = "system:serviceaccount:default:debugger";
    let (code, _, err) = exec(cluster, &["--as", user, "shell", "--", "true"], b"").await;
    assert_ne!(code, 0);
    // kubectl 1.28 (SPDY) POSTs: `create`; kubectl 1.30+ (WebSocket) GETs: `get` first.
    let refusal = "resource \"pods/exec\" in API group \"\" in the namespace \"default\"";
    assert!(err.contains(&format!("User \"{user}\" cannot ")) && err.contains(refusal), "{err}");
    let grants = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: exec, namespace: default}
rules:
- {apiGroups: [""], resources: [pods/exec], verbs: [get, create]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: exec, namespace: default}
subjects: [{kind: ServiceAccount, name: debugger, namespace: default}]
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: exec}
"#;
    create_all(&cluster.client, grants).await;
    let (code, out, err) = exec(cluster, &["--as", user, "shell", "--", "echo", "granted"], b"").await;
    assert_eq!((code, out.as_str()), (0, "granted\n"), "{err}");
}

/// kubelet `exec` rule 5: `kubectl exec -it`, driven through `script` (which gives kubectl a
/// terminal), runs the command on a terminal whose size kubectl sends; its exit code comes back.
/// Over SPDY (kubectl 1.28) and WebSocket (kubectl 1.32).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_exec_with_a_terminal_gets_a_pty() {
    for minor in [28, 32] {
        let cluster = cluster_of(minor).await;
        running_shell(&cluster).await;
        exec_on_a_terminal(&cluster).await;
    }
}

async fn exec_on_a_terminal(cluster: &TestCluster) {
    let dir = tempfile::tempdir().unwrap();
    // Writes the kubeconfig `script`'s kubectl reads.
    drop(kubectl_command(cluster, dir.path()));
    // The remote side waits for the size kubectl sends after connecting (a terminal starts 0x0).
    let remote =
        "tty; echo \"TERM=$TERM\"; while [ \"$(stty size)\" = \"0 0\" ]; do :; done; stty size; exit 4";
    let command = format!("stty cols 100 rows 30; kubectl exec -it shell -- sh -c '{remote}'");
    let run = tokio::process::Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .env("KUBECONFIG", dir.path().join("config"))
        .env("HOME", dir.path())
        .env("SHELL", "/bin/sh")
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = within_limit("kubectl exec -it to end", REAL_WAIT, run).await.unwrap();
    let text = String::from_utf8_lossy(&out.stdout).replace('\r', "");
    assert!(text.contains("/dev/pts/"), "the command's stdin is a terminal: {text}");
    assert!(text.contains("TERM=xterm"), "as containerd sets it: {text}");
    assert!(text.contains("30 100"), "the size kubectl sent: {text}");
    assert_eq!(out.status.code(), Some(4), "{text}");
}

/// kubelet `exec` rule 4: a command exec'd in a container ends with it (SIGKILL: 137) when the
/// container stops, here for the pod's deletion.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exec_ends_with_its_container() {
    use tokio::io::AsyncBufReadExt;
    let cluster = cluster_of(28).await;
    running_shell(&cluster).await;
    let dir = tempfile::tempdir().unwrap();
    let mut child = kubectl_command(&cluster, dir.path())
        .args(["exec", "shell", "--", "sh", "-c", "echo started; exec sleep 600"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let first = within_limit("the exec to start", REAL_WAIT, lines.next_line()).await.unwrap();
    assert_eq!(first.as_deref(), Some("started"));
    let pods: Api<Pod> = cluster.api();
    pods.delete("shell", &DeleteParams::default()).await.unwrap();
    let out = within_limit("the exec to end with its container", REAL_WAIT, child.wait_with_output())
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(137), "{}", String::from_utf8_lossy(&out.stderr));
}
