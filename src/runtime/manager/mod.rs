//! The manager (controller-runtime's `Manager`): one process's life around its controllers —
//! check the cluster with a caller's preflight, serve the endpoints, campaign for the lease (if
//! asked), run the workload while leading, and on a signal shut down in order — stop intake, let
//! reconciles in flight finish within the deadline, release the lease, return. A second signal
//! ends it at once.
//!
//! The workload (the informers and controllers) is a parameter of [`Manager::run`], in two
//! stages, so that caches are warm on every replica while only the leader reconciles:
//!
//! 1. `prepare(context)` runs on every replica at start: it starts the informers and registers
//!    them (so `/readyz` and `/debug/cache` show them on standbys too), and returns stage 2;
//! 2. `lead(stop)` runs the workers — at once without leader election, otherwise only while this
//!    replica holds the lease — until `stop` is cancelled.
//!
//! Nothing here knows which resources are managed: the preflight (e.g. "is the CRD served?") and
//! the workload come from the caller.

use std::fmt::Display;
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use kube::Client;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

pub mod leader;

use crate::runtime::manager::leader::{LeaderElector, LeaderError, LeaseConfig};
use crate::runtime::observe::access::AccessReview;
use crate::runtime::observe::introspection::Introspection;
use crate::runtime::observe::metrics::Metrics;
use crate::runtime::observe::process_metrics::ProcessCollector;
use crate::runtime::observe::server::{self, Endpoints, ServerState};
use crate::runtime::observe::tls::{ServedCertificate, TlsError};

/// Beyond `shutdown_timeout`, how long releasing the lease and closing may take before the manager
/// returns anyway.
const RELEASE_GRACE: Duration = Duration::from_secs(5);

/// What the manager is asked to do, independent of where the flags came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManagerConfig {
    /// Watch this namespace only; `None` for all.
    pub namespace: Option<String>,
    /// Concurrent reconciles.
    pub workers: usize,
    /// Address of `/metrics`.
    pub metrics_addr: SocketAddr,
    /// Address of `/debug/*` (`run` defaults it to loopback: it shows keys, names and errors).
    pub debug_addr: SocketAddr,
    /// Address of `/healthz` and `/readyz`. Addresses that are equal share one listener serving
    /// the union of their endpoints.
    pub health_addr: SocketAddr,
    /// The lease to campaign for, if leader election is on.
    pub leader_election: Option<LeaseConfig>,
    /// How long reconciles in flight may take after a signal.
    pub shutdown_timeout: Duration,
    /// Serve `/metrics`, and `/debug/*` off loopback, only to requests the API server
    /// authenticates and authorizes (TokenReview, SubjectAccessReview: `runtime::observe::access`), and
    /// over TLS only (`server::encrypted`).
    pub metrics_secure: bool,
    /// With `metrics_secure`, the directory whose `tls.crt` and `tls.key` the TLS listeners serve
    /// (read again when they change); `None`: a self-signed certificate made at start (`runtime::observe::tls`).
    pub metrics_cert_dir: Option<PathBuf>,
}

/// What the workload receives: the client, what to watch, and where to report its informers,
/// controllers and metrics (so the endpoints show them).
pub struct WorkloadContext {
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
    /// The workload's second stage runs when this replica becomes leader (leader election is on):
    /// its controllers record the first passes' causes as a leader change.
    pub leader_election: bool,
}

impl std::fmt::Debug for WorkloadContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkloadContext")
            .field("namespace", &self.namespace)
            .field("workers", &self.workers)
            .field("shutdown_timeout", &self.shutdown_timeout)
            .finish_non_exhaustive()
    }
}

/// Why the manager ended other than cleanly; each message is one sentence.
#[derive(Debug, thiserror::Error)]
pub enum ManagerError {
    /// The caller's preflight refused the cluster (its message says why and what to do).
    #[error(transparent)]
    Preflight(Box<dyn std::error::Error + Send + Sync>),
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
    /// Leader election failed or the lease was lost (the process should exit so that it restarts
    /// as a fresh candidate, as controller-runtime's manager does).
    #[error("{0}; exiting so that the process restarts as a candidate")]
    Leader(#[from] LeaderError),
    /// The workload stopped with an error.
    #[error("the operator stopped: {0}")]
    Operator(String),
    /// The TLS certificate of `--metrics-secure` cannot be served.
    #[error("cannot serve TLS (--metrics-secure): {0}")]
    Tls(#[from] TlsError),
    /// Shutdown took longer than the deadline.
    #[error("shutdown did not finish within {0:?}; exiting without waiting further")]
    ShutdownTimedOut(Duration),
    /// A second signal arrived during shutdown.
    #[error("a second signal arrived during shutdown: exiting at once")]
    Interrupted,
}

/// The manager after its start-up checks: the preflight passed, the endpoints are bound.
pub struct Manager {
    client: Client,
    config: ManagerConfig,
    metrics: Arc<Metrics>,
    view: Introspection,
    listeners: Vec<(TcpListener, Endpoints)>,
    tls: Option<Arc<ServedCertificate>>,
    /// Where `/metrics` is served.
    pub metrics_addr: SocketAddr,
    /// Where `/debug/*` is served.
    pub debug_addr: SocketAddr,
    /// Where `/healthz` and `/readyz` are served.
    pub health_addr: SocketAddr,
}

impl std::fmt::Debug for Manager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Manager")
            .field("config", &self.config)
            .field("metrics_addr", &self.metrics_addr)
            .field("debug_addr", &self.debug_addr)
            .field("health_addr", &self.health_addr)
            .finish_non_exhaustive()
    }
}

impl Manager {
    /// Awaits `preflight` (the caller's check that the cluster serves what the workload needs),
    /// then binds the endpoints.
    pub async fn start<E>(
        client: Client,
        config: ManagerConfig,
        preflight: impl Future<Output = Result<(), E>>,
    ) -> Result<Manager, ManagerError>
    where
        E: std::error::Error + Send + Sync + 'static,
    {
        preflight.await.map_err(|e| ManagerError::Preflight(Box::new(e)))?;
        let tls = match config.metrics_secure {
            true => Some(Arc::new(ServedCertificate::load(config.metrics_cert_dir.as_deref())?)),
            false => None,
        };
        // Flags naming the same address share one listener serving the union of their endpoints.
        let requested = [
            ("metrics-addr", config.metrics_addr, Endpoints::METRICS),
            ("debug-addr", config.debug_addr, Endpoints::DEBUG),
            ("health-addr", config.health_addr, Endpoints::HEALTH),
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
            let (listener, local) = bind(flag, addr).await?;
            bound.push((addr, local));
            listeners.push((listener, endpoints));
        }
        let local_of = |addr: SocketAddr| {
            bound.iter().find(|(asked, _)| *asked == addr).map_or(addr, |(_, local)| *local)
        };
        let (metrics_addr, debug_addr, health_addr) =
            (local_of(config.metrics_addr), local_of(config.debug_addr), local_of(config.health_addr));
        let metrics = Arc::new(Metrics::new());
        let view = Introspection::new();
        metrics.with_registry(|registry| {
            registry.register_collector(Box::new(view.informer_collector()));
            registry.register_collector(Box::new(ProcessCollector::new(jiff::Timestamp::now())));
        });
        tracing::info!(%metrics_addr, "serving /metrics");
        tracing::info!(%debug_addr, "serving /debug/queue and /debug/cache");
        tracing::info!(%health_addr, "serving /healthz and /readyz");
        if config.metrics_secure {
            tracing::info!(
                "/metrics (and /debug/* off loopback) answer only authenticated, authorized requests (TokenReview, SubjectAccessReview), over TLS only"
            );
        }
        Ok(Manager { client, config, metrics, view, listeners, tls, metrics_addr, debug_addr, health_addr })
    }

    /// With `metrics_secure`, the certificate the TLS listeners answer handshakes with now.
    pub fn certificate(&self) -> Option<rustls_pki_types::CertificateDer<'static>> {
        self.tls.as_ref().map(|tls| tls.certificate())
    }

    /// Runs until the workload ends or a signal arrives on `signals`, as the module docs say.
    /// `prepare` starts what every replica runs and returns `lead`, which runs the workers until
    /// its token is cancelled; with leader election `lead` starts only once this replica leads,
    /// and is aborted if the lease is lost.
    pub async fn run<P, Prepared, L, Fut, E>(
        self,
        prepare: P,
        mut signals: mpsc::Receiver<()>,
    ) -> Result<(), ManagerError>
    where
        P: FnOnce(WorkloadContext) -> Prepared,
        Prepared: Future<Output = Result<L, E>>,
        L: FnOnce(CancellationToken) -> Fut,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: Display + Send + 'static,
    {
        let Self { client, config, metrics, view, listeners, tls, .. } = self;
        let servers = CancellationToken::new();
        let access = config.metrics_secure.then(|| Arc::new(AccessReview::new(client.clone())));
        if let Some(tls) = &tls {
            tokio::spawn(Arc::clone(tls).watch(servers.clone()));
        }
        let state = ServerState { metrics: Arc::clone(&metrics), view: view.clone(), access, tls };
        for (listener, endpoints) in listeners {
            tokio::spawn(server::serve(listener, endpoints, state.clone(), servers.clone()));
        }
        let _stop_servers = servers.drop_guard();

        let context = WorkloadContext {
            client: client.clone(),
            namespace: config.namespace.clone(),
            workers: config.workers,
            shutdown_timeout: config.shutdown_timeout,
            metrics,
            view: view.clone(),
            leader_election: config.leader_election.is_some(),
        };
        let lead = tokio::select! {
            prepared = prepare(context) => prepared.map_err(|e| ManagerError::Operator(e.to_string()))?,
            _ = next_signal(&mut signals) => return Ok(()),
        };
        let shutdown = CancellationToken::new();
        let workload = async {
            let ended = match config.leader_election.clone() {
                Some(lease) => {
                    let elector = LeaderElector::new(client, lease.clone())?;
                    view.set_leading(&lease.name, elector.leading());
                    elector.run(shutdown.clone(), lead).await?
                }
                None => {
                    let work = tokio::spawn(lead(shutdown.clone()));
                    Some(work.await.map_err(|_| ManagerError::Operator("the operator panicked".into()))?)
                }
            };
            ended.unwrap_or(Ok(())).map_err(|e| ManagerError::Operator(e.to_string()))
        };
        tokio::pin!(workload);

        tokio::select! {
            ended = &mut workload => ended,
            _ = next_signal(&mut signals) => {
                tracing::info!(deadline = ?config.shutdown_timeout,
                    "signal received: stopping intake and finishing reconciles in flight (a second signal exits at once)");
                shutdown.cancel();
                let deadline = config.shutdown_timeout + RELEASE_GRACE;
                tokio::select! {
                    ended = &mut workload => {
                        tracing::info!("shut down cleanly");
                        ended
                    }
                    _ = next_signal(&mut signals) => Err(ManagerError::Interrupted),
                    _ = tokio::time::sleep(deadline) => Err(ManagerError::ShutdownTimedOut(deadline)),
                }
            }
        }
    }
}

/// Binds `addr` and reads back the address bound (port 0 picks a free one).
async fn bind(flag: &'static str, addr: SocketAddr) -> Result<(TcpListener, SocketAddr), ManagerError> {
    let listen_error = |e: std::io::Error| ManagerError::Listen { flag, addr, reason: e.to_string() };
    let listener = TcpListener::bind(addr).await.map_err(listen_error)?;
    let bound = listener.local_addr().map_err(listen_error)?;
    Ok((listener, bound))
}

/// The next signal; a closed channel never signals.
async fn next_signal(signals: &mut mpsc::Receiver<()>) {
    if signals.recv().await.is_none() {
        std::future::pending::<()>().await;
    }
}

/// SIGTERM and SIGINT (Ctrl-C), each as one message. The handlers are installed before this
/// returns, so a signal sent afterwards is never missed.
pub fn os_signals() -> mpsc::Receiver<()> {
    let (sender, receiver) = mpsc::channel(4);
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let install = |kind: SignalKind, name: &str| match signal(kind) {
            Ok(stream) => Some(stream),
            Err(error) => {
                tracing::warn!(%error, "cannot listen for {name}; it will not stop the operator");
                None
            }
        };
        let mut terminate = install(SignalKind::terminate(), "SIGTERM");
        let mut interrupt = install(SignalKind::interrupt(), "SIGINT");
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    Some(()) = recv(&mut terminate) => {}
                    Some(()) = recv(&mut interrupt) => {}
                    else => return,
                }
                if sender.send(()).await.is_err() {
                    return;
                }
            }
        });
    }
    #[cfg(not(unix))]
    tokio::spawn(async move {
        while tokio::signal::ctrl_c().await.is_ok() {
            if sender.send(()).await.is_err() {
                return;
            }
        }
    });
    receiver
}

/// The next delivery of an installed signal; `None` if it is not installed or its stream ended.
#[cfg(unix)]
async fn recv(stream: &mut Option<tokio::signal::unix::Signal>) -> Option<()> {
    match stream {
        Some(stream) => stream.recv().await,
        None => None,
    }
}
