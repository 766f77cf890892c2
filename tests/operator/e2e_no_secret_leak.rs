//! The generated password, and the keys and certificates the operator issues, never leave their
//! Secrets: not in a log line of the operator (captured at trace level), not in an Event, not in
//! the StatefulSet or the cluster's status.
#![cfg(feature = "sim")]

use crate::common;

use base64::Engine;
use common::*;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;

const NAME: &str = "production-postgres";

#[tokio::test(start_paused = true)]
async fn the_password_keys_and_certificates_appear_only_in_their_secrets() {
    // On this test's thread (the whole test on the paused clock's current-thread runtime).
    let logs = Captured::default();
    let _capture =
        logs.start("dbcluster_operator::databasecluster=trace,dbcluster_operator::runtime=trace,kube=trace");

    let cluster = TestCluster::start().await;
    let operator = cluster.start_operator().await;
    let api = cluster.clusters();
    api.create(&PostParams::default(), &sample()).await.unwrap();
    await_object(&api, NAME, "Running 3/3", |c| phase(c) == Some("Running") && ready(c) == 3).await;
    // A scale and a hand edit of the Secret's labels bring more passes and writes.
    api.patch(NAME, &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": 4}}))).await.unwrap();
    await_object(&api, NAME, "Running 4/4", |c| phase(c) == Some("Running") && ready(c) == 4).await;
    let secrets = cluster.api::<Secret>();
    let drop_label = Patch::Merge(json!({"metadata": {"labels": {"app.kubernetes.io/component": "edited"}}}));
    secrets.patch("production-postgres-app", &PatchParams::default(), &drop_label).await.unwrap();
    await_object(&secrets, "production-postgres-app", "the label restored", |s| {
        s.metadata.labels.as_ref().unwrap()["app.kubernetes.io/component"] == "database"
    })
    .await;
    reconcile_now(&operator, &key(NAME)).await;
    operator.stop().await;

    let secret = secrets.get("production-postgres-app").await.unwrap();
    let password = String::from_utf8(secret.data.unwrap()["password"].0.clone()).unwrap();
    // The password, and every key and certificate the operator issued: the whole value, its
    // base64 as the Secret stores it, and (for a PEM) a line of its body.
    let mut secret_values = vec![password];
    for (name, key) in [
        ("production-postgres-ca", "ca.key"),
        ("production-postgres-ca", "ca.crt"),
        ("production-postgres-server", "tls.key"),
        ("production-postgres-server", "tls.crt"),
        ("production-postgres-replication-client", "tls.key"),
    ] {
        let pem = secret_value(&secrets.get(name).await.unwrap(), key);
        let body_line = pem.lines().nth(1).expect("a PEM body").to_owned();
        assert!(body_line.len() >= 40, "{name}/{key}: a line of the PEM body");
        secret_values.extend([pem, body_line]);
    }
    let encoded: Vec<String> =
        secret_values.iter().map(|v| base64::engine::general_purpose::STANDARD.encode(v)).collect();
    let leaks = |text: &str| secret_values.iter().chain(&encoded).any(|v| text.contains(v.as_str()));

    let logs = logs.text();
    assert!(logs.contains("child reconciled"), "the operator's logs were captured");
    assert!(!leaks(&logs), "a password, key or certificate is in the logs");
    for event in cluster.events_about(NAME).await {
        assert!(!leaks(&serde_json::to_string(&event).unwrap()), "the password is in {event:?}");
    }
    let sts = cluster.api::<StatefulSet>().get(NAME).await.unwrap();
    assert!(!leaks(&serde_json::to_string(&sts).unwrap()), "the password is in the StatefulSet");
    let live = api.get(NAME).await.unwrap();
    assert!(!leaks(&serde_json::to_string(&live).unwrap()), "the password is in the DatabaseCluster");
}
