//! `pods/exec` (`kubectl exec`, `kubectl dbc psql`): the request checked as the apiserver checks
//! it, then upgraded to the transport the client asks for, on which the process kubelet's command
//! runs (`session`).
//!
//! Two transports, as a real cluster serves them: SPDY/3.1 (`spdy`, `spdy_conn`), what kubectl up
//! to 1.29 speaks and what a 1.28 cluster serves (its kubelet's `remotecommand` streams); and
//! WebSocket `v5.channel.k8s.io`/`v4.channel.k8s.io` (`websocket`, `channels`), what kubectl 1.30+
//! asks for first, served as a 1.30+ apiserver's `StreamTranslatorHandler` (KEP-4006) serves it.
//! kubectl 1.30+ falls back to SPDY only when the WebSocket upgrade is refused.
//!
//! Rules (tests: `channels`, `spdy`, `kubelet::exec`, `tests/postgres/sim_process_kubelet/exec.rs`):
//! 1. Authorization, for an impersonated user (a request without impersonation is the cluster
//!    admin's): `create` on `pods/exec` for a POST; for a GET (every WebSocket), `get` — the
//!    verb a GET is authorized with — and `create`, the check 1.35 adds with
//!    `AuthorizePodWebsocketUpgradeCreatePermission` (on by default): a Role granting both
//!    works on every version. Refused: 403 `pods "NAME" is forbidden: User "U" cannot VERB
//!    resource "pods/exec" in API group "" in the namespace "NS"`.
//! 2. Then, before any upgrade: the pod (404), the options and the container
//!    (`kubelet::exec` rules 1–2, 400), then the upgrade: none is 400 `Upgrade request
//!    required`; a WebSocket without a served subprotocol (`channels` rule 1) or key is 400; SPDY
//!    without a served `X-Stream-Protocol-Version` (v5 or v4) is 403, as the kubelet's handshake.
//! 3. A container not running here (`kubelet::exec` rule 3): over SPDY, the kubelet's 500
//!    `container not found ("NAME")` instead of the upgrade (kubectl: `unable to upgrade
//!    connection: …`); over WebSocket the upgrade happens first, as the translator makes it, and
//!    the refusal is an `InternalError` status on the error channel.
//! 4. The request log records `get` (GET) or `create` (POST) on `pods/exec`, as RBAC sees the
//!    request.

pub mod channels;
mod session;
mod spdy;
mod spdy_conn;
mod websocket;

use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;

use crate::sim::api_error::ApiError;
use crate::sim::authorizer::{self, Attributes, User};
use crate::sim::cluster::Cluster;
use crate::sim::exec::session::Session;
use crate::sim::handlers::Body;
use crate::sim::kubelet::exec::{self as kubelet_exec, ExecOptions};
use crate::sim::resources::Kind;

/// Rule 4: the verb RBAC sees for an exec request made with `method`; `None` for a method the
/// subresource does not serve.
pub fn verb(method: &Method) -> Option<&'static str> {
    match *method {
        Method::GET => Some("get"),
        Method::POST => Some("create"),
        _ => None,
    }
}

/// Rule 1: the verbs `user` needs, the first refused if any.
fn refused_verb(
    cluster: &Cluster,
    user: &User,
    method: &Method,
    namespace: &str,
    name: &str,
) -> Option<&'static str> {
    let verbs: &[&'static str] = if *method == Method::GET { &["get", "create"] } else { &["create"] };
    cluster.read(|s| {
        verbs.iter().copied().find(|verb| {
            let attributes = Attributes {
                verb,
                group: "",
                resource: "pods",
                subresource: Some("exec"),
                namespace: Some(namespace),
                name,
            };
            !authorizer::allows(&s.store, user, &attributes)
        })
    })
}

/// How the client asks to upgrade (rule 2).
#[derive(Debug, PartialEq, Eq)]
enum Upgrade {
    WebSocket,
    Spdy,
    None,
}

fn upgrade_of(headers: &http::HeaderMap) -> Upgrade {
    let value = |name: header::HeaderName| {
        headers
            .get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .collect::<Vec<_>>()
            .join(",")
            .to_ascii_lowercase()
    };
    let connection_upgrades = value(header::CONNECTION).split(',').any(|t| t.trim() == "upgrade");
    let upgrade = value(header::UPGRADE);
    if !connection_upgrades {
        Upgrade::None
    } else if upgrade.split(',').any(|t| t.trim() == "websocket") {
        Upgrade::WebSocket
    } else if upgrade.contains("spdy/") {
        Upgrade::Spdy
    } else {
        Upgrade::None
    }
}

/// Answers `GET|POST …/pods/NAME/exec` (rules 1–3).
pub fn respond(
    cluster: &Arc<Cluster>,
    req: Request<Incoming>,
    kind: &Kind,
    namespace: &str,
    name: &str,
    user: Option<&User>,
) -> Result<Response<Body>, ApiError> {
    if let Some(user) = user
        && let Some(verb) = refused_verb(cluster, user, req.method(), namespace, name)
    {
        return Err(ApiError::forbidden(
            kind,
            name,
            &format!(
                "User \"{}\" cannot {verb} resource \"pods/exec\" in API group \"\" in the namespace \"{namespace}\"",
                user.name
            ),
        ));
    }
    let pod = cluster
        .read(|s| s.store.get("pods", namespace, name).cloned())
        .ok_or_else(|| ApiError::not_found(kind, name))?;
    let options = ExecOptions::parse(req.uri().query())?;
    let container = kubelet_exec::choose_container(&pod, options.container.as_deref())?;
    let uid = pod["metadata"]["uid"].as_str().unwrap_or_default();
    let target = kubelet_exec::target(&cluster.node, uid, &container);
    let session = Session { options, target: target.ok_or(container), shutdown: cluster.shutdown.clone() };
    match upgrade_of(req.headers()) {
        Upgrade::WebSocket => upgrade_to_websocket(req, session),
        Upgrade::Spdy => upgrade_to_spdy(req, session, kind, name),
        Upgrade::None => Err(ApiError::bad_request("Upgrade request required")),
    }
}

/// Rules 2 and 3 over WebSocket; `session.target` is the container's name when it does not run.
fn upgrade_to_websocket(req: Request<Incoming>, mut session: Session) -> Result<Response<Body>, ApiError> {
    let offered =
        req.headers().get_all(header::SEC_WEBSOCKET_PROTOCOL).iter().filter_map(|v| v.to_str().ok());
    let protocol = channels::negotiate(offered).ok_or_else(|| {
        ApiError::bad_request(
            "requested protocol(s) are not supported; supports [v5.channel.k8s.io v4.channel.k8s.io]",
        )
    })?;
    let key = req
        .headers()
        .get(header::SEC_WEBSOCKET_KEY)
        .ok_or_else(|| ApiError::bad_request("a WebSocket upgrade needs Sec-WebSocket-Key"))?;
    let accept = derive_accept_key(key.as_bytes());
    session.target = session.target.map_err(|container| {
        format!("unable to upgrade connection: {}", kubelet_exec::container_not_found(&container))
    });
    let resp = switching(&[
        (header::UPGRADE, "websocket"),
        (header::SEC_WEBSOCKET_PROTOCOL, protocol.name()),
        (header::SEC_WEBSOCKET_ACCEPT, &accept),
    ]);
    tokio::spawn(upgraded(req, move |io| websocket::serve(io, protocol, session)));
    Ok(resp)
}

/// Rules 2 and 3 over SPDY; `session.target` is the container's name when it does not run.
fn upgrade_to_spdy(
    req: Request<Incoming>,
    session: Session,
    kind: &Kind,
    name: &str,
) -> Result<Response<Body>, ApiError> {
    let offered = req.headers().get_all(STREAM_PROTOCOL).iter().filter_map(|v| v.to_str().ok());
    let protocol = negotiate_spdy(offered).ok_or_else(|| {
        ApiError::forbidden(
            kind,
            name,
            "unable to upgrade: unable to negotiate protocol: server accepts [v5.channel.k8s.io v4.channel.k8s.io]",
        )
    })?;
    if let Err(container) = &session.target {
        return Ok(kubelet_refusal(&kubelet_exec::container_not_found(container)));
    }
    let resp = switching(&[(header::UPGRADE, "SPDY/3.1"), (STREAM_PROTOCOL, protocol)]);
    tokio::spawn(upgraded(req, move |io| spdy_conn::serve(io, session)));
    Ok(resp)
}

/// The header naming the streams protocol over SPDY (`X-Stream-Protocol-Version`).
const STREAM_PROTOCOL: header::HeaderName = header::HeaderName::from_static("x-stream-protocol-version");

/// Rule 2: the protocol over SPDY, the client's first that is served (`httpstream.Handshake`).
fn negotiate_spdy<'a>(offered: impl IntoIterator<Item = &'a str>) -> Option<&'static str> {
    offered.into_iter().flat_map(|v| v.split(',')).map(str::trim).find_map(|p| match p {
        "v5.channel.k8s.io" => Some("v5.channel.k8s.io"),
        "v4.channel.k8s.io" => Some("v4.channel.k8s.io"),
        _ => None,
    })
}

/// Rule 3 over SPDY: the kubelet's answer for a container it does not run
/// (`streaming.WriteError`: a 500 whose body is the message), which kubectl shows as
/// `unable to upgrade connection: MESSAGE`.
fn kubelet_refusal(message: &str) -> Response<Body> {
    let mut resp = Response::new(Full::new(Bytes::from(message.to_owned())).boxed_unsync());
    *resp.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
    resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    resp
}

/// The 101 answer with `headers`.
fn switching(headers: &[(header::HeaderName, &str)]) -> Response<Body> {
    let mut resp = Response::new(Empty::<Bytes>::new().map_err(|never| match never {}).boxed_unsync());
    *resp.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    resp.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    for (name, value) in headers {
        if let Ok(value) = HeaderValue::from_str(value) {
            resp.headers_mut().insert(name.clone(), value);
        }
    }
    resp
}

/// Waits for the connection to be handed over, then runs `serve` on it.
async fn upgraded<F, Fut>(mut req: Request<Incoming>, serve: F)
where
    F: FnOnce(TokioIo<hyper::upgrade::Upgraded>) -> Fut,
    Fut: Future<Output = ()>,
{
    match hyper::upgrade::on(&mut req).await {
        Ok(io) => serve(TokioIo::new(io)).await,
        Err(e) => tracing::debug!(error = %e, "an exec's connection was not upgraded"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> http::HeaderMap {
        let mut map = http::HeaderMap::new();
        for (k, v) in pairs {
            map.append(
                header::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        map
    }

    #[test]
    fn upgrades_are_told_apart_as_wsstream_and_spdy_do() {
        let ws = headers(&[("connection", "keep-alive, Upgrade"), ("upgrade", "websocket")]);
        assert_eq!(upgrade_of(&ws), Upgrade::WebSocket);
        assert_eq!(
            upgrade_of(&headers(&[("connection", "Upgrade"), ("upgrade", "SPDY/3.1")])),
            Upgrade::Spdy
        );
        assert_eq!(
            upgrade_of(&headers(&[("upgrade", "websocket")])),
            Upgrade::None,
            "Connection must say upgrade"
        );
        assert_eq!(upgrade_of(&headers(&[])), Upgrade::None);
        assert_eq!(
            (verb(&Method::GET), verb(&Method::POST), verb(&Method::PUT)),
            (Some("get"), Some("create"), None)
        );
    }
}
