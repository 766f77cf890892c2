//! The instance manager (`dbcluster-operator instance init|run`, `src/instance`) and the
//! operator's instance I/O (`databasecluster::instances`), against real PostgreSQL 15 processes.
//!
//! Each "pod" here is what a kubelet would make of the operator's pod spec: the ConfigMap's keys
//! and the Secrets' keys (the logins and the status token) as files, its own loopback address and
//! socket directory, its own `/etc/hosts` (a private mount namespace) so that
//! `<pod>.<svc>.<ns>.svc` resolves, and this crate's binary run as a non-root user (Debian's
//! `postgres`); readiness is the manager's `/readyz`. Needs root (for the mount namespace and the
//! user switch) and the PostgreSQL 15 server binaries.

#![allow(unsafe_code, reason = "libc: kill and killpg of the program under test")]
#![cfg(feature = "sim")]

use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use common::postgres::{
    POSTGRES_BIN as BIN, REAL_POLL_INTERVAL, REAL_WAIT, eventually_some, require_postgres,
};
use common::within_limit;

use dbcluster_operator::databasecluster::api::types::{DatabaseCluster, DatabaseClusterSpec};
use dbcluster_operator::databasecluster::api::validation::validate_spec;
use dbcluster_operator::databasecluster::instances::{
    Target, check_login, connect, create_slot, observe, promote, reload, set_password,
};
use dbcluster_operator::databasecluster::specs::config::{
    CONFIG_HASH_PARAMETER, POSTGRESQL_CONF_KEY, RESTART_PARAMETERS, build_config_map, postgresql_conf,
};
use dbcluster_operator::databasecluster::specs::credentials::{Login, build_login_secret};
use dbcluster_operator::databasecluster::specs::resources::Owner;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, Command};

const NAMESPACE: &str = "default";
const CLUSTER: &str = "db";
/// The manager's HTTP port.
const STATUS_PORT: u16 = 8000;
/// The `/status` bearer token mounted in every pod.
const TOKEN: &str = "test-status-token";
/// This crate's binary: the instance manager.
const MANAGER: &str = env!("CARGO_BIN_EXE_dbcluster-operator");

/// One simulated cluster's files: the ConfigMap, the Secrets, the hosts file, and a directory per pod
/// (shared with the tests of `instance_metrics`).
pub(crate) struct Fixture {
    _dir: tempfile::TempDir,
    pub(crate) root: PathBuf,
    subnet: u8,
    pods: Vec<Instance>,
    /// More environment for the manager, e.g. `DBC_CUSTOM_QUERIES`.
    pub(crate) env: Vec<(String, String)>,
}

struct Instance {
    name: String,
    child: Option<Child>,
    log: PathBuf,
}

impl Fixture {
    /// `subnet` keeps each test's addresses (127.213.<subnet>.<n>) apart from the others'.
    pub(crate) async fn new(subnet: u8, config: &[(&str, &str)]) -> Fixture {
        require_postgres();
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        let mut cluster = DatabaseCluster::new(
            CLUSTER,
            DatabaseClusterSpec {
                replicas: 2,
                version: "15".into(),
                storage_size: "1Gi".into(),
                postgres_config: Some(
                    config.iter().map(|(n, v)| ((*n).to_owned(), (*v).to_owned())).collect(),
                ),
                ..DatabaseClusterSpec::default()
            },
        );
        cluster.metadata.namespace = Some(NAMESPACE.into());
        cluster.metadata.uid = Some("uid".into());
        let owner = Owner::of(&cluster).unwrap();
        let spec = validate_spec(&cluster.spec).unwrap();
        let config_map = build_config_map(&owner, &spec, "db-0", None);
        write_files(&root.join("cfg"), config_map.data.unwrap());
        for login in Login::ALL {
            let password = format!("{}-pw:{}", login.mount_dir(), subnet);
            let secret = build_login_secret(&owner, login, &password);
            let data = secret.data.unwrap().into_iter().map(|(k, v)| (k, String::from_utf8(v.0).unwrap()));
            write_files(&root.join("sec").join(login.mount_dir()), data.collect());
        }
        write_files(
            &root.join("sec").join("status"),
            BTreeMap::from([("token".to_owned(), TOKEN.to_owned())]),
        );
        let mut hosts = String::from("127.0.0.1 localhost\n");
        for n in 0..4 {
            hosts.push_str(&format!("127.213.{subnet}.{} db-{n}.db.{NAMESPACE}.svc\n", n + 1));
        }
        std::fs::write(root.join("hosts"), hosts).unwrap();
        let status =
            std::process::Command::new("chown").args(["-R", "postgres:postgres"]).arg(&root).status();
        assert!(status.unwrap().success());
        std::fs::set_permissions(&root, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        Fixture { _dir: dir, root, subnet, pods: Vec::new(), env: Vec::new() }
    }

    fn secret(&self, login: Login) -> String {
        std::fs::read_to_string(self.root.join("sec").join(login.mount_dir()).join("password")).unwrap()
    }

    fn set_secret(&self, login: Login, password: &str) {
        std::fs::write(self.root.join("sec").join(login.mount_dir()).join("password"), password).unwrap();
    }

    pub(crate) fn ip(&self, ordinal: usize) -> String {
        format!("127.213.{}.{}", self.subnet, ordinal + 1)
    }

    pub(crate) fn target(&self, ordinal: usize, login: Login, database: &str) -> Target {
        Target {
            host: self.ip(ordinal),
            port: 5432,
            user: login.username().into(),
            password: self.secret(login),
            database: database.into(),
        }
    }

    pub(crate) fn superuser(&self, ordinal: usize) -> Target {
        self.target(ordinal, Login::Superuser, "postgres")
    }

    pub(crate) fn pgdata(&self, ordinal: usize) -> PathBuf {
        self.root.join(format!("db-{ordinal}")).join("data").join("pgdata")
    }

    /// The instance manager run as pod `db-<ordinal>` would run it.
    fn command(&self, ordinal: usize, verb: &str) -> Command {
        let pod = self.root.join(format!("db-{ordinal}"));
        std::fs::create_dir_all(pod.join("data")).unwrap();
        let _ = std::process::Command::new("chown").args(["-R", "postgres:postgres"]).arg(&pod).status();
        let inner = format!(
            "mount --bind {hosts} /etc/hosts && exec setpriv --reuid=postgres --regid=postgres --init-groups \
             env PATH={BIN}:/usr/bin:/bin PGDATA={pgdata} POD_NAME=db-{ordinal} POD_IP={ip} \
             DBC_CONFIG={cfg} DBC_SECRETS={sec} DBC_RUN={run} DBC_PEER_DOMAIN=db.{NAMESPACE}.svc {env} \
             {MANAGER} instance {verb}",
            hosts = self.root.join("hosts").display(),
            pgdata = self.pgdata(ordinal).display(),
            ip = self.ip(ordinal),
            cfg = self.root.join("cfg").display(),
            sec = self.root.join("sec").display(),
            run = pod.join("run").display(),
            env = self.env.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" "),
        );
        let mut command = Command::new("unshare");
        command.args(["-m", "bash", "-c", &inner]).stdin(Stdio::null()).process_group(0);
        command
    }

    /// Runs `instance init` for pod `ordinal` to completion; returns its log.
    pub(crate) async fn init(&self, ordinal: usize) -> String {
        let output =
            within_limit("instance init", REAL_WAIT, self.command(ordinal, "init").output()).await.unwrap();
        let log = String::from_utf8_lossy(&output.stderr).into_owned();
        assert!(output.status.success(), "init of db-{ordinal} failed:\n{log}");
        log
    }

    /// Starts `instance run` for pod `ordinal` and waits until its readiness probe passes.
    pub(crate) async fn start(&mut self, ordinal: usize) {
        let log = self.root.join(format!("db-{ordinal}.log"));
        let file = std::fs::OpenOptions::new().create(true).append(true).open(&log).unwrap();
        let mut command = self.command(ordinal, "run");
        command.stdout(file.try_clone().unwrap()).stderr(file);
        let child = command.spawn().unwrap();
        self.pods.retain(|p| p.name != format!("db-{ordinal}"));
        self.pods.push(Instance { name: format!("db-{ordinal}"), child: Some(child), log });
        let limit = Duration::from_secs(60);
        common::eventually_every(&format!("db-{ordinal} ready"), limit, REAL_POLL_INTERVAL, || async {
            match self.get(ordinal, "/readyz", None).await {
                Some((200, _)) => Ok(()),
                _ => Err(Log(self.log(ordinal))),
            }
        })
        .await;
    }

    /// `GET path` on pod `ordinal`'s manager (with a bearer token when given): the status code
    /// and body, or `None` when nothing answers within two seconds.
    pub(crate) async fn get(&self, ordinal: usize, path: &str, token: Option<&str>) -> Option<(u16, String)> {
        self.get_on(ordinal, STATUS_PORT, path, token).await
    }

    /// `GET path` on pod `ordinal`'s `port`.
    async fn get_on(
        &self,
        ordinal: usize,
        port: u16,
        path: &str,
        token: Option<&str>,
    ) -> Option<(u16, String)> {
        let exchange = async {
            let mut stream = tokio::net::TcpStream::connect((self.ip(ordinal).as_str(), port)).await.ok()?;
            let auth = token.map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
            let request = format!("GET {path} HTTP/1.1\r\nHost: pod\r\n{auth}Connection: close\r\n\r\n");
            stream.write_all(request.as_bytes()).await.ok()?;
            let mut answer = String::new();
            stream.read_to_string(&mut answer).await.ok()?;
            let code = answer.split_whitespace().nth(1)?.parse().ok()?;
            let body = answer.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
            Some((code, body))
        };
        tokio::time::timeout(Duration::from_secs(2), exchange).await.ok().flatten()
    }

    /// Pod `ordinal`'s `/status`, parsed.
    async fn status(&self, ordinal: usize) -> serde_json::Value {
        let (code, body) = self.get(ordinal, "/status", Some(TOKEN)).await.expect("the manager answers");
        assert_eq!(code, 200, "{body}");
        serde_json::from_str(&body).unwrap()
    }

    pub(crate) fn log(&self, ordinal: usize) -> String {
        std::fs::read_to_string(self.root.join(format!("db-{ordinal}.log"))).unwrap_or_default()
    }

    /// Waits for pod `ordinal`'s manager to exit on its own; its exit status must be success.
    async fn exited(&mut self, ordinal: usize) {
        let name = format!("db-{ordinal}");
        let pod = self.pods.iter_mut().find(|p| p.name == name).unwrap();
        let mut child = pod.child.take().unwrap();
        let status = within_limit("the manager's exit", REAL_WAIT, child.wait()).await.unwrap();
        assert!(
            status.success(),
            "{name} exited with {status}:\n{}",
            std::fs::read_to_string(&pod.log).unwrap()
        );
    }

    /// Sends SIGTERM (what a kubelet does) and waits for the instance to exit.
    pub(crate) async fn stop(&mut self, ordinal: usize) {
        let name = format!("db-{ordinal}");
        let pod = self.pods.iter_mut().find(|p| p.name == name).unwrap();
        let mut child = pod.child.take().unwrap();
        signal(child.id().unwrap(), libc::SIGTERM, false);
        let status = within_limit("a fast shutdown", REAL_WAIT, child.wait()).await.unwrap();
        assert!(
            status.success(),
            "{name} exited with {status}:\n{}",
            std::fs::read_to_string(&pod.log).unwrap()
        );
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        for pod in &mut self.pods {
            if let Some(child) = &pod.child
                && let Some(pid) = child.id()
            {
                signal(pid, libc::SIGKILL, true);
            }
        }
    }
}

/// Sends `signal` to the process `pid`, or to the process group it leads, by the system call.
/// (Never through `kill(1)`: procps' `kill -KILL -<pid>` without `--` can end up as
/// `kill(-1, SIGKILL)`, which as root ends every process on the machine.)
fn signal(pid: u32, signal: libc::c_int, group: bool) {
    let pid = libc::pid_t::try_from(pid).expect("a pid fits pid_t");
    assert!(pid > 1, "refusing to signal pid {pid}");
    // SAFETY: plain system calls on a child this fixture spawned and has not reaped (its pid, and
    // its process group: it was spawned with `process_group(0)`).
    let sent = unsafe { if group { libc::killpg(pid, signal) } else { libc::kill(pid, signal) } };
    assert!(sent == 0 || group, "kill({pid}, {signal}) failed: {}", std::io::Error::last_os_error());
}

/// An instance's log, shown as it is when a wait for it times out.
struct Log(String);

impl std::fmt::Debug for Log {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "\n{}", self.0)
    }
}

fn write_files(dir: &Path, files: BTreeMap<String, String>) {
    std::fs::create_dir_all(dir).unwrap();
    for (name, content) in files {
        std::fs::write(dir.join(name), content).unwrap();
    }
}

/// A primary and a standby cloned over its slot, streaming.
pub(crate) async fn primary_and_standby(subnet: u8) -> Fixture {
    let mut fixture = Fixture::new(subnet, &[("work_mem", "4MB")]).await;
    fixture.init(0).await;
    fixture.start(0).await;
    let su = fixture.superuser(0);
    create_slot(&connect(&su).await.unwrap(), &su, "instance_1").await.unwrap();
    let log = fixture.init(1).await;
    assert!(log.contains("cloning db-0.db.default.svc over slot instance_1"), "{log}");
    fixture.start(1).await;
    fixture
}

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

    let primary = observe(&fixture.superuser(0)).await.unwrap();
    assert!(!primary.in_recovery);
    assert!(primary.version.starts_with("15."), "{}", primary.version);
    assert_eq!(primary.slots.len(), 1);
    assert!(primary.slots[0].active);
    assert_eq!(primary.standbys.len(), 1);
    assert_eq!(
        (primary.standbys[0].name.as_str(), primary.standbys[0].state.as_str()),
        ("db-1", "streaming")
    );
    let replica = observe(&fixture.superuser(1)).await.unwrap();
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
async fn only_the_replication_user_may_open_a_replication_connection() {
    let fixture = primary_and_standby(2).await;
    let replicate = |login: Login| {
        let target = fixture.target(0, login, "postgres");
        std::process::Command::new("psql")
            .arg(format!(
                "host={} user={} password={} dbname=replication replication=true",
                target.host, target.user, target.password
            ))
            .args(["-XtAc", "IDENTIFY_SYSTEM"])
            .output()
            .unwrap()
    };
    assert!(replicate(Login::Replication).status.success());
    for login in [Login::Superuser, Login::App] {
        let output = replicate(login);
        assert!(!output.status.success());
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains("no pg_hba.conf entry for replication connection"), "{stderr}");
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
    assert!(!observe(&fixture.superuser(0)).await.unwrap().in_recovery, "the primary comes back as primary");
    eventually_some("the standby streams again", || async {
        let facts = observe(&fixture.superuser(0)).await.ok()?;
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
    for login in Login::ALL {
        check_login(&fixture.target(0, login, login.database())).await.unwrap();
    }

    // New Secrets over kept data (a cluster re-created over its volumes): applied at start.
    let old = fixture.target(0, Login::App, "app");
    fixture.stop(0).await;
    fixture.set_secret(Login::Superuser, "new-superuser-password");
    fixture.set_secret(Login::App, "new-app-password");
    fixture.init(0).await;
    fixture.start(0).await;
    check_login(&fixture.superuser(0)).await.unwrap();
    check_login(&fixture.target(0, Login::App, "app")).await.unwrap();
    assert!(check_login(&old).await.unwrap_err().is_password_refused(), "the old password no longer works");

    // A Secret changed while the server runs: the operator sets a SCRAM verifier.
    fixture.set_secret(Login::App, "rotated-app-password");
    let rotated = fixture.target(0, Login::App, "app");
    assert!(check_login(&rotated).await.unwrap_err().is_password_refused());
    let su = fixture.superuser(0);
    set_password(&connect(&su).await.unwrap(), &su, "app", "rotated-app-password").await.unwrap();
    check_login(&rotated).await.unwrap();
    let log = fixture.log(0);
    for secret in ["new-superuser-password", "new-app-password", "rotated-app-password"] {
        assert!(!log.contains(secret), "the server log holds a password");
    }
}

#[tokio::test]
async fn a_reloadable_change_applies_without_restart_and_the_hash_shows_it() {
    let mut fixture = Fixture::new(5, &[("work_mem", "4MB")]).await;
    fixture.init(0).await;
    fixture.start(0).await;
    let su = fixture.superuser(0);
    let client = connect(&su).await.unwrap();
    let started: String =
        client.query_one("SELECT pg_postmaster_start_time()::text", &[]).await.unwrap().get(0);
    let before = observe(&su).await.unwrap();
    assert_eq!(before.config_hash_applied, before.config_hash_on_disk);

    let conf = postgresql_conf(&BTreeMap::from([("work_mem".to_owned(), "64MB".to_owned())]), None);
    std::fs::write(fixture.root.join("cfg").join(POSTGRESQL_CONF_KEY), &conf).unwrap();
    let pending = observe(&su).await.unwrap();
    assert_ne!(
        pending.config_hash_on_disk, pending.config_hash_applied,
        "the new file is seen before a reload"
    );
    assert_eq!(pending.config_hash_applied, before.config_hash_applied);
    reload(&client, &su).await.unwrap();
    eventually_some("the reload applies the new hash", || async {
        (observe(&su).await.ok()?.config_hash_applied == pending.config_hash_on_disk).then_some(())
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
    let su = fixture.superuser(1);
    let new_primary = connect(&su).await.unwrap();
    assert!(promote(&new_primary, &su).await.unwrap());
    create_slot(&new_primary, &su, "instance_0").await.unwrap();
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
