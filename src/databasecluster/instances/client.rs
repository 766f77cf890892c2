//! The operator's HTTP client of the instance managers: one connection per request (a pass asks
//! each instance once), plain HTTP/1.1, the bearer token on every request, every request bounded
//! ([`CONNECT_TIMEOUT`], and a limit per call), and answers of at most [`MAX_ANSWER_BYTES`].

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

/// An instance manager to ask.
#[derive(Clone, Debug)]
pub struct Target {
    /// The instance's address (its pod IP).
    pub host: String,
    /// The status port (8000).
    pub port: u16,
    /// The bearer token.
    pub token: StatusToken,
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
    };
    format!("the operator could not read the instance's status: {why}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(port: u16) -> Target {
        Target { host: "127.0.0.1".into(), port, token: StatusToken::new("t0ken-UNIQUE") }
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

    /// A one-connection HTTP server on loopback that answers `answer` and returns the request.
    async fn serve_once(answer: &'static str) -> (u16, tokio::task::JoinHandle<String>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let task = tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut buffer = vec![0u8; 4096];
            let read = stream.read(&mut buffer).await.unwrap();
            stream.write_all(answer.as_bytes()).await.unwrap();
            String::from_utf8_lossy(&buffer[..read]).into_owned()
        });
        (port, task)
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
