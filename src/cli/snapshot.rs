//! `dbcluster-operator status`, the fetching half: with the user's own credentials, read one
//! DatabaseCluster, its children (the StatefulSet, Services and Secret it controls, and the
//! StatefulSet's Pods), the Events about it, and — when the operator answers — its `/debug/queue`
//! entry for the key, into a [`Snapshot`] for [`crate::cli::status::render`]. The operator being
//! down is not an error: the view then says why it was unreachable.

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
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::cli::StatusArgs;
use crate::cli::cluster::{self, ClusterError};
use crate::cli::status::{Child, RuntimeView, Snapshot, key_view, pod_child, render, statefulset_child};
use crate::databasecluster::resources::label;
use crate::databasecluster::types::DatabaseCluster;

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
    /// A read failed.
    #[error("{what}: {reason}")]
    Read {
        /// What was being read, e.g. `listing Services in default`.
        what: String,
        /// Why.
        reason: String,
    },
}

/// Reads everything `status` shows about `namespace/name`; `operator_url` is where the operator
/// serves `/debug/queue` (e.g. `http://127.0.0.1:8082`).
pub async fn fetch(
    client: &Client,
    namespace: &str,
    name: &str,
    operator_url: &str,
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

    let view = operator_view(operator_url, &format!("{namespace}/{name}")).await;
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
pub async fn operator_view(operator_url: &str, key: &str) -> RuntimeView {
    match tokio::time::timeout(OPERATOR_TIMEOUT, get_json(operator_url, "/debug/queue")).await {
        Ok(Ok(report)) => key_view(&report, key),
        Ok(Err(why)) => RuntimeView::Unreachable(why),
        Err(_) => RuntimeView::Unreachable(format!("no answer within {OPERATOR_TIMEOUT:?}")),
    }
}

/// GET `base_url` + `path` over plain HTTP/1.1, parsed as JSON; errors as one line.
async fn get_json(base_url: &str, path: &str) -> Result<Value, String> {
    let uri: http::Uri =
        format!("{}{path}", base_url.trim_end_matches('/')).parse().map_err(|e| format!("{e}"))?;
    if uri.scheme_str() != Some("http") {
        return Err(format!("{base_url}: only http:// is supported"));
    }
    let authority = uri.authority().ok_or_else(|| format!("{base_url}: no host"))?.clone();
    let address = match authority.port_u16() {
        Some(_) => authority.to_string(),
        None => format!("{authority}:80"),
    };
    let stream = tokio::net::TcpStream::connect(&address).await.map_err(|e| format!("{address}: {e}"))?;
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.map_err(|e| e.to_string())?;
    tokio::spawn(connection);
    let request = http::Request::get(uri.path())
        .header(http::header::HOST, authority.as_str())
        .body(Empty::<bytes::Bytes>::new())
        .map_err(|e| e.to_string())?;
    let response = sender.send_request(request).await.map_err(|e| e.to_string())?;
    let status = response.status();
    let body = response.into_body().collect().await.map_err(|e| e.to_string())?.to_bytes();
    if !status.is_success() {
        return Err(format!("{path} answered {status}"));
    }
    serde_json::from_slice(&body).map_err(|e| format!("{path} is not JSON: {e}"))
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
    let snapshot = fetch(&client, &namespace, &args.name, &args.operator_url).await?;
    Ok(render(&snapshot))
}
