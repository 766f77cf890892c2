//! The certificate authorities, with real PostgreSQL 15 through the process kubelet: the user's
//! own client CA and replication certificate (cert-manager-shaped `kubernetes.io/tls` Secrets)
//! replace the operator's, and the operator's CA is rotated before it expires with an overlap in
//! which every `ca.crt` carries both CAs, so that a client holding the bundle keeps verifying,
//! replication keeps streaming and nothing restarts.
#![cfg(feature = "sim")]

use crate::common;

use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use common::postgres::*;
use common::*;
use dbcluster_operator::databasecluster::api::certificates::CertificatesSpec;
use dbcluster_operator::databasecluster::controller::operator::OperatorOptions;
use dbcluster_operator::databasecluster::tls::issue::{KeyPem, Leaf, issue_ca, issue_leaf, signed_by};
use dbcluster_operator::databasecluster::tls::renew::Lifetimes;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams, PostParams};

use super::e2e_tls::{NAME, NS, pod_address, secret, served_certificate, tls_secret, uri};

const STREAMING_OVER_TLS: &str = "SELECT count(*) FROM pg_stat_replication r JOIN pg_stat_ssl s USING (pid) WHERE s.ssl AND r.state = 'streaming'";

fn write_private(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    let mut file = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&path).unwrap();
    std::io::Write::write_all(&mut file, text.as_bytes()).unwrap();
    path
}

/// `su` (the superuser's host uri to the primary) as a replication connection of `replicator`
/// presenting `client`.
fn replication_uri(su: &str, dir: &Path, label: &str, client: &KeyPem) -> String {
    let mut url = url::Url::parse(su).unwrap();
    url.set_username("replicator").unwrap();
    url.set_password(None).unwrap();
    let cert = write_private(dir, &format!("{label}.crt"), &client.cert);
    let key = write_private(dir, &format!("{label}.key"), &client.key);
    let uri = with_param(url.as_str(), "sslcert", &cert.display().to_string());
    with_param(&with_param(&uri, "sslkey", &key.display().to_string()), "replication", "true")
}

async fn create(cluster: &TestCluster, certificates: Option<CertificatesSpec>) {
    let mut db = sample();
    db.spec.replicas = 2;
    db.spec.backup_schedule = None;
    db.spec.certificates = certificates;
    cluster.clusters().patch(NAME, &PatchParams::apply("kubectl"), &Patch::Apply(&db)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_users_client_ca_verifies_replication_by_the_users_certificate() {
    let cluster = process_cluster().await;
    let _operator = cluster.start_operator().await;
    let day = std::time::Duration::from_secs(86_400);
    let now = jiff::Timestamp::now();
    // As cert-manager writes a CA Certificate's Secret: the CA in tls.crt and ca.crt, no ca.key.
    let client_ca = issue_ca("the user's client CA", now, day).unwrap();
    let replication = issue_leaf(&client_ca, &Leaf::Client("replicator".into()), now, day).unwrap();
    let secrets: Api<Secret> = cluster.api();
    for made in [
        tls_secret("user-client-ca", &client_ca, &client_ca.cert),
        tls_secret("user-replication-tls", &replication, &client_ca.cert),
    ] {
        secrets.create(&PostParams::default(), &made).await.unwrap();
    }
    let certificates = CertificatesSpec {
        client_ca_secret: Some("user-client-ca".into()),
        replication_tls_secret: Some("user-replication-tls".into()),
        ..CertificatesSpec::default()
    };
    create(&cluster, Some(certificates)).await;
    await_streaming(&cluster, NAME, 2, None).await;

    // The operator issued no client certificate; it still issues the servers' (under its CA).
    assert!(secrets.get_opt(&format!("{NAME}-replication-client")).await.unwrap().is_none());
    assert!(secrets.get_opt(&format!("{NAME}-server")).await.unwrap().is_some());
    let su = uri(&cluster, "superuser", "rw").await;
    assert_eq!(
        psql(&su, STREAMING_OVER_TLS),
        Ok("1".into()),
        "the standby streams with the user's certificate"
    );

    // The servers verify client certificates against the user's CA, and that CA only.
    let dir = tempfile::tempdir().unwrap();
    let users = issue_leaf(&client_ca, &Leaf::Client("replicator".into()), now, day).unwrap();
    let identify = psql(&replication_uri(&su, dir.path(), "users", &users), "IDENTIFY_SYSTEM");
    assert!(identify.is_ok(), "a certificate of the user's CA logs in: {identify:?}");
    let own_ca = KeyPem {
        cert: secret(&cluster, &format!("{NAME}-ca"), "ca.crt").await,
        key: secret(&cluster, &format!("{NAME}-ca"), "ca.key").await,
    };
    let operators = issue_leaf(&own_ca, &Leaf::Client("replicator".into()), now, day).unwrap();
    let refused = psql(&replication_uri(&su, dir.path(), "operators", &operators), "IDENTIFY_SYSTEM");
    assert!(
        refused.as_ref().is_err_and(|e| e.contains("unknown ca")),
        "the operator's CA is not trusted: {refused:?}"
    );
}

/// The number of certificates in a PEM text.
fn certificates_in(pem: &str) -> usize {
    pem.matches("-----BEGIN CERTIFICATE-----").count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ca_is_rotated_with_an_overlap_and_no_client_breaks() {
    let cluster = process_cluster().await;
    // Leaves of 60 s renewed 40 s ahead; a CA of 200 s made before the cluster: the next CA is
    // published at 80 s (E - 2V) and promoted at 140 s (E - V); the old one retires at 200 s.
    let certificates = Lifetimes::with_leaves(60, 40).unwrap();
    let first =
        issue_ca("default/production-postgres", jiff::Timestamp::now(), std::time::Duration::from_secs(200))
            .unwrap();
    let data = [("ca.crt", &first.cert), ("ca.key", &first.key)]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), ByteString(v.clone().into_bytes())))
        .collect();
    let mut ca_secret = Secret { data: Some(data), type_: Some("Opaque".into()), ..Secret::default() };
    ca_secret.metadata.name = Some(format!("{NAME}-ca"));
    cluster.api::<Secret>().create(&PostParams::default(), &ca_secret).await.unwrap();
    let _operator =
        cluster.start_operator_with(OperatorOptions { certificates, ..OperatorOptions::default() }).await;
    create(&cluster, None).await;
    await_streaming(&cluster, NAME, 2, None).await;
    let su = uri(&cluster, "superuser", "rw").await;
    let su_standby = uri(&cluster, "superuser", "ro").await;
    let started = "SELECT pg_postmaster_start_time()";
    let (primary_start, standby_start) = (psql(&su, started).unwrap(), psql(&su_standby, started).unwrap());

    // Published: every ca.crt carries both CAs while the old one still signs.
    let app_secret = format!("{NAME}-app");
    let bundle = eventually_some("the next CA published in the app Secret", || async {
        let ca = secret(&cluster, &app_secret, "ca.crt").await;
        (certificates_in(&ca) == 2).then_some(ca)
    })
    .await;
    assert!(bundle.starts_with(first.cert.trim_end()), "the signing CA first");
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("bundle.crt");
    std::fs::write(&copy, &bundle).unwrap();
    let app = with_param(&uri(&cluster, "app", "rw").await, "sslrootcert", &copy.display().to_string());
    assert_eq!(psql(&app, "SELECT 1"), Ok("1".into()), "the bundle verifies the old CA's certificate");

    // Promoted: the instances serve certificates of the new CA, without a restart.
    let next = eventually_some("the next CA promoted", || async {
        let ca = secret(&cluster, &format!("{NAME}-ca"), "ca.crt").await;
        (!signed_by(&ca, &first.cert) && bundle.contains(ca.trim_end())).then_some(ca)
    })
    .await;
    for ordinal in [0, 1] {
        let (ip, name) = (pod_address(&cluster, ordinal).await, format!("{NAME}-{ordinal}.{NAME}.{NS}.svc"));
        eventually_some("the instance serves a certificate of the new CA", || async {
            signed_by(&served_certificate(&ip, &name)?, &next).then_some(())
        })
        .await;
    }
    // The copy an application took during the overlap verifies the new certificates.
    assert_eq!(psql(&app, "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()"), Ok("t".into()));
    let standby_app =
        with_param(&uri(&cluster, "app", "ro").await, "sslrootcert", &copy.display().to_string());
    assert_eq!(psql(&standby_app, "SELECT pg_is_in_recovery()"), Ok("t".into()));
    assert_eq!(psql(&su, started), Ok(primary_start), "the primary was reloaded, not restarted");
    assert_eq!(psql(&su_standby, started), Ok(standby_start), "the standby was reloaded, not restarted");
    await_streaming(&cluster, NAME, 2, None).await;
    assert_eq!(psql(&su, STREAMING_OVER_TLS), Ok("1".into()), "replication streams under the new CA");

    // Retired: once the old CA has expired, ca.crt is the new CA alone.
    eventually_some("the old CA retired", || async {
        let ca = secret(&cluster, &app_secret, "ca.crt").await;
        (certificates_in(&ca) == 1 && ca.trim_end() == next.trim_end()).then_some(())
    })
    .await;
    let live = cluster.clusters().get(NAME).await.unwrap();
    let conditions = &live.status.as_ref().unwrap().conditions;
    assert!(
        !conditions.iter().any(|c| c.type_ == "CertificatesExpiring" && c.status == "True"),
        "a rotated CA never warns: {conditions:?}"
    );
}
