//! Continuous WAL archiving end to end: a DatabaseCluster with `spec.backup.objectStore` pointing
//! at a real S3-compatible server (moto, `common::s3`) runs real PostgreSQL 15 through the process
//! kubelet; the operator mounts the credentials Secret into the instance, the primary archives
//! every segment, and the status says so (`ContinuousArchiving=True`, `lastArchivedWAL`). The
//! store hangs: within a minute the condition is `False` with the reason, a Warning Event says
//! so, and writes still succeed; the store returns: the backlog is archived with no segment
//! missing, the condition flips back and a Normal Event says so. The credentials' values are in
//! no pod spec, status or Event.
#![cfg(feature = "sim")]

use crate::common;

use std::time::{Duration, Instant};

use common::postgres::*;
use common::s3::S3Server;
use common::*;
use dbcluster_operator::databasecluster::api::types::DatabaseCluster;

use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;

const NAME: &str = "archived";
const NS: &str = "default";
const BUCKET: &str = "e2e-archive";
const ACCESS_KEY_ID: &str = "AKIDE2EARCHIVING";
const SECRET_ACCESS_KEY: &str = "e2e-secret-access-key-value";

/// The app user's uri of the primary's pod, as the host reaches it.
async fn app_uri(cluster: &TestCluster) -> String {
    let secrets: Api<Secret> = cluster.api();
    let secret = secrets.get(&format!("{NAME}-app")).await.unwrap();
    let uri = String::from_utf8(secret.data.unwrap()["uri"].0.clone()).unwrap();
    let pod = cluster.api::<Pod>().get(&format!("{NAME}-0")).await.unwrap();
    // Verified against the cluster's CA, at the pod's own address.
    at_address(&host_uri(cluster, "default", &uri), &pod_ip(&pod))
}

/// Waits until `ContinuousArchiving` has `state`; the cluster.
async fn await_archiving(cluster: &TestCluster, state: &str, limit: Duration) -> DatabaseCluster {
    eventually_every(&format!("ContinuousArchiving={state}"), limit, REAL_POLL_INTERVAL, || async {
        let db = cluster.clusters().get(NAME).await.map_err(|e| e.to_string())?;
        match condition_of(&db, "ContinuousArchiving") {
            Some((s, _, _)) if s == state => Ok(db),
            other => Err(format!("{other:?}")),
        }
    })
    .await
}

fn segment_number(name: &str) -> u64 {
    u64::from_str_radix(&name[8..16], 16).unwrap() * 256 + u64::from_str_radix(&name[16..24], 16).unwrap()
}

async fn create_cluster(cluster: &TestCluster, s3: &S3Server) {
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "s3-credentials", "namespace": NS},
        "stringData": {"ACCESS_KEY_ID": ACCESS_KEY_ID, "ACCESS_SECRET_KEY": SECRET_ACCESS_KEY},
    }))
    .unwrap();
    cluster.api::<Secret>().create(&PostParams::default(), &secret).await.unwrap();
    let mut value = serde_json::to_value(sample()).unwrap();
    value["metadata"]["name"] = json!(NAME);
    value["spec"]["replicas"] = json!(1);
    value["spec"]["backup"] = json!({
        "storageSize": "1Gi",
        "objectStore": {
            "destination": format!("s3://{BUCKET}/{NAME}"),
            "endpoint": s3.endpoint(),
            "credentials": {"name": "s3-credentials"},
        },
        "walArchive": {"archiveTimeout": "1s"},
    });
    let db: DatabaseCluster = serde_json::from_value(value).unwrap();
    cluster.clusters().create(&PostParams::default(), &db).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_archive_is_reported_fails_visibly_while_the_store_hangs_and_catches_up_without_a_gap() {
    let s3 = S3Server::start().await;
    s3.create_bucket(BUCKET).await;
    let cluster = process_cluster().await;
    let operator = cluster.start_operator().await;
    cluster.track_events(&operator);
    create_cluster(&cluster, &s3).await;
    await_streaming(&cluster, NAME, 1, None).await;
    let uri = app_uri(&cluster).await;
    eventually_every("the app's first write", Duration::from_secs(60), REAL_POLL_INTERVAL, || async {
        psql(
            &uri,
            "CREATE TABLE IF NOT EXISTS items (id int); INSERT INTO items SELECT generate_series(1, 100)",
        )
    })
    .await;
    let healthy = await_archiving(&cluster, "True", REAL_WAIT).await;
    let first = healthy.status.unwrap().backups.unwrap().last_archived_wal.expect("lastArchivedWAL");

    s3.pause();
    let paused = Instant::now();
    psql(&uri, "INSERT INTO items SELECT generate_series(101, 200)").expect("writes go on");
    let failing = await_archiving(&cluster, "False", Duration::from_secs(90)).await;
    let took = paused.elapsed();
    eprintln!("ContinuousArchiving=False {took:?} after the store stopped answering");
    assert!(took < Duration::from_secs(60), "reported within a minute, took {took:?}");
    let (_, reason, message) = condition_of(&failing, "ContinuousArchiving").unwrap();
    assert_eq!(reason, "ArchivingFailing");
    assert!(message.contains("wait on the primary"), "{message}");
    psql(&uri, "INSERT INTO items SELECT generate_series(201, 300)").expect("writes still go on");
    await_event_reasons(&cluster, NAME, &["ArchivingFailed"]).await;

    s3.resume();
    psql(&uri, "INSERT INTO items SELECT generate_series(301, 400)").unwrap();
    let recovered = await_archiving(&cluster, "True", REAL_WAIT).await;
    await_event_reasons(&cluster, NAME, &["ArchivingRecovered"]).await;
    let last = recovered.status.clone().unwrap().backups.unwrap().last_archived_wal.unwrap();
    assert!(segment_number(&last) > segment_number(&first), "{first} then {last}");

    let store = s3.client(BUCKET, NAME, ACCESS_KEY_ID, SECRET_ACCESS_KEY);
    let numbers: Vec<u64> = store
        .list("wal")
        .await
        .unwrap()
        .iter()
        .filter_map(|n| n.rsplit('/').next())
        .map(|f| f.trim_end_matches(".gz"))
        .filter(|f| f.len() == 24)
        .map(segment_number)
        .collect();
    let expected: Vec<u64> = (numbers[0]..=segment_number(&last)).collect();
    assert_eq!(numbers[..expected.len()], expected[..], "no segment missing from the archive");

    // The credentials' values are nowhere the API shows: pod specs, the status, the Events.
    let pods = cluster.api::<Pod>().list(&ListParams::default()).await.unwrap();
    let shown = [
        serde_json::to_string(&pods.items).unwrap(),
        serde_json::to_string(&recovered.status).unwrap(),
        serde_json::to_string(&cluster.events_about(NAME).await).unwrap(),
    ];
    for text in shown {
        assert!(!text.contains(SECRET_ACCESS_KEY) && !text.contains(ACCESS_KEY_ID), "a credential shown");
    }
    assert!(serde_json::to_string(&pods.items).unwrap().contains("s3-credentials"), "mounted by name");
}
