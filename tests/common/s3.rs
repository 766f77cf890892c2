//! A real S3-compatible server for the tests: moto's server mode (PyPI `moto[server]`, which
//! `scripts/test` installs), started on a free loopback port with a bounded wait for readiness,
//! stopped when dropped. [`S3Server::pause`] and [`S3Server::resume`] stop and continue its process
//! (SIGSTOP/SIGCONT): a store that hangs, then comes back with its objects (moto keeps them in
//! memory, so a restart would lose them).

#![allow(unsafe_code, reason = "libc::kill of the server process the test started")]

use std::process::Stdio;
use std::time::Duration;

use dbcluster_operator::databasecluster::api::object_store::Compression;
use dbcluster_operator::instance::archive::StoreConfig;
use dbcluster_operator::instance::archive::store::{Store, install_crypto_provider};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, Command};

/// How long the server may take to answer after starting.
const READY_LIMIT: Duration = Duration::from_secs(60);

/// A running moto server.
pub struct S3Server {
    child: Child,
    /// Its port on 127.0.0.1.
    pub port: u16,
    log: tempfile::NamedTempFile,
}

/// Sends one plain HTTP/1.1 request; the status code, or `None` when nothing answers in 2 s.
async fn request(port: u16, method: &str, path: &str) -> Option<u16> {
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.ok()?;
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        );
        stream.write_all(head.as_bytes()).await.ok()?;
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).await.ok()?;
        String::from_utf8_lossy(&answer).split_whitespace().nth(1)?.parse().ok()
    };
    tokio::time::timeout(Duration::from_secs(2), exchange).await.ok().flatten()
}

impl S3Server {
    /// Starts the server and waits (at most a minute) until it answers.
    pub async fn start() -> S3Server {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let log = tempfile::NamedTempFile::new().unwrap();
        let child = Command::new("python3")
            .args(["-m", "moto.server", "-H", "127.0.0.1", "-p", &port.to_string()])
            .stdin(Stdio::null())
            .stdout(log.reopen().unwrap())
            .stderr(log.reopen().unwrap())
            .kill_on_drop(true)
            .spawn()
            .expect("python3 runs moto's server: run scripts/test, which installs moto[server]");
        let server = S3Server { child, port, log };
        let started = std::time::Instant::now();
        while request(port, "GET", "/").await != Some(200) {
            assert!(
                started.elapsed() < READY_LIMIT,
                "moto's server did not answer within {READY_LIMIT:?} (is moto[server] installed? run scripts/test):\n{}",
                std::fs::read_to_string(server.log.path()).unwrap_or_default()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        server
    }

    /// The endpoint URL.
    /// A test's own client of the store under `bucket/prefix`, with the given credentials.
    pub fn client(&self, bucket: &str, prefix: &str, key_id: &str, secret: &str) -> Store {
        install_crypto_provider();
        Store::new(&StoreConfig {
            bucket: bucket.into(),
            prefix: prefix.into(),
            endpoint: Some(self.endpoint()),
            region: "us-east-1".into(),
            compression: Compression::Gzip,
            access_key_id: key_id.into(),
            secret_access_key: secret.into(),
            session_token: None,
            ca_pem: None,
        })
        .expect("a store client for the test server")
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Creates bucket `name`.
    pub async fn create_bucket(&self, name: &str) {
        assert_eq!(request(self.port, "PUT", &format!("/{name}")).await, Some(200), "creating bucket {name}");
    }

    fn signal(&self, signal: libc::c_int) {
        let pid = self.child.id().expect("the server runs") as libc::pid_t;
        // SAFETY: kill(2) on the pid of a child this value owns and has not reaped.
        let sent = unsafe { libc::kill(pid, signal) };
        assert_eq!(sent, 0, "signalling the S3 server");
    }

    /// Stops the server's process: requests hang (a store gone away).
    pub fn pause(&self) {
        self.signal(libc::SIGSTOP);
    }

    /// Lets it go on, with every object it had.
    pub fn resume(&self) {
        self.signal(libc::SIGCONT);
    }
}
