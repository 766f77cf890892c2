//! The certificates' status, end to end on the timer kubelet: every certificate's expiry is in the
//! status (never a key or a certificate), and a certificate the operator cannot renew (here the
//! CA, which it never replaces, close to its expiry) brings the condition `CertificatesExpiring`
//! and one Warning Event.
#![cfg(feature = "sim")]

use crate::common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::*;
use dbcluster_operator::databasecluster::tls::issue::issue_ca;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::PostParams;

const NAME: &str = "production-postgres";

#[tokio::test(start_paused = true)]
async fn the_status_shows_each_expiry_and_warns_of_a_certificate_it_cannot_renew() {
    let cluster = TestCluster::start().await;
    // A CA that expires in an hour, well inside the 30 days' margin, made before the cluster.
    let ca =
        issue_ca("default/production-postgres", jiff::Timestamp::now(), Duration::from_secs(3600)).unwrap();
    let data = BTreeMap::from([
        ("ca.crt".to_owned(), ByteString(ca.cert.clone().into_bytes())),
        ("ca.key".to_owned(), ByteString(ca.key.clone().into_bytes())),
    ]);
    let mut secret = Secret { data: Some(data), type_: Some("Opaque".into()), ..Secret::default() };
    secret.metadata.name = Some(format!("{NAME}-ca"));
    cluster.api::<Secret>().create(&PostParams::default(), &secret).await.unwrap();

    let _operator = cluster.start_operator().await;
    let api = cluster.clusters();
    api.create(&PostParams::default(), &sample()).await.unwrap();
    let expiring = |c: &dbcluster_operator::databasecluster::api::types::DatabaseCluster| {
        let status = c.status.as_ref()?;
        status.conditions.iter().find(|c| c.type_ == "CertificatesExpiring" && c.status == "True").cloned()
    };
    let live = await_object(&api, NAME, "CertificatesExpiring=True", |c| expiring(c).is_some()).await;
    let condition = expiring(&live).unwrap();
    assert_eq!(condition.reason, "CertificateExpiring");
    assert!(
        condition.message.starts_with("not renewed: production-postgres-ca expires at "),
        "{}",
        condition.message
    );
    assert!(!condition.message.contains("production-postgres-server"), "the leaves were renewed");

    let expiry = &live.status.as_ref().unwrap().certificate_expiry;
    let names: Vec<&str> = expiry.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        [
            "production-postgres-ca",
            "production-postgres-operator-client",
            "production-postgres-replication-client",
            "production-postgres-server"
        ]
    );
    for at in expiry.values() {
        at.parse::<jiff::Timestamp>().unwrap_or_else(|e| panic!("{at} is RFC 3339: {e}"));
    }
    let status_text = serde_json::to_string(&live.status).unwrap();
    assert!(!status_text.contains("BEGIN"), "no PEM in the status");

    let warnings = cluster.events_with_reason(NAME, "CertificateExpiring").await;
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert_eq!(warnings[0].type_.as_deref(), Some("Warning"));
}
