//! What pods are given and run for: Jobs, `kubectl logs`, bound claims and their reclaim, and
//! ConfigMap and Secret volumes that follow their source.

use super::*;

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
