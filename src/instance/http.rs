//! The manager's HTTP listener on `POD_IP:$DBC_STATUS_PORT` (the container port `status`):
//!
//! - `GET /healthz` (liveness, startup): 200 when the postmaster answers `SELECT 1` on its socket
//!   within [`PROBE_LIMIT`], 503 otherwise.
//! - `GET /readyz` (readiness): 200 when the server answers in its role (out of recovery when the
//!   record names this pod, in recovery otherwise) with the credentials applied, 503 otherwise.
//! - `GET /status`: [`super::status::Report`] as JSON, only with `Authorization: Bearer <token>`
//!   where the token is the mounted `$DBC_SECRETS/status/token` (read at each request, compared in
//!   constant time); 401 otherwise, and when no token is mounted.
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
use http_body_util::Full;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use sha2::{Digest, Sha256};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::decide::{readiness, role};
use super::local::{Local, PROBE_LIMIT};
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
    /// `/metrics`.
    pub metrics: super::metrics::Exporter,
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

/// Serves connections until `stop` is cancelled.
pub async fn serve(
    listener: TcpListener,
    shared: Arc<Shared>,
    endpoints: Endpoints,
    stop: CancellationToken,
) {
    loop {
        let accepted = tokio::select! {
            () = stop.cancelled() => return,
            accepted = listener.accept() => accepted,
        };
        let Ok((stream, _)) = accepted else { continue };
        let shared = shared.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            let service = service_fn(move |request| {
                let shared = shared.clone();
                async move { Ok::<_, Infallible>(route(&request, &shared, endpoints).await) }
            });
            let connection = http1::Builder::new().serve_connection(TokioIo::new(stream), service);
            tokio::select! {
                () = stop.cancelled() => {}
                _ = connection => {}
            }
        });
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

/// The answer to `request`.
pub async fn route<B>(request: &Request<B>, shared: &Shared, endpoints: Endpoints) -> Response<Full<Bytes>> {
    if request.method() != Method::GET {
        return text(StatusCode::METHOD_NOT_ALLOWED, "only GET");
    }
    if endpoints == Endpoints::Metrics {
        if request.uri().path() != "/metrics" {
            return text(StatusCode::NOT_FOUND, "not found");
        }
        let mut response = text(StatusCode::OK, shared.metrics.scrape().await.trim_end());
        response
            .headers_mut()
            .insert(header::CONTENT_TYPE, header::HeaderValue::from_static("text/plain; version=0.0.4"));
        return response;
    }
    match request.uri().path() {
        "/healthz" => match shared.local.ping(PROBE_LIMIT).await {
            Ok(()) => text(StatusCode::OK, "ok"),
            Err(error) => text(StatusCode::SERVICE_UNAVAILABLE, &error.to_string()),
        },
        "/readyz" => ready(shared).await,
        "/status" => status(request, shared).await,
        _ => text(StatusCode::NOT_FOUND, "not found"),
    }
}

async fn ready(shared: &Shared) -> Response<Full<Bytes>> {
    let role = role(&shared.settings.recorded_primary(), &shared.settings.pod_name);
    let started = shared.started.load(Ordering::Acquire);
    let in_recovery = if started { shared.local.in_recovery(PROBE_LIMIT).await.ok() } else { None };
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

async fn status<B>(request: &Request<B>, shared: &Shared) -> Response<Full<Bytes>> {
    let header = request.headers().get(header::AUTHORIZATION).and_then(|v| v.to_str().ok());
    let token = super::secrets::status_token(&shared.settings);
    if !authorized(header, token.as_deref()) {
        let mut refused = text(StatusCode::UNAUTHORIZED, "a bearer token is required");
        refused.headers_mut().insert(header::WWW_AUTHENTICATE, header::HeaderValue::from_static("Bearer"));
        return refused;
    }
    let role = role(&shared.settings.recorded_primary(), &shared.settings.pod_name);
    match super::status::report(&shared.local, role, &shared.settings.pgdata).await {
        Ok(report) => match serde_json::to_vec(&report) {
            Ok(body) => {
                let mut response = Response::new(Full::new(Bytes::from(body)));
                response
                    .headers_mut()
                    .insert(header::CONTENT_TYPE, header::HeaderValue::from_static("application/json"));
                response
            }
            Err(error) => text(StatusCode::INTERNAL_SERVER_ERROR, &error.to_string()),
        },
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
        Shared { settings, local, started: AtomicBool::new(true), metrics }
    }

    #[tokio::test]
    async fn without_a_server_the_probes_fail_and_status_wants_the_token() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("status")).unwrap();
        std::fs::write(dir.path().join("status/token"), "abc\n").unwrap();
        let shared = shared(dir.path(), dir.path());
        let get = |path: &str, auth: Option<&str>| {
            let mut builder = Request::get(path);
            if let Some(auth) = auth {
                builder = builder.header(header::AUTHORIZATION, auth);
            }
            builder.body(()).unwrap()
        };
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
                route(&get(path, auth), &shared, Endpoints::Status).await.status(),
                want,
                "{path} {auth:?}"
            );
        }
        let metrics = route(&get("/metrics", None), &shared, Endpoints::Metrics).await;
        assert_eq!(metrics.status(), StatusCode::OK);
        let status = route(&get("/status", Some("Bearer abc")), &shared, Endpoints::Metrics).await;
        assert_eq!(status.status(), StatusCode::NOT_FOUND, "the metrics port serves /metrics alone");
    }
}
