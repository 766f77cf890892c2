//! The operator's HTTP endpoints, served with hyper: `/metrics`, `/debug/{queue,cache}` and
//! `/debug/queue/<namespace>/<name>` (one key's last passes: why each ran, what it did), and the
//! live page `/debug/` with the snapshots it polls, `/debug/live.json` (see `live`), for
//! people and Prometheus, `/healthz` and `/readyz` for the kubelet. The three groups (metrics,
//! debug, health) can listen on separate addresses ([`Endpoints`]), as controller-runtime's
//! `--metrics-bind-address`, `--pprof-bind-address` and `--health-probe-bind-address` do. With an
//! [`AccessReview`] (`run --metrics-secure`), a path is answered only to a bearer token the API
//! server authenticates and whose user may `get` the path (see `access`), except the probes and,
//! on a loopback listener, `/debug/*`: loopback is their protection ([`reviewed`]). A listener
//! with a reviewed path then speaks TLS only ([`encrypted`]; the certificate is `tls`'s), so the
//! token and the answer never cross the network in clear; a plain HTTP request to it is answered
//! `400` saying so, and nothing else. Probes on a listener of their own stay plain HTTP.

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

use crate::runtime::ObjectKey;
use crate::runtime::observe::access::AccessReview;
use crate::runtime::observe::introspection::Introspection;
use crate::runtime::observe::live;
use crate::runtime::observe::metrics::Metrics;
use crate::runtime::observe::tls::ServedCertificate;

/// Where one key's history is served: `/debug/queue/<namespace>/<name>` (or `/<name>` for a
/// cluster-scoped key).
const KEY_HISTORY_PREFIX: &str = "/debug/queue/";

/// The content type of `/metrics`: `Metrics::encode` writes the OpenMetrics text format.
pub const METRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Which endpoints a listener serves: any union of the three groups (several flags may name the
/// same address).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Endpoints {
    metrics: bool,
    debug: bool,
    health: bool,
}

impl Endpoints {
    /// `/metrics`.
    pub const METRICS: Self = Self { metrics: true, debug: false, health: false };
    /// `/debug/queue`, `/debug/cache`: they show keys, object names and errors, so `run` serves
    /// them on loopback unless asked otherwise.
    pub const DEBUG: Self = Self { metrics: false, debug: true, health: false };
    /// `/healthz`, `/readyz`.
    pub const HEALTH: Self = Self { metrics: false, debug: false, health: true };
    /// All of them.
    pub const ALL: Self = Self { metrics: true, debug: true, health: true };

    /// The endpoints of `self` and of `other`.
    pub fn union(self, other: Self) -> Self {
        Self {
            metrics: self.metrics || other.metrics,
            debug: self.debug || other.debug,
            health: self.health || other.health,
        }
    }
}

/// What the handlers read.
#[derive(Debug, Clone)]
pub struct ServerState {
    /// The process's metrics registry.
    pub metrics: Arc<Metrics>,
    /// The registered informers and controllers.
    pub view: Introspection,
    /// Who may read `/metrics` and `/debug/*`; `None`: anyone who can connect.
    pub access: Option<Arc<AccessReview>>,
    /// The certificate of the listeners with reviewed paths ([`encrypted`]); `None`: plain HTTP.
    pub tls: Option<Arc<ServedCertificate>>,
}

/// How long a client may take to finish the TLS handshake before its connection is dropped.
const HANDSHAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// The answer to a plain HTTP request on a TLS listener (Go's `net/http` answers the same).
const PLAIN_ON_TLS: &[u8] = b"HTTP/1.1 400 Bad Request\r\ncontent-type: text/plain; charset=utf-8\r\n\
connection: close\r\n\r\nClient sent an HTTP request to an HTTPS server.\n";

/// Serves `endpoints` on `listener` until `shutdown` is cancelled (connections in progress are
/// dropped then; a scrape is short).
pub async fn serve(
    listener: TcpListener,
    endpoints: Endpoints,
    state: ServerState,
    shutdown: CancellationToken,
) {
    let loopback = listener.local_addr().is_ok_and(|addr| addr.ip().is_loopback());
    let tls = state.tls.as_ref().filter(|_| encrypted(endpoints, loopback)).map(|tls| tls.acceptor());
    loop {
        let stream = tokio::select! {
            _ = shutdown.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(error) => {
                    // Typically too many open files: back off briefly instead of spinning.
                    tracing::warn!(%error, "accepting an HTTP connection failed");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let state = state.clone();
        let shutdown = shutdown.clone();
        let tls = tls.clone();
        tokio::spawn(async move {
            let Some(acceptor) = tls else {
                return connection(stream, endpoints, loopback, state, shutdown).await;
            };
            match first_byte(&stream).await {
                Some(TLS_HANDSHAKE) => {}
                Some(_) => return refuse_plain(stream).await,
                None => return,
            }
            match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                Ok(Ok(stream)) => connection(stream, endpoints, loopback, state, shutdown).await,
                Ok(Err(error)) => tracing::debug!(%error, "TLS handshake failed"),
                Err(_) => tracing::debug!("TLS handshake timed out"),
            }
        });
    }
}

/// Whether a listener serving `endpoints` (on a loopback address or not) speaks TLS when the
/// server has a certificate: when some path on it is [`reviewed`] (`/metrics`, or `/debug/*` off
/// loopback), so that the bearer token never crosses in clear.
pub fn encrypted(endpoints: Endpoints, loopback: bool) -> bool {
    endpoints.metrics || (endpoints.debug && !loopback)
}

/// The first byte of a TLS record that opens a handshake; plain HTTP starts with a method's letter.
const TLS_HANDSHAKE: u8 = 0x16;

/// The client's first byte, left unread; `None` if it sent none within [`HANDSHAKE_TIMEOUT`].
async fn first_byte(stream: &TcpStream) -> Option<u8> {
    let mut first = [0u8; 1];
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, stream.peek(&mut first)).await {
        Ok(Ok(1)) => Some(first[0]),
        _ => None,
    }
}

/// Answers a plain HTTP request on a TLS listener with [`PLAIN_ON_TLS`] and closes.
async fn refuse_plain(mut stream: TcpStream) {
    // Read what was sent first: closing with unread bytes resets the connection, which can
    // discard the answer before the client reads it.
    let _ = stream.read(&mut [0u8; 8192]).await;
    let _ = stream.write_all(PLAIN_ON_TLS).await;
    let _ = stream.shutdown().await;
}

/// Serves HTTP/1.1 on one connection until it ends or `shutdown` is cancelled.
async fn connection<I>(
    io: I,
    endpoints: Endpoints,
    loopback: bool,
    state: ServerState,
    shutdown: CancellationToken,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = service_fn(move |request: Request<hyper::body::Incoming>| {
        let state = state.clone();
        async move { Ok::<_, Infallible>(route(&request, endpoints, loopback, &state).await) }
    });
    let connection = http1::Builder::new().serve_connection(TokioIo::new(io), service);
    tokio::select! {
        _ = shutdown.cancelled() => {}
        result = connection => if let Err(error) = result {
            tracing::debug!(%error, "HTTP connection ended with an error");
        },
    }
}

/// The answer to `request`: refused unless the access review (if any) lets it through, then
/// [`respond`]'s answer.
async fn route<B>(
    request: &Request<B>,
    endpoints: Endpoints,
    loopback: bool,
    state: &ServerState,
) -> Response<Full<Bytes>> {
    let (method, uri) = (request.method(), request.uri());
    if let Some(access) = state.access.as_ref().filter(|_| reviewed(uri.path(), endpoints, loopback))
        && let Err(denied) = access.check(request.headers(), uri.path()).await
    {
        return text(denied.status(), &format!("{denied}\n"));
    }
    respond_to(method, uri.path(), uri.query().unwrap_or_default(), endpoints, state)
}

/// Whether, with an access review, a request for `path` on a listener serving `endpoints` (on a
/// loopback address or not) is reviewed: all but the kubelet's probes and `/debug/*` on a
/// loopback listener of its own (`run` serves it there unless asked otherwise; reaching it takes
/// `kubectl port-forward`). A listener that also serves `/metrics` is a secured one: its
/// `/debug/*` is reviewed too, wherever it listens.
pub fn reviewed(path: &str, endpoints: Endpoints, loopback: bool) -> bool {
    let probe = endpoints.health && matches!(path, "/healthz" | "/readyz");
    let local_debug = loopback && !endpoints.metrics && path.starts_with("/debug/");
    !probe && !local_debug
}

/// The live page's snapshots (see `live`).
const LIVE_SNAPSHOT: &str = "/debug/live.json";

/// The response to `method path` on a listener serving `endpoints`, without a query string.
pub fn respond(
    method: &Method,
    path: &str,
    endpoints: Endpoints,
    state: &ServerState,
) -> Response<Full<Bytes>> {
    respond_to(method, path, "", endpoints, state)
}

/// The response to `method path?query` on a listener serving `endpoints` (only the live page's
/// snapshots read the query).
pub fn respond_to(
    method: &Method,
    path: &str,
    query: &str,
    endpoints: Endpoints,
    state: &ServerState,
) -> Response<Full<Bytes>> {
    if method != Method::GET && method != Method::HEAD {
        return text(StatusCode::METHOD_NOT_ALLOWED, "only GET is served\n");
    }
    match path {
        "/metrics" if endpoints.metrics => {
            reply(StatusCode::OK, METRICS_CONTENT_TYPE, state.metrics.encode().into_bytes())
        }
        "/debug/queue" if endpoints.debug => json(&state.view.queue_report()),
        "/debug/cache" if endpoints.debug => json(&state.view.cache_report()),
        "/debug/" if endpoints.debug => {
            reply(StatusCode::OK, "text/html; charset=utf-8", live::PAGE_HTML.as_bytes().to_vec())
        }
        LIVE_SNAPSHOT if endpoints.debug => match live::snapshot_json(&state.view, query) {
            Ok(body) => reply(StatusCode::OK, "application/json", body),
            Err(error) => text(StatusCode::INTERNAL_SERVER_ERROR, &format!("{error}\n")),
        },
        _ if endpoints.debug && path.starts_with(KEY_HISTORY_PREFIX) => {
            let key: ObjectKey =
                path[KEY_HISTORY_PREFIX.len()..].parse().unwrap_or_else(|never| match never {});
            match state.view.key_history(&key) {
                Some(history) => json(&history),
                None => text(StatusCode::NOT_FOUND, &format!("no controller knows {key}\n")),
            }
        }
        "/healthz" if endpoints.health => match state.view.liveness() {
            Ok(()) => text(StatusCode::OK, "ok\n"),
            Err(stopped) => text(
                StatusCode::INTERNAL_SERVER_ERROR,
                &format!("watch loops stopped: {}\n", stopped.join(", ")),
            ),
        },
        "/readyz" if endpoints.health => match state.view.readiness() {
            Ok(()) => text(StatusCode::OK, "ok\n"),
            Err(unsynced) => text(
                StatusCode::SERVICE_UNAVAILABLE,
                &format!("caches not synced yet: {}\n", unsynced.join(", ")),
            ),
        },
        _ => text(StatusCode::NOT_FOUND, "not found\n"),
    }
}

fn text(status: StatusCode, body: &str) -> Response<Full<Bytes>> {
    reply(status, "text/plain; charset=utf-8", body.as_bytes().to_vec())
}

fn json(value: &impl serde::Serialize) -> Response<Full<Bytes>> {
    let mut body = serde_json::to_vec_pretty(value).unwrap_or_default();
    body.push(b'\n');
    reply(StatusCode::OK, "application/json", body)
}

fn reply(status: StatusCode, content_type: &'static str, body: Vec<u8>) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response.headers_mut().insert(header::CONTENT_TYPE, header::HeaderValue::from_static(content_type));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_group_serves_only_its_own_paths() {
        let state = ServerState {
            metrics: Arc::new(Metrics::new()),
            view: Introspection::new(),
            access: None,
            tls: None,
        };
        let status =
            |path: &str, endpoints: Endpoints| respond(&Method::GET, path, endpoints, &state).status();
        assert_eq!(status("/metrics", Endpoints::METRICS), StatusCode::OK);
        assert_eq!(status("/debug/queue", Endpoints::METRICS), StatusCode::NOT_FOUND);
        assert_eq!(status("/debug/cache", Endpoints::HEALTH), StatusCode::NOT_FOUND);
        assert_eq!(status("/metrics", Endpoints::DEBUG), StatusCode::NOT_FOUND);
        assert_eq!(status("/debug/queue", Endpoints::DEBUG), StatusCode::OK);
        assert_eq!(status("/debug/cache", Endpoints::METRICS.union(Endpoints::DEBUG)), StatusCode::OK);
        assert_eq!(status("/healthz", Endpoints::ALL), StatusCode::OK);
        assert_eq!(status("/debug/queue/default/unknown", Endpoints::DEBUG), StatusCode::NOT_FOUND);
        assert_eq!(status("/debug/queue/default/unknown", Endpoints::METRICS), StatusCode::NOT_FOUND);
        assert_eq!(status("/debug/", Endpoints::DEBUG), StatusCode::OK);
        assert_eq!(status("/debug/", Endpoints::METRICS), StatusCode::NOT_FOUND);
        assert_eq!(status("/debug/live.json", Endpoints::DEBUG), StatusCode::OK);
        assert_eq!(status("/debug/live", Endpoints::DEBUG), StatusCode::NOT_FOUND, "no stream any more");
    }

    #[test]
    fn the_access_review_covers_all_but_the_probes_and_debug_on_a_loopback_listener_of_its_own() {
        let shared = Endpoints::ALL;
        assert!(reviewed("/metrics", shared, true), "/metrics, even on loopback");
        assert!(reviewed("/metrics", Endpoints::METRICS, false));
        assert!(!reviewed("/healthz", shared, false) && !reviewed("/readyz", Endpoints::HEALTH, false));
        assert!(reviewed("/healthz", Endpoints::METRICS, false), "not a probe where none is served");
        for path in ["/debug/", "/debug/queue", "/debug/live.json", "/debug/queue/default/pg"] {
            assert!(!reviewed(path, Endpoints::DEBUG, true), "{path} on loopback");
            assert!(reviewed(path, Endpoints::DEBUG, false), "{path} exposed");
            assert!(reviewed(path, shared, true), "{path} on the metrics listener, even on loopback");
        }
        assert!(reviewed("/debugger", Endpoints::DEBUG, true) && reviewed("/nope", shared, true));
    }

    #[test]
    fn a_listener_with_a_reviewed_path_is_encrypted() {
        assert!(encrypted(Endpoints::METRICS, true) && encrypted(Endpoints::METRICS, false));
        assert!(encrypted(Endpoints::DEBUG, false) && !encrypted(Endpoints::DEBUG, true));
        assert!(!encrypted(Endpoints::HEALTH, false), "probes on their own listener stay plain HTTP");
        assert!(encrypted(Endpoints::ALL, true), "probes sharing the metrics listener are served over TLS");
    }
}
