//! HTTP request handling: discovery paths, then resource requests routed by verb to the
//! read, watch and write handlers (`pods/log` to the process kubelet's logs, `pods/exec` to
//! `sim::exec`), with faults and the request log applied on the way in.

mod read;
mod scale;
mod watch;
mod write;

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use serde_json::Value;

use crate::sim::api_error::ApiError;
use crate::sim::authorizer::User;
use crate::sim::cluster::Cluster;
use crate::sim::discovery;
use crate::sim::events;
use crate::sim::openapi;
use crate::sim::patch::PatchType;
use crate::sim::request_log::RequestRecord;
use crate::sim::resources::Kind;
use crate::sim::route::{self, Target};

/// Response body: a whole JSON document or a stream of watch events.
pub type Body = UnsyncBoxBody<Bytes, Infallible>;

/// Query parameters, last value wins.
pub type Query = HashMap<String, String>;

/// A JSON response.
pub fn json_response(status: u16, value: &Value) -> Response<Body> {
    let body = Full::new(Bytes::from(value.to_string())).boxed_unsync();
    let mut resp = Response::new(body);
    *resp.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    resp.headers_mut().insert(header::CONTENT_TYPE, header::HeaderValue::from_static("application/json"));
    resp
}

/// A failure as a `Status` response.
pub fn error_response(e: &ApiError) -> Response<Body> {
    let mut resp = json_response(e.code, &e.to_status());
    if let Some(secs) = e.retry_after {
        resp.headers_mut().insert(header::RETRY_AFTER, header::HeaderValue::from(secs));
    }
    resp
}

/// The object as a client of `kind`'s version sees it (custom resources are stored once for
/// all versions; the apiVersion is the one requested).
pub fn present(kind: &Kind, obj: &Value) -> Value {
    let mut obj = obj.clone();
    if events::is_events_v1(kind) {
        events::to_events_v1(&mut obj);
    }
    obj["apiVersion"] = Value::String(kind.api_version());
    obj
}

/// What the request does, as RBAC names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verb {
    Get,
    List,
    Watch,
    Create,
    Update,
    Patch,
    Delete,
    DeleteCollection,
}

impl Verb {
    fn as_str(self) -> &'static str {
        match self {
            Verb::Get => "get",
            Verb::List => "list",
            Verb::Watch => "watch",
            Verb::Create => "create",
            Verb::Update => "update",
            Verb::Patch => "patch",
            Verb::Delete => "delete",
            Verb::DeleteCollection => "deletecollection",
        }
    }

    fn of(method: &Method, target: &Target, query: &Query) -> Result<Self, ApiError> {
        let watch = query.get("watch").is_some_and(|w| w == "true" || w == "1");
        let one = target.name.is_some();
        Ok(match (method.as_str(), one) {
            ("GET", true) => Verb::Get,
            ("GET", false) if watch => Verb::Watch,
            ("GET", false) => Verb::List,
            ("POST", false) => Verb::Create,
            ("PUT", true) => Verb::Update,
            ("PATCH", true) => Verb::Patch,
            ("DELETE", true) => Verb::Delete,
            ("DELETE", false) => Verb::DeleteCollection,
            (m, _) => {
                return Err(ApiError::method_not_allowed(format!(
                    "the server does not allow this method on the requested resource ({m})"
                )));
            }
        })
    }
}

fn parse_query(q: Option<&str>) -> Query {
    url::form_urlencoded::parse(q.unwrap_or_default().as_bytes())
        .into_owned()
        .filter(|(k, _)| !k.is_empty())
        .collect()
}

/// A parsed request, with the body collected for writes.
pub struct Call {
    target: Target,
    query: Query,
    accept: String,
    content_type: String,
    user_agent: String,
    user: Option<User>,
    body: Bytes,
}

impl Call {
    /// The field manager: `fieldManager`, else the user agent's program name, as the apiserver does.
    fn field_manager(&self) -> String {
        if let Some(m) = self.query.get("fieldManager").filter(|m| !m.is_empty()) {
            return m.clone();
        }
        let agent = self.user_agent.split('/').next().unwrap_or_default();
        if agent.is_empty() { "unknown".into() } else { agent.to_string() }
    }

    fn dry_run(&self) -> bool {
        self.query.get("dryRun").is_some_and(|d| d == "All")
    }
}

/// Handles one HTTP request.
pub async fn handle(cluster: Arc<Cluster>, req: Request<Incoming>) -> Response<Body> {
    match handle_inner(cluster, req).await {
        Ok(resp) => resp,
        Err(e) => error_response(&e),
    }
}

async fn handle_inner(cluster: Arc<Cluster>, req: Request<Incoming>) -> Result<Response<Body>, ApiError> {
    let path = req.uri().path().to_string();
    if let Some(resp) = discovery_response(&cluster, req.method(), &path) {
        return Ok(resp);
    }
    let (group, version, rest) = route::split_api_path(&path).ok_or_else(|| ApiError::no_route(&path))?;
    let target = cluster
        .read(|s| route::resolve(&s.registry, &group, &version, &rest))
        .ok_or_else(|| ApiError::no_route(&path))?;
    let query = parse_query(req.uri().query());
    if is_pod_subresource(&target, "exec") {
        let verb = crate::sim::exec::verb(req.method())
            .ok_or_else(|| ApiError::method_not_allowed("the exec subresource supports get and create"))?;
        log_and_fault(&cluster, verb, &group, &version, &target).await?;
        let (ns, name) =
            (target.namespace.clone().unwrap_or_default(), target.name.clone().unwrap_or_default());
        let user = impersonated(req.headers());
        return crate::sim::exec::respond(&cluster, req, &target.kind, &ns, &name, user.as_ref());
    }
    let verb = Verb::of(req.method(), &target, &query)?;
    log_and_fault(&cluster, verb.as_str(), &group, &version, &target).await?;
    if crate::sim::reviews::is_review(&target.kind) {
        let body = read_body(req).await?;
        let (code, review) = cluster.read(|s| {
            crate::sim::reviews::respond(&s.store, &cluster.tokens, &target.kind, verb.as_str(), &body)
        })?;
        return Ok(json_response(code, &review));
    }
    if is_pod_subresource(&target, "log") {
        let (ns, name) =
            (target.namespace.clone().unwrap_or_default(), target.name.clone().unwrap_or_default());
        if verb != Verb::Get {
            return Err(ApiError::method_not_allowed("the log subresource supports get"));
        }
        return crate::sim::kubelet::logs::respond(&cluster, &target.kind, &ns, &name, &query);
    }
    let served = match target.subresource.as_deref() {
        None => true,
        Some("status") => target.kind.status_subresource,
        Some("scale") => target.kind.scale_subresource,
        Some(_) => false,
    };
    if !served {
        return Err(ApiError::no_route(&path));
    }
    let header = |name: header::HeaderName| {
        req.headers().get(name).and_then(|v| v.to_str().ok()).unwrap_or_default().to_string()
    };
    let (accept, content_type, user_agent) =
        (header(header::ACCEPT), header(header::CONTENT_TYPE), header(header::USER_AGENT));
    let user = impersonated(req.headers());
    let body = read_body(req).await?;
    let call = Call { target, query, accept, content_type, user_agent, user, body };
    if call.target.subresource.as_deref() == Some("scale") {
        let how = match verb {
            Verb::Get => scale::ScaleVerb::Get,
            Verb::Update => scale::ScaleVerb::Put,
            Verb::Patch => scale::ScaleVerb::Patch(
                PatchType::from_content_type(&call.content_type)
                    .ok_or_else(|| ApiError::unsupported_media_type(&call.content_type))?,
            ),
            _ => {
                return Err(ApiError::method_not_allowed(
                    "the scale subresource supports get, update and patch",
                ));
            }
        };
        return scale::handle(&cluster, &call, how);
    }
    match verb {
        Verb::Get => read::get(&cluster, &call),
        Verb::List => read::list(&cluster, &call),
        Verb::Watch => watch::watch(cluster.clone(), &call),
        Verb::Create => write::create(&cluster, &call),
        Verb::Update => write::update(&cluster, &call),
        Verb::Patch => write::patch(&cluster, &call),
        Verb::Delete => write::delete(&cluster, &call),
        Verb::DeleteCollection => write::delete_collection(&cluster, &call),
    }
}

/// Whether `target` is the core pods' subresource `sub` (`log`, `exec`).
fn is_pod_subresource(target: &Target, sub: &str) -> bool {
    target.kind.group.is_empty() && target.kind.plural == "pods" && target.subresource.as_deref() == Some(sub)
}

/// Records the request in the log, then applies the faults (latency, an injected failure).
async fn log_and_fault(
    cluster: &Cluster,
    verb: &str,
    group: &str,
    version: &str,
    target: &Target,
) -> Result<(), ApiError> {
    cluster.log.push(RequestRecord {
        verb: verb.into(),
        group: group.to_owned(),
        version: version.to_owned(),
        resource: target.kind.plural.clone(),
        subresource: target.subresource.clone(),
        namespace: target.namespace.clone(),
        name: target.name.clone(),
    });
    let latency = cluster.faults.latency();
    if !latency.is_zero() {
        tokio::time::sleep(latency).await;
    }
    let subresource_failure = target
        .subresource
        .as_ref()
        .and_then(|sub| cluster.faults.take_failure(&format!("{}/{sub}", target.kind.plural)));
    if let Some(code) = subresource_failure.or_else(|| cluster.faults.take_failure(&target.kind.plural)) {
        return Err(ApiError::injected(code));
    }
    Ok(())
}

/// The request's whole body.
async fn read_body(req: Request<Incoming>) -> Result<Bytes, ApiError> {
    let collected = req.into_body().collect().await;
    Ok(collected.map_err(|e| ApiError::bad_request(format!("reading the request body: {e}")))?.to_bytes())
}

/// The user a request is made as: `Impersonate-User` with its `Impersonate-Group`s (the
/// simulator authenticates no one; a request without them is the cluster admin's).
fn impersonated(headers: &http::HeaderMap) -> Option<User> {
    let name = headers.get("impersonate-user")?.to_str().ok()?;
    let groups = headers
        .get_all("impersonate-group")
        .iter()
        .filter_map(|g| g.to_str().ok().map(String::from))
        .collect();
    Some(User::new(name, groups))
}

fn discovery_response(cluster: &Cluster, method: &Method, path: &str) -> Option<Response<Body>> {
    if method != Method::GET {
        return None;
    }
    let segments: Vec<&str> = path.trim_matches('/').split('/').filter(|s| !s.is_empty()).collect();
    let doc = match segments.as_slice() {
        ["version"] => Some(discovery::version(cluster.config.kubernetes_version)),
        ["healthz"] | ["livez"] | ["readyz"] => {
            let mut resp = Response::new(Full::new(Bytes::from_static(b"ok")).boxed_unsync());
            resp.headers_mut().insert(header::CONTENT_TYPE, header::HeaderValue::from_static("text/plain"));
            return Some(resp);
        }
        ["openapi", "v2"] => {
            let mut resp = Response::new(Full::new(Bytes::new()).boxed_unsync());
            resp.headers_mut().insert(
                header::CONTENT_TYPE,
                header::HeaderValue::from_static(
                    "application/com.github.proto-openapi.spec.v2.v1.0+protobuf",
                ),
            );
            return Some(resp);
        }
        ["openapi", "v3"] => Some(cluster.read(|s| openapi::v3_index(&s.registry, s.version))),
        ["openapi", "v3", "api", version] => {
            cluster.read(|s| openapi::v3_group_version(&s.registry, "", version, s.version))
        }
        ["openapi", "v3", "apis", group, version] => {
            cluster.read(|s| openapi::v3_group_version(&s.registry, group, version, s.version))
        }
        ["api"] => Some(discovery::core_versions(&cluster.config.addr.to_string())),
        ["apis"] => Some(cluster.read(|s| discovery::groups(&s.registry))),
        ["apis", group] => cluster.read(|s| discovery::group(&s.registry, group)),
        ["api", version] => cluster.read(|s| discovery::resources(&s.registry, "", version)),
        ["apis", group, version] => cluster.read(|s| discovery::resources(&s.registry, group, version)),
        _ => return None,
    };
    Some(match doc {
        Some(d) => json_response(200, &d),
        None => error_response(&ApiError::no_route(path)),
    })
}
