//! The instance manager (`dbcluster-operator instance init|run`, `src/instance`) and the
//! operator's client of it (`databasecluster::instances::client`), against real PostgreSQL 15
//! processes.
//!
//! Each "pod" here is what a kubelet would make of the operator's pod spec: the ConfigMap's keys
//! and the Secrets' keys (the logins and the status token) as files, its own loopback address and
//! socket directory, its own `/etc/hosts` (a private mount namespace) so that
//! `<pod>.<svc>.<ns>.svc` resolves, and this crate's binary run as a non-root user (Debian's
//! `postgres`); readiness is the manager's `/readyz`. Needs root (for the mount namespace and the
//! user switch) and the PostgreSQL 15 server binaries.

#![cfg(feature = "sim")]

mod commands;
mod fixture;

use crate::common;

use std::collections::BTreeMap;

use common::postgres::{POSTGRES_BIN as BIN, eventually_some};
use fixture::*;
pub(crate) use fixture::{Fixture, connect, primary_and_standby};

use dbcluster_operator::databasecluster::instances::SlotChanges;
use dbcluster_operator::databasecluster::instances::client::{
    STATUS_TIMEOUT, change_slots, observe, promote, reload,
};
use dbcluster_operator::databasecluster::specs::config::{
    CONFIG_HASH_PARAMETER, POSTGRESQL_CONF_KEY, RESTART_PARAMETERS, postgresql_conf,
};
use dbcluster_operator::databasecluster::specs::credentials::Login;
use dbcluster_operator::instance::status::credential_version;

#[tokio::test]
async fn a_standby_streams_from_the_primary_and_refuses_writes() {
    let fixture = primary_and_standby(1).await;
    let app = fixture.target(0, Login::App, "app");
    let client = connect(&app).await.unwrap();
    client
        .batch_execute("CREATE TABLE t (i int); INSERT INTO t SELECT generate_series(1, 10000)")
        .await
        .unwrap();

    let standby_app = fixture.target(1, Login::App, "app");
    eventually_some("the rows reach the standby", || async {
        let c = connect(&standby_app).await.ok()?;
        c.query_one("SELECT count(*) FROM t", &[])
            .await
            .is_ok_and(|r| r.get::<_, i64>(0) == 10_000)
            .then_some(())
    })
    .await;
    let standby = connect(&standby_app).await.unwrap();
    let refused = standby.batch_execute("INSERT INTO t VALUES (1)").await.unwrap_err();
    assert_eq!(refused.code(), Some(&tokio_postgres::error::SqlState::READ_ONLY_SQL_TRANSACTION));

    let primary = observe(&fixture.manager(0), STATUS_TIMEOUT).await.unwrap();
    assert!(!primary.in_recovery);
    assert!(primary.version.starts_with("15."), "{}", primary.version);
    assert_eq!(primary.slots.len(), 1);
    assert!(primary.slots[0].active);
    assert_eq!(primary.standbys.len(), 1);
    assert_eq!(
        (primary.standbys[0].name.as_str(), primary.standbys[0].state.as_str()),
        ("db-1", "streaming")
    );
    let replica = observe(&fixture.manager(1), STATUS_TIMEOUT).await.unwrap();
    assert!(replica.in_recovery);
    assert!(replica.standbys.is_empty());

    // The app user owns its database and is no superuser.
    let row = client
        .query_one(
            "SELECT rolsuper, (SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = 'app') \
             FROM pg_roles WHERE rolname = current_user",
            &[],
        )
        .await
        .unwrap();
    assert_eq!((row.get::<_, bool>(0), row.get::<_, String>(1)), (false, "app".to_owned()));
}

#[tokio::test]
async fn replication_needs_tls_and_the_replication_users_client_certificate() {
    let fixture = primary_and_standby(2).await;
    // libpq refuses a key others can read: a private copy.
    let keys = tempfile::tempdir().unwrap();
    let key = keys.path().join("replication.key");
    std::fs::copy(fixture.root.join("sec/replication-tls/tls.key"), &key).unwrap();
    std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let cert = fixture.root.join("sec/replication-tls/tls.crt");
    let replicate = |login: Login, tls: &str| {
        let target = fixture.target(0, login, "postgres");
        let ca = fixture.ca_file();
        std::process::Command::new("psql")
            .arg(format!(
                "host={} hostaddr={} user={} password={} dbname=replication replication=true sslrootcert={} {tls}",
                target.name,
                target.host,
                target.user,
                target.password,
                ca.display()
            ))
            .args(["-XtAc", "IDENTIFY_SYSTEM"])
            .env("PGCONNECT_TIMEOUT", "5")
            .output()
            .unwrap()
    };
    let with_cert = format!("sslmode=verify-full sslcert={} sslkey={}", cert.display(), key.display());
    let output = replicate(Login::Replication, &with_cert);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let refusals = [
        (Login::Replication, "sslmode=disable", "no encryption"),
        (Login::Replication, "sslmode=verify-full", "certificate"),
        // Only the replication user may replicate over TCP (the backups present its certificate).
        (Login::Superuser, "sslmode=verify-full", "no pg_hba.conf entry for replication connection"),
        (Login::App, "sslmode=verify-full", "no pg_hba.conf entry for replication connection"),
    ];
    for (login, tls, want) in refusals {
        let output = replicate(login, tls);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success() && stderr.contains(want), "{login:?} {tls}: {stderr}");
    }
}

#[tokio::test]
async fn restarted_instances_keep_their_role_and_foreign_data_is_re_cloned() {
    let mut fixture = primary_and_standby(3).await;
    let app = fixture.target(0, Login::App, "app");
    connect(&app)
        .await
        .unwrap()
        .batch_execute("CREATE TABLE kept (i int); INSERT INTO kept VALUES (42)")
        .await
        .unwrap();

    fixture.stop(1).await;
    let log = fixture.init(1).await;
    assert!(!log.contains("cloning"), "a standby with its data is not cloned again:\n{log}");
    fixture.start(1).await;
    fixture.stop(0).await;
    fixture.init(0).await;
    fixture.start(0).await;
    assert!(
        !observe(&fixture.manager(0), STATUS_TIMEOUT).await.unwrap().in_recovery,
        "the primary comes back as primary"
    );
    eventually_some("the standby streams again", || async {
        let facts = observe(&fixture.manager(0), STATUS_TIMEOUT).await.ok()?;
        facts.standbys.iter().any(|s| s.state == "streaming").then_some(())
    })
    .await;

    // Data from another cluster (a fresh initdb) in the standby's volume: re-cloned.
    fixture.stop(1).await;
    let pgdata = fixture.pgdata(1);
    std::fs::remove_dir_all(&pgdata).unwrap();
    let initdb = std::process::Command::new("setpriv")
        .args(["--reuid=postgres", "--regid=postgres", "--init-groups", &format!("{BIN}/initdb"), "-D"])
        .arg(&pgdata)
        .output()
        .unwrap();
    assert!(initdb.status.success(), "{}", String::from_utf8_lossy(&initdb.stderr));
    let log = fixture.init(1).await;
    assert!(log.contains("data belongs to another cluster"), "{log}");
    fixture.start(1).await;
    let standby_app = fixture.target(1, Login::App, "app");
    eventually_some("the re-cloned standby has the primary's data", || async {
        let c = connect(&standby_app).await.ok()?;
        c.query_one("SELECT i FROM kept", &[]).await.is_ok_and(|r| r.get::<_, i32>(0) == 42).then_some(())
    })
    .await;
}

#[tokio::test]
async fn the_database_accepts_exactly_the_secrets_passwords() {
    let mut fixture = Fixture::new(4, &[]).await;
    fixture.init(0).await;
    fixture.start(0).await;
    for login in [Login::Superuser, Login::App] {
        check_login(&fixture.target(0, login, login.database())).await.unwrap();
    }
    // The replication user has no password: it logs in by client certificate only.
    let replication = fixture.target(0, Login::Replication, "postgres");
    assert!(
        password_refused(&check_login(&replication).await.unwrap_err()),
        "the replication password is refused"
    );

    // New Secrets over kept data (a cluster re-created over its volumes): applied at start.
    let old = fixture.target(0, Login::App, "app");
    fixture.stop(0).await;
    fixture.set_secret(Login::Superuser, "new-superuser-password");
    fixture.set_secret(Login::App, "new-app-password");
    fixture.init(0).await;
    fixture.start(0).await;
    check_login(&fixture.superuser(0)).await.unwrap();
    check_login(&fixture.target(0, Login::App, "app")).await.unwrap();
    assert!(password_refused(&check_login(&old).await.unwrap_err()), "the old password no longer works");

    // Secrets changed while the server runs (a rotation, a Secret regenerated): the manager sees
    // the mounted files change and sets the passwords again, the superuser's too (its socket is
    // trusted, so no restart is needed), and reports the versions it applied.
    fixture.set_secret(Login::App, "rotated-app-password");
    fixture.set_secret(Login::Superuser, "rotated-superuser-password");
    let version = |user: &str, password: &str| credential_version(TOKEN, user, password);
    let wanted = [
        ("app", version("app", "rotated-app-password")),
        ("superuser", version("postgres", "rotated-superuser-password")),
    ];
    eventually_some("the manager reports the rotated Secrets applied", || async {
        let reported = observe(&fixture.manager(0), STATUS_TIMEOUT).await.ok()?.credentials;
        wanted.iter().all(|(login, v)| reported.get(*login) == Some(v)).then_some(())
    })
    .await;
    check_login(&fixture.target(0, Login::App, "app")).await.unwrap();
    check_login(&fixture.superuser(0)).await.unwrap();
    let log = fixture.log(0);
    for secret in
        ["new-superuser-password", "new-app-password", "rotated-app-password", "rotated-superuser-password"]
    {
        assert!(!log.contains(secret), "the server log holds a password");
    }
    let status = fixture.get(0, "/status", Some(TOKEN)).await.unwrap().1;
    assert!(!status.contains("rotated-app-password"), "the report holds a password");
}

#[tokio::test]
async fn a_reloadable_change_applies_without_restart_and_the_hash_shows_it() {
    let mut fixture = Fixture::new(5, &[("work_mem", "4MB")]).await;
    fixture.init(0).await;
    fixture.start(0).await;
    let su = fixture.superuser(0);
    let manager = fixture.manager(0);
    let client = connect(&su).await.unwrap();
    let started: String =
        client.query_one("SELECT pg_postmaster_start_time()::text", &[]).await.unwrap().get(0);
    let before = observe(&manager, STATUS_TIMEOUT).await.unwrap();
    assert_eq!(before.config_hash_applied, before.config_hash_on_disk);

    let conf = postgresql_conf(&BTreeMap::from([("work_mem".to_owned(), "64MB".to_owned())]), None);
    std::fs::write(fixture.root.join("cfg").join(POSTGRESQL_CONF_KEY), &conf).unwrap();
    let pending = observe(&manager, STATUS_TIMEOUT).await.unwrap();
    assert_ne!(
        pending.config_hash_on_disk, pending.config_hash_applied,
        "the new file is seen before a reload"
    );
    assert_eq!(pending.config_hash_applied, before.config_hash_applied);
    reload(&manager).await.unwrap();
    eventually_some("the reload applies the new hash", || async {
        (observe(&manager, STATUS_TIMEOUT).await.ok()?.config_hash_applied == pending.config_hash_on_disk)
            .then_some(())
    })
    .await;
    let after = connect(&su).await.unwrap();
    let work_mem: String = after.query_one("SHOW work_mem", &[]).await.unwrap().get(0);
    assert_eq!(work_mem, "64MB");
    let now: String = after.query_one("SELECT pg_postmaster_start_time()::text", &[]).await.unwrap().get(0);
    assert_eq!(now, started, "no restart");
    let hash: String =
        after.query_one("SELECT current_setting($1)", &[&CONFIG_HASH_PARAMETER]).await.unwrap().get(0);
    assert!(conf.contains(&hash));
}

#[tokio::test]
async fn the_restart_parameter_table_is_postgresql_15s_postmaster_context() {
    let mut fixture = Fixture::new(6, &[]).await;
    fixture.init(0).await;
    fixture.start(0).await;
    let client = connect(&fixture.superuser(0)).await.unwrap();
    let rows = client
        .query("SELECT name FROM pg_settings WHERE context = 'postmaster' ORDER BY name", &[])
        .await
        .unwrap();
    let server: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
    assert_eq!(server, RESTART_PARAMETERS);
}

#[tokio::test]
async fn the_manager_serves_its_probes_and_a_status_only_with_the_token() {
    let fixture = primary_and_standby(7).await;
    assert_eq!(fixture.get(0, "/healthz", None).await.map(|r| r.0), Some(200));
    assert_eq!(fixture.get(1, "/healthz", None).await.map(|r| r.0), Some(200));
    for token in [None, Some("wrong")] {
        let (code, body) = fixture.get(0, "/status", token).await.unwrap();
        assert_eq!(code, 401, "{body}");
        assert!(!body.contains("system_identifier"));
    }
    eventually_some("the primary reports its standby streaming", || async {
        let status = fixture.status(0).await;
        let standbys = status["standbys"].as_array().unwrap();
        standbys.iter().any(|s| s["name"] == "db-1" && s["state"] == "streaming").then_some(())
    })
    .await;
    let (primary, standby) = (fixture.status(0).await, fixture.status(1).await);
    assert_eq!((primary["role"].as_str(), primary["in_recovery"].as_bool()), (Some("primary"), Some(false)));
    assert_eq!((standby["role"].as_str(), standby["in_recovery"].as_bool()), (Some("standby"), Some(true)));
    assert_eq!(primary["system_identifier"], standby["system_identifier"]);
    assert!(primary["current_lsn"].is_string() && standby["received_lsn"].is_string(), "{primary} {standby}");
    assert_eq!(primary["slots"][0]["name"], "instance_1");
    assert_eq!(primary["pending_restart"], false);
    assert!(primary["file_settings"]["refused"].as_array().unwrap().is_empty());
    assert_eq!(primary["file_settings"]["hash_on_disk"], primary["file_settings"]["hash_applied"]);
    assert!(primary["data_directory_bytes"].as_u64().unwrap() > 1_000_000);

    let (code, metrics) = fixture.get_on(0, 9187, "/metrics", None).await.unwrap();
    assert_eq!(code, 200, "{metrics}");
    for line in [
        "pg_up 1",
        "pg_in_recovery 0",
        "pg_replication_lag_bytes{standby=\"db-1\"}",
        "pg_database_size_bytes{datname=\"app\"}",
        "pg_xact_commit_total{datname=\"postgres\"}",
    ] {
        assert!(metrics.contains(line), "{line} in {metrics}");
    }
    let (_, standby_metrics) = fixture.get_on(1, 9187, "/metrics", None).await.unwrap();
    assert!(standby_metrics.contains("pg_in_recovery 1"), "{standby_metrics}");
}

#[tokio::test]
async fn a_primary_the_record_no_longer_names_is_fenced_and_rejoins_as_a_standby() {
    let mut fixture = primary_and_standby(8).await;
    // A failover as the operator makes it: the record names db-1, which is then promoted.
    std::fs::write(fixture.root.join("cfg").join("primary"), "db-1").unwrap();
    fixture.exited(0).await;
    assert!(fixture.log(0).contains("fencing"), "{}", fixture.log(0));
    assert!(promote(&fixture.manager(1)).await.unwrap());
    let slot = SlotChanges { create: vec!["instance_0".into()], drop: Vec::new() };
    change_slots(&fixture.manager(1), &slot).await.unwrap();
    let new_primary = connect(&fixture.superuser(1)).await.unwrap();
    new_primary
        .batch_execute("CREATE TABLE after_failover (i int); INSERT INTO after_failover VALUES (7)")
        .await
        .unwrap();

    // The fenced container restarts: its data shut down cleanly as primary; rewound onto db-1.
    let log = fixture.init(0).await;
    assert!(log.contains("rewinding"), "{log}");
    fixture.start(0).await;
    eventually_some("the old primary streams from the new one", || async {
        let status = fixture.status(1).await;
        let standbys = status["standbys"].as_array().unwrap();
        standbys.iter().any(|s| s["name"] == "db-0" && s["state"] == "streaming").then_some(())
    })
    .await;
    let old = fixture.target(0, Login::Superuser, "postgres");
    eventually_some("the row written after the failover reaches the old primary", || async {
        let c = connect(&old).await.ok()?;
        c.query_one("SELECT i FROM after_failover", &[])
            .await
            .is_ok_and(|r| r.get::<_, i32>(0) == 7)
            .then_some(())
    })
    .await;
}
