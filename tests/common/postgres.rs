//! Helpers of the tests that run real PostgreSQL through the simulator's process kubelet.

use std::time::Duration;

use dbcluster_operator::sim::{KubeletKind, SimConfig};

use super::TestCluster;

/// Where the tests expect the PostgreSQL 15 server binaries (Debian's `postgresql-15`).
pub const POSTGRES_BIN: &str = "/usr/lib/postgresql/15/bin";

/// How long a real cluster may take to reach a state (real time: real processes).
pub const REAL_WAIT: Duration = Duration::from_secs(240);

/// How often a real-time wait looks again (each look may start `psql` or open a connection).
pub const REAL_POLL_INTERVAL: Duration = Duration::from_millis(100);

/// Fails the test with one line saying what to install when PostgreSQL 15 is missing.
pub fn require_postgres() {
    let server = std::path::Path::new(POSTGRES_BIN).join("postgres");
    let psql = std::process::Command::new("psql").arg("--version").output().is_ok_and(|o| o.status.success());
    assert!(
        server.is_file() && psql,
        "this test runs real PostgreSQL 15: install it (Debian: apt-get install postgresql-15) or run scripts/test, which does"
    );
}

/// A simulated cluster whose pods are real processes.
pub async fn process_cluster() -> TestCluster {
    require_postgres();
    TestCluster::start_with(SimConfig { kubelet: KubeletKind::Process, ..SimConfig::default() }).await
}

/// Waits (real time, bounded by [`REAL_WAIT`]) for `check` to return `Some`: the shared
/// [`eventually`](super::eventually) for checks that have nothing to report while they wait.
pub async fn eventually_some<T, F: std::future::Future<Output = Option<T>>>(
    what: &str,
    mut check: impl FnMut() -> F,
) -> T {
    super::eventually_every(what, REAL_WAIT, REAL_POLL_INTERVAL, || {
        let next = check();
        async move { next.await.ok_or("not yet") }
    })
    .await
}

/// Runs `sql` with `psql` from the host against `uri`; its trimmed output, or psql's error.
pub fn psql(uri: &str, sql: &str) -> Result<String, String> {
    let out = std::process::Command::new("psql")
        .args([uri, "-X", "-tA", "-v", "ON_ERROR_STOP=1", "-c", sql])
        .env("PGCONNECT_TIMEOUT", "5")
        .output()
        .map_err(|e| format!("running psql: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_owned())
    }
}

/// The Secret's `uri` with its host resolved as a pod in `namespace` resolves it.
pub fn host_uri(cluster: &TestCluster, namespace: &str, uri: &str) -> String {
    let url = url::Url::parse(uri).expect("the Secret's uri is a URL");
    let host = url.host_str().expect("the uri has a host").to_owned();
    let ip = cluster
        .sim
        .resolve(namespace, &host)
        .unwrap_or_else(|| panic!("{host} does not resolve in the cluster"));
    uri.replacen(&host, &ip.to_string(), 1)
}
