//! Base backups to the object store and point-in-time recovery from it, end to end: real
//! PostgreSQL 15 through the process kubelet, a real S3-compatible server (moto, `common::s3`).
//!
//! A source with a primary and a streaming standby archives WAL every second; `backup-now` takes a
//! base backup from the standby, streamed into the store with its manifest written last, and the
//! status names it with the first recoverability point.
#![cfg(feature = "sim")]

use crate::common;

use common::postgres::*;
use common::s3::S3Server;
use common::*;
use dbcluster_operator::databasecluster::api::types::DatabaseCluster;
use dbcluster_operator::instance::archive::manifest::BackupManifest;
use dbcluster_operator::instance::archive::store::Store;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

const NS: &str = "default";
const BUCKET: &str = "e2e-pitr";
const SOURCE: &str = "pitr-source";
const ACCESS_KEY_ID: &str = "AKIDE2EPITRSOURCE";
const SECRET_ACCESS_KEY: &str = "e2e-pitr-secret-access-key";

/// The store spec of a cluster whose archive is at `s3://BUCKET/<path>`.
pub fn store_spec(s3: &S3Server, path: &str) -> serde_json::Value {
    json!({
        "destination": format!("s3://{BUCKET}/{path}"),
        "endpoint": s3.endpoint(),
        "credentials": {"name": "s3-credentials"},
    })
}

fn database(name: &str, replicas: i32, extra: serde_json::Value) -> DatabaseCluster {
    let mut value = serde_json::to_value(sample()).unwrap();
    value["metadata"]["name"] = json!(name);
    value["spec"]["replicas"] = json!(replicas);
    for (key, field) in extra.as_object().unwrap() {
        value["spec"][key] = field.clone();
    }
    serde_json::from_value(value).unwrap()
}

/// The app user's uri of `name`'s primary, as the host reaches it.
pub async fn app_uri(cluster: &TestCluster, name: &str) -> String {
    let secret = cluster.api::<Secret>().get(&format!("{name}-app")).await.unwrap();
    let uri = String::from_utf8(secret.data.unwrap()["uri"].0.clone()).unwrap();
    host_uri(cluster, NS, &uri)
}

fn condition_of(db: &DatabaseCluster, type_: &str) -> Option<(String, String, String)> {
    let c = db.status.as_ref()?.conditions.iter().find(|c| c.type_ == type_)?;
    Some((c.status.clone(), c.reason.clone(), c.message.clone()))
}

/// The started environment: the store, the simulated cluster with the operator, the credentials.
pub struct Setup {
    /// moto.
    pub s3: S3Server,
    /// The simulated cluster.
    pub cluster: TestCluster,
    /// The operator (kept running).
    pub _operator: RunningOperator,
}

/// Starts moto with the bucket, the cluster, the operator, and the credentials Secret.
pub async fn setup() -> Setup {
    let s3 = S3Server::start().await;
    s3.create_bucket(BUCKET).await;
    let cluster = process_cluster().await;
    let operator = cluster.start_operator().await;
    cluster.track_events(&operator);
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "s3-credentials", "namespace": NS},
        "stringData": {"ACCESS_KEY_ID": ACCESS_KEY_ID, "ACCESS_SECRET_KEY": SECRET_ACCESS_KEY},
    }))
    .unwrap();
    cluster.api::<Secret>().create(&PostParams::default(), &secret).await.unwrap();
    Setup { s3, cluster, _operator: operator }
}

/// The store of the archive at `path`, as the tests read it.
pub fn store(setup: &Setup, path: &str) -> Store {
    setup.s3.client(BUCKET, path, ACCESS_KEY_ID, SECRET_ACCESS_KEY)
}

/// Creates the source (`replicas` instances, archiving every second) with table `items`.
pub async fn create_source(setup: &Setup, replicas: i32) -> String {
    let backup =
        json!({"objectStore": store_spec(&setup.s3, SOURCE), "walArchive": {"archiveTimeout": "1s"}});
    let db = database(SOURCE, replicas, json!({"backup": backup}));
    setup.cluster.clusters().create(&PostParams::default(), &db).await.unwrap();
    await_streaming(&setup.cluster, SOURCE, replicas as usize, None).await;
    let uri = app_uri(&setup.cluster, SOURCE).await;
    eventually_some("the source's first write", || async {
        psql(
            &uri,
            "CREATE TABLE IF NOT EXISTS items (id int PRIMARY KEY, at timestamptz DEFAULT clock_timestamp())",
        )
        .ok()
    })
    .await;
    uri
}

/// Asks for a backup with `token` and waits for it to succeed; the cluster then.
pub async fn backup_now(setup: &Setup, token: &str) -> DatabaseCluster {
    let api = setup.cluster.clusters();
    let patch = json!({"metadata": {"annotations": {"databases.madmmas.dev/backup-now": token}}});
    api.patch(SOURCE, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    let job = dbcluster_operator::databasecluster::backup::jobs::on_demand_job_name(SOURCE, token);
    eventually_every(&format!("backup {token} succeeded"), REAL_WAIT, REAL_POLL_INTERVAL, || async {
        let db = api.get(SOURCE).await.map_err(|e| e.to_string())?;
        let last_job = db.status.as_ref().and_then(|s| s.backups.as_ref()).and_then(|b| b.last_job.clone());
        match (condition_of(&db, "LastBackupSucceeded"), last_job) {
            (Some((state, _, _)), Some(last)) if last.name == job && state == "True" => Ok(db),
            (Some((state, _, message)), Some(last)) if last.name == job && state == "False" => {
                panic!("backup {token} failed: {message}")
            }
            other => Err(format!("{other:?}")),
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_base_backup_streams_from_the_standby_into_the_store_with_its_manifest_last() {
    let setup = setup().await;
    let uri = create_source(&setup, 2).await;
    psql(&uri, "INSERT INTO items (id) SELECT generate_series(1, 1000)").unwrap();
    let db = backup_now(&setup, "first").await;
    let backups = db.status.clone().unwrap().backups.unwrap();
    let last = backups.last.expect("status.backups.last");
    let (_, _, message) = condition_of(&db, "LastBackupSucceeded").unwrap();
    assert!(message.contains("pitr-source-ro."), "taken from the streaming standby: {message}");
    assert_eq!(backups.first_recoverability_point, Some(last.end_time.clone()), "the only backup");

    // In the store: the data and the manifest, whose checksum and size are the data's.
    let store = store(&setup, SOURCE);
    let manifest = store.get(&BackupManifest::object_name(&last.name)).await.unwrap().expect("the manifest");
    let manifest: BackupManifest = serde_json::from_slice(&manifest).unwrap();
    assert_eq!(manifest.name, last.name);
    assert!(manifest.source.starts_with("pitr-source-ro."), "{manifest:?}");
    assert_eq!(manifest.size_bytes as i64, last.size_bytes);
    let mut data = Vec::new();
    let got = store.download_stream(&manifest.data_object_name(), &mut data).await.unwrap();
    assert_eq!((got.bytes, got.sha256.as_str()), (manifest.size_bytes, manifest.sha256.as_str()));
    let names = store.list("wal").await.unwrap();
    for segment in [&manifest.start_wal, &manifest.end_wal] {
        assert!(names.iter().any(|n| n.contains(segment.as_str())), "{segment} archived: {names:?}");
    }

    // The Job's pod names the credentials' Secret, never a value; its command is the manager's.
    let pods = setup.cluster.api::<Pod>().list(&ListParams::default()).await.unwrap();
    let jobs = setup.cluster.api::<Job>().list(&ListParams::default()).await.unwrap();
    let shown = [
        serde_json::to_string(&pods.items).unwrap(),
        serde_json::to_string(&jobs.items).unwrap(),
        serde_json::to_string(&db.status).unwrap(),
        serde_json::to_string(&setup.cluster.events_about(SOURCE).await).unwrap(),
    ];
    for text in shown {
        assert!(!text.contains(SECRET_ACCESS_KEY) && !text.contains(ACCESS_KEY_ID), "a credential shown");
    }
    assert!(serde_json::to_string(&jobs.items).unwrap().contains("base-backup"));
}
