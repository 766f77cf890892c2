//! One cluster, one database (issue 12), with real PostgreSQL 15 through the process kubelet: a
//! primary with streaming standbys, the `-rw`/`-ro`/`-r` Services, role labels and
//! `status.instances` from observed facts, Secrets whose passwords the database accepts, scaling
//! and hibernation, storage growth, rolling updates and reloads.

mod common;

use std::collections::BTreeMap;
use std::time::Instant;

use common::postgres::*;
use common::*;
use dbcluster_operator::databasecluster::api::types::DatabaseCluster;
use dbcluster_operator::databasecluster::specs::app_secret::APP_SECRET_OF;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Secret, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};

const NAME: &str = "production-postgres";
const NS: &str = "default";

fn secret_value(secret: &Secret, key: &str) -> String {
    let bytes = &secret.data.as_ref().expect("data")[key].0;
    String::from_utf8(bytes.clone()).expect("utf-8")
}

async fn create(cluster: &TestCluster, replicas: i32, config: &[(&str, &str)]) {
    let mut db = sample();
    db.spec.replicas = replicas;
    db.spec.backup_schedule = None;
    if !config.is_empty() {
        db.spec.postgres_config =
            Some(config.iter().map(|(n, v)| ((*n).to_owned(), (*v).to_owned())).collect());
    }
    cluster.clusters().patch(NAME, &PatchParams::apply("kubectl"), &Patch::Apply(&db)).await.unwrap();
}

async fn patch_spec(cluster: &TestCluster, spec: serde_json::Value) {
    let patch = serde_json::json!({ "spec": spec });
    cluster.clusters().patch(NAME, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
}

/// Waits until the cluster reports `replicas` ready instances, a primary, and every standby
/// streaming; on timeout the failure shows the last status seen.
async fn await_streaming(cluster: &TestCluster, replicas: usize) -> DatabaseCluster {
    let api = cluster.clusters();
    let what = format!("{replicas} instances ready and streaming");
    eventually_every(&what, REAL_WAIT, REAL_POLL_INTERVAL, || async {
        let db = api.get(NAME).await.map_err(|e| e.to_string())?;
        let Some(status) = db.status.as_ref() else { return Err("no status".to_owned()) };
        let instances = &status.instances;
        let done = status.ready_instances.as_deref() == Some(&format!("{replicas}/{replicas}"))
            && instances.len() == replicas
            && instances.iter().all(|i| i.ready)
            // Every instance observed in this pass (an unobserved one has role `unknown`).
            && instances.iter().all(|i| i.role == "primary" || i.role == "replica")
            && instances.iter().filter(|i| i.role == "primary").count() == 1
            && instances
                .iter()
                .filter(|i| i.role == "replica")
                .all(|i| i.replication_state.as_deref() == Some("streaming"))
            && status.current_primary.is_some()
            && status.phase.map(|p| p.as_str()) == Some("Running");
        if done {
            Ok(db)
        } else {
            Err(format!("{:?} {:?}: {instances:?}", status.phase, status.ready_instances))
        }
    })
    .await
}

async fn uri(cluster: &TestCluster, secret: &str, service: &str) -> String {
    let secrets: Api<Secret> = cluster.api();
    let secret =
        eventually_some("the Secret", || async { secrets.get_opt(secret).await.ok().flatten() }).await;
    let uri = secret_value(&secret, "uri").replace(&format!("{NAME}-rw."), &format!("{service}."));
    host_uri(cluster, NS, &uri)
}

async fn pods(cluster: &TestCluster) -> Vec<Pod> {
    let api: Api<Pod> = cluster.api();
    let list =
        api.list(&ListParams::default().labels(&format!("app.kubernetes.io/instance={NAME}"))).await.unwrap();
    list.items
}

fn pod_ip(pod: &Pod) -> String {
    pod.status.as_ref().and_then(|s| s.pod_ip.clone()).unwrap_or_default()
}

fn start_time(pod: &Pod) -> String {
    let status = pod.status.as_ref().and_then(|s| s.container_statuses.as_ref()).unwrap();
    let postgres = status.iter().find(|c| c.name == "postgres").unwrap();
    format!("{:?}", postgres.state.as_ref().and_then(|s| s.running.as_ref()).map(|r| &r.started_at))
}

/// The superuser's uri to one pod by IP.
async fn pod_uri(cluster: &TestCluster, ip: &str, database: &str) -> String {
    let secrets: Api<Secret> = cluster.api();
    let secret = secrets.get(&format!("{NAME}-superuser")).await.unwrap();
    format!("postgresql://postgres:{}@{ip}:5432/{database}", secret_value(&secret, "password"))
}

async fn slots(cluster: &TestCluster, primary_ip: &str) -> String {
    let uri = pod_uri(cluster, primary_ip, "postgres").await;
    psql(&uri, "SELECT string_agg(slot_name, ',' ORDER BY slot_name) FROM pg_replication_slots").unwrap()
}

/// The cluster's `type_` condition status at each change a watch delivers (from now on; repeats
/// of the same status are left out), so a transient state is seen even if it lasts one pass.
async fn watch_condition(
    cluster: &TestCluster,
    type_: &'static str,
) -> tokio::sync::mpsc::UnboundedReceiver<String> {
    let api = cluster.clusters();
    let current = api.get(NAME).await.unwrap();
    let version = current.metadata.resource_version.clone().unwrap();
    let mut last = condition(&current, type_).map(|(status, _)| status);
    let mut stream = api
        .watch(&WatchParams::default().fields(&format!("metadata.name={NAME}")), &version)
        .await
        .unwrap()
        .boxed();
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Some(event) = stream.next().await {
            let Ok(WatchEvent::Modified(db)) = event else { continue };
            let status = condition(&db, type_).map(|(status, _)| status);
            if status != last {
                last = status.clone();
                if let Some(status) = status
                    && tx.send(status).is_err()
                {
                    break;
                }
            }
        }
    });
    rx
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_go_to_the_primary_reads_to_the_standbys_and_the_secrets_always_log_in() {
    let cluster = process_cluster().await;
    let _operator = cluster.start_operator().await;
    create(&cluster, 3, &[]).await;
    let db = await_streaming(&cluster, 3).await;
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
        let uri = rw_uri.replacen(&url::Url::parse(rw_uri).unwrap().host_str().unwrap().to_owned(), ip, 1);
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
    await_streaming(&cluster, 3).await;
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
        await_streaming(&cluster, replicas).await;
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
    await_streaming(&cluster, 3).await;
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
    await_streaming(&cluster, 3).await;
    let rw = uri(&cluster, "production-postgres-app", "production-postgres-rw").await;
    eventually_some("the data survived hibernation", || async {
        (psql(&rw, "SELECT count(*) FROM kept").ok()? == "1000").then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn updates_roll_standbys_first_and_reloadable_settings_reload() {
    let cluster = process_cluster().await;
    let _operator = cluster.start_operator().await;
    create(&cluster, 3, &[("work_mem", "4MB")]).await;
    await_streaming(&cluster, 3).await;
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
    await_streaming(&cluster, 3).await;
    writer.await_acknowledged(4, Instant::now(), "after the upgrade").await;
    let log = writer.finish().await;
    let acknowledged = log.iter().filter(|w| w.acknowledged()).count();
    println!(
        "rolling upgrade: {acknowledged} acknowledged writes, longest write outage {:?}",
        longest_outage(&log)
    );
    let lost = lost_writes(&rw, &log);
    assert!(lost.is_empty(), "acknowledged writes lost: {lost:?}; the writes:{}", timeline(&log));
    let order = await_event_reasons(&cluster, NAME, &["RollingUpdate"]).await;
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
    // The requests tests/rbac.rs cannot see with its timer kubelet: role labels and roll deletions.
    let log = cluster.sim.request_log();
    for verb in ["patch", "delete"] {
        assert!(
            log.iter().any(|r| r.resource == "pods" && r.verb == verb && r.subresource.is_none()),
            "pods {verb}"
        );
    }
    // With 3 instances the primary's turn is a switchover to an updated standby
    // (primaryUpdateMethod: Switchover, the default); the old primary is then updated as a standby.
    assert!(rolls[2].contains("standby production-postgres-0"), "the old primary goes last: {rolls:?}");
    assert!(
        events.iter().any(|e| e.reason.as_deref() == Some("SwitchedOver")),
        "the primary was switched over, not restarted"
    );

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

/// Issue 11's password rule: a cluster deleted and re-created over its kept volumes gets new
/// Secrets, and the database (initialised with the old passwords) accepts the new ones, since each
/// instance applies its mounted Secrets at start. Then the same for a Secret of the user's own
/// (`spec.appSecretName`), its rotation, and a name that does not exist.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_recreated_over_its_kept_volumes_accepts_its_new_secrets() {
    let cluster = process_cluster().await;
    let _operator = cluster.start_operator().await;
    create(&cluster, 1, &[]).await;
    await_streaming(&cluster, 1).await;
    let rw = uri(&cluster, "production-postgres-app", "production-postgres-rw").await;
    psql(&rw, "CREATE TABLE kept (id int); INSERT INTO kept SELECT generate_series(1, 100)").unwrap();
    let secrets: Api<Secret> = cluster.api();
    let old = secret_value(&secrets.get("production-postgres-app").await.unwrap(), "password");

    cluster.clusters().delete(NAME, &DeleteParams::default()).await.unwrap();
    eventually_some("the cluster, its pods and Secrets gone", || async {
        let gone = cluster.clusters().get_opt(NAME).await.ok()?.is_none()
            && pods(&cluster).await.is_empty()
            && secrets.get_opt("production-postgres-app").await.ok()?.is_none();
        gone.then_some(())
    })
    .await;
    let pvcs: Api<PersistentVolumeClaim> = cluster.api();
    assert!(pvcs.get("data-production-postgres-0").await.is_ok(), "the volume is kept (Retain)");

    create(&cluster, 1, &[]).await;
    await_streaming(&cluster, 1).await;
    let renewed = secrets.get("production-postgres-app").await.unwrap();
    assert_ne!(secret_value(&renewed, "password"), old, "a new Secret, a new password");
    let rw = uri(&cluster, "production-postgres-app", "production-postgres-rw").await;
    let count = eventually_some("the new app password logs in", || async {
        psql(&rw, "SELECT count(*) FROM kept").ok()
    })
    .await;
    assert_eq!(count, "100", "the data is the kept volume's");

    // The user's own app Secret (spec.appSecretName): the database accepts its password; the
    // operator labels it and changes nothing else; the user's rotation reaches the database.
    let team = "team-db-credentials";
    let team_secret = |password: &str| Secret {
        metadata: kube::api::ObjectMeta { name: Some(team.into()), ..Default::default() },
        string_data: Some(BTreeMap::from([
            ("username".to_owned(), "app".to_owned()),
            ("password".to_owned(), password.to_owned()),
        ])),
        ..Secret::default()
    };
    secrets.create(&PostParams::default(), &team_secret("chosen-by-the-team-1")).await.unwrap();
    patch_spec(&cluster, serde_json::json!({"appSecretName": team})).await;
    let team_uri = |password: &str| {
        host_uri(&cluster, NS, &format!("postgresql://app:{password}@{NAME}-rw.{NS}.svc:5432/app"))
    };
    let logs_in = |password: &'static str| {
        let uri = team_uri(password);
        move || {
            let uri = uri.clone();
            async move { (psql(&uri, "SELECT count(*) FROM kept").ok()? == "100").then_some(()) }
        }
    };
    eventually_some("the team's password logs in", logs_in("chosen-by-the-team-1")).await;
    let labelled = secrets.get(team).await.unwrap();
    let labels = labelled.metadata.labels.clone().unwrap_or_default();
    assert_eq!(labels.get(APP_SECRET_OF).map(String::as_str), Some(NAME), "{labels:?}");
    assert_eq!(labels.len(), 1, "only the operator's label is added: {labels:?}");
    assert_eq!(secret_value(&labelled, "password"), "chosen-by-the-team-1", "the data is the user's");
    assert!(labelled.metadata.owner_references.is_none(), "the operator does not own the user's Secret");

    let rotated = serde_json::json!({"stringData": {"password": "chosen-by-the-team-2"}});
    secrets.patch(team, &PatchParams::default(), &Patch::Merge(&rotated)).await.unwrap();
    eventually_some("the rotated password logs in", logs_in("chosen-by-the-team-2")).await;
    let refused = psql(&team_uri("chosen-by-the-team-1"), "SELECT 1").unwrap_err();
    assert!(refused.contains("password authentication failed"), "{refused}");

    // A Secret that does not exist: the pass fails saying so, as a Warning Event; the data stays.
    patch_spec(&cluster, serde_json::json!({"appSecretName": "no-such-secret"})).await;
    eventually_some("a Warning naming the missing Secret", || async {
        let events = cluster.events_about(NAME).await;
        events
            .iter()
            .any(|e| {
                e.type_.as_deref() == Some("Warning")
                    && e.note.as_deref().is_some_and(|n| n.contains("Secret no-such-secret does not exist"))
            })
            .then_some(())
    })
    .await;
    assert_eq!(psql(&team_uri("chosen-by-the-team-2"), "SELECT count(*) FROM kept"), Ok("100".into()));
}

/// Issue 11: an instance that cannot start (a parameter value the server refuses) shows in the
/// cluster's status with the reason from its container's state, not just `Provisioning`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_that_cannot_start_says_why_in_the_status() {
    let cluster = process_cluster().await;
    let _operator = cluster.start_operator().await;
    create(&cluster, 1, &[("work_mem", "lots")]).await;
    let api = cluster.clusters();
    let (reason, message, instance) = eventually_some("Ready=False, InstanceFailing", || async {
        let db = api.get(NAME).await.ok()?;
        let status = db.status?;
        let ready = status.conditions.iter().find(|c| c.type_ == "Ready")?.clone();
        let instance = status.instances.first()?.message.clone()?;
        (ready.reason == "InstanceFailing").then_some((ready.reason, ready.message, instance))
    })
    .await;
    assert_eq!(reason, "InstanceFailing");
    assert!(message.contains("production-postgres-0: container "), "{message}");
    assert!(
        ["CrashLoopBackOff", "Error"].iter().any(|r| instance.contains(r)),
        "the container's state: {instance}"
    );
    let phase = api.get(NAME).await.unwrap().status.unwrap().phase.map(|p| p.as_str());
    assert_ne!(phase, Some("Running"));
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
    await_streaming(&cluster, 1).await;
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
