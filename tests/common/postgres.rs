//! Helpers of the tests that run real PostgreSQL through the simulator's process kubelet.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dbcluster_operator::databasecluster::api::types::DatabaseCluster;
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

/// Waits (real time, bounded by [`REAL_WAIT`]) until the cluster `name` in `default` is Running
/// with `replicas` of `replicas` instances ready, every instance observed (its role `primary` or
/// `replica`), one primary (`primary`, when given, which `currentPrimary` names) and every standby
/// streaming; returns the cluster. On timeout the failure shows the last status seen.
pub async fn await_streaming(
    cluster: &TestCluster,
    name: &str,
    replicas: usize,
    primary: Option<&str>,
) -> DatabaseCluster {
    let api = cluster.clusters();
    let from = primary.map(|p| format!(" from {p}")).unwrap_or_default();
    let what = format!("{name}: {replicas} instances ready and streaming{from}");
    super::eventually_every(&what, REAL_WAIT, REAL_POLL_INTERVAL, || async {
        let db = api.get(name).await.map_err(|e| e.to_string())?;
        let Some(status) = db.status.as_ref() else { return Err("no status".to_owned()) };
        let instances = &status.instances;
        let primaries: Vec<&str> =
            instances.iter().filter(|i| i.role == "primary").map(|i| i.name.as_str()).collect();
        let done = status.ready_instances.as_deref() == Some(&format!("{replicas}/{replicas}"))
            && instances.len() == replicas
            && instances.iter().all(|i| i.ready)
            // Every instance observed in this pass (an unobserved one has role `unknown`).
            && instances.iter().all(|i| i.role == "primary" || i.role == "replica")
            && primaries.len() == 1
            && primary.is_none_or(|p| primaries == [p])
            && instances
                .iter()
                .filter(|i| i.role == "replica")
                .all(|i| i.replication_state.as_deref() == Some("streaming"))
            && status.current_primary.is_some()
            && primary.is_none_or(|p| status.current_primary.as_deref() == Some(p))
            && status.phase.map(|p| p.as_str()) == Some("Running");
        if done {
            Ok(db)
        } else {
            Err(format!(
                "{:?} {:?} primary {:?}: {instances:?}",
                status.phase, status.ready_instances, status.current_primary
            ))
        }
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

/// The Secret's `uri` with its host resolved as a pod in `namespace` resolves it: the name stays
/// (`verify-full` checks it against the server's certificate) and `hostaddr` says where it is.
/// Its `sslrootcert` names where a pod mounts the Secret; here, a file on the host holding the
/// CA that verifies the cluster's servers (the `ca.crt` of its login Secret `<cluster>-superuser`,
/// the cluster named by the host's Service).
pub fn host_uri(cluster: &TestCluster, namespace: &str, uri: &str) -> String {
    let url = url::Url::parse(uri).expect("the Secret's uri is a URL");
    let host = url.host_str().expect("the uri has a host").to_owned();
    let ip = cluster
        .sim
        .resolve(namespace, &host)
        .unwrap_or_else(|| panic!("{host} does not resolve in the cluster"));
    let mut uri = uri.to_owned();
    if url.query_pairs().any(|(k, _)| k == "sslrootcert") {
        let service = host.split('.').next().unwrap_or_default();
        let name = service.trim_end_matches("-rw").trim_end_matches("-ro").trim_end_matches("-r");
        uri = with_param(&uri, "sslrootcert", &ca_file(cluster, namespace, name).display().to_string());
    }
    at_address(&uri, &ip.to_string())
}

/// `uri` (a [`host_uri`]) to the server at `ip`: its `hostaddr` replaced, its name kept (every
/// instance's certificate names the client Services too).
pub fn at_address(uri: &str, ip: &str) -> String {
    with_param(uri, "hostaddr", ip)
}

/// `uri` with its query parameter `key` set to `value` (added last, any earlier value removed).
pub fn with_param(uri: &str, key: &str, value: &str) -> String {
    let mut url = url::Url::parse(uri).expect("a URL");
    let mut pairs: Vec<(String, String)> =
        url.query_pairs().map(|(k, v)| (k.into_owned(), v.into_owned())).filter(|(k, _)| k != key).collect();
    pairs.push((key.to_owned(), value.to_owned()));
    url.query_pairs_mut().clear().extend_pairs(pairs);
    url.to_string()
}

/// The CA that verifies cluster `name`'s servers in a file on the host (written anew at each
/// call: a re-created cluster has a new CA).
pub fn ca_file(cluster: &TestCluster, namespace: &str, name: &str) -> std::path::PathBuf {
    let secrets: kube::Api<k8s_openapi::api::core::v1::Secret> =
        kube::Api::namespaced(cluster.client.clone(), namespace);
    let secret = tokio::task::block_in_place(|| {
        tokio::runtime::Handle::current().block_on(secrets.get(&format!("{name}-superuser")))
    })
    .expect("the cluster's superuser Secret");
    let ca = secret.data.and_then(|d| d.get("ca.crt").cloned()).expect("the login Secret holds ca.crt");
    let path = cluster.scratch_dir().join(format!("{namespace}-{name}-ca.crt"));
    std::fs::write(&path, ca.0).expect("writing the CA file");
    path
}

/// One write of a [`Writer`]: its id, when psql answered, and psql's error if it failed.
#[derive(Clone, Debug)]
pub struct Write {
    /// The row's id (1, 2, …: one per write).
    pub id: i64,
    /// When psql answered.
    pub at: Instant,
    /// psql's error, for a write that failed.
    pub error: Option<String>,
}

impl Write {
    /// Whether the server acknowledged the write (its row must then survive).
    pub fn acknowledged(&self) -> bool {
        self.error.is_none()
    }
}

/// A client that inserts a row through `uri` every 100 ms until it is finished, logging each write.
pub struct Writer {
    stop: Arc<AtomicBool>,
    log: Arc<Mutex<Vec<Write>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Writer {
    /// Starts writing through `uri` (into a `ticks (id bigint PRIMARY KEY, …)` table).
    pub fn start(uri: String) -> Writer {
        let stop = Arc::new(AtomicBool::new(false));
        let log = Arc::new(Mutex::new(Vec::new()));
        let (flag, shared) = (stop.clone(), log.clone());
        let task = tokio::task::spawn_blocking(move || {
            let mut id = 0i64;
            while !flag.load(Ordering::Relaxed) {
                id += 1;
                let error = psql(&uri, &format!("INSERT INTO ticks (id) VALUES ({id})")).err();
                shared.lock().unwrap().push(Write { id, at: Instant::now(), error });
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        Writer { stop, log, task }
    }

    /// Waits (bounded) until `count` writes answered after `since` were acknowledged: the writes
    /// a phase needs on either side of what it does, however slowly a loaded machine runs psql.
    pub async fn await_acknowledged(&self, count: usize, since: Instant, what: &str) {
        eventually_some(&format!("{count} writes acknowledged {what}"), || async {
            let log = self.log.lock().unwrap();
            (log.iter().filter(|w| w.acknowledged() && w.at > since).count() >= count).then_some(())
        })
        .await;
    }

    /// Stops the writer; every write it made, in order.
    pub async fn finish(self) -> Vec<Write> {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.unwrap();
        Arc::try_unwrap(self.log).expect("the writer has stopped").into_inner().unwrap()
    }
}

/// `log` as one line per write (milliseconds since the first write, and psql's error if any),
/// for a failed assertion.
pub fn timeline(log: &[Write]) -> String {
    let Some(first) = log.first() else { return "no write".to_owned() };
    log.iter()
        .map(|w| {
            let outcome = w.error.as_deref().map_or("ok", |e| e.lines().next().unwrap_or(e));
            format!("\n  {} +{} ms: {outcome}", w.id, (w.at - first.at).as_millis())
        })
        .collect()
}

/// The writes of `log` that were acknowledged but whose rows the primary at `uri` does not have.
pub fn lost_writes(uri: &str, log: &[Write]) -> Vec<i64> {
    let present: std::collections::BTreeSet<i64> =
        psql(uri, "SELECT id FROM ticks").unwrap().lines().map(|l| l.parse().unwrap()).collect();
    log.iter().filter(|w| w.acknowledged() && !present.contains(&w.id)).map(|w| w.id).collect()
}

/// The longest time between two acknowledged writes of `log` (the write outage).
pub fn longest_outage(log: &[Write]) -> Duration {
    let acknowledged: Vec<Instant> = log.iter().filter(|w| w.acknowledged()).map(|w| w.at).collect();
    acknowledged.windows(2).map(|w| w[1] - w[0]).max().unwrap_or_default()
}

/// [`super::sample`] named `name`, with `replicas` instances and the spec fields in `extra` set.
pub fn sample_with(name: &str, replicas: i32, extra: serde_json::Value) -> DatabaseCluster {
    let mut value = serde_json::to_value(super::sample()).expect("the sample serializes");
    value["metadata"]["name"] = serde_json::json!(name);
    value["spec"]["replicas"] = serde_json::json!(replicas);
    for (key, field) in extra.as_object().expect("the extra spec fields are an object") {
        value["spec"][key] = field.clone();
    }
    serde_json::from_value(value).expect("a DatabaseCluster")
}

/// The condition `type_` of the cluster: (status, reason, message).
pub fn condition_of(db: &DatabaseCluster, type_: &str) -> Option<(String, String, String)> {
    let c = db.status.as_ref()?.conditions.iter().find(|c| c.type_ == type_)?;
    Some((c.status.clone(), c.reason.clone(), c.message.clone()))
}
