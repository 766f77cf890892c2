//! Rolling updates (standbys first), reloads, and a configuration PostgreSQL refuses.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn updates_roll_standbys_first_and_reloadable_settings_reload() {
    let cluster = process_cluster().await;
    let _operator = cluster.start_operator().await;
    create(&cluster, 3, &[("work_mem", "4MB")]).await;
    await_streaming(&cluster, NAME, 3, None).await;
    let rw = uri(&cluster, "production-postgres-app", "production-postgres-rw").await;
    psql(&rw, "CREATE TABLE ticks (id serial PRIMARY KEY, at timestamptz DEFAULT now())").unwrap();

    // A reloadable parameter: applied by reload, no pod restarted.
    let started: BTreeMap<String, String> =
        pods(&cluster).await.iter().map(|p| (p.metadata.name.clone().unwrap(), start_time(p))).collect();
    patch_spec(&cluster, serde_json::json!({"postgresConfig": {"work_mem": "64MB"}})).await;
    for pod in pods(&cluster).await {
        let uri = pod_uri(&cluster, &pod_ip(&pod), "postgres").await;
        eventually_some("work_mem reloaded", || async {
            (psql(&uri, "SHOW work_mem").ok()? == "64MB").then_some(())
        })
        .await;
    }
    let after: BTreeMap<String, String> =
        pods(&cluster).await.iter().map(|p| (p.metadata.name.clone().unwrap(), start_time(p))).collect();
    assert_eq!(started, after, "a reload restarts nothing");

    // A version change with a client writing every 100 ms through -rw.
    let writer = Writer::start(rw.clone());
    writer.await_acknowledged(4, Instant::now(), "before the upgrade").await;
    patch_spec(&cluster, serde_json::json!({"version": "15.5"})).await;
    let api = cluster.clusters();
    eventually_some("the upgrade completes", || async {
        let db = api.get(NAME).await.ok()?;
        let status = db.status.as_ref()?;
        (status.current_version.as_deref() == Some("15.5")
            && status.phase.map(|p| p.as_str()) == Some("Running"))
        .then_some(())
    })
    .await;
    await_streaming(&cluster, NAME, 3, None).await;
    writer.await_acknowledged(4, Instant::now(), "after the upgrade").await;
    let log = writer.finish().await;
    let acknowledged = log.iter().filter(|w| w.acknowledged()).count();
    println!(
        "rolling upgrade: {acknowledged} acknowledged writes, longest write outage {:?}",
        longest_outage(&log)
    );
    let lost = lost_writes(&rw, &log);
    assert!(lost.is_empty(), "acknowledged writes lost: {lost:?}; the writes:{}", timeline(&log));
    assert_rolled_standbys_first_then_switched_over(&cluster).await;

    // A restart parameter: rolls again (every pod restarted).
    let before: BTreeMap<String, String> = pods(&cluster)
        .await
        .iter()
        .map(|p| (p.metadata.name.clone().unwrap(), p.metadata.uid.clone().unwrap()))
        .collect();
    patch_spec(
        &cluster,
        serde_json::json!({"postgresConfig": {"work_mem": "64MB", "max_connections": "150"}}),
    )
    .await;
    eventually_some("every pod replaced with max_connections 150", || async {
        let now = pods(&cluster).await;
        let replaced = now.len() == 3
            && now.iter().all(|p| {
                before.get(p.metadata.name.as_deref().unwrap_or_default()) != p.metadata.uid.as_ref()
            });
        if !replaced {
            return None;
        }
        for pod in &now {
            let uri = pod_uri(&cluster, &pod_ip(pod), "postgres").await;
            if psql(&uri, "SHOW max_connections").ok()? != "150" {
                return None;
            }
        }
        Some(())
    })
    .await;
}

/// The roll's Events: three steps, the old primary last after a switchover (with 3 instances the
/// primary's turn is a switchover to an updated standby, `primaryUpdateMethod: Switchover`, the
/// default; the old primary is then updated as a standby); and the pod patches and deletions
/// tests/operator/rbac.rs cannot see with its timer kubelet.
async fn assert_rolled_standbys_first_then_switched_over(cluster: &TestCluster) {
    let order = await_event_reasons(cluster, NAME, &["RollingUpdate"]).await;
    assert!(!order.is_empty());
    let events = cluster.events_about(NAME).await;
    let mut rolls: Vec<String> = events
        .iter()
        .filter(|e| e.reason.as_deref() == Some("RollingUpdate"))
        .map(|e| e.note.clone().unwrap_or_default())
        .collect();
    // A pass that starts before the cache shows a deletion may delete (and say so) once more.
    rolls.dedup();
    assert_eq!(rolls.len(), 3, "{rolls:?}");
    let log = cluster.sim.request_log();
    for verb in ["patch", "delete"] {
        assert!(
            log.iter().any(|r| r.resource == "pods" && r.verb == verb && r.subresource.is_none()),
            "pods {verb}"
        );
    }
    assert!(rolls[2].contains("standby production-postgres-0"), "the old primary goes last: {rolls:?}");
    assert!(
        events.iter().any(|e| e.reason.as_deref() == Some("SwitchedOver")),
        "the primary was switched over, not restarted"
    );
}

/// `Ready`'s reason and message once its reason is `reason` and the message holds `needle`.
async fn await_ready(cluster: &TestCluster, reason: &str, needle: &str) -> String {
    let api = cluster.clusters();
    eventually_some(&format!("Ready with reason {reason}, saying {needle}"), || async {
        let db = api.get(NAME).await.ok()?;
        let ready = db.status?.conditions.into_iter().find(|c| c.type_ == "Ready")?;
        (ready.reason == reason && ready.message.contains(needle)).then_some(ready.message)
    })
    .await
}

/// A `postgresConfig` that PostgreSQL refuses (a bad value, an unknown name) is neither reloaded
/// nor rolled out: the instance keeps its settings and keeps running, and `Ready=False`,
/// `InvalidConfiguration`, names what PostgreSQL refuses, with a Warning Event. A fixed spec is
/// then applied (here by a roll, for `max_connections`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configuration_postgres_refuses_is_not_applied_and_the_status_says_why() {
    let cluster = process_cluster().await;
    let _operator = cluster.start_operator().await;
    create(&cluster, 1, &[("work_mem", "4MB")]).await;
    await_streaming(&cluster, NAME, 1, None).await;
    let pod = pods(&cluster).await.remove(0);
    let uid = pod.metadata.uid.clone();
    let uri = pod_uri(&cluster, &pod_ip(&pod), "postgres").await;

    // Values it cannot parse, of a reloadable and of a restart parameter: neither reloaded nor
    // rolled out.
    patch_spec(
        &cluster,
        serde_json::json!({"postgresConfig": {"work_mem": "lots", "shared_buffers": "lots"}}),
    )
    .await;
    let message =
        await_ready(&cluster, "InvalidConfiguration", "work_mem = 'lots' (setting could not be applied)")
            .await;
    assert!(message.contains("shared_buffers = 'lots' (setting could not be applied)"), "{message}");
    await_event_reasons(&cluster, NAME, &["InvalidConfiguration"]).await;
    assert_eq!(psql(&uri, "SHOW work_mem").unwrap(), "4MB");
    assert_eq!(pods(&cluster).await[0].metadata.uid, uid, "no roll for a refused restart parameter");

    // A name it does not know, beside a restart parameter: no roll either.
    let unknown = serde_json::json!({"postgresConfig":
        {"work_mem": null, "shared_buffers": null, "work_memm": "8MB", "max_connections": "150"}});
    patch_spec(&cluster, unknown).await;
    let message = await_ready(
        &cluster,
        "InvalidConfiguration",
        "work_memm = '8MB' (unrecognized configuration parameter)",
    )
    .await;
    assert!(!message.contains("max_connections"), "a restart parameter is not refused: {message}");
    assert_eq!(pods(&cluster).await[0].metadata.uid, uid, "no roll while the file is refused");
    assert_eq!(psql(&uri, "SHOW max_connections").unwrap(), "100");
    let reloads = cluster.events_about(NAME).await;
    assert!(!reloads.iter().any(|e| e.reason.as_deref() == Some("ConfigurationReloaded")), "{reloads:?}");

    // Fixed: rolled out (max_connections), and Ready again.
    patch_spec(&cluster, serde_json::json!({"postgresConfig": {"work_memm": null, "work_mem": "8MB"}})).await;
    eventually_some("the instance rolled, with the fixed settings in force", || async {
        let pod = pods(&cluster).await.into_iter().next()?;
        if pod.metadata.uid == uid {
            return None;
        }
        let uri = pod_uri(&cluster, &pod_ip(&pod), "postgres").await;
        let settings =
            psql(&uri, "SELECT current_setting('work_mem') || ' ' || current_setting('max_connections')");
        (settings.ok()? == "8MB 150").then_some(())
    })
    .await;
    await_ready(&cluster, "AllReplicasReady", "").await;
}
