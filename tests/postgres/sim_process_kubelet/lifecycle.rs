//! A pod's life: readiness and Services, deletion (preStop, SIGTERM), exit codes and
//! termination messages, and no process outliving the simulator.

use super::*;

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
    let web = await_pod(&pods, "web", "ready", ready).await;
    // Bound to the node before it ran, as the scheduler's binding leaves a pod.
    assert!(web["spec"]["nodeName"].as_str().is_some_and(|n| n.starts_with("sim-node-")), "{web}");
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
