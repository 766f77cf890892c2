//! TLS by default, with real PostgreSQL 15 through the process kubelet: every TCP session is
//! encrypted and verified (the app Secret's `uri` connects with `verify-full`, its host resolved
//! as a pod resolves it; plaintext and another CA are refused), replication authenticates by
//! client certificate (the replication user has no password), and short-lived certificates are
//! renewed and served without a restart while replication carries on.
#![cfg(feature = "sim")]

use crate::common;

use std::process::{Command, Stdio};

use common::postgres::*;
use common::*;
use dbcluster_operator::databasecluster::api::certificates::CertificatesSpec;
use dbcluster_operator::databasecluster::controller::operator::OperatorOptions;
use dbcluster_operator::databasecluster::tls::issue::{KeyPem, Leaf, issue_ca, issue_leaf};
use dbcluster_operator::databasecluster::tls::renew::Lifetimes;
use dbcluster_operator::databasecluster::tls::server_dns_names;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{Api, Patch, PatchParams, PostParams};

pub(crate) const NAME: &str = "production-postgres";
pub(crate) const NS: &str = "default";

async fn create(cluster: &TestCluster, replicas: i32) {
    let mut db = sample();
    db.spec.replicas = replicas;
    db.spec.backup_schedule = None;
    cluster.clusters().patch(NAME, &PatchParams::apply("kubectl"), &Patch::Apply(&db)).await.unwrap();
}

pub(crate) async fn secret(cluster: &TestCluster, name: &str, key: &str) -> String {
    let secrets: Api<Secret> = cluster.api();
    secret_value(&secrets.get(name).await.unwrap(), key)
}

/// The login Secret `login`'s uri to the Service `service`, resolved as a pod resolves it.
pub(crate) async fn uri(cluster: &TestCluster, login: &str, service: &str) -> String {
    let raw = secret(cluster, &format!("{NAME}-{login}"), "uri").await;
    host_uri(cluster, NS, &raw.replace(&format!("{NAME}-rw."), &format!("{NAME}-{service}.")))
}

pub(crate) async fn pod_address(cluster: &TestCluster, ordinal: usize) -> String {
    let pods: Api<Pod> = cluster.api();
    pod_ip(&pods.get(&format!("{NAME}-{ordinal}")).await.unwrap())
}

/// The certificate the server at `ip` presents to a client asking for `name` (PEM).
pub(crate) fn served_certificate(ip: &str, name: &str) -> Option<String> {
    let out = Command::new("openssl")
        .args(["s_client", "-starttls", "postgres", "-connect", &format!("{ip}:5432"), "-servername", name])
        .stdin(Stdio::null())
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let begin = text.find("-----BEGIN CERTIFICATE-----")?;
    let end = text[begin..].find("-----END CERTIFICATE-----")? + begin + "-----END CERTIFICATE-----".len();
    Some(text[begin..end].to_owned())
}

pub(crate) fn same_pem(a: &str, b: &str) -> bool {
    a.split_whitespace().collect::<String>() == b.split_whitespace().collect::<String>()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_tcp_session_is_verified_tls_and_replication_authenticates_by_certificate() {
    let cluster = process_cluster().await;
    let _operator = cluster.start_operator().await;
    create(&cluster, 2).await;
    await_streaming(&cluster, NAME, 2, None).await;

    // The app Secret carries the CA and verify-full URIs.
    let raw = secret(&cluster, &format!("{NAME}-app"), "uri").await;
    assert!(raw.ends_with("?sslmode=verify-full&sslrootcert=/etc/dbcluster-app/ca.crt"), "{raw}");
    let jdbc = secret(&cluster, &format!("{NAME}-app"), "jdbc-uri").await;
    assert!(jdbc.contains("&sslmode=verify-full&sslrootcert=/etc/dbcluster-app/ca.crt"), "{jdbc}");
    let ca = secret(&cluster, &format!("{NAME}-ca"), "ca.crt").await;
    assert_eq!(secret(&cluster, &format!("{NAME}-app"), "ca.crt").await, ca);

    // psql "$uri" verifies the server's name and CA, and the session is encrypted.
    let app = uri(&cluster, "app", "rw").await;
    let session = psql(&app, "SELECT ssl, version FROM pg_stat_ssl WHERE pid = pg_backend_pid()").unwrap();
    assert!(session == "t|TLSv1.3" || session == "t|TLSv1.2", "{session}");
    for service in ["ro", "r"] {
        let other = uri(&cluster, "app", service).await;
        assert_eq!(psql(&other, "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()"), Ok("t".into()));
    }

    // Plaintext is refused; so is a server that another CA would have to vouch for.
    let plain = psql(&with_param(&app, "sslmode", "disable"), "SELECT 1").unwrap_err();
    assert!(plain.contains("no pg_hba.conf entry") && plain.contains("no encryption"), "{plain}");
    let dir = tempfile::tempdir().unwrap();
    let other_ca = dir.path().join("other-ca.crt");
    let other =
        issue_ca("elsewhere/other", jiff::Timestamp::now(), std::time::Duration::from_secs(3600)).unwrap();
    std::fs::write(&other_ca, other.cert).unwrap();
    let refused =
        psql(&with_param(&app, "sslrootcert", &other_ca.display().to_string()), "SELECT 1").unwrap_err();
    assert!(refused.contains("certificate verify failed"), "{refused}");

    // Each pod is verified under its own name (what the standbys and the backups connect to).
    let standby = format!("{NAME}-1.{NAME}.{NS}.svc");
    let ip = pod_address(&cluster, 1).await;
    let by_pod = with_param(&app.replacen(&format!("{NAME}-rw.{NS}.svc"), &standby, 1), "hostaddr", &ip);
    assert_eq!(psql(&by_pod, "SELECT pg_is_in_recovery()"), Ok("t".into()));

    // The standby streams over TLS as the replication user, which has no password.
    let su = uri(&cluster, "superuser", "rw").await;
    let replication = psql(
        &su,
        "SELECT r.application_name, r.usename, r.state, s.ssl FROM pg_stat_replication r JOIN pg_stat_ssl s USING (pid)",
    );
    assert_eq!(replication, Ok(format!("{NAME}-1|replicator|streaming|t")));
    assert_eq!(
        psql(&su, "SELECT rolpassword IS NULL FROM pg_authid WHERE rolname = 'replicator'"),
        Ok("t".into())
    );
    let hba = psql(&su, "SELECT DISTINCT type FROM pg_hba_file_rules WHERE type <> 'local'");
    assert_eq!(hba, Ok("hostssl".into()), "no plaintext TCP rule");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn short_lived_certificates_are_renewed_and_served_without_a_restart() {
    let cluster = process_cluster().await;
    // Valid 150 s, renewed 120 s before expiry: a renewal about every 30 s.
    let certificates = Lifetimes::with_leaves(150, 120).unwrap();
    let _operator =
        cluster.start_operator_with(OperatorOptions { certificates, ..OperatorOptions::default() }).await;
    create(&cluster, 2).await;
    await_streaming(&cluster, NAME, 2, None).await;
    let su = uri(&cluster, "superuser", "rw").await;
    let su_standby = uri(&cluster, "superuser", "ro").await;
    let started = "SELECT pg_postmaster_start_time()";
    let (primary_start, standby_start) = (psql(&su, started).unwrap(), psql(&su_standby, started).unwrap());
    let ca = secret(&cluster, &format!("{NAME}-ca"), "ca.crt").await;
    let first = secret(&cluster, &format!("{NAME}-server"), "tls.crt").await;
    let first_client = secret(&cluster, &format!("{NAME}-replication-client"), "tls.crt").await;

    let server = format!("{NAME}-server");
    eventually_some("the server and replication certificates renewed", || async {
        let now = secret(&cluster, &server, "tls.crt").await;
        let client = secret(&cluster, &format!("{NAME}-replication-client"), "tls.crt").await;
        (!same_pem(&now, &first) && !same_pem(&client, &first_client)).then_some(())
    })
    .await;
    for ordinal in [0, 1] {
        let (ip, name) = (pod_address(&cluster, ordinal).await, format!("{NAME}-{ordinal}.{NAME}.{NS}.svc"));
        eventually_some("the instance serves a renewed certificate", || async {
            let served = served_certificate(&ip, &name)?;
            (!same_pem(&served, &first)).then_some(())
        })
        .await;
    }
    assert_eq!(secret(&cluster, &format!("{NAME}-ca"), "ca.crt").await, ca, "the CA is kept");
    assert_eq!(psql(&su, started), Ok(primary_start), "the primary was reloaded, not restarted");
    assert_eq!(psql(&su_standby, started), Ok(standby_start), "the standby was reloaded, not restarted");
    // A session opened after the renewal verifies against the same CA; replication carries on.
    let app = uri(&cluster, "app", "rw").await;
    assert_eq!(psql(&app, "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()"), Ok("t".into()));
    await_streaming(&cluster, NAME, 2, None).await;
    let streaming = psql(
        &su,
        "SELECT count(*) FROM pg_stat_replication r JOIN pg_stat_ssl s USING (pid) WHERE s.ssl AND r.state = 'streaming'",
    );
    assert_eq!(streaming, Ok("1".into()));
}

/// A `kubernetes.io/tls` Secret as cert-manager writes it: `tls.crt`, `tls.key`, `ca.crt`.
pub(crate) fn tls_secret(name: &str, leaf: &KeyPem, ca: &str) -> Secret {
    let data = [("tls.crt", &leaf.cert), ("tls.key", &leaf.key), ("ca.crt", &ca.to_owned())]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), ByteString(v.clone().into_bytes())))
        .collect();
    let mut secret =
        Secret { data: Some(data), type_: Some("kubernetes.io/tls".into()), ..Secret::default() };
    secret.metadata.name = Some(name.to_owned());
    secret
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_users_server_certificate_is_served_verified_and_reloaded_when_replaced() {
    let cluster = process_cluster().await;
    let _operator = cluster.start_operator().await;
    let day = std::time::Duration::from_secs(86_400);
    let now = jiff::Timestamp::now();
    let user_ca = issue_ca("the user's CA", now, day).unwrap();
    let names = Leaf::Server(server_dns_names(NAME, NS));
    let first = issue_leaf(&user_ca, &names, now, day).unwrap();
    let secrets: Api<Secret> = cluster.api();
    secrets
        .create(&PostParams::default(), &tls_secret("user-server-tls", &first, &user_ca.cert))
        .await
        .unwrap();
    let mut db = sample();
    db.spec.replicas = 2;
    db.spec.backup_schedule = None;
    db.spec.certificates = Some(CertificatesSpec {
        server_tls_secret: Some("user-server-tls".into()),
        ..CertificatesSpec::default()
    });
    cluster.clusters().patch(NAME, &PatchParams::apply("kubectl"), &Patch::Apply(&db)).await.unwrap();
    await_streaming(&cluster, NAME, 2, None).await;

    // The operator issued no server certificate; its Secrets carry the user's CA.
    assert!(secrets.get_opt(&format!("{NAME}-server")).await.unwrap().is_none());
    assert!(same_pem(&secret(&cluster, &format!("{NAME}-app"), "ca.crt").await, &user_ca.cert));
    let app = uri(&cluster, "app", "rw").await;
    assert_eq!(psql(&app, "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()"), Ok("t".into()));
    let (ip, name) = (pod_address(&cluster, 0).await, format!("{NAME}-0.{NAME}.{NS}.svc"));
    assert!(same_pem(&served_certificate(&ip, &name).unwrap(), &first.cert));
    let su = uri(&cluster, "superuser", "rw").await;
    let started = psql(&su, "SELECT pg_postmaster_start_time()").unwrap();
    let streaming = "SELECT count(*) FROM pg_stat_replication r JOIN pg_stat_ssl s USING (pid) WHERE s.ssl AND r.state = 'streaming'";
    assert_eq!(psql(&su, streaming), Ok("1".into()), "the standby verified the user's certificate");

    // The user replaces the certificate: served without a restart.
    let second = issue_leaf(&user_ca, &names, jiff::Timestamp::now(), day).unwrap();
    let replaced = tls_secret("user-server-tls", &second, &user_ca.cert);
    secrets
        .replace(
            "user-server-tls",
            &PostParams::default(),
            &Secret { metadata: secrets.get("user-server-tls").await.unwrap().metadata, ..replaced },
        )
        .await
        .unwrap();
    for ordinal in [0, 1] {
        let (ip, name) = (pod_address(&cluster, ordinal).await, format!("{NAME}-{ordinal}.{NAME}.{NS}.svc"));
        eventually_some("the replaced certificate is served", || async {
            same_pem(&served_certificate(&ip, &name)?, &second.cert).then_some(())
        })
        .await;
    }
    assert_eq!(psql(&su, "SELECT pg_postmaster_start_time()"), Ok(started), "reloaded, not restarted");
    assert_eq!(psql(&app, "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()"), Ok("t".into()));
}
