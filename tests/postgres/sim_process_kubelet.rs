//! The simulator's process kubelet over real HTTP: pods run as real processes (the `postgres:15`
//! image maps to the host's PostgreSQL 15 binaries and gives `bash`, `python3`, `sleep`… of the host
//! through its `PATH`). Each test states the kubelet rule it proves.
#![cfg(feature = "sim")]

use crate::common;

use std::collections::HashMap;
use std::time::Duration;

use common::postgres::*;
use common::*;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, Service};
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::{Value, json};

fn pod(name: &str, spec: Value) -> Pod {
    serde_json::from_value(json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": name}}, "spec": spec}))
        .expect("a valid pod")
}

async fn create_pod(cluster: &TestCluster, name: &str, spec: Value) -> Api<Pod> {
    let pods: Api<Pod> = cluster.api();
    pods.create(&PostParams::default(), &pod(name, spec)).await.expect("the pod is accepted");
    pods
}

async fn await_pod(pods: &Api<Pod>, name: &str, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    eventually_some(what, || async {
        let pod = pods.get_opt(name).await.ok()??;
        let value = serde_json::to_value(&pod).ok()?;
        done(&value).then_some(value)
    })
    .await
}

fn phase_is(phase: &'static str) -> impl Fn(&Value) -> bool {
    move |p| p["status"]["phase"] == phase
}

fn ready(p: &Value) -> bool {
    p["status"]["conditions"]
        .as_array()
        .is_some_and(|c| c.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"))
}

/// `kubectl logs` against the cluster; stdout, or stderr on failure.
fn kubectl_logs(cluster: &TestCluster, args: &[&str]) -> Result<String, String> {
    kubectl(cluster, &[&["logs"], args].concat())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_without_a_host_program_is_err_image_pull() {
    let cluster = process_cluster().await;
    let pods =
        create_pod(&cluster, "web", json!({"containers": [{"name": "web", "image": "nginx:1.25"}]})).await;
    let p = await_pod(&pods, "web", "ErrImagePull", |p| {
        p["status"]["containerStatuses"][0]["state"]["waiting"]["reason"] == "ErrImagePull"
    })
    .await;
    assert_eq!(p["status"]["phase"], "Pending");
    let message = p["status"]["containerStatuses"][0]["state"]["waiting"]["message"].as_str().unwrap();
    assert!(message.contains("\"nginx:1.25\""), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_container_gets_its_command_env_volumes_user_and_names() {
    let cluster = process_cluster().await;
    let secrets: Api<Secret> = cluster.api();
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "creds"}, "stringData": {"password": "s3cr3t"}});
    secrets.create(&PostParams::default(), &serde_json::from_value(secret).unwrap()).await.unwrap();
    let maps: Api<ConfigMap> = cluster.api();
    let map = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"}, "data": {"mode": "fast", "app.conf": "x=1"}});
    maps.create(&PostParams::default(), &serde_json::from_value(map).unwrap()).await.unwrap();
    let script = r#"
        echo "args=$0 $1"
        echo "password=$PASSWORD mode=$MODE name=$NAME ip=$IP url=$URL"
        echo "user=$(id -u):$(id -g) groups=$(id -G) pwd=$(pwd) host=$(hostname)"
        echo "conf=$(cat /etc/cfg/app.conf) secret=$(cat /etc/creds/password) podname=$(cat /etc/info/name)"
        touch /etc/oops 2>/dev/null && echo root=writable || echo root=readonly
        touch /scratch/ok && echo scratch=writable
        getent hosts localhost | awk '{print "localhost=" $1}'
    "#;
    let pods = create_pod(
        &cluster,
        "probe-env",
        json!({
            "restartPolicy": "Never",
            "securityContext": {"runAsUser": 1234, "runAsGroup": 2345, "fsGroup": 3456},
            "containers": [{
                "name": "main", "image": "postgres:15", "workingDir": "/scratch",
                "command": ["bash", "-c", script], "args": ["$(MODE)", "$$(MODE)"],
                "env": [
                    {"name": "PASSWORD", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "password"}}},
                    {"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "mode"}}},
                    {"name": "NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                    {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                    {"name": "URL", "value": "http://$(NAME):$(MODE)"},
                ],
                "securityContext": {"readOnlyRootFilesystem": true},
                "volumeMounts": [
                    {"name": "cfg", "mountPath": "/etc/cfg"},
                    {"name": "creds", "mountPath": "/etc/creds"},
                    {"name": "info", "mountPath": "/etc/info"},
                    {"name": "scratch", "mountPath": "/scratch"},
                ],
            }],
            "volumes": [
                {"name": "cfg", "configMap": {"name": "cfg"}},
                {"name": "creds", "secret": {"secretName": "creds"}},
                {"name": "info", "downwardAPI": {"items": [{"path": "name", "fieldRef": {"fieldPath": "metadata.name"}}]}},
                {"name": "scratch", "emptyDir": {}},
            ],
        }),
    )
    .await;
    let p = await_pod(&pods, "probe-env", "Succeeded", phase_is("Succeeded")).await;
    let ip = p["status"]["podIP"].as_str().unwrap().to_owned();
    assert!(ip.starts_with("127.10."), "{ip}");
    let logs = kubectl_logs(&cluster, &["probe-env"]).unwrap();
    let expected = [
        "args=fast $(MODE)".to_owned(),
        format!("password=s3cr3t mode=fast name=probe-env ip={ip} url=http://probe-env:fast"),
        "user=1234:2345 groups=2345 3456 pwd=/scratch host=probe-env".to_owned(),
        "conf=x=1 secret=s3cr3t podname=probe-env".to_owned(),
        "root=readonly".to_owned(),
        "scratch=writable".to_owned(),
        format!("localhost={ip}"),
    ];
    let lines: Vec<&str> = logs.lines().collect();
    assert_eq!(lines, expected, "{logs}");
    assert_eq!(p["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"], 0);
    assert_eq!(p["status"]["containerStatuses"][0]["state"]["terminated"]["reason"], "Completed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn init_containers_run_in_order_before_the_containers() {
    let cluster = process_cluster().await;
    let step = |n: &str| json!({"name": n, "image": "postgres:15", "command": ["bash", "-c", format!("echo {n} >> /work/order")], "volumeMounts": [{"name": "work", "mountPath": "/work"}]});
    let pods = create_pod(
        &cluster,
        "ordered",
        json!({
            "restartPolicy": "Never",
            "initContainers": [step("first"), step("second")],
            "containers": [{"name": "main", "image": "postgres:15", "command": ["cat", "/work/order"], "volumeMounts": [{"name": "work", "mountPath": "/work"}]}],
            "volumes": [{"name": "work", "emptyDir": {}}],
        }),
    )
    .await;
    let p = await_pod(&pods, "ordered", "Succeeded", phase_is("Succeeded")).await;
    assert_eq!(kubectl_logs(&cluster, &["ordered", "-c", "main"]).unwrap(), "first\nsecond\n");
    assert_eq!(p["status"]["initContainerStatuses"][1]["state"]["terminated"]["exitCode"], 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashing_container_restarts_with_back_off_and_keeps_its_previous_log() {
    let cluster = process_cluster().await;
    let pods = create_pod(
        &cluster,
        "crash",
        json!({"containers": [{"name": "main", "image": "postgres:15", "command": ["bash", "-c", "echo run; exit 3"]}]}),
    )
    .await;
    let p = await_pod(&pods, "crash", "CrashLoopBackOff", |p| {
        p["status"]["containerStatuses"][0]["state"]["waiting"]["reason"] == "CrashLoopBackOff"
    })
    .await;
    let status = &p["status"]["containerStatuses"][0];
    assert!(status["restartCount"].as_u64().unwrap() >= 1, "{status}");
    assert_eq!(status["lastState"]["terminated"]["exitCode"], 3);
    assert_eq!(status["ready"], false);
    assert_eq!(p["status"]["phase"], "Running");
    assert_eq!(kubectl_logs(&cluster, &["crash", "--previous"]).unwrap(), "run\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_liveness_probe_restarts_the_container_and_sigkill_ends_the_grace_period() {
    let cluster = process_cluster().await;
    // The probe never passes; the container ignores SIGTERM (as bash does as a PID namespace's
    // init), so each stop ends with SIGKILL after the 2 s grace period.
    let pods = create_pod(
        &cluster,
        "sickly",
        json!({
            "terminationGracePeriodSeconds": 2,
            "containers": [{"name": "main", "image": "postgres:15",
                "command": ["bash", "-c", "trap '' TERM; echo started; while true; do sleep 0.1; done"],
                "livenessProbe": {"exec": {"command": ["test", "-e", "/tmp/never"]}, "initialDelaySeconds": 1, "periodSeconds": 1, "failureThreshold": 2},
            }],
        }),
    )
    .await;
    let p = await_pod(&pods, "sickly", "a restart after the liveness probe failed", |p| {
        p["status"]["containerStatuses"][0]["restartCount"].as_u64() >= Some(1)
    })
    .await;
    let last = &p["status"]["containerStatuses"][0]["lastState"]["terminated"];
    assert_eq!(last["exitCode"], 137, "SIGKILLed after the grace period: {last}");
    assert_eq!(last["reason"], "Error");

    // A container that ignores SIGTERM is SIGKILLed when the grace period ends.
    let stubborn = create_pod(
        &cluster,
        "stubborn",
        json!({
            "terminationGracePeriodSeconds": 2,
            "containers": [{"name": "main", "image": "postgres:15", "command": ["bash", "-c", "trap '' TERM; echo up; while true; do sleep 0.1; done"]}],
        }),
    )
    .await;
    await_pod(&stubborn, "stubborn", "running", ready).await;
    eventually_some("the container to print", || async {
        kubectl_logs(&cluster, &["stubborn"]).ok().filter(|l| l == "up\n")
    })
    .await;
    let deleted = std::time::Instant::now();
    stubborn.delete("stubborn", &DeleteParams::default()).await.unwrap();
    eventually_some("the pod to go", || async {
        stubborn.get_opt("stubborn").await.unwrap().is_none().then_some(())
    })
    .await;
    assert!(
        deleted.elapsed() >= Duration::from_secs(2),
        "the grace period was waited out: {:?}",
        deleted.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probes_gate_readiness_and_a_service_forwards_to_ready_pods() {
    let cluster = process_cluster().await;
    let maps: Api<ConfigMap> = cluster.api();
    let site = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "site"}, "data": {"index.html": "hello"}});
    maps.create(&PostParams::default(), &serde_json::from_value(site).unwrap()).await.unwrap();
    // `127.0.0.1` as an argument is the pod's own address (pods share the host's network).
    let pods = create_pod(
        &cluster,
        "web",
        json!({
            "containers": [{
                "name": "web", "image": "postgres:15",
                "command": ["python3", "-m", "http.server", "--bind", "127.0.0.1", "--directory", "/site", "8080"],
                "ports": [{"name": "http", "containerPort": 8080}],
                "readinessProbe": {"httpGet": {"path": "/index.html", "port": "http"}, "periodSeconds": 1},
                "livenessProbe": {"tcpSocket": {"port": 8080}, "initialDelaySeconds": 5, "periodSeconds": 1},
                "volumeMounts": [{"name": "site", "mountPath": "/site"}],
            }],
            "volumes": [{"name": "site", "configMap": {"name": "site"}}],
        }),
    )
    .await;
    let services: Api<Service> = cluster.api();
    let svc = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"}, "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": "http"}]}});
    services.create(&PostParams::default(), &serde_json::from_value(svc).unwrap()).await.unwrap();
    await_pod(&pods, "web", "ready", ready).await;
    let ip = cluster.sim.resolve("default", "web.default.svc.cluster.local").expect("the Service resolves");
    assert!(ip.to_string().starts_with("127.11."), "{ip}");
    let answer = eventually_some("the Service forwards", || async {
        let answer = try_http_get(std::net::SocketAddr::from((ip, 80)), "/index.html").await;
        answer.filter(|(status, _, _)| *status == 200).map(|(_, _, body)| body)
    })
    .await;
    assert_eq!(answer.trim(), "hello");
    let client = create_pod(
        &cluster,
        "client",
        json!({"restartPolicy": "Never", "containers": [{"name": "c", "image": "postgres:15", "command": ["python3", "-c", "import urllib.request as u; print(u.urlopen('http://web/index.html').read().decode().strip())"]}]}),
    )
    .await;
    await_pod(&client, "client", "Succeeded", phase_is("Succeeded")).await;
    assert_eq!(kubectl_logs(&cluster, &["client"]).unwrap(), "hello\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deletion_runs_pre_stop_then_sigterm_and_the_pod_goes_when_stopped() {
    let cluster = process_cluster().await;
    let out = tempfile::tempdir().unwrap();
    std::fs::set_permissions(out.path(), std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let pods = create_pod(
        &cluster,
        "graceful",
        json!({
            "terminationGracePeriodSeconds": 20,
            "containers": [{
                "name": "main", "image": "postgres:15",
                "command": ["bash", "-c", "trap 'echo term >> /out/trail; exit 0' TERM; echo started >> /out/trail; while true; do sleep 0.1; done"],
                "lifecycle": {"preStop": {"exec": {"command": ["bash", "-c", "echo prestop >> /out/trail"]}}},
                "volumeMounts": [{"name": "out", "mountPath": "/out"}],
            }],
            "volumes": [{"name": "out", "hostPath": {"path": out.path().to_str().unwrap()}}],
        }),
    )
    .await;
    await_pod(&pods, "graceful", "running", |p| p["status"]["phase"] == "Running" && ready(p)).await;
    pods.delete("graceful", &DeleteParams::default()).await.unwrap();
    eventually_some("the pod to go", || async {
        pods.get_opt("graceful").await.unwrap().is_none().then_some(())
    })
    .await;
    let trail = std::fs::read_to_string(out.path().join("trail")).unwrap();
    assert_eq!(trail, "started\nprestop\nterm\n");
}

/// Run by [`processes_never_outlive_the_simulator`] as a child process: a simulator with one
/// pod whose process is `sleep <marker>`; prints `READY` once it runs, then waits to be killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn child_simulator() {
    let Ok(marker) = std::env::var("PROCESS_KUBELET_CHILD") else { return };
    let cluster = process_cluster().await;
    let pods = create_pod(&cluster, "sleeper", json!({"containers": [{"name": "s", "image": "postgres:15", "command": ["bash", "-c", format!("sleep {marker} & sleep {marker}; wait")]}]})).await;
    await_pod(&pods, "sleeper", "running", phase_is("Running")).await;
    eventually_some("the sleep processes", || async { (!processes_with(&marker).is_empty()).then_some(()) })
        .await;
    println!("READY");
    tokio::time::sleep(Duration::from_secs(600)).await;
}

fn processes_with(marker: &str) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| {
                String::from_utf8_lossy(&c).replace('\0', " ").trim() == format!("sleep {marker}")
            })
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processes_never_outlive_the_simulator() {
    require_postgres();
    let marker = format!("{}", 900_000 + std::process::id());
    // The harness names a test by its path in the binary's module tree, the crate left out.
    let (_, module) = module_path!().split_once("::").expect("a module of the test binary");
    let child_test = format!("{module}::child_simulator");
    let mut child = tokio::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", &child_test, "--nocapture", "--test-threads=1"])
        .env("PROCESS_KUBELET_CHILD", &marker)
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    within("the child's pod to run", async {
        use tokio::io::AsyncBufReadExt;
        let mut lines = tokio::io::BufReader::new(stdout).lines();
        while let Some(line) = lines.next_line().await.unwrap() {
            if line.contains("READY") {
                return;
            }
        }
        panic!("the child simulator ended before its pod ran");
    })
    .await;
    assert_eq!(processes_with(&marker).len(), 2, "the pod's processes run");
    child.start_kill().unwrap();
    child.wait().await.unwrap();
    eventually_some("no process of the killed simulator's pod", || async {
        processes_with(&marker).is_empty().then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exited_container_reports_its_exit_code_reason_and_termination_message() {
    let cluster = process_cluster().await;
    let container = |command: &str, extra: Value| {
        let mut c = json!({"name": "main", "image": "postgres:15", "command": ["bash", "-c", command]});
        c.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        c
    };
    let told = container("echo out; echo 'config is bad' > /dev/termination-log; exit 3", json!({}));
    let pods = create_pod(&cluster, "told", json!({"containers": [told]})).await;
    let fallback = container(
        "echo one; echo 'FATAL: bad value' >&2; exit 2",
        json!({"terminationMessagePolicy": "FallbackToLogsOnError"}),
    );
    create_pod(&cluster, "fallback", json!({"restartPolicy": "Never", "containers": [fallback]})).await;
    let custom = container("echo done > /tmp/why", json!({"terminationMessagePath": "/tmp/why"}));
    create_pod(&cluster, "custom", json!({"restartPolicy": "Never", "containers": [custom]})).await;
    let silent = container("echo fine", json!({"terminationMessagePolicy": "FallbackToLogsOnError"}));
    create_pod(&cluster, "silent", json!({"restartPolicy": "Never", "containers": [silent]})).await;

    // A restarting container: the run that ended is lastState, then CrashLoopBackOff says why.
    let p = await_pod(&pods, "told", "CrashLoopBackOff", |p| {
        p["status"]["containerStatuses"][0]["state"]["waiting"]["reason"] == "CrashLoopBackOff"
    })
    .await;
    let status = &p["status"]["containerStatuses"][0];
    let last = &status["lastState"]["terminated"];
    assert_eq!(
        (&last["exitCode"], &last["reason"], &last["message"]),
        (&json!(3), &json!("Error"), &json!("config is bad\n")),
        "{status}"
    );
    let uid = p["metadata"]["uid"].as_str().unwrap();
    let waiting = status["state"]["waiting"]["message"].as_str().unwrap();
    assert!(
        waiting.starts_with("back-off 10s restarting failed container=main pod=told_default("),
        "{waiting}"
    );
    assert!(waiting.ends_with(&format!("({uid})")), "{waiting}");

    let terminated = |name: &'static str| {
        let pods = pods.clone();
        async move {
            let p = await_pod(&pods, name, "finished", |p| {
                matches!(p["status"]["phase"].as_str(), Some("Succeeded" | "Failed"))
            })
            .await;
            p["status"]["containerStatuses"][0]["state"]["terminated"].clone()
        }
    };
    let t = terminated("fallback").await;
    assert_eq!((&t["exitCode"], &t["reason"]), (&json!(2), &json!("Error")), "{t}");
    assert_eq!(t["message"], "one\nFATAL: bad value\n", "the log's tail for a failed run: {t}");
    let t = terminated("custom").await;
    assert_eq!(
        (&t["exitCode"], &t["reason"], &t["message"]),
        (&json!(0), &json!("Completed"), &json!("done\n")),
        "{t}"
    );
    let t = terminated("silent").await;
    assert_eq!(t["reason"], "Completed");
    assert!(t.get("message").is_none(), "no message: the file is empty and the run succeeded: {t}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_succeed_or_fail_as_their_pods_do() {
    use k8s_openapi::api::batch::v1::Job;
    let cluster = process_cluster().await;
    let jobs: Api<Job> = cluster.api();
    let job = |name: &str, code: i32| -> Job {
        serde_json::from_value(json!({
            "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"backoffLimit": 1, "template": {"spec": {"restartPolicy": "Never", "containers": [{
                "name": "main", "image": "postgres:15", "command": ["bash", "-c", format!("echo attempt; exit {code}")],
            }]}}},
        }))
        .unwrap()
    };
    jobs.create(&PostParams::default(), &job("works", 0)).await.unwrap();
    jobs.create(&PostParams::default(), &job("breaks", 1)).await.unwrap();
    let outcome = |name: &'static str| {
        let jobs = jobs.clone();
        async move {
            eventually_some(&format!("{name} finished"), || async {
                let j = jobs.get(name).await.ok()?;
                let conditions = j.status?.conditions?;
                conditions
                    .iter()
                    .find(|c| (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True")
                    .map(|c| c.type_.clone())
            })
            .await
        }
    };
    assert_eq!(outcome("works").await, "Complete");
    assert_eq!(outcome("breaks").await, "Failed");
    let failed = jobs.get("breaks").await.unwrap().status.unwrap().failed;
    assert_eq!(failed, Some(2), "one retry within backoffLimit 1, then the Job fails");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_logs_follows_a_running_container_and_shows_the_previous_run_after_a_restart() {
    let cluster = process_cluster().await;
    let control = tempfile::tempdir().unwrap();
    std::fs::set_permissions(control.path(), std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    // Each run numbers itself, says so, waits for the test's go-ahead, says so again and fails.
    let script = r#"n=$(cat /in/runs 2>/dev/null || echo 0); echo $((n+1)) > /in/runs
        echo "run $n start"; while [ ! -e /in/go-$n ]; do sleep 0.1; done; echo "run $n after"; exit 1"#;
    let pods = create_pod(
        &cluster,
        "chatty",
        json!({
            "containers": [{"name": "main", "image": "postgres:15", "command": ["bash", "-c", script],
                "volumeMounts": [{"name": "in", "mountPath": "/in"}]}],
            "volumes": [{"name": "in", "hostPath": {"path": control.path().to_str().unwrap()}}],
        }),
    )
    .await;
    await_pod(&pods, "chatty", "running", phase_is("Running")).await;
    let home = tempfile::tempdir().unwrap();
    let mut follow = kubectl_command(&cluster, home.path())
        .args(["logs", "-f", "chatty"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use tokio::io::AsyncBufReadExt;
    let mut lines = tokio::io::BufReader::new(follow.stdout.take().unwrap()).lines();
    let first = within("the first line", lines.next_line()).await.unwrap();
    assert_eq!(first.as_deref(), Some("run 0 start"));
    // Written after kubectl started following: it arrives on the same stream.
    std::fs::write(control.path().join("go-0"), b"").unwrap();
    let second = within("the line written while following", lines.next_line()).await.unwrap();
    assert_eq!(second.as_deref(), Some("run 0 after"));
    let end = within("the follow to end with the run", lines.next_line()).await.unwrap();
    assert_eq!(end, None, "kubectl logs -f ends when the run ends");
    assert!(within("kubectl to exit", follow.wait()).await.unwrap().success());

    await_pod(&pods, "chatty", "the second run", |p| {
        let s = &p["status"]["containerStatuses"][0];
        s["restartCount"] == 1 && s["state"]["running"].is_object()
    })
    .await;
    assert_eq!(kubectl_logs(&cluster, &["chatty", "--previous"]).unwrap(), "run 0 start\nrun 0 after\n");
    let current = eventually_some("the second run's first line", || async {
        kubectl_logs(&cluster, &["chatty"]).ok().filter(|l| !l.is_empty())
    })
    .await;
    assert_eq!(current, "run 1 start\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bound_claims_get_volumes_reclaimed_as_their_class_says() {
    use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
    use k8s_openapi::api::storage::v1::StorageClass;
    let cluster = process_cluster().await;
    let classes: Api<StorageClass> = Api::all(cluster.sim.client());
    let standard =
        eventually_some("the default StorageClass", || async { classes.get_opt("standard").await.ok()? })
            .await;
    assert_eq!(standard.reclaim_policy.as_deref(), Some("Delete"));
    let keep = json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": "keep"}, "provisioner": "sim.dbcluster-operator/hostpath", "reclaimPolicy": "Retain"});
    classes.create(&PostParams::default(), &serde_json::from_value(keep).unwrap()).await.unwrap();
    let claims: Api<PersistentVolumeClaim> = cluster.api();
    let volumes: Api<PersistentVolume> = Api::all(cluster.sim.client());
    let claim = |name: &str, class: Option<&str>| -> PersistentVolumeClaim {
        let mut spec =
            json!({"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}});
        if let Some(c) = class {
            spec["storageClassName"] = json!(c);
        }
        serde_json::from_value(json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name}, "spec": spec})).unwrap()
    };
    let mut dirs = HashMap::new();
    for (name, class, policy) in [("gone", None, "Delete"), ("kept", Some("keep"), "Retain")] {
        claims.create(&PostParams::default(), &claim(name, class)).await.unwrap();
        let bound = eventually_some("the claim bound", || async {
            let c = claims.get(name).await.ok()?;
            (c.status.as_ref()?.phase.as_deref() == Some("Bound")).then_some(c)
        })
        .await;
        let volume_name = bound.spec.unwrap().volume_name.unwrap();
        assert_eq!(volume_name, format!("pvc-{}", bound.metadata.uid.unwrap()));
        let pv = volumes.get(&volume_name).await.unwrap();
        let spec = pv.spec.unwrap();
        assert_eq!(spec.persistent_volume_reclaim_policy.as_deref(), Some(policy));
        assert_eq!(spec.claim_ref.unwrap().name.as_deref(), Some(name));
        assert_eq!(pv.status.unwrap().phase.as_deref(), Some("Bound"));
        let pods = create_pod(
            &cluster,
            &format!("writer-{name}"),
            json!({"restartPolicy": "Never", "containers": [{"name": "w", "image": "postgres:15",
                "command": ["bash", "-c", "echo data > /data/file"], "volumeMounts": [{"name": "d", "mountPath": "/data"}]}],
                "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": name}}]}),
        )
        .await;
        await_pod(&pods, &format!("writer-{name}"), "Succeeded", phase_is("Succeeded")).await;
        let dir = std::path::PathBuf::from(spec.host_path.unwrap().path);
        assert_eq!(
            std::fs::read_to_string(dir.join("file")).unwrap(),
            "data\n",
            "the pod wrote into the volume's directory"
        );
        dirs.insert(name, (volume_name, dir));
    }
    let listed = kubectl(&cluster, &["get", "pv"]).unwrap();
    assert!(
        listed.contains("RECLAIM POLICY") && listed.contains("default/kept") && listed.contains("Retain"),
        "{listed}"
    );

    for name in ["gone", "kept"] {
        claims.delete(name, &DeleteParams::default()).await.unwrap();
    }
    let (gone_volume, gone_dir) = &dirs["gone"];
    eventually_some("the Delete volume removed", || async {
        volumes.get_opt(gone_volume).await.ok()?.is_none().then_some(())
    })
    .await;
    assert!(!gone_dir.exists(), "Delete removes the directory too");
    let (kept_volume, kept_dir) = &dirs["kept"];
    eventually_some("the Retain volume released", || async {
        let pv = volumes.get(kept_volume).await.ok()?;
        (pv.status?.phase.as_deref() == Some("Released")).then_some(())
    })
    .await;
    assert_eq!(std::fs::read_to_string(kept_dir.join("file")).unwrap(), "data\n", "Retain keeps the data");
    let listed = kubectl(&cluster, &["get", "pv"]).unwrap();
    assert!(listed.contains("Released") && !listed.contains(gone_volume.as_str()), "{listed}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_map_and_secret_volumes_follow_their_source() {
    let cluster = process_cluster().await;
    let maps: Api<ConfigMap> = cluster.api();
    let map = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"}, "data": {"mode": "fast"}});
    maps.create(&PostParams::default(), &serde_json::from_value(map).unwrap()).await.unwrap();
    let secrets: Api<Secret> = cluster.api();
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "creds"}, "stringData": {"token": "one"}});
    secrets.create(&PostParams::default(), &serde_json::from_value(secret).unwrap()).await.unwrap();
    // Prints the files' contents each time they change.
    let script = r#"last=; while true; do v="$(cat /cfg/mode) $(cat /creds/token)"
        if [ "$v" != "$last" ]; then echo "$v"; last="$v"; fi; sleep 0.1; done"#;
    create_pod(
        &cluster,
        "reader",
        json!({
            "containers": [{"name": "main", "image": "postgres:15", "command": ["bash", "-c", script],
                "volumeMounts": [{"name": "cfg", "mountPath": "/cfg"}, {"name": "creds", "mountPath": "/creds"}]}],
            "volumes": [{"name": "cfg", "configMap": {"name": "cfg"}}, {"name": "creds", "secret": {"secretName": "creds"}}],
        }),
    )
    .await;
    let logs_with = |text: &'static str| {
        let cluster = &cluster;
        async move {
            eventually_some(text, || async {
                kubectl_logs(cluster, &["reader"]).ok().filter(|l| l.contains(text))
            })
            .await
        }
    };
    logs_with("fast one").await;
    let patch = |data: Value| kube::api::Patch::Merge(json!({ "data": data }));
    maps.patch("cfg", &Default::default(), &patch(json!({"mode": "slow"}))).await.unwrap();
    logs_with("slow one").await;
    let token = json!({"token": base64_of("two")});
    secrets.patch("creds", &Default::default(), &patch(token)).await.unwrap();
    let logs = logs_with("slow two").await;
    assert_eq!(logs, "fast one\nslow one\nslow two\n", "the running container saw each change, in order");
}

fn base64_of(text: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(text)
}
