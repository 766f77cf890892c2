//! The life of `dbcluster-operator run`: check the cluster, serve the endpoints, campaign for the
//! lease (if asked), run the operator while leading, and on a signal shut down in order — stop
//! intake, let reconciles in flight finish within the deadline, release the lease, exit 0. A
//! second signal ends the process at once.
//!
//! The operator itself is a parameter of [`Started::run`], in two stages, so that caches are warm
//! on every replica while only the leader reconciles:
//!
//! 1. `prepare(context)` runs on every replica at start: it starts the informers and registers
//!    them (so `/readyz` and `/debug/cache` show them on standbys too), and returns stage 2;
//! 2. `lead(stop)` runs the workers — at once without leader election, otherwise only while this
//!    replica holds the lease — until `stop` is cancelled.
//!
//! The binary passes the DatabaseCluster operator ([`operator`]); tests pass small controllers.

use std::fmt::Display;
use std::future::Future;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use kube::Client;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::cli::RunArgs;
use crate::cli::cluster::{self, ClusterError};
use crate::cli::logging;
use crate::databasecluster::operator::{Operator, OperatorError, OperatorOptions};
use crate::runtime::introspection::Introspection;
use crate::runtime::leader::{self, LeaderElector, LeaderError, LeaseConfig};
use crate::runtime::metrics::Metrics;
use crate::runtime::process_metrics::ProcessCollector;
use crate::runtime::server::{self, Endpoints, ServerState};

/// Beyond `shutdown_timeout`, how long releasing the lease and closing may take before the process
/// exits anyway.
const RELEASE_GRACE: Duration = Duration::from_secs(5);

/// What `run` was asked to do, independent of where the flags came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// Watch this namespace only; `None` for all.
    pub namespace: Option<String>,
    /// Concurrent reconciles.
    pub workers: usize,
    /// Address of `/metrics`.
    pub metrics_addr: SocketAddr,
    /// Address of `/debug/*` (loopback by default).
    pub debug_addr: SocketAddr,
    /// Address of `/healthz` and `/readyz`.
    pub health_addr: SocketAddr,
    /// The lease to campaign for, if leader election is on.
    pub leader_election: Option<LeaseConfig>,
    /// How long reconciles in flight may take after a signal.
    pub shutdown_timeout: Duration,
}

impl Settings {
    /// The settings the flags ask for; `default_namespace` (the pod's, or the kubeconfig
    /// context's) holds the lease unless `--leader-election-namespace` says otherwise.
    pub fn from_args(args: &RunArgs, default_namespace: &str) -> Self {
        let leader_election = args.leader_elect.then(|| {
            let namespace = args.leader_election_namespace.as_deref().unwrap_or(default_namespace);
            LeaseConfig::new(namespace, &args.leader_election_id, leader::default_identity())
        });
        Self {
            namespace: args.namespace.clone(),
            workers: usize::from(args.workers),
            metrics_addr: args.metrics_addr,
            debug_addr: args.debug_addr,
            health_addr: args.health_addr,
            leader_election,
            shutdown_timeout: args.shutdown_timeout,
        }
    }
}

/// What the operator receives: the client, what to watch, and where to report its informers,
/// controllers and metrics (so the endpoints show them).
pub struct OperatorContext {
    /// The client for the cluster.
    pub client: Client,
    /// Watch this namespace only; `None` for all.
    pub namespace: Option<String>,
    /// Concurrent reconciles.
    pub workers: usize,
    /// How long reconciles in flight may take once the stop token is cancelled.
    pub shutdown_timeout: Duration,
    /// The metrics registry `/metrics` encodes.
    pub metrics: Arc<Metrics>,
    /// Where informers and controller probes are registered for `/readyz` and `/debug/*`.
    pub view: Introspection,
}

/// Why `run` ended other than cleanly; each message is one sentence.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The cluster cannot be found, reached or used.
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
    /// An endpoint address could not be bound.
    #[error("cannot listen on {addr} (--{flag}): {reason}; pick another address")]
    Listen {
        /// The flag that gave the address.
        flag: &'static str,
        /// The address.
        addr: SocketAddr,
        /// Why.
        reason: String,
    },
    /// Leader election failed or the lease was lost (the process exits so that it restarts as a
    /// fresh candidate, as controller-runtime's manager does).
    #[error("{0}; exiting so that the process restarts as a candidate")]
    Leader(#[from] LeaderError),
    /// The operator stopped with an error.
    #[error("the operator stopped: {0}")]
    Operator(String),
    /// Shutdown took longer than the deadline.
    #[error("shutdown did not finish within {0:?}; exiting without waiting further")]
    ShutdownTimedOut(Duration),
    /// A second signal arrived during shutdown.
    #[error("a second signal arrived during shutdown: exiting at once")]
    Interrupted,
}

/// The process after its start-up checks: the cluster answers, the endpoints are bound.
pub struct Started {
    client: Client,
    settings: Settings,
    metrics: Arc<Metrics>,
    view: Introspection,
    listeners: Vec<(TcpListener, Endpoints)>,
    /// Where `/metrics` is served.
    pub metrics_addr: SocketAddr,
    /// Where `/debug/*` is served.
    pub debug_addr: SocketAddr,
    /// Where `/healthz` and `/readyz` are served.
    pub health_addr: SocketAddr,
}

/// Checks the cluster (reachable, CRD installed) and binds the endpoints.
pub async fn start(client: Client, url: &str, settings: Settings) -> Result<Started, RunError> {
    cluster::preflight(&client, url, settings.namespace.as_deref()).await?;
    tracing::info!(%url, namespace = settings.namespace.as_deref().unwrap_or("(all)"),
        "connected; the DatabaseCluster CRD is served");
    let bind = |flag: &'static str, addr: SocketAddr| async move {
        TcpListener::bind(addr).await.map_err(|e| RunError::Listen { flag, addr, reason: e.to_string() })
    };
    // Flags naming the same address share one listener serving the union of their endpoints.
    let requested = [
        ("metrics-addr", settings.metrics_addr, Endpoints::METRICS),
        ("debug-addr", settings.debug_addr, Endpoints::DEBUG),
        ("health-addr", settings.health_addr, Endpoints::HEALTH),
    ];
    let mut groups: Vec<(&'static str, SocketAddr, Endpoints)> = Vec::new();
    for (flag, addr, endpoints) in requested {
        match groups.iter_mut().find(|(_, grouped, _)| *grouped == addr) {
            Some(group) => group.2 = group.2.union(endpoints),
            None => groups.push((flag, addr, endpoints)),
        }
    }
    let mut listeners = Vec::new();
    let mut bound = Vec::new();
    for (flag, addr, endpoints) in groups {
        let listener = bind(flag, addr).await?;
        bound.push((addr, local_addr(&listener, flag, addr)?));
        listeners.push((listener, endpoints));
    }
    let local_of =
        |addr: SocketAddr| bound.iter().find(|(asked, _)| *asked == addr).map_or(addr, |(_, local)| *local);
    let (metrics_addr, debug_addr, health_addr) =
        (local_of(settings.metrics_addr), local_of(settings.debug_addr), local_of(settings.health_addr));
    let metrics = Arc::new(Metrics::new());
    let view = Introspection::new();
    metrics.with_registry(|registry| {
        registry.register_collector(Box::new(view.informer_collector()));
        registry.register_collector(Box::new(ProcessCollector::new(jiff::Timestamp::now())));
    });
    tracing::info!(%metrics_addr, "serving /metrics");
    tracing::info!(%debug_addr, "serving /debug/queue and /debug/cache");
    tracing::info!(%health_addr, "serving /healthz and /readyz");
    Ok(Started { client, settings, metrics, view, listeners, metrics_addr, debug_addr, health_addr })
}

fn local_addr(listener: &TcpListener, flag: &'static str, addr: SocketAddr) -> Result<SocketAddr, RunError> {
    listener.local_addr().map_err(|e| RunError::Listen { flag, addr, reason: e.to_string() })
}

impl Started {
    /// Runs until the operator ends or a signal arrives on `signals`, as the module docs say.
    /// `prepare` starts what every replica runs and returns `lead`, which runs the workers until
    /// its token is cancelled; with leader election `lead` starts only once this replica leads,
    /// and is aborted if the lease is lost.
    pub async fn run<P, Prepared, L, Fut, E>(
        self,
        prepare: P,
        mut signals: mpsc::Receiver<()>,
    ) -> Result<(), RunError>
    where
        P: FnOnce(OperatorContext) -> Prepared,
        Prepared: Future<Output = Result<L, E>>,
        L: FnOnce(CancellationToken) -> Fut,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: Display + Send + 'static,
    {
        let Self { client, settings, metrics, view, listeners, .. } = self;
        let servers = CancellationToken::new();
        let state = ServerState { metrics: Arc::clone(&metrics), view: view.clone() };
        for (listener, endpoints) in listeners {
            tokio::spawn(server::serve(listener, endpoints, state.clone(), servers.clone()));
        }
        let _stop_servers = servers.drop_guard();

        let context = OperatorContext {
            client: client.clone(),
            namespace: settings.namespace.clone(),
            workers: settings.workers,
            shutdown_timeout: settings.shutdown_timeout,
            metrics,
            view: view.clone(),
        };
        let lead = tokio::select! {
            prepared = prepare(context) => prepared.map_err(|e| RunError::Operator(e.to_string()))?,
            _ = next_signal(&mut signals) => return Ok(()),
        };
        let shutdown = CancellationToken::new();
        let operator = async {
            let ended = match settings.leader_election.clone() {
                Some(lease) => {
                    let elector = LeaderElector::new(client, lease.clone())?;
                    view.set_leading(&lease.name, elector.leading());
                    elector.run(shutdown.clone(), lead).await?
                }
                None => {
                    let work = tokio::spawn(lead(shutdown.clone()));
                    Some(work.await.map_err(|_| RunError::Operator("the operator panicked".into()))?)
                }
            };
            ended.unwrap_or(Ok(())).map_err(|e| RunError::Operator(e.to_string()))
        };
        tokio::pin!(operator);

        tokio::select! {
            ended = &mut operator => ended,
            _ = next_signal(&mut signals) => {
                tracing::info!(deadline = ?settings.shutdown_timeout,
                    "signal received: stopping intake and finishing reconciles in flight (a second signal exits at once)");
                shutdown.cancel();
                let deadline = settings.shutdown_timeout + RELEASE_GRACE;
                tokio::select! {
                    ended = &mut operator => {
                        tracing::info!("shut down cleanly");
                        ended
                    }
                    _ = next_signal(&mut signals) => Err(RunError::Interrupted),
                    _ = tokio::time::sleep(deadline) => Err(RunError::ShutdownTimedOut(deadline)),
                }
            }
        }
    }
}

/// The next signal; a closed channel never signals.
async fn next_signal(signals: &mut mpsc::Receiver<()>) {
    if signals.recv().await.is_none() {
        std::future::pending::<()>().await;
    }
}

/// SIGTERM and SIGINT (Ctrl-C), each as one message.
pub fn os_signals() -> mpsc::Receiver<()> {
    let (sender, receiver) = mpsc::channel(4);
    tokio::spawn(async move {
        #[cfg(unix)]
        let mut terminate = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(stream) => Some(stream),
            Err(error) => {
                tracing::warn!(%error, "cannot listen for SIGTERM; only SIGINT stops the operator");
                None
            }
        };
        loop {
            #[cfg(unix)]
            let terminated = async {
                match terminate.as_mut() {
                    Some(stream) => stream.recv().await,
                    None => std::future::pending().await,
                }
            };
            #[cfg(not(unix))]
            let terminated = std::future::pending::<Option<()>>();
            tokio::select! {
                _ = terminated => {}
                result = tokio::signal::ctrl_c() => if result.is_err() { return },
            }
            if sender.send(()).await.is_err() {
                return;
            }
        }
    });
    receiver
}

/// `dbcluster-operator run`: everything above with the process's flags, environment and signals.
/// Prints one `error: …` line and exits non-zero on failure (130 after a second signal).
pub fn main(args: RunArgs) -> ExitCode {
    logging::init(args.log_format);
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
            ExitCode::from(if matches!(error, RunError::Interrupted) { 130 } else { 1 })
        }
    }
}

async fn run_from_environment(args: RunArgs) -> Result<(), RunError> {
    let source = cluster::source_from_environment(args.kubeconfig.as_deref());
    let config = cluster::load_config(&source, args.context.as_deref()).await?;
    let url = config.cluster_url.to_string().trim_end_matches('/').to_string();
    let settings = Settings::from_args(&args, &config.default_namespace);
    let client = Client::try_from(config)
        .map_err(|e| RunError::Client { url: url.clone(), reason: cluster::one_line(&e) })?;
    let started = start(client, &url, settings).await?;
    started.run(database_cluster_workload, os_signals()).await
}

/// The DatabaseCluster operator in `run`'s two stages: on every replica its informers start and
/// are registered with the endpoints (`/readyz`, `/debug/*`, informer metrics), so standbys keep
/// warm caches; the returned stage runs its workers while leading, until `stop` is cancelled.
pub async fn database_cluster_workload(
    context: OperatorContext,
) -> Result<impl FnOnce(CancellationToken) -> BoxFuture<'static, Result<(), OperatorError>>, OperatorError> {
    let options = OperatorOptions {
        namespace: context.namespace,
        workers: context.workers,
        shutdown_timeout: context.shutdown_timeout,
        instance: leader::default_identity(),
        metrics: context.metrics,
        ..OperatorOptions::default()
    };
    let operator = Operator::new(context.client, options);
    operator.register(&context.view);
    operator.start_informers();
    Ok(move |stop: CancellationToken| -> BoxFuture<'static, Result<(), OperatorError>> {
        Box::pin(operator.run(stop.cancelled_owned()))
    })
}
