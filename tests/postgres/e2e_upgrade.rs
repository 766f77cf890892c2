//! PostgreSQL 18 through the process kubelet (`postgres:18` → the install that
//! `scripts/install-postgres-18` makes, which `scripts/test` runs), TLS on as on 15, and the major
//! upgrade from 15 to 18 in place.
#![cfg(feature = "sim")]

use crate::common;

use common::postgres::*;
use common::*;
use dbcluster_operator::databasecluster::api::types::DatabaseCluster;
use dbcluster_operator::sim::kubelet::images;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams};

const NAME: &str = "production-postgres";

/// Fails the test with one line saying what to install when the PostgreSQL 18 binaries are missing.
fn require_postgres_18() {
    assert!(
        images::postgres_bin_dir(18).is_some(),
        "this test runs real PostgreSQL 18: run scripts/test, which installs PostgreSQL 18 into {}",
        images::install_root().display()
    );
}

/// A process cluster with the operator running `db` (named [`NAME`]), every instance streaming.
async fn start_cluster(db: DatabaseCluster) -> (TestCluster, RunningOperator) {
    require_postgres_18();
    let cluster = process_cluster().await;
    let operator = cluster.start_operator().await;
    let replicas = db.spec.replicas as usize;
    cluster.clusters().patch(NAME, &PatchParams::apply("kubectl"), &Patch::Apply(&db)).await.unwrap();
    await_streaming(&cluster, NAME, replicas, None).await;
    (cluster, operator)
}

/// Asks for PostgreSQL 18.
async fn ask_for_18(cluster: &TestCluster) {
    let upgrade = Patch::Merge(serde_json::json!({"spec": {"version": "18"}}));
    cluster.clusters().patch(NAME, &PatchParams::default(), &upgrade).await.unwrap();
}

/// Waits for `Ready=False, MajorUpgradeFailed`; returns its message.
async fn await_rollback(cluster: &TestCluster) -> String {
    let api = cluster.clusters();
    eventually_some("Ready=False, MajorUpgradeFailed", || async {
        let c = api.get(NAME).await.ok()?;
        let (status, reason, message) = condition_of(&c, "Ready")?;
        (status == "False" && reason == "MajorUpgradeFailed").then_some(message)
    })
    .await
}

/// The app Secret's `uri`, its host resolved as a pod resolves it.
async fn app_uri(cluster: &TestCluster) -> String {
    let secrets: Api<Secret> = cluster.api();
    let secret = secrets.get(&format!("{NAME}-app")).await.unwrap();
    host_uri(cluster, "default", &secret_value(&secret, "uri"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_starts_on_18_with_tls_and_streams() {
    let mut db = sample();
    db.spec.replicas = 2;
    db.spec.version = "18".into();
    let (cluster, _operator) = start_cluster(db).await;
    let running = cluster.clusters().get(NAME).await.unwrap();
    assert_eq!(running.status.unwrap().current_version.as_deref(), Some("18"));
    let uri = app_uri(&cluster).await;
    assert_eq!(psql(&uri, "show server_version_num").map(|v| v.starts_with("18")), Ok(true));
    let encrypted = "select ssl from pg_stat_ssl where pid = pg_backend_pid()";
    assert_eq!(psql(&uri, encrypted), Ok("t".into()), "the app Secret's uri verifies the server over TLS");
    psql(&uri, "create table t (n int); insert into t values (1), (2)").unwrap();
    assert_eq!(psql(&uri, "select sum(n) from t"), Ok("3".into()));
}

/// A login Secret's `uri` (`app`, `superuser`) with its host resolved; `database` replaces its path.
async fn login_uri(cluster: &TestCluster, login: &str, database: Option<&str>) -> String {
    let secrets: Api<Secret> = cluster.api();
    let secret = secrets.get(&format!("{NAME}-{login}")).await.unwrap();
    let uri = host_uri(cluster, "default", &secret_value(&secret, "uri"));
    let mut url = url::Url::parse(&uri).expect("a URL");
    if let Some(db) = database {
        url.set_path(db);
    }
    url.to_string()
}

/// Waits until the cluster runs `version` on every instance, streaming; returns the cluster.
async fn await_version(cluster: &TestCluster, version: &str, replicas: usize) -> DatabaseCluster {
    let api = cluster.clusters();
    eventually_some(&format!("currentVersion {version}"), || async {
        let c = api.get(NAME).await.ok()?;
        (c.status.as_ref()?.current_version.as_deref() == Some(version)).then_some(())
    })
    .await;
    await_streaming(cluster, NAME, replicas, None).await
}

const DATA: &str = "CREATE TABLE items (id serial PRIMARY KEY, name text NOT NULL, price numeric);
INSERT INTO items (name, price) SELECT 'item ' || g, g * 1.5 FROM generate_series(1, 5000) g;
CREATE INDEX items_name ON items (name);
CREATE TABLE orders (id bigint PRIMARY KEY, item int REFERENCES items, at timestamptz DEFAULT now());
INSERT INTO orders (id, item) SELECT g, g FROM generate_series(1, 300) g;
CREATE SEQUENCE invoice_numbers START 1000;
SELECT nextval('invoice_numbers') FROM generate_series(1, 7);
CREATE TABLE ticks (id bigint PRIMARY KEY, at timestamptz DEFAULT now());";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_three_instance_15_cluster_is_upgraded_to_18_with_every_object_and_login() {
    let (cluster, _operator) = start_cluster(sample()).await;
    let (app, superuser) = (app_uri(&cluster).await, login_uri(&cluster, "superuser", None).await);
    psql(&app, DATA).unwrap();
    psql(&superuser, "CREATE ROLE reporting LOGIN PASSWORD 'reporting-password'").unwrap();
    psql(&superuser, "CREATE DATABASE archive").unwrap();
    let archive = login_uri(&cluster, "superuser", Some("archive")).await;
    psql(&archive, "CREATE TABLE kept AS SELECT g AS n FROM generate_series(1, 100) g").unwrap();

    let writer = Writer::start(app.clone());
    writer.await_acknowledged(5, std::time::Instant::now(), "before the upgrade").await;
    let asked = std::time::Instant::now();
    ask_for_18(&cluster).await;
    let upgraded = await_version(&cluster, "18", 3).await;
    let elapsed = asked.elapsed();
    writer.await_acknowledged(5, std::time::Instant::now(), "after the upgrade").await;
    let log = writer.finish().await;

    let app = app_uri(&cluster).await;
    assert_eq!(psql(&app, "SELECT current_setting('server_version_num')::int / 10000"), Ok("18".into()));
    assert_eq!(psql(&app, "SELECT count(*), sum(price) FROM items"), Ok("5000|18753750.0".into()));
    assert_eq!(
        psql(&app, "SELECT count(*) FROM orders JOIN items ON items.id = orders.item"),
        Ok("300".into())
    );
    assert_eq!(
        psql(&app, "SELECT indexname FROM pg_indexes WHERE indexname = 'items_name'"),
        Ok("items_name".into())
    );
    let plan =
        psql(&app, "SET enable_seqscan = off; EXPLAIN SELECT * FROM items WHERE name = 'item 7'").unwrap();
    assert!(plan.contains("items_name"), "the index is used on 18: {plan}");
    assert_eq!(psql(&app, "SELECT nextval('invoice_numbers')"), Ok("1007".into()));
    assert_eq!(
        psql(&superuser, "SELECT rolcanlogin FROM pg_roles WHERE rolname = 'reporting'"),
        Ok("t".into())
    );
    let reporting = superuser.replacen(
        superuser.split("//").nth(1).unwrap().split('@').next().unwrap(),
        "reporting:reporting-password",
        1,
    );
    assert_eq!(
        psql(&reporting, "SELECT current_user"),
        Ok("reporting".into()),
        "the role's password works on 18"
    );
    assert_eq!(psql(&archive, "SELECT sum(n) FROM kept"), Ok("5050".into()));
    assert_eq!(lost_writes(&app, &log), Vec::<i64>::new(), "{}", timeline(&log));
    let status = upgraded.status.clone().unwrap();
    assert_eq!(condition_of(&upgraded, "MajorUpgrade").map(|c| c.1), Some("Completed".into()));
    assert_eq!(status.instances.iter().filter(|i| i.role == "replica").count(), 2, "standbys re-cloned");
    let reasons = [
        "MajorUpgradeStoppingInstances",
        "MajorUpgradeRunningPgUpgrade",
        "MajorUpgradeStartingNewVersion",
        "MajorUpgradeCompleted",
    ];
    await_event_reasons(&cluster, NAME, &reasons).await;
    // docs/upgrades.md's figures (run with --nocapture).
    eprintln!(
        "upgrade 15.4 -> 18 of 3 instances: writes refused for {:.1?}; done after {elapsed:.1?}",
        longest_outage(&log)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_upgrade_check_rolls_back_to_15_with_the_data_and_says_why() {
    let mut db = sample();
    db.spec.replicas = 2;
    let (cluster, _operator) = start_cluster(db).await;
    let app = app_uri(&cluster).await;
    // reg* types other than regclass, regrole and regtype hold OIDs pg_upgrade does not keep.
    psql(
        &app,
        "CREATE TABLE hooks (id int PRIMARY KEY, handler regproc); INSERT INTO hooks VALUES (1, 'now')",
    )
    .unwrap();
    ask_for_18(&cluster).await;
    let failed = await_rollback(&cluster).await;
    assert!(failed.contains("pg_upgrade --check") && failed.contains("reg*"), "{failed}");
    let rolled_back = await_version(&cluster, "15.4", 2).await;
    assert_eq!(rolled_back.spec.version, "18");
    let app = app_uri(&cluster).await;
    assert_eq!(psql(&app, "SELECT current_setting('server_version_num')::int / 10000"), Ok("15".into()));
    assert_eq!(psql(&app, "SELECT handler FROM hooks"), Ok("now".into()), "the old data is untouched");
    psql(&app, "INSERT INTO hooks VALUES (2, 'now')").unwrap();
    assert_eq!(condition_of(&rolled_back, "Ready").map(|c| c.1), Some("MajorUpgradeFailed".into()));
    await_event_reasons(&cluster, NAME, &["MajorUpgradeRolledBack"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parameter_18_no_longer_has_is_reported_and_the_cluster_stays_on_15() {
    let mut db = sample();
    db.spec.replicas = 1;
    // Removed in PostgreSQL 16.
    db.spec.postgres_config = Some([("vacuum_defer_cleanup_age".to_owned(), "0".to_owned())].into());
    let (cluster, _operator) = start_cluster(db).await;
    psql(&app_uri(&cluster).await, "CREATE TABLE kept AS SELECT 1 AS n").unwrap();
    ask_for_18(&cluster).await;
    let failed = await_rollback(&cluster).await;
    assert!(
        failed.contains("vacuum_defer_cleanup_age") && failed.contains("nothing was changed"),
        "{failed}"
    );
    await_version(&cluster, "15.4", 1).await;
    assert_eq!(psql(&app_uri(&cluster).await, "SELECT n FROM kept"), Ok("1".into()));
}
