//! libpq access (`tokio-postgres`) to this instance's own server over its Unix socket in `$DBC_RUN`
//! as the superuser (trusted locally by `pg_hba.conf`), and to the recorded primary over TCP.
//! Every call is bounded: connecting and the statements together within the caller's limit, so a
//! hung server never hangs the manager or a probe.
//!
//! Quiet in the server's log: a session ends with libpq's goodbye (never a reset connection, which
//! the server logs), and [`Local::ping`] and the metrics do not knock while `postmaster.pid` says
//! the server is starting or stopping (each refused connection is a `FATAL` line in its log; see
//! [`accepting`]).

use std::future::Future;
use std::time::Duration;

use thiserror::Error;
use tokio_postgres::tls::MakeTlsConnect;
use tokio_postgres::{Client, Config, NoTls, Socket};

use super::decide::PrimaryFacts;
use super::secrets::Credential;
use super::settings::Settings;

/// How long a liveness probe's query may take in all (`/healthz`).
pub const PROBE_LIMIT: Duration = Duration::from_secs(2);
/// How long a readiness probe's query may take in all (`/readyz`): a server that cannot say
/// whether it is in recovery within a second fails the attempt (the readiness probe in
/// `databasecluster::specs::instance_pod` counts three in a row before the pod is unready).
pub const READINESS_LIMIT: Duration = Duration::from_secs(1);
/// How long `/status`'s queries may take in all: the operator waits for every instance's report
/// before it decides, so a hung server must not hold a pass back for long.
pub const STATUS_LIMIT: Duration = Duration::from_secs(2);
/// How long an administrative call may take (reload, the watcher's look, `/status`).
pub const ADMIN_LIMIT: Duration = Duration::from_secs(5);
/// How long asking the recorded primary may take.
const PRIMARY_LIMIT: Duration = Duration::from_secs(8);
/// How long a finished session may take to say goodbye before its connection is dropped.
const CLOSE_LIMIT: Duration = Duration::from_millis(500);

/// A client call failed.
#[derive(Debug, Error)]
pub enum ClientError {
    /// No answer within the limit.
    #[error("{target}: no answer within {limit:?}")]
    Timeout {
        /// Which server.
        target: String,
        /// The limit.
        limit: Duration,
    },
    /// `postmaster.pid` says the server does not accept connections now.
    #[error("{target}: not accepting connections ({state})")]
    NotAccepting {
        /// Which server.
        target: String,
        /// The state `postmaster.pid` gives (`starting`, `stopping`, `not running`).
        state: String,
    },
    /// The driver's error.
    #[error("{target}: {source}")]
    Postgres {
        /// Which server.
        target: String,
        /// Why.
        source: tokio_postgres::Error,
    },
    /// The CA that verifies the other instances could not be read: no TCP session is opened.
    #[error("the CA certificate {path} is unreadable, so no instance can be verified: {source}")]
    UnreadableCa {
        /// The CA file.
        path: std::path::PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// This instance's server on its socket.
#[derive(Clone, Debug)]
pub struct Local {
    config: Config,
    /// `$PGDATA/postmaster.pid`.
    pid_file: std::path::PathBuf,
}

/// Whether the server accepts connections, from `postmaster.pid`'s text (`None`: no file, so no
/// server): `Ok(())` when its status line says `ready` or `standby`, or when the file has no
/// status line yet to go by; `Err(state)` otherwise.
pub fn accepting(pid_file: Option<&str>) -> Result<(), String> {
    let Some(text) = pid_file else { return Err("not running".to_owned()) };
    match text.lines().nth(7).map(str::trim) {
        None | Some("ready" | "standby") => Ok(()),
        Some(state) => Err(state.to_owned()),
    }
}

/// Connects with `config` and runs `work` on the session, all within `limit`.
pub async fn session<T, F, Fut>(
    config: &Config,
    target: &str,
    limit: Duration,
    work: F,
) -> Result<T, ClientError>
where
    F: FnOnce(Client) -> Fut,
    Fut: Future<Output = Result<T, tokio_postgres::Error>>,
{
    session_with(config, NoTls, target, limit, work).await
}

/// [`session`] over `tls` (a TCP session: [`super::tls_connect::Verified`]).
pub async fn session_with<T, F, Fut, M>(
    config: &Config,
    tls: M,
    target: &str,
    limit: Duration,
    work: F,
) -> Result<T, ClientError>
where
    F: FnOnce(Client) -> Fut,
    Fut: Future<Output = Result<T, tokio_postgres::Error>>,
    M: MakeTlsConnect<Socket>,
    M::Stream: Send + 'static,
{
    let attempt = async {
        let (client, connection) = config.connect(tls).await?;
        let driver = tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%error, "session ended");
            }
        });
        let result = work(client).await;
        // The client is gone: the driver says goodbye and ends; one that does not is dropped.
        let mut driver = driver;
        if tokio::time::timeout(CLOSE_LIMIT, &mut driver).await.is_err() {
            driver.abort();
        }
        result
    };
    tokio::time::timeout(limit, attempt)
        .await
        .map_err(|_| ClientError::Timeout { target: target.to_owned(), limit })?
        .map_err(|source| ClientError::Postgres { target: target.to_owned(), source })
}

impl Local {
    /// The server of `settings` as `superuser` (its name only: the socket is trusted).
    pub fn new(settings: &Settings, superuser: &str) -> Local {
        let mut config = Config::new();
        config
            .host_path(&settings.run_dir)
            .port(settings.port)
            .user(superuser)
            .dbname("postgres")
            .application_name("dbcluster-instance")
            .connect_timeout(PROBE_LIMIT);
        Local { config, pid_file: settings.pgdata.join("postmaster.pid") }
    }

    /// The same server, database `database`, sessions named `application_name` started with
    /// the command-line `options` (`-c name=value …`, applied as the superuser).
    pub fn for_sessions(&self, database: &str, application_name: &str, options: &str) -> Local {
        let mut config = self.config.clone();
        config.dbname(database).application_name(application_name).options(options);
        Local { config, pid_file: self.pid_file.clone() }
    }

    /// Runs `work` on a fresh local session within `limit`.
    pub async fn with<T, F, Fut>(&self, limit: Duration, work: F) -> Result<T, ClientError>
    where
        F: FnOnce(Client) -> Fut,
        Fut: Future<Output = Result<T, tokio_postgres::Error>>,
    {
        session(&self.config, "the local server", limit, work).await
    }

    /// Whether `postmaster.pid` lets a session be tried now ([`accepting`]): a refused
    /// connection would be a `FATAL` line in the server's log.
    pub async fn accepting(&self) -> Result<(), ClientError> {
        let pid_file = tokio::fs::read_to_string(&self.pid_file).await.ok();
        accepting(pid_file.as_deref())
            .map_err(|state| ClientError::NotAccepting { target: "the local server".to_owned(), state })
    }

    /// The server answers a trivial query; not asked while it does not accept connections.
    pub async fn ping(&self, limit: Duration) -> Result<(), ClientError> {
        self.accepting().await?;
        self.with(limit, |c| async move { c.simple_query("SELECT 1").await.map(drop) }).await
    }

    /// `pg_is_in_recovery()`.
    pub async fn in_recovery(&self, limit: Duration) -> Result<bool, ClientError> {
        self.with(limit, |c| async move { Ok(c.query_one("SELECT pg_is_in_recovery()", &[]).await?.get(0)) })
            .await
    }

    /// `pg_reload_conf()`.
    pub async fn reload(&self) -> Result<(), ClientError> {
        self.with(ADMIN_LIMIT, |c| async move { c.simple_query("SELECT pg_reload_conf()").await.map(drop) })
            .await
    }
}

/// Asks the recorded primary `recorded` (as the superuser, over TCP and TLS verifying its
/// certificate against the cluster's CA and its name) for its system identifier
/// and whether it accepts writes; `None` when it does not answer in time.
pub async fn observe_primary(
    settings: &Settings,
    recorded: &str,
    superuser: &Credential,
) -> Option<PrimaryFacts> {
    let query = |c: Client| async move {
        let row = c
            .query_one(
                "SELECT system_identifier::text, NOT pg_is_in_recovery() FROM pg_control_system()",
                &[],
            )
            .await?;
        Ok((row.get::<_, String>(0), row.get::<_, bool>(1)))
    };
    match on_primary(settings, recorded, superuser, PRIMARY_LIMIT, query).await {
        Ok((id, writable)) => id.parse().ok().map(|system_id| PrimaryFacts { system_id, writable }),
        Err(error) => {
            tracing::debug!(%error, "the recorded primary did not answer");
            None
        }
    }
}

/// Has the recorded primary `recorded` make a checkpoint (as [`observe_primary`] connects), so
/// that its control file names the timeline it now writes: a server promoted moments ago still
/// names the old one until its first checkpoint after the promotion ends (a spread one, minutes),
/// and `pg_rewind` reads the source's timeline from there (it would find nothing to rewind).
pub async fn checkpoint_primary(
    settings: &Settings,
    recorded: &str,
    superuser: &Credential,
) -> Result<(), ClientError> {
    let work = |c: Client| async move { c.batch_execute("CHECKPOINT").await };
    on_primary(settings, recorded, superuser, super::commands::CHECKPOINT_LIMIT, work).await
}

/// Runs `work` in a session with the recorded primary as the superuser, over TLS verifying it.
async fn on_primary<T, F, Fut>(
    settings: &Settings,
    recorded: &str,
    superuser: &Credential,
    limit: Duration,
    work: F,
) -> Result<T, ClientError>
where
    F: FnOnce(Client) -> Fut,
    Fut: Future<Output = Result<T, tokio_postgres::Error>>,
{
    let mut config = Config::new();
    let host = settings.host_of(recorded);
    config
        .host(&host)
        .port(settings.port)
        .user(&superuser.username)
        .password(superuser.password.expose())
        .dbname("postgres")
        .application_name("dbcluster-instance")
        .connect_timeout(Duration::from_secs(5));
    let path = super::tls::ca_cert(settings);
    let tls = super::tls_connect::Verified::from_ca_file(&path)
        .map_err(|source| ClientError::UnreadableCa { path: path.clone(), source })?;
    config.ssl_mode(tokio_postgres::config::SslMode::Require);
    session_with(&config, tls, &host, limit, work).await
}

/// A loopback port that accepts connections and never answers (a hung server), for tests of
/// the limits on both sides of the instance manager's connections.
#[cfg(test)]
pub(crate) async fn silent_port() -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        let mut kept = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            kept.push(stream);
        }
    });
    port
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pid_files_status_line_says_whether_to_connect() {
        let file =
            |status: &str| format!("42\n/data\n1700000000\n5432\n/run\n10.0.0.3\n  1234  5678\n{status}\n");
        let cases = [
            (None, Err("not running")),
            (Some(file("ready   ")), Ok(())),
            (Some(file("standby ")), Ok(())),
            (Some(file("starting")), Err("starting")),
            (Some(file("stopping")), Err("stopping")),
            (Some("42\n/data\n".to_owned()), Ok(())),
        ];
        for (text, want) in cases {
            assert_eq!(accepting(text.as_deref()), want.map_err(str::to_owned), "{text:?}");
        }
    }

    #[tokio::test]
    async fn a_server_that_accepts_but_never_answers_fails_within_the_limit() {
        let port = silent_port().await;
        let mut config = Config::new();
        config.host("127.0.0.1").port(port).user("postgres");
        let started = std::time::Instant::now();
        let limit = Duration::from_millis(300);
        let result =
            session(&config, "hung", limit, |c| async move { c.simple_query("SELECT 1").await.map(drop) });
        let error = result.await.unwrap_err();
        assert!(matches!(error, ClientError::Timeout { .. }), "{error}");
        assert!(started.elapsed() < Duration::from_secs(2));
    }
}
