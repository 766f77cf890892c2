//! Finding the cluster (controller-runtime's order: `--kubeconfig`, `$KUBECONFIG`, the in-cluster
//! service account, `~/.kube/config`) and checking, before anything starts, that it answers and
//! serves the DatabaseCluster CRD — so that each way of failing ends in one sentence saying what
//! to do.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use kube::api::ListParams;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};

use crate::databasecluster::api::types::DatabaseCluster;

/// Where the cluster's address and credentials come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigSource {
    /// `--kubeconfig PATH`.
    Flag(PathBuf),
    /// `$KUBECONFIG` (one or more paths, merged as kubectl does).
    Env(OsString),
    /// The pod's service account.
    InCluster,
    /// `~/.kube/config`.
    Home(PathBuf),
    /// Nothing found.
    Nothing,
}

/// Picks the source in controller-runtime's order. Pure: the caller reads the environment.
pub fn choose_source(
    flag: Option<&Path>,
    env_kubeconfig: Option<OsString>,
    in_cluster: bool,
    home: Option<&Path>,
) -> ConfigSource {
    if let Some(path) = flag {
        return ConfigSource::Flag(path.to_path_buf());
    }
    if let Some(paths) = env_kubeconfig.filter(|paths| !paths.is_empty()) {
        return ConfigSource::Env(paths);
    }
    if in_cluster {
        return ConfigSource::InCluster;
    }
    match home.map(|home| home.join(".kube").join("config")) {
        Some(path) if path.exists() => ConfigSource::Home(path),
        _ => ConfigSource::Nothing,
    }
}

/// The source this process's flags and environment point at.
pub fn source_from_environment(flag: Option<&Path>) -> ConfigSource {
    let in_cluster = std::env::var_os("KUBERNETES_SERVICE_HOST").is_some()
        && std::env::var_os("KUBERNETES_SERVICE_PORT").is_some();
    let home = std::env::var_os("HOME").map(PathBuf::from);
    choose_source(flag, std::env::var_os("KUBECONFIG"), in_cluster, home.as_deref())
}

/// Why the cluster cannot be used; each message is one sentence that says what to do.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// No source at all.
    #[error(
        "no cluster configured: pass --kubeconfig, set $KUBECONFIG, create ~/.kube/config (e.g. `kind create cluster`) or run inside a cluster"
    )]
    NothingConfigured,
    /// The kubeconfig could not be read or parsed, or lacks the context asked for.
    #[error("cannot use the kubeconfig {source_name}: {reason}")]
    Kubeconfig {
        /// Which file(s).
        source_name: String,
        /// What is wrong, in one line.
        reason: String,
    },
    /// The in-cluster service account could not be loaded.
    #[error("cannot use the in-cluster service account: {0}")]
    InCluster(String),
    /// No connection to the API server.
    #[error(
        "cannot reach the Kubernetes API server at {url}: {reason}; check --kubeconfig/--context and that the cluster is running"
    )]
    Unreachable {
        /// The server's address.
        url: String,
        /// The root cause, in one line.
        reason: String,
    },
    /// The API server answered, but does not serve DatabaseClusters.
    #[error(
        "the DatabaseCluster CRD is not installed in the cluster at {url}: run `kubectl apply -f manifests/crd.yaml`"
    )]
    CrdMissing {
        /// The server's address.
        url: String,
    },
    /// Credentials rejected or permission missing.
    #[error(
        "the API server at {url} refused to list DatabaseClusters ({code} {reason}): apply manifests/rbac.yaml or check the kubeconfig's user"
    )]
    Forbidden {
        /// The server's address.
        url: String,
        /// 401 or 403.
        code: u16,
        /// The server's reason.
        reason: String,
    },
    /// Any other answer.
    #[error("the API server at {url} answered listing DatabaseClusters with {code}: {message}")]
    Unexpected {
        /// The server's address.
        url: String,
        /// HTTP status.
        code: u16,
        /// The server's message.
        message: String,
    },
}

/// Loads the client configuration from `source`, using `context` for kubeconfig sources.
pub async fn load_config(source: &ConfigSource, context: Option<&str>) -> Result<Config, ClusterError> {
    let options = KubeConfigOptions { context: context.map(str::to_string), cluster: None, user: None };
    let (name, kubeconfig) = match source {
        ConfigSource::Nothing => return Err(ClusterError::NothingConfigured),
        ConfigSource::InCluster => {
            return Config::incluster().map_err(|e| ClusterError::InCluster(one_line(&e)));
        }
        ConfigSource::Flag(path) | ConfigSource::Home(path) => {
            (path.display().to_string(), Kubeconfig::read_from(path))
        }
        ConfigSource::Env(paths) => {
            let name = format!("$KUBECONFIG ({})", paths.to_string_lossy());
            (
                name,
                Kubeconfig::from_env().and_then(|found| found.ok_or(kube::config::KubeconfigError::FindPath)),
            )
        }
    };
    let kubeconfig_error = |reason: String| ClusterError::Kubeconfig { source_name: name.clone(), reason };
    let kubeconfig = kubeconfig.map_err(|e| kubeconfig_error(one_line(&e)))?;
    Config::from_custom_kubeconfig(kubeconfig, &options).await.map_err(|e| kubeconfig_error(one_line(&e)))
}

/// How long the start-up check waits for the API server.
const PREFLIGHT_TIMEOUT: Duration = Duration::from_secs(15);

/// Checks that the API server answers and serves DatabaseClusters (in `namespace`, or in all).
pub async fn preflight(client: &Client, url: &str, namespace: Option<&str>) -> Result<(), ClusterError> {
    let api: Api<DatabaseCluster> = match namespace {
        Some(namespace) => Api::namespaced(client.clone(), namespace),
        None => Api::all(client.clone()),
    };
    let unreachable = |reason: String| ClusterError::Unreachable { url: url.to_string(), reason };
    let answer = tokio::time::timeout(PREFLIGHT_TIMEOUT, api.list(&ListParams::default().limit(1)))
        .await
        .map_err(|_| unreachable(format!("no answer within {PREFLIGHT_TIMEOUT:?}")))?;
    match answer {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) => Err(match status.code {
            404 => ClusterError::CrdMissing { url: url.to_string() },
            code @ (401 | 403) => {
                ClusterError::Forbidden { url: url.to_string(), code, reason: status.reason }
            }
            code => ClusterError::Unexpected { url: url.to_string(), code, message: status.message },
        }),
        Err(error) => Err(unreachable(one_line(&error))),
    }
}

/// The innermost cause of an error chain, which names what actually went wrong (e.g.
/// "Connection refused (os error 111)"), on one line.
pub fn one_line(error: &(dyn std::error::Error + 'static)) -> String {
    let mut innermost = error;
    while let Some(source) = innermost.source() {
        innermost = source;
    }
    let text = innermost.to_string();
    let text = if text.is_empty() { error.to_string() } else { text };
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_follow_controller_runtimes_order() {
        let home = tempfile::tempdir().unwrap();
        let flag = Path::new("/etc/flag-config");
        let env = || Some(OsString::from("/a:/b"));
        assert_eq!(
            choose_source(Some(flag), env(), true, Some(home.path())),
            ConfigSource::Flag(flag.into())
        );
        assert_eq!(choose_source(None, env(), true, Some(home.path())), ConfigSource::Env("/a:/b".into()));
        assert_eq!(choose_source(None, Some(OsString::new()), true, None), ConfigSource::InCluster);
        assert_eq!(choose_source(None, None, false, Some(home.path())), ConfigSource::Nothing);
        std::fs::create_dir(home.path().join(".kube")).unwrap();
        std::fs::write(home.path().join(".kube/config"), "").unwrap();
        assert_eq!(
            choose_source(None, None, false, Some(home.path())),
            ConfigSource::Home(home.path().join(".kube/config"))
        );
        // In-cluster comes before the home file.
        assert_eq!(choose_source(None, None, true, Some(home.path())), ConfigSource::InCluster);
    }

    #[test]
    fn one_line_names_the_root_cause() {
        let root =
            std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "Connection refused\n(os error 111)");
        let outer = kube::Error::Service(Box::new(root));
        assert_eq!(one_line(&outer), "Connection refused (os error 111)");
    }
}
