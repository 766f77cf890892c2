//! The certificates' status, end to end on the timer kubelet: every certificate's expiry is in the
//! status (never a key or a certificate); a CA near its end is rotated (both CAs trusted after);
//! a certificate the operator cannot renew (the user's close to its expiry, or one whose renewal
//! the API refuses) brings the condition `CertificatesExpiring` with a reason and one Warning
//! Event; and Secrets `spec.certificates` names that cannot be used make the cluster
//! `Ready=False, InvalidCertificates` with a Warning Event, deleting nothing.
#![cfg(feature = "sim")]

use crate::common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::*;
use dbcluster_operator::databasecluster::api::certificates::CertificatesSpec;
use dbcluster_operator::databasecluster::api::types::DatabaseCluster;
use dbcluster_operator::databasecluster::tls::issue::{KeyPem, Leaf, issue_ca, issue_leaf, signed_by};
use dbcluster_operator::databasecluster::tls::server_dns_names;
use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{DeleteParams, PostParams};

const NAME: &str = "production-postgres";
const HOUR: Duration = Duration::from_secs(3600);
const DAY: Duration = Duration::from_secs(86_400);

fn secret(name: &str, type_: &str, entries: &[(&str, &str)]) -> Secret {
    let data: BTreeMap<String, ByteString> =
        entries.iter().map(|(k, v)| ((*k).to_owned(), ByteString(v.as_bytes().to_vec()))).collect();
    let mut secret = Secret { data: Some(data), type_: Some(type_.into()), ..Secret::default() };
    secret.metadata.name = Some(name.to_owned());
    secret
}

fn tls(name: &str, leaf: &KeyPem, ca: &str) -> Secret {
    secret(name, "kubernetes.io/tls", &[("tls.crt", &leaf.cert), ("tls.key", &leaf.key), ("ca.crt", ca)])
}

fn ca_secret(ca: &KeyPem) -> Secret {
    secret(&format!("{NAME}-ca"), "Opaque", &[("ca.crt", &ca.cert), ("ca.key", &ca.key)])
}

fn value(secret: &Secret, key: &str) -> String {
    String::from_utf8(secret.data.as_ref().unwrap()[key].0.clone()).unwrap()
}

fn condition(c: &DatabaseCluster, type_: &str, status: &str) -> Option<Condition> {
    let conditions = &c.status.as_ref()?.conditions;
    conditions.iter().find(|c| c.type_ == type_ && c.status == status).cloned()
}

async fn create(cluster: &TestCluster, certificates: Option<CertificatesSpec>) {
    let mut db = sample();
    db.spec.certificates = certificates;
    cluster.clusters().create(&PostParams::default(), &db).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn the_status_shows_each_expiry_and_a_ca_near_its_end_is_rotated() {
    let cluster = TestCluster::start().await;
    // A CA that expires in an hour, well inside the 30 days' margin, made before the cluster.
    let first = issue_ca("default/production-postgres", jiff::Timestamp::now(), HOUR).unwrap();
    cluster.api::<Secret>().create(&PostParams::default(), &ca_secret(&first)).await.unwrap();
    let _operator = cluster.start_operator().await;
    create(&cluster, None).await;
    let api = cluster.clusters();
    let live = await_object(&api, NAME, "every certificate's expiry", |c| {
        c.status.as_ref().is_some_and(|s| s.certificate_expiry.len() == 3)
    })
    .await;

    // Too late for an overlap: the new CA signs at once, and the old one stays trusted.
    let secrets = cluster.api::<Secret>();
    let ca = value(&secrets.get(&format!("{NAME}-ca")).await.unwrap(), "ca.crt");
    assert!(!signed_by(&ca, &first.cert), "a new CA");
    let previous = value(&secrets.get(&format!("{NAME}-ca")).await.unwrap(), "previous.crt");
    assert_eq!(previous, first.cert);
    let server = secrets.get(&format!("{NAME}-server")).await.unwrap();
    assert!(signed_by(&value(&server, "tls.crt"), &ca), "the server's certificate is the new CA's");
    let app_ca = value(&secrets.get(&format!("{NAME}-app")).await.unwrap(), "ca.crt");
    assert!(app_ca.contains(ca.trim_end()) && app_ca.contains(first.cert.trim_end()), "both CAs trusted");

    let expiry = &live.status.as_ref().unwrap().certificate_expiry;
    let names: Vec<&str> = expiry.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        ["production-postgres-ca", "production-postgres-replication-client", "production-postgres-server"]
    );
    for at in expiry.values() {
        at.parse::<jiff::Timestamp>().unwrap_or_else(|e| panic!("{at} is RFC 3339: {e}"));
    }
    let status_text = serde_json::to_string(&live.status).unwrap();
    assert!(!status_text.contains("BEGIN"), "no PEM in the status");
    assert!(condition(&live, "CertificatesExpiring", "True").is_none(), "a rotated CA does not warn");
    assert!(cluster.events_with_reason(NAME, "CertificateExpiring").await.is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_renewal_the_api_refuses_warns_and_keeps_the_certificate_in_place() {
    let cluster = TestCluster::start().await;
    let now = jiff::Timestamp::now();
    let ca = issue_ca("default/production-postgres", now, 3650 * DAY).unwrap();
    // A replication certificate due for renewal, in a Secret the API will not let change.
    let due = issue_leaf(&ca, &Leaf::Client("replicator".into()), now, HOUR).unwrap();
    let mut frozen = tls(&format!("{NAME}-replication-client"), &due, &ca.cert);
    frozen.immutable = Some(true);
    let secrets = cluster.api::<Secret>();
    for made in [ca_secret(&ca), frozen] {
        secrets.create(&PostParams::default(), &made).await.unwrap();
    }
    let _operator = cluster.start_operator().await;
    create(&cluster, None).await;
    let expiring = |c: &DatabaseCluster| condition(c, "CertificatesExpiring", "True");
    let live =
        await_object(&cluster.clusters(), NAME, "CertificatesExpiring=True", |c| expiring(c).is_some()).await;
    let shown = expiring(&live).unwrap();
    assert_eq!(shown.reason, "CertificateRenewalFailed");
    assert!(
        shown.message.starts_with("could not renew production-postgres-replication-client: "),
        "{}",
        shown.message
    );
    assert!(shown.message.contains("immutable"), "the API's reason: {}", shown.message);
    let warnings = cluster.events_with_reason(NAME, "CertificateRenewalFailed").await;
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert_eq!(warnings[0].type_.as_deref(), Some("Warning"));
    // The certificate in place still serves, and shows its own expiry.
    let kept = secrets.get(&format!("{NAME}-replication-client")).await.unwrap();
    assert_eq!(value(&kept, "tls.crt"), due.cert);
    let expiry = &live.status.as_ref().unwrap().certificate_expiry;
    let shown_expiry: jiff::Timestamp = expiry["production-postgres-replication-client"].parse().unwrap();
    assert!(shown_expiry <= now + jiff::SignedDuration::from_secs(3600));
}

#[tokio::test(start_paused = true)]
async fn a_users_certificate_near_its_end_warns() {
    let cluster = TestCluster::start().await;
    let now = jiff::Timestamp::now();
    let user_ca = issue_ca("the user's CA", now, DAY).unwrap();
    let server = issue_leaf(&user_ca, &Leaf::Server(server_dns_names(NAME, "default")), now, HOUR).unwrap();
    cluster
        .api::<Secret>()
        .create(&PostParams::default(), &tls("user-tls", &server, &user_ca.cert))
        .await
        .unwrap();
    let _operator = cluster.start_operator().await;
    let certificates =
        CertificatesSpec { server_tls_secret: Some("user-tls".into()), ..CertificatesSpec::default() };
    create(&cluster, Some(certificates)).await;
    let expiring = |c: &DatabaseCluster| condition(c, "CertificatesExpiring", "True");
    let live =
        await_object(&cluster.clusters(), NAME, "CertificatesExpiring=True", |c| expiring(c).is_some()).await;
    let shown = expiring(&live).unwrap();
    assert_eq!(shown.reason, "CertificateExpiring");
    assert!(shown.message.starts_with("not renewed: user-tls expires at "), "{}", shown.message);
    let warnings = cluster.events_with_reason(NAME, "CertificateExpiring").await;
    assert_eq!(warnings.len(), 1, "{warnings:?}");
}

#[tokio::test(start_paused = true)]
async fn unusable_certificate_secrets_make_the_cluster_not_ready_and_delete_nothing() {
    let cluster = TestCluster::start().await;
    let now = jiff::Timestamp::now();
    let client_ca = issue_ca("the user's client CA", now, 3650 * DAY).unwrap();
    let secrets = cluster.api::<Secret>();
    // The client CA without its key, and no replication certificate: the operator cannot sign one.
    let keyless = secret("client-ca", "Opaque", &[("ca.crt", &client_ca.cert)]);
    secrets.create(&PostParams::default(), &keyless).await.unwrap();
    let _operator = cluster.start_operator().await;
    let certificates =
        CertificatesSpec { client_ca_secret: Some("client-ca".into()), ..CertificatesSpec::default() };
    create(&cluster, Some(certificates)).await;
    let api = cluster.clusters();
    let invalid =
        |c: &DatabaseCluster| condition(c, "Ready", "False").filter(|r| r.reason == "InvalidCertificates");
    let live = await_object(&api, NAME, "Ready=False, InvalidCertificates", |c| invalid(c).is_some()).await;
    let message = invalid(&live).unwrap().message;
    assert!(message.contains("Secret client-ca has no ca.key"), "{message}");
    assert_eq!(cluster.events_with_reason(NAME, "InvalidCertificates").await.len(), 1);

    // With its key, the operator signs the replication certificate with it and the cluster comes up.
    let keyed = secret("client-ca", "Opaque", &[("ca.crt", &client_ca.cert), ("ca.key", &client_ca.key)]);
    secrets
        .replace(
            "client-ca",
            &PostParams::default(),
            &Secret { metadata: secrets.get("client-ca").await.unwrap().metadata, ..keyed },
        )
        .await
        .unwrap();
    await_object(&api, NAME, "Ready=True", |c| condition(c, "Ready", "True").is_some()).await;
    let replication = secrets.get(&format!("{NAME}-replication-client")).await.unwrap();
    assert!(signed_by(&value(&replication, "tls.crt"), &client_ca.cert), "signed by the user's client CA");
    assert_eq!(value(&replication, "ca.crt"), client_ca.cert);

    // The Secret goes: not ready again, and nothing of the cluster is deleted.
    secrets.delete("client-ca", &DeleteParams::default()).await.unwrap();
    let live = await_object(&api, NAME, "Ready=False, InvalidCertificates", |c| invalid(c).is_some()).await;
    assert!(invalid(&live).unwrap().message.contains("Secret client-ca does not exist"));
    assert!(cluster.api::<StatefulSet>().get_opt(NAME).await.unwrap().is_some(), "the StatefulSet stays");
    assert!(secrets.get_opt(&format!("{NAME}-replication-client")).await.unwrap().is_some());
}
