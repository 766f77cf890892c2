//! The manager's HTTP listener on `POD_IP:$DBC_STATUS_PORT` (the container port `status`):
//!
//! - `GET /healthz` (liveness, startup): 200 when the postmaster answers `SELECT 1` on its socket
//!   within [`PROBE_LIMIT`], 503 otherwise.
//! - `GET /readyz` (readiness): 200 when the server answers in its role (out of recovery when the
//!   record names this pod, in recovery otherwise) with the credentials applied, within
//!   [`READINESS_LIMIT`]; 503 otherwise.
//! - While the data volume is full ([`super::disk`]): `/readyz` 503, `/status` 507 with the
//!   reason, and `/healthz` 200 until the server runs (the manager waits for room on purpose).
//! - `GET /status`: [`super::status::Report`] as JSON, only with `Authorization: Bearer <token>`
//!   where the token is the mounted `$DBC_SECRETS/status/token` (read at each request, compared in
//!   constant time); 401 otherwise, and when no token is mounted.
//! - `POST /promote`, `/checkpoint`, `/reload`, `/slots`: the operator's commands
//!   ([`super::commands`]), with the same token.
//!
//! The status port serves TLS with the cluster's server certificate (the mounted `server-tls/`,
//! read again when it changes: [`crate::runtime::observe::tls::ServedCertificate`]), so the token
//! and the report never cross the pod network in the clear; the operator verifies it against the
//! cluster's CA under the pod's name, and the kubelet's probes (`scheme: HTTPS`) do not verify it,
//! as a kubelet never does. A handshake not done within [`HANDSHAKE_LIMIT`] drops the connection.
//!
//! The metrics listener on `POD_IP:$DBC_METRICS_PORT` serves `GET /metrics` alone
//! ([`super::metrics`]).
//!
//! Probe answers are bounded by their query's limit, so a hung server makes them fail in time
//! rather than hang.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, Limited};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use parking_lot::Mutex;
use sha2::{Digest, Sha256};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::commands::{self, Command, MAX_BODY_BYTES};
use super::decide::{Applied, readiness, role};
use super::disk;
use super::local::{Local, PROBE_LIMIT, READINESS_LIMIT};
use super::settings::Settings;

/// What the handlers share with the manager.
#[derive(Debug)]
pub struct Shared {
    /// The environment.
    pub settings: Settings,
    /// The local server.
    pub local: Local,
    /// Set once the server runs with its credentials applied (cleared never: a server that stops
    /// ends the manager).
    pub started: AtomicBool,
    /// The mounted Secrets' versions last applied (`/status` reports them), set by the start and
    /// the record watcher.
    pub applied: Mutex<Option<Applied>>,
    /// `/metrics`.
    pub metrics: super::metrics::Exporter,
}

impl Shared {
    /// The handlers' state for `settings`, with nothing started or applied yet.
    pub fn new(settings: Settings, local: Local, metrics: super::metrics::Exporter) -> Shared {
        Shared { settings, local, started: AtomicBool::new(false), applied: Mutex::new(None), metrics }
    }
}

/// Which of the manager's listeners.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoints {
    /// `/healthz`, `/readyz`, `/status`.
    Status,
    /// `/metrics`.
    Metrics,
}

/// Binds a listener on the pod's address (a taken port fails the start, as it should).
pub async fn bind(settings: &Settings, port: u16) -> std::io::Result<TcpListener> {
    TcpListener::bind((settings.pod_ip.as_str(), port)).await
}

/// How long a client may take over its TLS handshake.
pub const HANDSHAKE_LIMIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Serves connections until `stop` is cancelled: over TLS with `tls`, plain HTTP without.
pub async fn serve(
    listener: TcpListener,
    shared: Arc<Shared>,
    endpoints: Endpoints,
    tls: Option<tokio_rustls::TlsAcceptor>,
    stop: CancellationToken,
) {
    loop {
        let accepted = tokio::select! {
            () = stop.cancelled() => return,
            accepted = listener.accept() => accepted,
        };
        let Ok((stream, _)) = accepted else { continue };
        let (shared, stop, tls) = (shared.clone(), stop.clone(), tls.clone());
        tokio::spawn(async move {
            match tls {
                None => serve_connection(stream, shared, endpoints, stop).await,
                Some(acceptor) => {
                    if let Ok(Ok(stream)) =
                        tokio::time::timeout(HANDSHAKE_LIMIT, acceptor.accept(stream)).await
                    {
                        serve_connection(stream, shared, endpoints, stop).await;
                    }
                }
            }
        });
    }
}

async fn serve_connection<S>(stream: S, shared: Arc<Shared>, endpoints: Endpoints, stop: CancellationToken)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let service = service_fn(move |request| {
        let shared = shared.clone();
        async move { Ok::<_, Infallible>(route(request, &shared, endpoints).await) }
    });
    let connection = http1::Builder::new().serve_connection(TokioIo::new(stream), service);
    tokio::select! {
        () = stop.cancelled() => {}
        _ = connection => {}
    }
}

fn text(status: StatusCode, body: &str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(format!("{body}\n"))));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, header::HeaderValue::from_static("text/plain; charset=utf-8"));
    response
}

/// What the status port serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoint {
    /// `GET /healthz`.
    Healthz,
    /// `GET /readyz`.
    Readyz,
    /// `GET /status` (token).
    Status,
    /// `POST` of a command (token).
    Command(Command),
}

/// The status port's endpoint for `method` and `path`: 404 for an unknown path, 405 for a
/// method the path does not take.
pub fn endpoint(method: &Method, path: &str) -> Result<Endpoint, StatusCode> {
    let (wanted, endpoint) = match path {
        "/healthz" => (Method::GET, Endpoint::Healthz),
        "/readyz" => (Method::GET, Endpoint::Readyz),
        "/status" => (Method::GET, Endpoint::Status),
        _ => (Method::POST, Endpoint::Command(Command::at(path).ok_or(StatusCode::NOT_FOUND)?)),
    };
    if *method == wanted { Ok(endpoint) } else { Err(StatusCode::METHOD_NOT_ALLOWED) }
}

/// The answer to `request`.
pub async fn route<B>(request: Request<B>, shared: &Shared, endpoints: Endpoints) -> Response<Full<Bytes>>
where
    B: hyper::body::Body<Data = Bytes>,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    if endpoints == Endpoints::Metrics {
        if request.method() != Method::GET {
            return text(StatusCode::METHOD_NOT_ALLOWED, "only GET");
        }
        if request.uri().path() != "/metrics" {
            return text(StatusCode::NOT_FOUND, "not found");
        }
        let mut response = text(StatusCode::OK, shared.metrics.scrape().await.trim_end());
        response
            .headers_mut()
            .insert(header::CONTENT_TYPE, header::HeaderValue::from_static("text/plain; version=0.0.4"));
        return response;
    }
    let endpoint = match endpoint(request.method(), request.uri().path()) {
        Ok(endpoint) => endpoint,
        Err(code) if code == StatusCode::NOT_FOUND => return text(code, "not found"),
        Err(code) => return text(code, "method not allowed"),
    };
    match endpoint {
        Endpoint::Healthz => {
            // A manager that waits for room on purpose is alive (see `super::disk`).
            let waiting = !shared.started.load(Ordering::Acquire);
            if let Some(space) = disk::full(&shared.settings.pgdata).filter(|_| waiting) {
                return text(StatusCode::OK, &format!("waiting: {}", disk::describe(&space)));
            }
            match shared.local.ping(PROBE_LIMIT).await {
                Ok(()) => text(StatusCode::OK, "ok"),
                Err(error) => text(StatusCode::SERVICE_UNAVAILABLE, &error.to_string()),
            }
        }
        Endpoint::Readyz => match disk::full(&shared.settings.pgdata) {
            Some(space) => text(StatusCode::SERVICE_UNAVAILABLE, &disk::describe(&space)),
            None => ready(shared).await,
        },
        Endpoint::Status => match token_refused(&request, shared) {
            Some(refused) => refused,
            None => match disk::full(&shared.settings.pgdata) {
                Some(space) => text(StatusCode::INSUFFICIENT_STORAGE, &disk::describe(&space)),
                None => status(shared).await,
            },
        },
        Endpoint::Command(command) => {
            if let Some(refused) = token_refused(&request, shared) {
                return refused;
            }
            let body = match Limited::new(request.into_body(), MAX_BODY_BYTES).collect().await {
                Ok(body) => body.to_bytes(),
                Err(error) => return text(StatusCode::BAD_REQUEST, &format!("reading the body: {error}")),
            };
            let (code, answer) = commands::run(command, &body, &shared.local).await;
            if !code.is_success() {
                tracing::warn!(command = command.path(), %code, %answer, "a command of the operator failed");
            }
            text(code, &answer)
        }
    }
}

async fn ready(shared: &Shared) -> Response<Full<Bytes>> {
    let role = role(&shared.settings.recorded_primary(), &shared.settings.pod_name);
    let started = shared.started.load(Ordering::Acquire);
    let in_recovery = if started { shared.local.in_recovery(READINESS_LIMIT).await.ok() } else { None };
    match readiness(role, started, in_recovery) {
        Ok(()) => text(StatusCode::OK, "ok"),
        Err(why) => {
            text(StatusCode::SERVICE_UNAVAILABLE, &format!("not ready as {}: {why:?}", role.as_str()))
        }
    }
}

/// Whether `header` is `Bearer <token>` with the expected token (compared in constant time).
pub fn authorized(header: Option<&str>, expected: Option<&str>) -> bool {
    let (Some(header), Some(expected)) = (header, expected) else { return false };
    let Some(given) = header.strip_prefix("Bearer ") else { return false };
    let (a, b) = (Sha256::digest(given.trim().as_bytes()), Sha256::digest(expected.as_bytes()));
    a.iter().zip(b.iter()).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The 401 answer when `request` lacks the mounted token; `None` when it carries it.
fn token_refused<B>(request: &Request<B>, shared: &Shared) -> Option<Response<Full<Bytes>>> {
    let header = request.headers().get(header::AUTHORIZATION).and_then(|v| v.to_str().ok());
    let token = super::secrets::status_token(&shared.settings);
    if authorized(header, token.as_deref()) {
        return None;
    }
    let mut refused = text(StatusCode::UNAUTHORIZED, "a bearer token is required");
    refused.headers_mut().insert(header::WWW_AUTHENTICATE, header::HeaderValue::from_static("Bearer"));
    Some(refused)
}

async fn status(shared: &Shared) -> Response<Full<Bytes>> {
    let role = role(&shared.settings.recorded_primary(), &shared.settings.pod_name);
    match super::status::report(&shared.local, role, &shared.settings.pgdata, &shared.settings.run_dir).await
    {
        Ok(mut report) => {
            report.credentials =
                shared.applied.lock().as_ref().map(|a| a.versions.clone()).unwrap_or_default();
            match serde_json::to_vec(&report) {
                Ok(body) => {
                    let mut response = Response::new(Full::new(Bytes::from(body)));
                    response
                        .headers_mut()
                        .insert(header::CONTENT_TYPE, header::HeaderValue::from_static("application/json"));
                    response
                }
                Err(error) => text(StatusCode::INTERNAL_SERVER_ERROR, &error.to_string()),
            }
        }
        Err(error) => text(StatusCode::SERVICE_UNAVAILABLE, &error.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_mounted_token_opens_status() {
        let cases = [
            (Some("Bearer t0ken"), Some("t0ken"), true),
            (Some("Bearer t0ken "), Some("t0ken"), true),
            (Some("Bearer other"), Some("t0ken"), false),
            (Some("bearer t0ken"), Some("t0ken"), false),
            (Some("t0ken"), Some("t0ken"), false),
            (Some("Basic dXNlcjpwYXNz"), Some("t0ken"), false),
            (None, Some("t0ken"), false),
            (Some("Bearer "), None, false),
            (Some("Bearer t0ken"), None, false),
        ];
        for (header, expected, want) in cases {
            assert_eq!(authorized(header, expected), want, "{header:?} against {expected:?}");
        }
    }

    fn shared(secrets: &std::path::Path, run: &std::path::Path) -> Shared {
        let mut settings = Settings::sample();
        settings.secrets_dir = secrets.to_owned();
        settings.run_dir = run.to_owned();
        settings.config_dir = run.to_owned();
        let local = Local::new(&settings, "postgres");
        let metrics = super::super::metrics::Exporter::new(&settings, &local);
        let shared = Shared::new(settings, local, metrics);
        shared.started.store(true, Ordering::Release);
        shared
    }

    #[test]
    fn each_path_takes_one_method() {
        use Endpoint::*;
        let (get, post, put) = (Method::GET, Method::POST, Method::PUT);
        let cases = [
            (&get, "/healthz", Ok(Healthz)),
            (&get, "/readyz", Ok(Readyz)),
            (&get, "/status", Ok(Status)),
            (&post, "/status", Err(StatusCode::METHOD_NOT_ALLOWED)),
            (&post, "/promote", Ok(Command(commands::Command::Promote))),
            (&post, "/checkpoint", Ok(Command(commands::Command::Checkpoint))),
            (&post, "/reload", Ok(Command(commands::Command::Reload))),
            (&post, "/slots", Ok(Command(commands::Command::Slots))),
            (&get, "/promote", Err(StatusCode::METHOD_NOT_ALLOWED)),
            (&put, "/reload", Err(StatusCode::METHOD_NOT_ALLOWED)),
            (&get, "/nothing", Err(StatusCode::NOT_FOUND)),
            (&post, "/nothing", Err(StatusCode::NOT_FOUND)),
        ];
        for (method, path, want) in cases {
            assert_eq!(endpoint(method, path), want, "{method} {path}");
        }
    }

    #[tokio::test]
    async fn without_a_server_the_probes_fail_and_status_wants_the_token() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("status")).unwrap();
        std::fs::write(dir.path().join("status/token"), "abc\n").unwrap();
        let shared = shared(dir.path(), dir.path());
        let request = |method: Method, path: &str, auth: Option<&str>| {
            let mut builder = Request::builder().method(method).uri(path);
            if let Some(auth) = auth {
                builder = builder.header(header::AUTHORIZATION, auth);
            }
            builder.body(Full::new(Bytes::new())).unwrap()
        };
        let get = |path: &str, auth: Option<&str>| request(Method::GET, path, auth);
        for (path, auth, want) in [
            ("/healthz", None, StatusCode::SERVICE_UNAVAILABLE),
            ("/readyz", None, StatusCode::SERVICE_UNAVAILABLE),
            ("/status", None, StatusCode::UNAUTHORIZED),
            ("/status", Some("Bearer wrong"), StatusCode::UNAUTHORIZED),
            ("/status", Some("Bearer abc"), StatusCode::SERVICE_UNAVAILABLE),
            ("/nothing", None, StatusCode::NOT_FOUND),
            ("/metrics", None, StatusCode::NOT_FOUND),
        ] {
            assert_eq!(
                route(get(path, auth), &shared, Endpoints::Status).await.status(),
                want,
                "{path} {auth:?}"
            );
        }
        for command in commands::Command::ALL {
            for auth in [None, Some("Bearer wrong")] {
                let answer =
                    route(request(Method::POST, command.path(), auth), &shared, Endpoints::Status).await;
                assert_eq!(answer.status(), StatusCode::UNAUTHORIZED, "{} {auth:?}", command.path());
            }
            let answer =
                route(request(Method::POST, command.path(), Some("Bearer abc")), &shared, Endpoints::Status)
                    .await;
            let refused = [StatusCode::UNAUTHORIZED, StatusCode::NOT_FOUND, StatusCode::METHOD_NOT_ALLOWED];
            assert!(!refused.contains(&answer.status()), "{}: {}", command.path(), answer.status());
        }
        let metrics = route(get("/metrics", None), &shared, Endpoints::Metrics).await;
        assert_eq!(metrics.status(), StatusCode::OK);
        let status = route(get("/status", Some("Bearer abc")), &shared, Endpoints::Metrics).await;
        assert_eq!(status.status(), StatusCode::NOT_FOUND, "the metrics port serves /metrics alone");
    }
}
