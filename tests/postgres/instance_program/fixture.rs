//! The fixture of the instance manager's tests: one simulated cluster's files (the ConfigMap,
//! the Secrets, a hosts file), its pods run as `instance init|run` would run in them, the
//! manager's HTTP endpoints, and SQL sessions of the tests' own (the operator opens none).

#![allow(unsafe_code, reason = "libc: kill and killpg of the program under test")]

use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use common::postgres::{POSTGRES_BIN as BIN, REAL_POLL_INTERVAL, REAL_WAIT, require_postgres};
use common::within_limit;

use dbcluster_operator::databasecluster::api::types::{DatabaseCluster, DatabaseClusterSpec};
use dbcluster_operator::databasecluster::api::validation::validate_spec;
use dbcluster_operator::databasecluster::instances::client::change_slots;
use dbcluster_operator::databasecluster::instances::{Access, SlotChanges, StatusToken, Target};
use dbcluster_operator::databasecluster::specs::config::build_config_map;
use dbcluster_operator::databasecluster::specs::credentials::{Login, build_login_secret};
use dbcluster_operator::databasecluster::specs::resources::Owner;
use dbcluster_operator::databasecluster::tls::issue::{Leaf, issue_ca, issue_leaf};
use dbcluster_operator::databasecluster::tls::server_dns_names;
use dbcluster_operator::instance::tls_connect::Verified;
use rustls_pki_types::pem::PemObject;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, Command};

pub const NAMESPACE: &str = "default";
const CLUSTER: &str = "db";
/// The manager's HTTP port.
pub const STATUS_PORT: u16 = 8000;
/// The `/status` bearer token mounted in every pod.
pub const TOKEN: &str = "test-status-token";
/// This crate's binary: the instance manager.
const MANAGER: &str = env!("CARGO_BIN_EXE_dbcluster-operator");

/// One simulated cluster's files: the ConfigMap, the Secrets, the hosts file, and a directory per pod
/// (shared with the tests of `instance_metrics`).
pub struct Fixture {
    _dir: tempfile::TempDir,
    pub root: PathBuf,
    subnet: u8,
    pods: Vec<Instance>,
    /// More environment for the manager, e.g. `DBC_CUSTOM_QUERIES`.
    pub env: Vec<(String, String)>,
}

pub struct Instance {
    name: String,
    child: Option<Child>,
    log: PathBuf,
}

impl Fixture {
    /// `subnet` keeps each test's addresses (127.213.<subnet>.<n>) apart from the others'.
    pub async fn new(subnet: u8, config: &[(&str, &str)]) -> Fixture {
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
        write_certificates(&root.join("sec"));
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

    /// The cluster's CA certificate (the one the servers' certificate is signed by).
    pub fn ca_file(&self) -> PathBuf {
        self.root.join("sec").join("server-tls").join("ca.crt")
    }

    pub fn secret(&self, login: Login) -> String {
        std::fs::read_to_string(self.root.join("sec").join(login.mount_dir()).join("password")).unwrap()
    }

    pub fn set_secret(&self, login: Login, password: &str) {
        std::fs::write(self.root.join("sec").join(login.mount_dir()).join("password"), password).unwrap();
    }

    pub fn ip(&self, ordinal: usize) -> String {
        format!("127.213.{}.{}", self.subnet, ordinal + 1)
    }

    /// A login to pod `ordinal`'s server with the mounted Secret's password (the test's own).
    pub fn target(&self, ordinal: usize, login: Login, database: &str) -> Sql {
        Sql {
            name: format!("db-{ordinal}.db.{NAMESPACE}.svc"),
            ca: self.ca_file(),
            host: self.ip(ordinal),
            user: login.username().into(),
            password: self.secret(login),
            database: database.into(),
        }
    }

    /// The superuser's login to pod `ordinal`.
    pub fn superuser(&self, ordinal: usize) -> Sql {
        self.target(ordinal, Login::Superuser, "postgres")
    }

    /// Pod `ordinal`'s instance manager, as the operator asks it (over TLS, verified against the
    /// cluster's CA under the pod's name).
    pub fn manager(&self, ordinal: usize) -> Target {
        let ca = std::fs::read_to_string(self.ca_file()).unwrap();
        Access::new(StatusToken::new(TOKEN), &ca, CLUSTER, NAMESPACE).target(
            &format!("db-{ordinal}"),
            self.ip(ordinal),
            STATUS_PORT,
        )
    }

    pub fn pgdata(&self, ordinal: usize) -> PathBuf {
        self.root.join(format!("db-{ordinal}")).join("data").join("pgdata")
    }

    /// The instance manager run as pod `db-<ordinal>` would run it.
    pub fn command(&self, ordinal: usize, verb: &str) -> Command {
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
    pub async fn init(&self, ordinal: usize) -> String {
        let output =
            within_limit("instance init", REAL_WAIT, self.command(ordinal, "init").output()).await.unwrap();
        let log = String::from_utf8_lossy(&output.stderr).into_owned();
        assert!(output.status.success(), "init of db-{ordinal} failed:\n{log}");
        log
    }

    /// Starts `instance run` for pod `ordinal` and waits until its readiness probe passes.
    pub async fn start(&mut self, ordinal: usize) {
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
    pub async fn get(&self, ordinal: usize, path: &str, token: Option<&str>) -> Option<(u16, String)> {
        self.request_on(ordinal, STATUS_PORT, "GET", path, token).await
    }

    /// `GET path` on pod `ordinal`'s `port`.
    pub async fn get_on(
        &self,
        ordinal: usize,
        port: u16,
        path: &str,
        token: Option<&str>,
    ) -> Option<(u16, String)> {
        self.request_on(ordinal, port, "GET", path, token).await
    }

    /// `method path` (no body) on pod `ordinal`'s `port`.
    pub async fn request_on(
        &self,
        ordinal: usize,
        port: u16,
        method: &str,
        path: &str,
        token: Option<&str>,
    ) -> Option<(u16, String)> {
        let exchange = async {
            let stream = tokio::net::TcpStream::connect((self.ip(ordinal).as_str(), port)).await.ok()?;
            if port != STATUS_PORT {
                return exchange_on(stream, method, path, token).await;
            }
            // The status port serves TLS: verified as the operator verifies it.
            let ca = std::fs::read(self.ca_file()).ok()?;
            let trusted =
                rustls_pki_types::CertificateDer::pem_slice_iter(&ca).collect::<Result<Vec<_>, _>>().ok()?;
            let connector = dbcluster_operator::runtime::observe::tls::client_connector(&trusted)?;
            let name =
                rustls_pki_types::ServerName::try_from(format!("db-{ordinal}.{CLUSTER}.{NAMESPACE}.svc"))
                    .ok()?;
            exchange_on(connector.connect(name, stream).await.ok()?, method, path, token).await
        };
        tokio::time::timeout(Duration::from_secs(2), exchange).await.ok().flatten()
    }

    /// Pod `ordinal`'s `/status`, parsed.
    pub async fn status(&self, ordinal: usize) -> serde_json::Value {
        let (code, body) = self.get(ordinal, "/status", Some(TOKEN)).await.expect("the manager answers");
        assert_eq!(code, 200, "{body}");
        serde_json::from_str(&body).unwrap()
    }

    pub fn log(&self, ordinal: usize) -> String {
        std::fs::read_to_string(self.root.join(format!("db-{ordinal}.log"))).unwrap_or_default()
    }

    /// Waits for pod `ordinal`'s manager to exit on its own; its exit status must be success.
    pub async fn exited(&mut self, ordinal: usize) {
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
    pub async fn stop(&mut self, ordinal: usize) {
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
pub fn signal(pid: u32, signal: libc::c_int, group: bool) {
    let pid = libc::pid_t::try_from(pid).expect("a pid fits pid_t");
    assert!(pid > 1, "refusing to signal pid {pid}");
    // SAFETY: plain system calls on a child this fixture spawned and has not reaped (its pid, and
    // its process group: it was spawned with `process_group(0)`).
    let sent = unsafe { if group { libc::killpg(pid, signal) } else { libc::kill(pid, signal) } };
    assert!(sent == 0 || group, "kill({pid}, {signal}) failed: {}", std::io::Error::last_os_error());
}

/// An instance's log, shown as it is when a wait for it times out.
pub struct Log(String);

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
pub async fn primary_and_standby(subnet: u8) -> Fixture {
    let mut fixture = Fixture::new(subnet, &[("work_mem", "4MB")]).await;
    fixture.init(0).await;
    fixture.start(0).await;
    let slot = SlotChanges { create: vec!["instance_1".into()], drop: Vec::new() };
    change_slots(&fixture.manager(0), &slot).await.unwrap();
    let log = fixture.init(1).await;
    assert!(log.contains("cloning db-0.db.default.svc over slot instance_1"), "{log}");
    fixture.start(1).await;
    fixture
}

/// A login of the tests' own to a server (the operator has none).
#[derive(Clone, Debug)]
pub struct Sql {
    /// The pod's name, as its certificate names it.
    pub name: String,
    /// The CA its certificate is verified with.
    pub ca: PathBuf,
    /// The pod's address.
    pub host: String,
    /// The user.
    pub user: String,
    /// Its password.
    pub password: String,
    /// The database.
    pub database: String,
}

/// Opens a session as `login` (within five seconds); its connection task ends with the client.
pub async fn connect(login: &Sql) -> Result<tokio_postgres::Client, tokio_postgres::Error> {
    let mut config = tokio_postgres::Config::new();
    config
        .host(&login.name)
        .hostaddr(login.host.parse().expect("an IP address"))
        .ssl_mode(tokio_postgres::config::SslMode::Require)
        .port(5432)
        .user(&login.user)
        .password(&login.password)
        .dbname(&login.database)
        .connect_timeout(Duration::from_secs(5));
    let tls = Verified::from_ca_file(&login.ca).expect("the fixture's CA");
    let (client, connection) = config.connect(tls).await?;
    tokio::spawn(connection);
    Ok(client)
}

/// Logs in and out as `login`.
pub async fn check_login(login: &Sql) -> Result<(), tokio_postgres::Error> {
    connect(login).await.map(drop)
}

/// `method path` (no body, a bearer `token` if given) on `stream`, read to its end: the status
/// code and body.
async fn exchange_on<S>(mut stream: S, method: &str, path: &str, token: Option<&str>) -> Option<(u16, String)>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let auth = token.map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: pod\r\n{auth}Content-Length: 0\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.ok()?;
    let code = answer.split_whitespace().nth(1)?.parse().ok()?;
    let body = answer.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
    Some((code, body))
}

/// Whether the server refused the password (SQLSTATE 28P01).
pub fn password_refused(error: &tokio_postgres::Error) -> bool {
    error.code() == Some(&tokio_postgres::error::SqlState::INVALID_PASSWORD)
}

/// The Secrets of the cluster's certificates as the pods mount them: the server's
/// (`server-tls/`), the servers' CA (`server-ca/`) and the replication client's
/// (`replication-tls/`), signed by a fresh CA.
fn write_certificates(secrets: &Path) {
    let now = jiff::Timestamp::now();
    let day = Duration::from_secs(86_400);
    let ca = issue_ca("default/db", now, day).unwrap();
    let server = issue_leaf(&ca, &Leaf::Server(server_dns_names(CLUSTER, NAMESPACE)), now, day).unwrap();
    let client = issue_leaf(&ca, &Leaf::Client("replicator".into()), now, day).unwrap();
    for (dir, leaf) in [("server-tls", server), ("replication-tls", client)] {
        let files = [("tls.crt", leaf.cert), ("tls.key", leaf.key), ("ca.crt", ca.cert.clone())];
        write_files(&secrets.join(dir), files.into_iter().map(|(k, v)| (k.to_owned(), v)).collect());
    }
    write_files(&secrets.join("server-ca"), BTreeMap::from([("ca.crt".to_owned(), ca.cert)]));
}
