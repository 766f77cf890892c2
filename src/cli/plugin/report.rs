//! `kubectl dbc report NAME`: a support bundle in one `.tar.gz`, for a bug report or a colleague:
//! the DatabaseCluster, every object labelled as its child (StatefulSets, Pods, Services,
//! ConfigMaps, PersistentVolumeClaims, Jobs, CronJobs, PodDisruptionBudgets), the Events of the
//! namespace that are about the cluster or its children, the operator's `/debug/queue` view of the
//! key, and each pod's recent log lines. Secrets are listed by name only: their data is never
//! read, so no password can end up in the bundle.

use std::path::Path;

use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::api::events::v1::Event;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, LogParams};
use serde_json::{Value, json};

use super::actions::{PluginError, get};
use crate::cli::cluster;
use crate::cli::snapshot::{Operator, operator_view};
use crate::cli::status::RuntimeView;
use crate::databasecluster::specs::names::label;

/// How many of each container's last log lines the bundle keeps.
pub const LOG_LINES: i64 = 1000;

/// The kinds of child the bundle lists: (group, version, kind, plural).
const CHILD_KINDS: [(&str, &str, &str, &str); 8] = [
    ("apps", "v1", "StatefulSet", "statefulsets"),
    ("", "v1", "Pod", "pods"),
    ("", "v1", "Service", "services"),
    ("", "v1", "ConfigMap", "configmaps"),
    ("", "v1", "PersistentVolumeClaim", "persistentvolumeclaims"),
    ("batch", "v1", "Job", "jobs"),
    ("batch", "v1", "CronJob", "cronjobs"),
    ("policy", "v1", "PodDisruptionBudget", "poddisruptionbudgets"),
];

/// Writes the bundle of `namespace/name` to `output`; says what it wrote.
pub async fn write(
    client: &Client,
    namespace: &str,
    name: &str,
    operator: &Operator,
    output: &Path,
) -> Result<String, PluginError> {
    let files = collect(client, namespace, name, operator).await?;
    let count = files.len();
    let io = |what: &str| {
        let what = format!("{what} {}", output.display());
        move |source| PluginError::Io { what, source }
    };
    let file = std::fs::File::create(output).map_err(io("creating"))?;
    let mut archive = tar::Builder::new(flate2::write::GzEncoder::new(file, flate2::Compression::default()));
    let prefix = format!("report-{namespace}-{name}");
    let written = jiff::Timestamp::now().as_second().max(0) as u64;
    for (path, bytes) in files {
        let mut header = tar::Header::new_gnu();
        header.set_size(bytes.len() as u64);
        header.set_mode(0o644);
        header.set_mtime(written);
        header.set_cksum();
        archive
            .append_data(&mut header, format!("{prefix}/{path}"), bytes.as_slice())
            .map_err(io("writing"))?;
    }
    archive.into_inner().and_then(|gz| gz.finish()).map_err(io("writing"))?;
    Ok(format!("{namespace}/{name}: {count} files written to {} (no Secret's data)", output.display()))
}

/// The bundle's files: (path in the archive, contents).
pub async fn collect(
    client: &Client,
    namespace: &str,
    name: &str,
    operator: &Operator,
) -> Result<Vec<(String, Vec<u8>)>, PluginError> {
    let pretty = |value: &Value| serde_json::to_vec_pretty(value).unwrap_or_default();
    let cluster = get(client, namespace, name).await?;
    let mut files = vec![("databasecluster.json".to_owned(), pretty(&cluster))];
    let selector = ListParams::default().labels(&format!("{}={name}", label::INSTANCE));
    let mut children = vec![name.to_owned()];
    for (group, version, kind, plural) in CHILD_KINDS {
        let resource = ApiResource {
            group: group.into(),
            version: version.into(),
            api_version: if group.is_empty() { version.into() } else { format!("{group}/{version}") },
            kind: kind.into(),
            plural: plural.into(),
        };
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &resource);
        let list = api.list(&selector).await.map_err(|e| read_error(plural, namespace, &e))?;
        children.extend(list.items.iter().filter_map(|o| o.metadata.name.clone()));
        files
            .push((format!("{plural}.json"), pretty(&serde_json::to_value(&list.items).unwrap_or_default())));
    }
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let secret_names: Vec<String> = secrets
        .list_metadata(&selector)
        .await
        .map_err(|e| read_error("secrets", namespace, &e))?
        .items
        .into_iter()
        .filter_map(|s| s.metadata.name)
        .collect();
    files.push(("secrets.txt".to_owned(), format!("{}\n", secret_names.join("\n")).into_bytes()));
    let events: Api<Event> = Api::namespaced(client.clone(), namespace);
    let about: Vec<Event> = events
        .list(&ListParams::default())
        .await
        .map_err(|e| read_error("events", namespace, &e))?
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_ref()).is_some_and(|n| children.contains(n)))
        .collect();
    files.push(("events.json".to_owned(), pretty(&serde_json::to_value(&about).unwrap_or_default())));
    let view = match operator_view(operator, &format!("{namespace}/{name}")).await {
        RuntimeView::Key(entry) => json!({"operator": operator.url, "key": entry}),
        RuntimeView::Unreachable(why) => json!({"operator": operator.url, "unreachable": why}),
    };
    files.push(("operator-view.json".to_owned(), pretty(&view)));
    files.extend(logs(client, namespace, &selector).await?);
    Ok(files)
}

/// Each container's last [`LOG_LINES`] lines, as `logs/<pod>/<container>.log`.
async fn logs(
    client: &Client,
    namespace: &str,
    selector: &ListParams,
) -> Result<Vec<(String, Vec<u8>)>, PluginError> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let list = pods.list(selector).await.map_err(|e| read_error("pods", namespace, &e))?;
    let mut files = Vec::new();
    for pod in &list.items {
        let pod_name = pod.metadata.name.clone().unwrap_or_default();
        let spec = pod.spec.as_ref();
        let containers =
            spec.into_iter().flat_map(|s| s.init_containers.iter().flatten().chain(&s.containers));
        for container in containers {
            let params = LogParams {
                container: Some(container.name.clone()),
                tail_lines: Some(LOG_LINES),
                ..LogParams::default()
            };
            // A container that has not started has no log: say so in the file instead.
            let text = pods
                .logs(&pod_name, &params)
                .await
                .unwrap_or_else(|e| format!("(no log: {})\n", cluster::one_line(&e)));
            files.push((format!("logs/{pod_name}/{}.log", container.name), text.into_bytes()));
        }
    }
    Ok(files)
}

fn read_error(plural: &str, namespace: &str, error: &kube::Error) -> PluginError {
    PluginError::Api { what: format!("listing {plural} in {namespace}"), reason: cluster::one_line(error) }
}
