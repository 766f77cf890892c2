//! The plugin's commands that change a DatabaseCluster (each a merge patch of the fields it owns,
//! as field manager `kubectl-dbc`), and `psql` through `kubectl exec`. See [`super`].

use std::path::Path;

use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};

use crate::cli::cluster;
use crate::databasecluster::api::types::DatabaseCluster;
use crate::databasecluster::backup::jobs::BACKUP_NOW_ANNOTATION;

pub use crate::databasecluster::specs::names::RESTARTED_AT_ANNOTATION;

/// The annotation `hibernate on` keeps the replica count in, for `hibernate off`.
pub const HIBERNATED_REPLICAS_ANNOTATION: &str = "databases.madmmas.dev/hibernatedReplicas";

/// The field manager of the plugin's writes.
const MANAGER: &str = "kubectl-dbc";

/// Why a plugin command failed.
#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    /// The kubeconfig or the client could not be set up.
    #[error("connecting to the cluster: {0}")]
    Connect(String),
    /// The DatabaseCluster does not exist.
    #[error("DatabaseCluster {namespace}/{name} not found")]
    NotFound {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
    },
    /// The API refused or failed a call.
    #[error("{what}: {reason}")]
    Api {
        /// What was being done.
        what: String,
        /// The API's answer, on one line.
        reason: String,
    },
    /// The command does not apply to the cluster as it is.
    #[error("{0}")]
    Refused(String),
    /// Writing the report or running kubectl failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The error.
        source: std::io::Error,
    },
}

fn clusters(client: &Client, namespace: &str) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), namespace, &ApiResource::erase::<DatabaseCluster>(&()))
}

/// The DatabaseCluster `namespace/name`, as JSON.
pub async fn get(client: &Client, namespace: &str, name: &str) -> Result<Value, PluginError> {
    match clusters(client, namespace).get(name).await {
        Ok(cluster) => Ok(serde_json::to_value(cluster).unwrap_or(Value::Null)),
        Err(kube::Error::Api(status)) if status.code == 404 => {
            Err(PluginError::NotFound { namespace: namespace.into(), name: name.into() })
        }
        Err(error) => Err(api_error(format!("reading DatabaseCluster {namespace}/{name}"), &error)),
    }
}

fn api_error(what: String, error: &kube::Error) -> PluginError {
    PluginError::Api { what, reason: cluster::one_line(error) }
}

async fn merge(client: &Client, namespace: &str, name: &str, patch: Value) -> Result<(), PluginError> {
    let params = PatchParams { field_manager: Some(MANAGER.into()), ..PatchParams::default() };
    clusters(client, namespace)
        .patch(name, &params, &Patch::Merge(&patch))
        .await
        .map(drop)
        .map_err(|e| api_error(format!("updating DatabaseCluster {namespace}/{name}"), &e))
}

/// The instance `pod` names: a pod name, or an ordinal of `name`'s pods.
pub fn instance_name(name: &str, pod: &str) -> String {
    if pod.parse::<u32>().is_ok() { format!("{name}-{pod}") } else { pod.to_owned() }
}

/// `promote`: a switchover of `namespace/name` to `pod` (`spec.primary`).
pub async fn promote(client: &Client, namespace: &str, name: &str, pod: &str) -> Result<String, PluginError> {
    let cluster = get(client, namespace, name).await?;
    let target = instance_name(name, pod);
    let replicas = cluster["spec"]["replicas"].as_i64().unwrap_or(0);
    let ordinal = target.strip_prefix(&format!("{name}-")).and_then(|o| o.parse::<i64>().ok());
    if ordinal.is_none_or(|o| o >= replicas) {
        return Err(PluginError::Refused(format!(
            "{target} is not an instance of {namespace}/{name} (its instances are {name}-0 to {name}-{})",
            replicas - 1
        )));
    }
    merge(client, namespace, name, json!({"spec": {"primary": target}})).await?;
    Ok(format!(
        "{namespace}/{name}: switchover to {target} requested (spec.primary); `kubectl dbc status {name}` follows it"
    ))
}

/// `backup`: a new on-demand backup token, if the cluster has `spec.backup`.
pub async fn backup(
    client: &Client,
    namespace: &str,
    name: &str,
    now: jiff::Timestamp,
) -> Result<String, PluginError> {
    let cluster = get(client, namespace, name).await?;
    if cluster["spec"]["backup"].is_null() {
        return Err(PluginError::Refused(format!(
            "{namespace}/{name} has no spec.backup: add one (where backups go, and a schedule if you want one) first"
        )));
    }
    let token = format!("kubectl-dbc-{}", now.as_second());
    merge(client, namespace, name, json!({"metadata": {"annotations": {BACKUP_NOW_ANNOTATION: token}}}))
        .await?;
    Ok(format!("{namespace}/{name}: backup {token} requested"))
}

/// `restart`: a rolling restart (a new [`RESTARTED_AT_ANNOTATION`]).
pub async fn restart(
    client: &Client,
    namespace: &str,
    name: &str,
    now: jiff::Timestamp,
) -> Result<String, PluginError> {
    get(client, namespace, name).await?;
    let at = jiff::Timestamp::from_second(now.as_second()).unwrap_or(now).to_string();
    merge(client, namespace, name, json!({"metadata": {"annotations": {RESTARTED_AT_ANNOTATION: at}}}))
        .await?;
    Ok(format!(
        "{namespace}/{name}: rolling restart requested (standbys first, then the primary by switchover)"
    ))
}

/// `hibernate on` (`replicas: 0`, the count kept in [`HIBERNATED_REPLICAS_ANNOTATION`]) or
/// `hibernate off` (that count back).
pub async fn hibernate(
    client: &Client,
    namespace: &str,
    name: &str,
    on: bool,
) -> Result<String, PluginError> {
    let cluster = get(client, namespace, name).await?;
    let replicas = cluster["spec"]["replicas"].as_i64().unwrap_or(0);
    let kept = cluster["metadata"]["annotations"][HIBERNATED_REPLICAS_ANNOTATION]
        .as_str()
        .and_then(|n| n.parse::<i64>().ok());
    if on {
        if replicas == 0 {
            return Ok(format!("{namespace}/{name} is already hibernated"));
        }
        let patch = json!({"metadata": {"annotations": {HIBERNATED_REPLICAS_ANNOTATION: replicas.to_string()}},
            "spec": {"replicas": 0}});
        merge(client, namespace, name, patch).await?;
        return Ok(format!(
            "{namespace}/{name}: hibernating (its {replicas} instances stop; volumes are kept)"
        ));
    }
    if replicas > 0 {
        return Ok(format!("{namespace}/{name} is not hibernated ({replicas} instances)"));
    }
    let Some(wake) = kept.filter(|n| *n > 0) else {
        return Err(PluginError::Refused(format!(
            "{namespace}/{name} has replicas: 0 but no {HIBERNATED_REPLICAS_ANNOTATION} annotation: set spec.replicas yourself"
        )));
    };
    let patch = json!({"metadata": {"annotations": {HIBERNATED_REPLICAS_ANNOTATION: null}}, "spec": {"replicas": wake}});
    merge(client, namespace, name, patch).await?;
    Ok(format!("{namespace}/{name}: waking up with {wake} instances"))
}

/// The pod that is `namespace/name`'s primary, as its status says.
pub async fn primary_of(client: &Client, namespace: &str, name: &str) -> Result<String, PluginError> {
    let cluster = get(client, namespace, name).await?;
    let status = &cluster["status"];
    status["currentPrimary"]
        .as_str()
        .or_else(|| status["targetPrimary"].as_str())
        .map(str::to_owned)
        .ok_or_else(|| PluginError::Refused(format!("{namespace}/{name} has no primary yet")))
}

/// The `kubectl exec` command line that opens `psql` in `pod` (the superuser over the local
/// socket: the pod's `PGHOST` and `PGUSER`), with `args` for psql; `-it` when `interactive`.
pub fn psql_command(
    kubeconfig: Option<&Path>,
    context: Option<&str>,
    namespace: &str,
    pod: &str,
    args: &[String],
    interactive: bool,
) -> Vec<String> {
    let mut command = vec!["kubectl".to_owned()];
    if let Some(path) = kubeconfig {
        command.extend(["--kubeconfig".to_owned(), path.display().to_string()]);
    }
    if let Some(context) = context {
        command.extend(["--context".to_owned(), context.to_owned()]);
    }
    command.extend(["-n", namespace, "exec"].map(str::to_owned));
    if interactive {
        command.push("-it".to_owned());
    }
    command.extend([pod, "-c", "postgres", "--", "psql"].map(str::to_owned));
    command.extend(args.iter().cloned());
    command
}

/// `psql`: runs [`psql_command`] with this terminal; its exit status is the command's.
pub fn exec_psql(
    kubeconfig: Option<&Path>,
    context: Option<&str>,
    namespace: &str,
    pod: &str,
    args: &[String],
) -> Result<String, PluginError> {
    use std::io::IsTerminal;
    let interactive = std::io::stdin().is_terminal();
    let command = psql_command(kubeconfig, context, namespace, pod, args, interactive);
    let status = std::process::Command::new(&command[0])
        .args(&command[1..])
        .status()
        .map_err(|source| PluginError::Io { what: "running kubectl".into(), source })?;
    if status.success() {
        Ok(String::new())
    } else {
        Err(PluginError::Refused(format!("psql in {pod} ended with {status}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ordinal_names_the_clusters_pod() {
        assert_eq!(instance_name("pg", "2"), "pg-2");
        assert_eq!(instance_name("pg", "pg-1"), "pg-1");
    }

    #[test]
    fn psql_runs_in_the_postgres_container_with_the_users_arguments() {
        let args = vec!["-c".to_owned(), "select 1".to_owned()];
        let command = psql_command(Some(Path::new("/k")), None, "prod", "pg-0", &args, false);
        assert_eq!(
            command,
            [
                "kubectl",
                "--kubeconfig",
                "/k",
                "-n",
                "prod",
                "exec",
                "pg-0",
                "-c",
                "postgres",
                "--",
                "psql",
                "-c",
                "select 1"
            ]
        );
        assert!(psql_command(None, Some("c"), "ns", "p", &[], true).contains(&"-it".to_owned()));
    }
}
