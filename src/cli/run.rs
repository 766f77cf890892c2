//! `dbcluster-operator run`: find the cluster, build the client, and run the DatabaseCluster
//! operator under the runtime's [`Manager`] with the DatabaseCluster preflight (the API server
//! answers and serves the CRD) and the process's signals.

use std::process::ExitCode;

use kube::Client;

use crate::cli::RunArgs;
use crate::cli::cluster::{self, ClusterError};
use crate::cli::logging;
use crate::databasecluster::controller::operator;
use crate::runtime::manager::leader::{self, LeaseConfig};
use crate::runtime::manager::{Manager, ManagerConfig, ManagerError, os_signals};

/// Why `run` ended other than cleanly; each message is one sentence.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The cluster cannot be found or its configuration used.
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    /// The client could not be built from the configuration.
    #[error("cannot build a Kubernetes client for {url}: {reason}")]
    Client {
        /// The server's address.
        url: String,
        /// Why.
        reason: String,
    },
    /// The manager refused the cluster or an address, or ended with an error.
    #[error(transparent)]
    Manager(#[from] ManagerError),
}

/// The manager's configuration the flags ask for; `default_namespace` (the pod's, or the
/// kubeconfig context's) holds the lease unless `--leader-election-namespace` says otherwise.
pub fn manager_config(args: &RunArgs, default_namespace: &str) -> ManagerConfig {
    let leader_election = args.leader_elect.then(|| {
        let namespace = args.leader_election_namespace.as_deref().unwrap_or(default_namespace);
        LeaseConfig::new(namespace, &args.leader_election_id, leader::default_identity())
    });
    ManagerConfig {
        namespace: args.namespace.clone(),
        workers: usize::from(args.workers),
        metrics_addr: args.metrics_addr,
        debug_addr: args.debug_addr,
        health_addr: args.health_addr,
        leader_election,
        shutdown_timeout: args.shutdown_timeout,
        metrics_secure: args.metrics_secure,
        metrics_cert_dir: args.metrics_cert_dir.clone(),
    }
}

/// Starts the manager on `client` (at `url`) after the DatabaseCluster preflight.
pub async fn start(client: Client, url: &str, config: ManagerConfig) -> Result<Manager, ManagerError> {
    let namespace = config.namespace.clone();
    let preflight = async {
        cluster::preflight(&client, url, namespace.as_deref()).await?;
        tracing::info!(%url, namespace = namespace.as_deref().unwrap_or("(all)"),
            "connected; the DatabaseCluster CRD is served");
        Ok::<_, ClusterError>(())
    };
    Manager::start(client.clone(), config, preflight).await
}

/// `dbcluster-operator run` with the process's flags, environment and signals. Prints one
/// `error: …` line and exits non-zero on failure (130 after a second signal).
pub fn main(args: RunArgs) -> ExitCode {
    logging::init(args.log_format);
    crate::databasecluster::specs::instance_pod::set_instance_image(args.instance_image.clone());
    use crate::databasecluster::tls::renew::{Lifetimes, set_lifetimes};
    match Lifetimes::with_leaves(args.certificate_validity, args.certificate_renew_before) {
        Some(lifetimes) => {
            set_lifetimes(lifetimes);
        }
        None => {
            eprintln!("error: --certificate-renew-before must be less than --certificate-validity");
            return ExitCode::FAILURE;
        }
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(run_from_environment(args));
    runtime.shutdown_background();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error}");
            let interrupted = matches!(error, RunError::Manager(ManagerError::Interrupted));
            ExitCode::from(if interrupted { 130 } else { 1 })
        }
    }
}

async fn run_from_environment(args: RunArgs) -> Result<(), RunError> {
    let source = cluster::source_from_environment(args.kubeconfig.as_deref());
    let config = cluster::load_config(&source, args.context.as_deref()).await?;
    let url = config.cluster_url.to_string().trim_end_matches('/').to_string();
    let manager_config = manager_config(&args, &config.default_namespace);
    // kube's own retries off: the reflector's and the work queue's policies are the only ones.
    let client = crate::runtime::client::client(config)
        .map_err(|e| RunError::Client { url: url.clone(), reason: cluster::one_line(&e) })?;
    let manager = start(client, &url, manager_config).await?;
    Ok(manager.run(operator::workload, os_signals()).await?)
}
