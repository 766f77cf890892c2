//! Writes to the primary, reads from the standbys, Secrets that log in, and scaling and
//! hibernation that keep the data.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_go_to_the_primary_reads_to_the_standbys_and_the_secrets_always_log_in() {
    let cluster = process_cluster().await;
    let _operator = cluster.start_operator().await;
    create(&cluster, 3, &[]).await;
    let db = await_streaming(&cluster, NAME, 3, None).await;
    let status = db.status.unwrap();
    assert_eq!(status.current_primary.as_deref(), Some("production-postgres-0"));
    assert!(
        status.instances.iter().all(|i| i.version.as_deref().is_some_and(|v| v.starts_with("15."))),
        "every instance reports its server version: {:?}",
        status.instances
    );

    let services: Api<Service> = cluster.api();
    for name in [NAME, "production-postgres-rw", "production-postgres-ro", "production-postgres-r"] {
        services.get(name).await.unwrap_or_else(|e| panic!("Service {name}: {e}"));
    }
    let pdb: Api<PodDisruptionBudget> = cluster.api();
    pdb.get(NAME).await.unwrap();
    let roles: BTreeMap<String, String> = pods(&cluster)
        .await
        .iter()
        .map(|p| {
            let labels = p.metadata.labels.as_ref().unwrap();
            (
                p.metadata.name.clone().unwrap(),
                labels.get("databases.madmmas.dev/role").cloned().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        roles,
        BTreeMap::from([
            ("production-postgres-0".to_owned(), "primary".to_owned()),
            ("production-postgres-1".to_owned(), "replica".to_owned()),
            ("production-postgres-2".to_owned(), "replica".to_owned()),
        ])
    );

    let rw = uri(&cluster, "production-postgres-app", "production-postgres-rw").await;
    psql(&rw, "CREATE TABLE items (id int PRIMARY KEY); INSERT INTO items SELECT generate_series(1, 10000)")
        .unwrap();
    let ro = uri(&cluster, "production-postgres-app", "production-postgres-ro").await;
    let standby_ips: Vec<String> = pods(&cluster)
        .await
        .iter()
        .filter(|p| p.metadata.name.as_deref() != Some("production-postgres-0"))
        .map(pod_ip)
        .collect();
    // Through -ro: a standby with every row (the forwarder picks the endpoint).
    let (ro_uri, rw_uri) = (&ro, &rw);
    eventually_some("-ro answers from a standby with all rows", || async move {
        let answer = psql(ro_uri, "SELECT count(*) || ' ' || pg_is_in_recovery() FROM items").ok()?;
        (answer == "10000 true").then_some(())
    })
    .await;
    // And every standby, by its pod IP, has every row.
    for ip in &standby_ips {
        let uri = at_address(rw_uri, ip);
        eventually_some("a standby has all rows", || {
            let uri = uri.clone();
            async move {
                (psql(&uri, "SELECT count(*) || ' ' || pg_is_in_recovery() FROM items").ok()? == "10000 true")
                    .then_some(())
            }
        })
        .await;
    }
    let refused = psql(&ro, "INSERT INTO items VALUES (10001)").unwrap_err();
    assert!(refused.contains("read-only transaction"), "{refused}");

    // Delete the app Secret: it comes back (a new password), and the database accepts it.
    let secrets: Api<Secret> = cluster.api();
    let old = secrets.get("production-postgres-app").await.unwrap();
    secrets.delete("production-postgres-app", &DeleteParams::default()).await.unwrap();
    let renewed = eventually_some("the app Secret is back with a new password", || async {
        let secret = secrets.get_opt("production-postgres-app").await.ok().flatten()?;
        (secret_value(&secret, "password") != secret_value(&old, "password")).then_some(secret)
    })
    .await;
    let new_rw = host_uri(&cluster, NS, &secret_value(&renewed, "uri"));
    eventually_some("the new app password logs in", || async {
        psql(&new_rw, "SELECT count(*) FROM items").ok()
    })
    .await;
    assert_eq!(psql(&new_rw, "SELECT count(*) FROM items"), Ok("10000".into()));
    let old_rw = host_uri(&cluster, NS, &secret_value(&old, "uri"));
    assert!(psql(&old_rw, "SELECT 1").unwrap_err().contains("password authentication failed"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scaling_clones_and_removes_standbys_and_hibernation_keeps_the_data() {
    let cluster = process_cluster().await;
    let _operator = cluster.start_operator().await;
    create(&cluster, 3, &[]).await;
    await_streaming(&cluster, NAME, 3, None).await;
    let rw = uri(&cluster, "production-postgres-app", "production-postgres-rw").await;
    psql(&rw, "CREATE TABLE kept (id int); INSERT INTO kept SELECT generate_series(1, 1000)").unwrap();
    let primary_ip = pod_ip(
        &pods(&cluster)
            .await
            .into_iter()
            .find(|p| p.metadata.name.as_deref() == Some("production-postgres-0"))
            .unwrap(),
    );

    for (replicas, expected_slots) in
        [(5, "instance_1,instance_2,instance_3,instance_4"), (2, "instance_1"), (3, "instance_1,instance_2")]
    {
        patch_spec(&cluster, serde_json::json!({"replicas": replicas})).await;
        await_streaming(&cluster, NAME, replicas, None).await;
        eventually_some(&format!("slots {expected_slots}"), || async {
            (slots(&cluster, &primary_ip).await == expected_slots).then_some(())
        })
        .await;
        for pod in pods(&cluster).await {
            let uri = pod_uri(&cluster, &pod_ip(&pod), "app").await;
            eventually_some("the instance has every row", || async {
                (psql(&uri, "SELECT count(*) FROM kept").ok()? == "1000").then_some(())
            })
            .await;
        }
    }

    // Storage growth on the running cluster: every instance's claim grows, `Resizing` is True
    // until the volumes report the size and False after, and the data is untouched.
    let resizing = watch_condition(&cluster, "Resizing").await;
    patch_spec(&cluster, serde_json::json!({"storageSize": "2Gi"})).await;
    let seen = within("Resizing True then False", async {
        let mut seen = Vec::new();
        let mut resizing = resizing;
        while let Some(status) = resizing.recv().await {
            seen.push(status);
            if seen.ends_with(&["True".to_owned(), "False".to_owned()]) {
                return seen;
            }
        }
        panic!("the watch ended after {seen:?}")
    })
    .await;
    assert_eq!(seen.first().map(String::as_str), Some("True"), "Resizing appears first: {seen:?}");
    let pvcs: Api<PersistentVolumeClaim> = cluster.api();
    for ordinal in 0..3 {
        let claim = pvcs.get(&format!("data-{NAME}-{ordinal}")).await.unwrap();
        let request =
            claim.spec.and_then(|s| s.resources).and_then(|r| r.requests).map(|r| r["storage"].0.clone());
        let capacity = claim.status.and_then(|s| s.capacity).map(|c| c["storage"].0.clone());
        assert_eq!((request.as_deref(), capacity.as_deref()), (Some("2Gi"), Some("2Gi")), "claim {ordinal}");
    }
    await_streaming(&cluster, NAME, 3, None).await;
    let rw = uri(&cluster, "production-postgres-app", "production-postgres-rw").await;
    assert_eq!(psql(&rw, "SELECT count(*) FROM kept").unwrap(), "1000", "the growth kept the data");

    patch_spec(&cluster, serde_json::json!({"replicas": 0})).await;
    let api = cluster.clusters();
    eventually_some("Hibernated with no pods", || async {
        let db = api.get(NAME).await.ok()?;
        let hibernated = db.status.as_ref()?.phase.map(|p| p.as_str()) == Some("Hibernated");
        (hibernated && pods(&cluster).await.is_empty()).then_some(())
    })
    .await;
    assert!(pvcs.get("data-production-postgres-0").await.is_ok(), "the volumes are kept");
    patch_spec(&cluster, serde_json::json!({"replicas": 3})).await;
    await_streaming(&cluster, NAME, 3, None).await;
    let rw = uri(&cluster, "production-postgres-app", "production-postgres-rw").await;
    eventually_some("the data survived hibernation", || async {
        (psql(&rw, "SELECT count(*) FROM kept").ok()? == "1000").then_some(())
    })
    .await;
}
