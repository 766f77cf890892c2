//! One cluster, one database, with real PostgreSQL 15 through the process kubelet: a
//! primary with streaming standbys, the `-rw`/`-ro`/`-r` Services, role labels and
//! `status.instances` from observed facts (the instance managers' `/status`: the operator opens no
//! database session), Secrets whose passwords the database accepts, scaling and hibernation,
//! storage growth, rolling updates and reloads.
#![cfg(feature = "sim")]

use crate::common;

use std::collections::BTreeMap;
use std::time::Instant;

use common::postgres::*;
use common::*;
use dbcluster_operator::databasecluster::specs::app_secret::APP_SECRET_OF;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Secret, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};

mod observation;
mod recovery;
mod replication;
mod updates;

const NAME: &str = "production-postgres";
const NS: &str = "default";

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
