//! The operator's HTTP endpoints, served with hyper: `/metrics` and `/debug/{queue,cache}` for
//! people and Prometheus, `/healthz` and `/readyz` for the kubelet. The two groups can listen on
//! two addresses ([`Endpoints`]), as controller-runtime's `--metrics-bind-address` and
//! `--health-probe-bind-address` do.

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::runtime::introspection::Introspection;
use crate::runtime::metrics::Metrics;

/// The content type of `/metrics`: `Metrics::encode` writes the OpenMetrics text format.
pub const METRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Which endpoints a listener serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoints {
    /// `/metrics`, `/debug/queue`, `/debug/cache`.
    Metrics,
    /// `/healthz`, `/readyz`.
    Health,
    /// All of them (when both addresses are the same).
    All,
}

impl Endpoints {
    fn metrics(self) -> bool {
        matches!(self, Self::Metrics | Self::All)
    }

    fn health(self) -> bool {
        matches!(self, Self::Health | Self::All)
    }
}

/// What the handlers read.
#[derive(Debug, Clone)]
pub struct ServerState {
    /// The process's metrics registry.
    pub metrics: Arc<Metrics>,
    /// The registered informers and controllers.
    pub view: Introspection,
}

/// Serves `endpoints` on `listener` until `shutdown` is cancelled (connections in progress are
/// dropped then; a scrape is short).
pub async fn serve(
    listener: TcpListener,
    endpoints: Endpoints,
    state: ServerState,
    shutdown: CancellationToken,
) {
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
        tokio::spawn(async move {
            let service = service_fn(move |request: Request<hyper::body::Incoming>| {
                let response = respond(request.method(), request.uri().path(), endpoints, &state);
                async move { Ok::<_, Infallible>(response) }
            });
            let connection = http1::Builder::new().serve_connection(TokioIo::new(stream), service);
            tokio::select! {
                _ = shutdown.cancelled() => {}
                result = connection => if let Err(error) = result {
                    tracing::debug!(%error, "HTTP connection ended with an error");
                },
            }
        });
    }
}

/// The response to `method path` on a listener serving `endpoints`.
pub fn respond(
    method: &Method,
    path: &str,
    endpoints: Endpoints,
    state: &ServerState,
) -> Response<Full<Bytes>> {
    if method != Method::GET && method != Method::HEAD {
        return text(StatusCode::METHOD_NOT_ALLOWED, "only GET is served\n");
    }
    match path {
        "/metrics" if endpoints.metrics() => {
            reply(StatusCode::OK, METRICS_CONTENT_TYPE, state.metrics.encode().into_bytes())
        }
        "/debug/queue" if endpoints.metrics() => json(&state.view.queue_report()),
        "/debug/cache" if endpoints.metrics() => json(&state.view.cache_report()),
        "/healthz" if endpoints.health() => match state.view.liveness() {
            Ok(()) => text(StatusCode::OK, "ok\n"),
            Err(stopped) => text(
                StatusCode::INTERNAL_SERVER_ERROR,
                &format!("watch loops stopped: {}\n", stopped.join(", ")),
            ),
        },
        "/readyz" if endpoints.health() => match state.view.readiness() {
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
