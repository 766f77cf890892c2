//! What a container gets and how it runs: its image's host programs, command, environment,
//! volumes, user and names, init containers, restarts with back-off, and liveness probes.

use super::*;

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
