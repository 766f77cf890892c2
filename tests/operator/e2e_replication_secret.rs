//! The `<name>-replication` Secret, end to end on the timer kubelet: it carries no password (the
//! replication user logs in by certificate), and a Secret an older version made, still holding
//! one, keeps it and every other key: the operator neither reads nor rewrites what it no longer
//! writes.
#![cfg(feature = "sim")]

use crate::common;

use std::collections::BTreeMap;

use common::*;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::PostParams;

const NAME: &str = "production-postgres";

fn keys(secret: &Secret) -> Vec<String> {
    secret.data.as_ref().map(|data| data.keys().cloned().collect()).unwrap_or_default()
}

async fn await_ready(cluster: &TestCluster) {
    await_object(&cluster.clusters(), NAME, "Ready=True", |c| {
        c.status
            .as_ref()
            .is_some_and(|s| s.conditions.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn the_replication_secret_has_no_password() {
    let cluster = TestCluster::start().await;
    let _operator = cluster.start_operator().await;
    cluster.clusters().create(&PostParams::default(), &sample()).await.unwrap();
    await_ready(&cluster).await;
    let secret = cluster.api::<Secret>().get(&format!("{NAME}-replication")).await.unwrap();
    assert_eq!(keys(&secret), ["ca.crt", "dbname", "host", "port", "sslmode", "sslrootcert", "username"]);
}

#[tokio::test(start_paused = true)]
async fn an_older_replication_secret_keeps_its_password_and_its_other_keys() {
    let cluster = TestCluster::start().await;
    let old = BTreeMap::from([
        ("username".to_owned(), ByteString(b"replicator".to_vec())),
        ("password".to_owned(), ByteString(b"an-older-versions-password".to_vec())),
        ("note".to_owned(), ByteString(b"a key of the user's".to_vec())),
    ]);
    let mut secret =
        Secret { data: Some(old), type_: Some("kubernetes.io/basic-auth".into()), ..Secret::default() };
    secret.metadata.name = Some(format!("{NAME}-replication"));
    let secrets = cluster.api::<Secret>();
    secrets.create(&PostParams::default(), &secret).await.unwrap();
    let _operator = cluster.start_operator().await;
    cluster.clusters().create(&PostParams::default(), &sample()).await.unwrap();
    await_ready(&cluster).await;
    let live = secrets.get(&format!("{NAME}-replication")).await.unwrap();
    let data = live.data.as_ref().unwrap();
    assert_eq!(data["password"].0, b"an-older-versions-password", "not clobbered");
    assert_eq!(data["note"].0, b"a key of the user's");
    assert!(data.contains_key("ca.crt"), "the operator's own keys are written: {:?}", keys(&live));
}
