//! `dbcluster-operator status`, the fetching half: with the user's own credentials, read one
//! DatabaseCluster, its children (the StatefulSet, Services and Secret it controls, and the
//! StatefulSet's Pods), the Events about it, and — when the operator answers — its `/debug/queue`
//! entry for the key, into a [`Snapshot`] for [`crate::cli::status::render`]. The operator being
//! down is not an error: the view then says why it was unreachable.
//!
//! The operator is read over `http://` (its loopback debug listener, through `kubectl
//! port-forward`) or `https://` (a listener of `run --metrics-secure`): then its certificate is
//! verified against `--operator-ca-file` (or the system's roots), never skipped, and
//! `--operator-token-file`'s bearer token is sent; a token is never sent over plain HTTP.

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Pod, Secret, Service};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, ApiResource, DynamicObject, ListParams};
use kube::{Client, Resource};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite};

use crate::cli::StatusArgs;
use crate::cli::cluster::{self, ClusterError};
use crate::cli::status::{Child, RuntimeView, Snapshot, key_view, pod_child, render, statefulset_child};
use crate::databasecluster::api::types::DatabaseCluster;
use crate::databasecluster::specs::names::label;
use crate::runtime::observe::tls;

/// How long the operator's `/debug/queue` may take to answer before it counts as unreachable.
const OPERATOR_TIMEOUT: Duration = Duration::from_secs(3);

/// Why `status` could not show the cluster.
#[derive(Debug, thiserror::Error)]
pub enum StatusError {
    /// The cluster cannot be found or its configuration used.
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    /// The client could not be built from the configuration.
    #[error("cannot build a Kubernetes client: {0}")]
    Client(String),
    /// No such DatabaseCluster.
    #[error("DatabaseCluster {namespace}/{name} not found")]
    NotFound {
        /// The namespace looked in.
        namespace: String,
        /// The name asked for.
        name: String,
    },
    /// A file a flag names cannot be used.
    #[error("{flag} {path}: {reason}")]
    Flag {
        /// The flag, e.g. `--operator-ca-file`.
        flag: &'static str,
        /// The file it names.
        path: String,
        /// Why it cannot be used.
        reason: String,
    },
    /// A read failed.
    #[error("{what}: {reason}")]
    Read {
        /// What was being read, e.g. `listing Services in default`.
        what: String,
        /// Why.
        reason: String,
    },
}

/// Where the operator's `/debug/queue` is read and how.
#[derive(Debug, Clone, Default)]
pub struct Operator {
    /// Its base URL, e.g. `http://127.0.0.1:8082` or `https://127.0.0.1:8080`.
    pub url: String,
    /// The bearer token sent to an `https://` URL.
    pub token: Option<String>,
    /// What an `https://` URL's certificate is verified against; `None`: the system's roots.
    pub trusted: Option<Vec<CertificateDer<'static>>>,
}

impl Operator {
    /// Read over plain HTTP (or HTTPS against the system's roots) without a token.
    pub fn at(url: impl Into<String>) -> Self {
        Self { url: url.into(), ..Self::default() }
    }

    /// The operator `status`'s flags name: the token and CA files read (an error names the file).
    pub fn from_args(args: &StatusArgs) -> Result<Self, StatusError> {
        let flag_error = |flag, path: &Path, reason: String| StatusError::Flag {
            flag,
            path: path.display().to_string(),
            reason,
        };
        let token = match &args.operator_token_file {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| flag_error("--operator-token-file", path, e.to_string()))?;
                let token = text.trim().to_owned();
                if token.is_empty() {
                    return Err(flag_error("--operator-token-file", path, "is empty".into()));
                }
                Some(token)
            }
            None => None,
        };
        let trusted = match &args.operator_ca_file {
            Some(path) => {
                let certificates = CertificateDer::pem_file_iter(path)
                    .and_then(Iterator::collect::<Result<Vec<_>, _>>)
                    .map_err(|e| flag_error("--operator-ca-file", path, e.to_string()))?;
                if certificates.is_empty() {
                    return Err(flag_error("--operator-ca-file", path, "holds no PEM certificate".into()));
                }
                Some(certificates)
            }
            None => None,
        };
        Ok(Self { url: args.operator_url.clone(), token, trusted })
    }
}

/// Reads everything `status` shows about `namespace/name`; `operator` says where the operator
/// serves `/debug/queue`.
pub async fn fetch(
    client: &Client,
    namespace: &str,
    name: &str,
    operator: &Operator,
) -> Result<Snapshot, StatusError> {
    let resource = ApiResource::erase::<DatabaseCluster>(&());
    let clusters: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &resource);
    let cluster = match clusters.get(name).await {
        Ok(cluster) => cluster,
        Err(kube::Error::Api(status)) if status.code == 404 => {
            return Err(StatusError::NotFound { namespace: namespace.into(), name: name.into() });
        }
        Err(error) => return Err(read_error(format!("reading DatabaseCluster {namespace}/{name}"), &error)),
    };
    let uid = cluster.metadata.uid.clone().unwrap_or_default();
    let selector = format!("{}={name}", label::INSTANCE);

    let statefulsets: Vec<StatefulSet> = controlled(client, namespace, &selector, &[uid.as_str()]).await?;
    let sts_uids: Vec<&str> = statefulsets.iter().filter_map(|s| s.metadata.uid.as_deref()).collect();
    let pods: Vec<Pod> = controlled(client, namespace, &selector, &sts_uids).await?;
    let services: Vec<Service> = controlled(client, namespace, &selector, &[uid.as_str()]).await?;
    let secrets: Vec<Secret> = controlled(client, namespace, &selector, &[uid.as_str()]).await?;
    let mut children: Vec<Child> = statefulsets.iter().map(statefulset_child).collect();
    children.extend(pods.iter().map(pod_child));
    children.extend(services.iter().map(|svc| {
        Child {
            kind: "Service",
            name: svc.metadata.name.clone().unwrap_or_default(),
            detail: svc
                .spec
                .as_ref()
                .and_then(|s| s.cluster_ip.as_deref())
                .map_or(String::new(), |ip| if ip == "None" { "headless".into() } else { ip.into() }),
        }
    }));
    // The Secret's name only: its data is never read into the output.
    children.extend(secrets.iter().map(|secret| Child {
        kind: "Secret",
        name: secret.metadata.name.clone().unwrap_or_default(),
        detail: String::new(),
    }));

    let events: Api<Event> = Api::namespaced(client.clone(), namespace);
    let about =
        ListParams::default().fields(&format!("regarding.kind=DatabaseCluster,regarding.name={name}"));
    let events = events
        .list(&about)
        .await
        .map_err(|e| read_error(format!("listing Events in {namespace}"), &e))?
        .items;

    let view = operator_view(operator, &format!("{namespace}/{name}")).await;
    let cluster = serde_json::to_value(&cluster).unwrap_or(Value::Null);
    Ok(Snapshot { cluster, children, events, view, now: jiff::Timestamp::now() })
}

/// The objects of kind `K` in `namespace` matching `selector` whose controller is one of `owners`
/// (by uid): the operator's children, not look-alikes someone else created.
async fn controlled<K>(
    client: &Client,
    namespace: &str,
    selector: &str,
    owners: &[&str],
) -> Result<Vec<K>, StatusError>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(client.clone(), namespace);
    let list = api
        .list(&ListParams::default().labels(selector))
        .await
        .map_err(|e| read_error(format!("listing {} in {namespace}", K::plural(&())), &e))?;
    let mut items: Vec<K> = list
        .items
        .into_iter()
        .filter(|item| controller_uid(item.meta()).is_some_and(|u| owners.contains(&u)))
        .collect();
    items.sort_by(|a, b| a.meta().name.cmp(&b.meta().name));
    Ok(items)
}

fn controller_uid(meta: &ObjectMeta) -> Option<&str> {
    meta.owner_references.as_ref()?.iter().find(|r| r.controller == Some(true)).map(|r| r.uid.as_str())
}

fn read_error(what: String, error: &kube::Error) -> StatusError {
    StatusError::Read { what, reason: cluster::one_line(error) }
}

/// The operator's `/debug/queue` entry for `key`, or why it could not be read.
pub async fn operator_view(operator: &Operator, key: &str) -> RuntimeView {
    match tokio::time::timeout(OPERATOR_TIMEOUT, get_json(operator, "/debug/queue")).await {
        Ok(Ok(report)) => key_view(&report, key),
        Ok(Err(why)) => RuntimeView::Unreachable(why),
        Err(_) => RuntimeView::Unreachable(format!("no answer within {OPERATOR_TIMEOUT:?}")),
    }
}

/// GET the operator's `path` over HTTP/1.1 (TLS for `https://`), parsed as JSON; errors as one line.
async fn get_json(operator: &Operator, path: &str) -> Result<Value, String> {
    let base_url = operator.url.trim_end_matches('/');
    let uri: http::Uri = format!("{base_url}{path}").parse().map_err(|e| format!("{e}"))?;
    let https = match uri.scheme_str() {
        Some("https") => true,
        Some("http") => false,
        _ => return Err(format!("{base_url}: only http:// and https:// are supported")),
    };
    if operator.token.is_some() && !https {
        return Err(format!("{base_url}: a token is sent over https:// only, never in clear"));
    }
    let authority = uri.authority().ok_or_else(|| format!("{base_url}: no host"))?.clone();
    let address = match authority.port_u16() {
        Some(_) => authority.to_string(),
        None => format!("{authority}:{}", if https { 443 } else { 80 }),
    };
    let stream = tokio::net::TcpStream::connect(&address).await.map_err(|e| format!("{address}: {e}"))?;
    let request = request(path, authority.as_str(), operator.token.as_deref().filter(|_| https))?;
    let response = if https {
        let host = authority.host().trim_start_matches('[').trim_end_matches(']').to_owned();
        let name = ServerName::try_from(host).map_err(|e| format!("{base_url}: {e}"))?;
        let trusted = match &operator.trusted {
            Some(trusted) => trusted.clone(),
            None => rustls_native_certs::load_native_certs().certs,
        };
        let connector = tls::client_connector(&trusted)
            .ok_or_else(|| format!("{base_url}: no certificate to verify it against (--operator-ca-file)"))?;
        let stream = connector.connect(name, stream).await.map_err(|e| format!("{address}: TLS: {e}"))?;
        send(stream, request).await?
    } else {
        send(stream, request).await?
    };
    let status = response.status();
    let body = response.into_body().collect().await.map_err(|e| e.to_string())?.to_bytes();
    if !status.is_success() {
        return Err(format!("{path} answered {status}"));
    }
    serde_json::from_slice(&body).map_err(|e| format!("{path} is not JSON: {e}"))
}

/// `GET path` for `host`, with `token` as a bearer token if given.
fn request(
    path: &str,
    host: &str,
    token: Option<&str>,
) -> Result<http::Request<Empty<bytes::Bytes>>, String> {
    let mut request = http::Request::get(path).header(http::header::HOST, host);
    if let Some(token) = token {
        request = request.header(http::header::AUTHORIZATION, format!("Bearer {token}"));
    }
    request.body(Empty::new()).map_err(|e| e.to_string())
}

/// Sends `request` on `io` (one HTTP/1.1 exchange) and returns the response.
async fn send<I>(
    io: I,
    request: http::Request<Empty<bytes::Bytes>>,
) -> Result<http::Response<hyper::body::Incoming>, String>
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(TokioIo::new(io)).await.map_err(|e| e.to_string())?;
    tokio::spawn(connection);
    sender.send_request(request).await.map_err(|e| e.to_string())
}

/// `dbcluster-operator status`: fetch and print; one `error: …` line and exit 1 on failure.
pub fn main(args: StatusArgs) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(status_from_environment(&args)) {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn status_from_environment(args: &StatusArgs) -> Result<String, StatusError> {
    let source = cluster::source_from_environment(args.kubeconfig.as_deref());
    let config = cluster::load_config(&source, args.context.as_deref()).await?;
    let namespace = args.namespace.clone().unwrap_or_else(|| config.default_namespace.clone());
    let client = Client::try_from(config).map_err(|e| StatusError::Client(cluster::one_line(&e)))?;
    let operator = Operator::from_args(args)?;
    let snapshot = fetch(&client, &namespace, &args.name, &operator).await?;
    Ok(render(&snapshot))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_is_a_bearer_header_and_never_sent_in_clear() {
        let with_token = request("/debug/queue", "op:8080", Some("t0k")).unwrap();
        assert_eq!(with_token.headers()[http::header::AUTHORIZATION], "Bearer t0k");
        assert_eq!(with_token.headers()[http::header::HOST], "op:8080");
        assert!(
            request("/debug/queue", "op", None).unwrap().headers().get(http::header::AUTHORIZATION).is_none()
        );
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let operator = Operator { token: Some("t0k".into()), ..Operator::at("http://127.0.0.1:9") };
        let refused = runtime.block_on(get_json(&operator, "/debug/queue")).unwrap_err();
        assert_eq!(refused, "http://127.0.0.1:9: a token is sent over https:// only, never in clear");
        let ftp = runtime.block_on(get_json(&Operator::at("ftp://op"), "/x")).unwrap_err();
        assert_eq!(ftp, "ftp://op: only http:// and https:// are supported");
    }

    #[test]
    fn the_flags_files_are_read_and_a_bad_one_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let (token, ca) = (dir.path().join("token"), dir.path().join("ca.crt"));
        std::fs::write(&token, "abc\n").unwrap();
        let generated = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
        std::fs::write(&ca, generated.cert.pem()).unwrap();
        let mut args = StatusArgs {
            name: "pg".into(),
            namespace: None,
            kubeconfig: None,
            context: None,
            operator_url: "https://127.0.0.1:8080".into(),
            operator_token_file: Some(token.clone()),
            operator_ca_file: Some(ca.clone()),
        };
        let operator = Operator::from_args(&args).unwrap();
        assert_eq!(operator.token.as_deref(), Some("abc"));
        assert_eq!(operator.trusted.as_deref(), Some(&[generated.cert.der().clone()][..]));
        std::fs::write(&ca, "not pem").unwrap();
        let error = Operator::from_args(&args).unwrap_err().to_string();
        assert_eq!(error, format!("--operator-ca-file {}: holds no PEM certificate", ca.display()));
        args.operator_token_file = Some(dir.path().join("missing"));
        let error = Operator::from_args(&args).unwrap_err().to_string();
        assert!(error.starts_with("--operator-token-file "), "{error}");
    }
}
