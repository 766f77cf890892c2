//! `spec.backup.objectStore` and `walArchive` at the API server (the simulator runs as
//! Kubernetes 1.28 and compiles the CRD's CEL rules as 1.28 does): a malformed destination,
//! endpoint or archive timeout is refused with the rule's message naming the expected form; a
//! valid store is accepted and the operator builds the instances' pods with the credentials
//! mounted by name and the store's settings as plain environment.
#![cfg(feature = "sim")]

use crate::common;

use common::*;
use dbcluster_operator::databasecluster::api::object_store::{
    ARCHIVE_TIMEOUT_MESSAGE, DESTINATION_MESSAGE, ENDPOINT_MESSAGE,
};
use dbcluster_operator::databasecluster::api::types::DatabaseCluster;
use k8s_openapi::api::apps::v1::StatefulSet;
use kube::api::PostParams;
use serde_json::json;

fn with_backup(name: &str, backup: serde_json::Value) -> DatabaseCluster {
    let mut value = serde_json::to_value(sample()).unwrap();
    value["metadata"]["name"] = json!(name);
    value["spec"]["backup"] = backup;
    serde_json::from_value(value).unwrap()
}

fn store(destination: &str, endpoint: &str) -> serde_json::Value {
    json!({"destination": destination, "endpoint": endpoint, "credentials": {"name": "s3-credentials"}})
}

#[tokio::test]
async fn malformed_store_settings_are_refused_with_messages_that_name_the_form() {
    let cluster = TestCluster::start().await;
    let api = cluster.clusters();
    let cases = [
        (json!({"objectStore": store("s3://UPPER/x", "https://s3.example.com")}), DESTINATION_MESSAGE),
        (json!({"objectStore": store("gs://bucket/x", "https://s3.example.com")}), DESTINATION_MESSAGE),
        (json!({"objectStore": store("s3://bucket/x", "s3.example.com:9000")}), ENDPOINT_MESSAGE),
        (
            json!({"objectStore": store("s3://bucket/x", "https://s3.example.com"), "walArchive": {"archiveTimeout": "0s"}}),
            ARCHIVE_TIMEOUT_MESSAGE,
        ),
        (
            json!({"objectStore": store("s3://bucket/x", "https://s3.example.com"), "walArchive": {"archiveTimeout": "500ms"}}),
            ARCHIVE_TIMEOUT_MESSAGE,
        ),
    ];
    for (n, (backup, message)) in cases.into_iter().enumerate() {
        let error =
            api.create(&PostParams::default(), &with_backup(&format!("bad-{n}"), backup.clone())).await;
        let Err(kube::Error::Api(status)) = error else { panic!("{backup} was accepted: {error:?}") };
        assert_eq!(status.code, 422, "{backup}");
        assert!(status.message.contains(message), "{backup}: {}", status.message);
    }
}

#[tokio::test]
async fn a_valid_store_gives_the_pods_its_settings_and_the_secret_by_name() {
    let cluster = TestCluster::start().await;
    let _operator = cluster.start_operator().await;
    let backup = json!({
        "objectStore": store("s3://bucket/prod", "https://s3.example.com"),
        "walArchive": {"archiveTimeout": "30s"},
        "retention": {"recoveryWindow": "7d"},
    });
    cluster.clusters().create(&PostParams::default(), &with_backup("archived", backup)).await.unwrap();
    let sts = await_object(&cluster.api::<StatefulSet>(), "archived", "the StatefulSet", |_| true).await;
    let pod = sts.spec.unwrap().template.spec.unwrap();
    let volume = pod.volumes.unwrap().into_iter().find(|v| v.name == "objectstore-credentials").unwrap();
    assert_eq!(volume.secret.unwrap().secret_name.as_deref(), Some("s3-credentials"));
    let postgres = pod.containers.iter().find(|c| c.name == "postgres").unwrap();
    let env: Vec<(String, Option<String>)> =
        postgres.env.clone().unwrap().into_iter().map(|e| (e.name, e.value)).collect();
    assert!(env.contains(&("DBC_WAL_ARCHIVE_TIMEOUT".into(), Some("30".into()))), "{env:?}");
    assert!(env.contains(&("DBC_OBJECT_STORE_DESTINATION".into(), Some("s3://bucket/prod".into()))));
    let mounts = postgres.volume_mounts.clone().unwrap();
    assert!(mounts.iter().any(|m| m.name == "objectstore-credentials" && m.read_only == Some(true)));
}
