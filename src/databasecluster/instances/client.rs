//! The operator's HTTPS client of the instance managers: one connection per request (a pass asks
//! each instance once), HTTP/1.1 over TLS verifying the manager's certificate against the
//! cluster's CA under its pod's name ([`Access`]: verification cannot be turned off), the bearer
//! token on every request, every request bounded ([`CONNECT_TIMEOUT`], and a limit per call,
//! the handshake included), and answers of at most [`MAX_ANSWER_BYTES`].

use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, StatusCode, header};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::rt::TokioIo;
use thiserror::Error;
use tokio::net::TcpStream;

use super::{InstanceFacts, Report, SlotChanges};
use crate::instance::commands::{CHECKPOINT_LIMIT, Command, PROMOTE_LIMIT};

/// How long connecting to an instance may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// How long `GET /status` of a ready instance may take in all (the manager bounds its own
/// queries to 2 s, `instance::local::STATUS_LIMIT`).
pub const STATUS_TIMEOUT: Duration = Duration::from_secs(3);
/// How long `GET /status` of an instance whose pod is not ready may take: a hung server makes
/// its manager wait out its own limit, and a pass that waited for it would hold back the
/// failover it may need by seconds. What a not-ready instance says only fills its status line.
pub const UNREADY_STATUS_TIMEOUT: Duration = Duration::from_secs(1);
/// How long a command the manager bounds to its administrative limit may take (reload, slots).
const ADMIN_TIMEOUT: Duration = Duration::from_secs(8);
/// Beyond the manager's own limit, how long a command's answer may take to arrive.
const MARGIN: Duration = Duration::from_secs(3);
/// Why an instance whose manager answers `507 Insufficient Storage` is not observed: its data
/// volume is full, and the manager keeps PostgreSQL stopped until it has room
/// (`crate::instance::disk`).
pub const DISK_FULL: &str =
    "its data volume is full: PostgreSQL stays stopped until it has room (grow spec.storageSize)";

/// Whether `error` is a manager saying its data volume is full.
pub fn is_disk_full(error: &InstanceError) -> bool {
    matches!(error, InstanceError::Answer { code: 507, .. })
}

/// The largest answer read.
pub const MAX_ANSWER_BYTES: usize = 1024 * 1024;

/// The `/status` bearer token; its `Debug` never shows it.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct StatusToken(String);

impl StatusToken {
    /// Wraps `token`.
    pub fn new(token: impl Into<String>) -> StatusToken {
        StatusToken(token.into())
    }

    /// The token, for the request header and the credential versions only.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for StatusToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StatusToken(<redacted>)")
    }
}

/// How the operator reaches one cluster's instance managers: the bearer token, and TLS trusting
/// exactly the cluster's CAs (the `ca.crt` bundle that verifies its servers), each manager
/// verified under its pod's name `<pod>.<cluster>.<namespace>.svc`, which the server certificate
/// names (`*.<cluster>.<namespace>.svc`).
#[derive(Clone)]
pub struct Access {
    token: StatusToken,
    connector: tokio_rustls::TlsConnector,
    domain: String,
}

impl std::fmt::Debug for Access {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Access")
            .field("token", &self.token)
            .field("domain", &self.domain)
            .finish_non_exhaustive()
    }
}

impl Access {
    /// Access to cluster `cluster_name`'s managers in `namespace`, trusting the certificates of
    /// the PEM text `ca_pem` (none readable: every handshake fails, never an unverified one).
    pub fn new(token: StatusToken, ca_pem: &str, cluster_name: &str, namespace: &str) -> Access {
        use rustls_pki_types::pem::PemObject;
        let mut roots = rustls::RootCertStore::empty();
        let certificates =
            rustls_pki_types::CertificateDer::pem_slice_iter(ca_pem.as_bytes()).filter_map(Result::ok);
        roots.add_parsable_certificates(certificates);
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(rustls::DEFAULT_VERSIONS)
            // Invariant: the ring provider supports the default versions.
            .expect("ring supports TLS 1.2 and 1.3")
            .with_root_certificates(roots)
            .with_no_client_auth();
        let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config));
        let domain = format!(
            "{}.{namespace}.svc",
            crate::databasecluster::specs::names::headless_service_name(cluster_name)
        );
        Access { token, connector, domain }
    }

    /// The bearer token.
    pub fn token(&self) -> &StatusToken {
        &self.token
    }

    /// The manager of pod `pod` at `host:port`.
    pub fn target(&self, pod: &str, host: String, port: u16) -> Target {
        let server_name = format!("{pod}.{}", self.domain);
        Target { host, port, token: self.token.clone(), tls: self.connector.clone(), server_name }
    }
}

/// An instance manager to ask.
#[derive(Clone)]
pub struct Target {
    /// The instance's address (its pod IP).
    pub host: String,
    /// The status port (8000).
    pub port: u16,
    /// The bearer token.
    pub token: StatusToken,
    /// TLS trusting the cluster's CAs.
    tls: tokio_rustls::TlsConnector,
    /// The name the manager's certificate must hold.
    server_name: String,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("server_name", &self.server_name)
            .finish_non_exhaustive()
    }
}

/// Why an instance could not be asked or told something.
#[derive(Debug, Error)]
pub enum InstanceError {
    /// Nothing accepted the connection.
    #[error("{host}: cannot connect: {source}")]
    Unreachable {
        /// The instance's address.
        host: String,
        /// Why.
        source: std::io::Error,
    },
    /// No answer in time.
    #[error("{host}: no answer within {timeout:?}")]
    Timeout {
        /// The instance's address.
        host: String,
        /// The limit.
        timeout: Duration,
    },
    /// The TLS handshake failed (the manager's certificate not verified, among others).
    #[error("{host}: TLS: {source}")]
    Tls {
        /// The instance's address.
        host: String,
        /// Why.
        source: std::io::Error,
    },
    /// The HTTP exchange failed.
    #[error("{host}: {source}")]
    Http {
        /// The instance's address.
        host: String,
        /// The client's error.
        source: hyper::Error,
    },
    /// The answer's body could not be read (cut short, or too large).
    #[error("{host}: reading the answer: {reason}")]
    Body {
        /// The instance's address.
        host: String,
        /// Why.
        reason: String,
    },
    /// The manager answered, but not with success.
    #[error("{host}: {path} answered {code}: {body}")]
    Answer {
        /// The instance's address.
        host: String,
        /// The request's path.
        path: &'static str,
        /// The status code.
        code: u16,
        /// The answer's text (its first line).
        body: String,
    },
    /// `/status` answered something that is not a report.
    #[error("{host}: the report does not read: {source}")]
    Decode {
        /// The instance's address.
        host: String,
        /// Why.
        source: serde_json::Error,
    },
}

/// What a request to a manager came back with.
struct Answer {
    code: StatusCode,
    body: Bytes,
}

/// Ends the connection's task when the request is done or given up.
struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The `Host` header for `host:port` (an IPv6 address in brackets).
fn authority(host: &str, port: u16) -> String {
    if host.contains(':') { format!("[{host}]:{port}") } else { format!("{host}:{port}") }
}

async fn exchange(
    target: &Target,
    method: Method,
    path: &'static str,
    body: Bytes,
    limit: Duration,
) -> Result<Answer, InstanceError> {
    let host = || target.host.clone();
    let work = async {
        let connect = TcpStream::connect((target.host.as_str(), target.port));
        let stream = tokio::time::timeout(CONNECT_TIMEOUT, connect)
            .await
            .map_err(|_| InstanceError::Timeout { host: host(), timeout: CONNECT_TIMEOUT })?
            .map_err(|source| InstanceError::Unreachable { host: host(), source })?;
        let tls = |source| InstanceError::Tls { host: host(), source };
        let name = rustls_pki_types::ServerName::try_from(target.server_name.clone())
            .map_err(|e| tls(std::io::Error::new(std::io::ErrorKind::InvalidInput, e)))?;
        let stream = target.tls.connect(name, stream).await.map_err(tls)?;
        let http = |source| InstanceError::Http { host: host(), source };
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.map_err(http)?;
        let _connection = AbortOnDrop(tokio::spawn(connection).abort_handle());
        let mut request = Request::new(Full::new(body));
        *request.method_mut() = method;
        *request.uri_mut() = http::Uri::from_static(path);
        let headers = request.headers_mut();
        let value = |text: String| {
            header::HeaderValue::try_from(text)
                .map_err(|e| InstanceError::Body { host: host(), reason: e.to_string() })
        };
        headers.insert(header::HOST, value(authority(&target.host, target.port))?);
        headers.insert(header::AUTHORIZATION, value(format!("Bearer {}", target.token.expose()))?);
        headers.insert(header::CONTENT_TYPE, header::HeaderValue::from_static("application/json"));
        let response = sender.send_request(request).await.map_err(http)?;
        let code = response.status();
        let body = Limited::new(response.into_body(), MAX_ANSWER_BYTES)
            .collect()
            .await
            .map_err(|e| InstanceError::Body { host: host(), reason: e.to_string() })?
            .to_bytes();
        Ok(Answer { code, body })
    };
    tokio::time::timeout(limit, work)
        .await
        .map_err(|_| InstanceError::Timeout { host: host(), timeout: limit })?
}

/// The answer, when it is a success; its code and first line as the error otherwise.
fn success(target: &Target, path: &'static str, answer: Answer) -> Result<Answer, InstanceError> {
    if answer.code.is_success() {
        return Ok(answer);
    }
    let text = String::from_utf8_lossy(&answer.body);
    Err(InstanceError::Answer {
        host: target.host.clone(),
        path,
        code: answer.code.as_u16(),
        body: text.lines().next().unwrap_or_default().chars().take(200).collect(),
    })
}

/// `GET /status`: what the instance says about itself, within `limit` ([`STATUS_TIMEOUT`] or
/// [`UNREADY_STATUS_TIMEOUT`]).
pub async fn observe(target: &Target, limit: Duration) -> Result<InstanceFacts, InstanceError> {
    let answer = exchange(target, Method::GET, "/status", Bytes::new(), limit).await?;
    let answer = success(target, "/status", answer)?;
    let report: Report = serde_json::from_slice(&answer.body)
        .map_err(|source| InstanceError::Decode { host: target.host.clone(), source })?;
    Ok(InstanceFacts::from_report(report))
}

async fn command(
    target: &Target,
    command: Command,
    body: Bytes,
    limit: Duration,
) -> Result<Answer, InstanceError> {
    let answer = exchange(target, Method::POST, command.path(), body, limit).await?;
    success(target, command.path(), answer)
}

/// `POST /promote`: whether the standby accepts writes now (`false`: the promotion goes on, but
/// did not finish within the manager's wait).
pub async fn promote(target: &Target) -> Result<bool, InstanceError> {
    let answer = command(target, Command::Promote, Bytes::new(), PROMOTE_LIMIT + MARGIN).await?;
    Ok(answer.code == StatusCode::OK)
}

/// `POST /checkpoint`: a checkpoint now (so that a shutdown right after has little left to write).
pub async fn checkpoint(target: &Target) -> Result<(), InstanceError> {
    command(target, Command::Checkpoint, Bytes::new(), CHECKPOINT_LIMIT + MARGIN).await.map(drop)
}

/// `POST /reload`: the server re-reads its configuration files.
pub async fn reload(target: &Target) -> Result<(), InstanceError> {
    command(target, Command::Reload, Bytes::new(), ADMIN_TIMEOUT).await.map(drop)
}

/// `POST /slots`: creates and drops physical slots on the instance.
pub async fn change_slots(target: &Target, changes: &SlotChanges) -> Result<(), InstanceError> {
    let body = serde_json::to_vec(changes)
        .map_err(|source| InstanceError::Decode { host: target.host.clone(), source })?;
    command(target, Command::Slots, Bytes::from(body), ADMIN_TIMEOUT).await.map(drop)
}

/// What `status.instances[].message` says of an instance whose `/status` could not be read: a
/// fixed text per kind of failure (the details, which change from pass to pass, go to the log), so
/// an instance that stays unreachable costs no status write.
pub fn unreached_message(error: &InstanceError) -> String {
    let why = match error {
        InstanceError::Unreachable { .. }
        | InstanceError::Timeout { .. }
        | InstanceError::Http { .. }
        | InstanceError::Body { .. } => "its instance manager did not answer".to_owned(),
        InstanceError::Answer { code: 507, .. } => DISK_FULL.to_owned(),
        InstanceError::Answer { code: 401, .. } => "its instance manager refused the status token".to_owned(),
        InstanceError::Answer { code: 503, .. } => {
            "its instance manager answered that PostgreSQL does not (starting, or stopped)".to_owned()
        }
        InstanceError::Answer { code, .. } => format!("its instance manager answered HTTP {code}"),
        InstanceError::Decode { .. } => "its instance manager's report does not read".to_owned(),
        InstanceError::Tls { .. } => {
            "the TLS handshake with its instance manager failed (is its certificate the cluster's?)"
                .to_owned()
        }
    };
    format!("the operator could not read the instance's status: {why}")
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::databasecluster::tls::issue::{KeyPem, Leaf, issue_ca, issue_leaf};

    /// The test cluster `db`'s CA, and a manager certificate it signs for the pods of `db`.
    fn pki() -> &'static (KeyPem, KeyPem) {
        static PKI: std::sync::OnceLock<(KeyPem, KeyPem)> = std::sync::OnceLock::new();
        PKI.get_or_init(|| {
            let (now, hour) = (jiff::Timestamp::now(), Duration::from_secs(3600));
            let ca = issue_ca("default/db", now, hour).unwrap();
            let server = issue_leaf(&ca, &Leaf::Server(vec!["*.db.default.svc".into()]), now, hour).unwrap();
            (ca, server)
        })
    }

    fn target(port: u16) -> Target {
        Access::new(StatusToken::new("t0ken-UNIQUE"), &pki().0.cert, "db", "default").target(
            "db-0",
            "127.0.0.1".into(),
            port,
        )
    }

    #[test]
    fn the_token_never_shows_in_debug_output() {
        assert!(!format!("{:?}", target(1)).contains("t0ken-UNIQUE"));
    }

    #[test]
    fn each_kind_of_failure_has_one_fixed_message() {
        let host = || "10.9.8.7".to_owned();
        let answer =
            |code| InstanceError::Answer { host: host(), path: "/status", code, body: "detail".into() };
        let timeout = InstanceError::Timeout { host: host(), timeout: STATUS_TIMEOUT };
        let refused =
            InstanceError::Unreachable { host: host(), source: std::io::ErrorKind::ConnectionRefused.into() };
        let cases = [
            (timeout, "did not answer"),
            (refused, "did not answer"),
            (answer(401), "refused the status token"),
            (answer(507), "data volume is full"),
            (answer(503), "PostgreSQL does not"),
            (answer(500), "answered HTTP 500"),
        ];
        for (error, want) in cases {
            let message = unreached_message(&error);
            assert!(message.starts_with("the operator could not read the instance's status: "), "{message}");
            assert!(message.contains(want), "{error}: {message}");
            assert!(!message.contains("10.9.8.7") && !message.contains("detail"), "no detail: {message}");
        }
        assert_eq!(authority("10.0.0.1", 8000), "10.0.0.1:8000");
        assert_eq!(authority("fd00::1", 8000), "[fd00::1]:8000");
    }

    /// A one-connection HTTPS server on loopback presenting `certificate`, that answers `answer`
    /// and returns the request.
    async fn serve_with(
        certificate: &KeyPem,
        answer: &'static str,
    ) -> (u16, tokio::task::JoinHandle<String>) {
        use rustls_pki_types::pem::PemObject;
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let chain = rustls_pki_types::CertificateDer::pem_slice_iter(certificate.cert.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        let key = rustls_pki_types::PrivateKeyDer::from_pem_slice(certificate.key.as_bytes()).unwrap();
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let task = tokio::spawn(async move {
            let (stream, _) = listener.accept().await.unwrap();
            let Ok(mut stream) = acceptor.accept(stream).await else { return String::new() };
            let mut buffer = vec![0u8; 4096];
            let read = stream.read(&mut buffer).await.unwrap();
            stream.write_all(answer.as_bytes()).await.unwrap();
            stream.shutdown().await.unwrap();
            String::from_utf8_lossy(&buffer[..read]).into_owned()
        });
        (port, task)
    }

    async fn serve_once(answer: &'static str) -> (u16, tokio::task::JoinHandle<String>) {
        serve_with(&pki().1, answer).await
    }

    #[tokio::test]
    async fn a_manager_is_verified_against_the_clusters_ca_under_its_pods_name() {
        let (port, _) = serve_once("HTTP/1.1 204 No Content\r\n\r\n").await;
        let other = Access::new(StatusToken::new("t"), &pki().0.cert, "other", "default");
        let error = reload(&other.target("other-0", "127.0.0.1".into(), port)).await.unwrap_err();
        assert!(matches!(error, InstanceError::Tls { .. }), "another cluster's name: {error}");
        let (now, hour) = (jiff::Timestamp::now(), Duration::from_secs(3600));
        let stranger = issue_ca("default/db", now, hour).unwrap();
        let forged =
            issue_leaf(&stranger, &Leaf::Server(vec!["*.db.default.svc".into()]), now, hour).unwrap();
        let (port, request) = serve_with(&forged, "HTTP/1.1 204 No Content\r\n\r\n").await;
        let error = reload(&target(port)).await.unwrap_err();
        assert!(matches!(error, InstanceError::Tls { .. }), "another CA's certificate: {error}");
        assert_eq!(request.await.unwrap(), "", "nothing, the token least, was sent");
        assert!(unreached_message(&error).contains("TLS handshake"));
    }

    #[tokio::test]
    async fn a_status_request_carries_the_token_and_reads_the_report() {
        let body = r#"{"role":"standby","in_recovery":true,"replayed_lsn":"0/10"}"#;
        let answer: &'static str = Box::leak(
            format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}", body.len())
                .into_boxed_str(),
        );
        let (port, request) = serve_once(answer).await;
        let facts = observe(&target(port), STATUS_TIMEOUT).await.unwrap();
        assert!(facts.in_recovery);
        assert_eq!(facts.replay_lsn, Some(16));
        let request = request.await.unwrap();
        assert!(request.starts_with("GET /status HTTP/1.1\r\n"), "{request}");
        assert!(request.to_lowercase().contains("authorization: bearer t0ken-unique"), "{request}");
    }

    #[tokio::test]
    async fn a_refusal_and_a_silent_port_are_errors_in_time() {
        let (port, _) = serve_once("HTTP/1.1 401 Unauthorized\r\ncontent-length: 6\r\n\r\nno\nyes").await;
        let error = reload(&target(port)).await.unwrap_err();
        assert!(matches!(error, InstanceError::Answer { code: 401, path: "/reload", .. }), "{error}");

        let port = crate::instance::local::silent_port().await;
        let started = std::time::Instant::now();
        let error = exchange(&target(port), Method::GET, "/status", Bytes::new(), Duration::from_millis(300))
            .await
            .err()
            .unwrap();
        assert!(matches!(error, InstanceError::Timeout { .. }), "{error}");
        assert!(started.elapsed() < Duration::from_secs(2));
    }
}
