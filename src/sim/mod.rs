//! An embedded simulated Kubernetes API server (hyper, plain HTTP on loopback) for the tests and
//! the `demo` command: the unmodified `kube` client and kubectl talk to it as to a cluster.
//!
//! One lock guards the state (`state`): every request is atomic and every write takes the next
//! global resourceVersion (`store`) and feeds the watch hub (`watch`). The served kinds come from
//! a table plus the CRDs (`resources`); HTTP parsing and routing by verb is in `handlers`; the
//! write rules (metadata, conflicts, status subresource, generation, finalizers) in `ops`, with
//! built-in defaults (`defaults`), custom-resource schemas ([`schema`], via `admission`), the
//! optional `OwnerReferencesPermissionEnforcement` plugin (`owner_references`, asking an RBAC
//! `authorizer` over the stored roles about impersonated users) and the patch formats (`patch`,
//! `apply`) on the way; TokenReviews and SubjectAccessReviews (`reviews`) over that authorizer and
//! the tokens [`SimServer::issue_token`] issues. OpenAPI v3 (`openapi`) publishes the CRDs' schemas. Background tasks: garbage collection (`gc`) and
//! the simulated kubelet, StatefulSet, Job and CronJob controllers (`controllers`). Tests steer
//! faults through [`Faults`] and read the [`RequestRecord`] log. `kubectl exec` runs commands in the
//! process kubelet's containers over WebSocket (`exec`). The `demo` command (`cli::demo`)
//! prints its live table with kubectl's [`json_path`] and [`age`].

mod admission;
mod api_error;
mod apply;
mod authorizer;
mod batch;
mod claims;
mod cluster;
mod config_data;
mod container_resources;
mod controllers;
mod defaults;
mod discovery;
mod events;
mod exec;
mod faults;
mod gc;
mod handlers;
mod immutable;
mod known_fields;
pub mod kubelet;
mod meta;
mod names;
mod nodes;
mod openapi;
mod ops;
mod owner_references;
mod patch;
mod request_log;
mod resources;
mod reviews;
mod route;
pub mod schema;
mod selectors;
mod server;
mod state;
mod store;
mod table;
pub mod version;
mod watch;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

pub use faults::Faults;
pub use request_log::RequestRecord;
pub use table::{age, json_path};
pub use version::KubernetesVersion;

use cluster::Cluster;

/// How the simulated server behaves.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// Where to listen; the default `127.0.0.1:0` picks a free port.
    pub addr: SocketAddr,
    /// How long a simulated pod takes to become Ready.
    pub pod_ready_delay: Duration,
    /// How many change events the watch history keeps (older resourceVersions answer 410).
    pub history_limit: usize,
    /// Whether watches honour `sendInitialEvents` (streaming lists).
    pub streaming_lists: bool,
    /// Watch duration when the request gives no `timeoutSeconds`.
    pub default_watch_timeout: Duration,
    /// How often watches that allow bookmarks get one.
    pub bookmark_interval: Duration,
    /// How long a simulated Job runs before it completes (or fails).
    pub job_duration: Duration,
    /// How long each step of the simulated expansion of a claim whose request grew takes: the
    /// CSI resizer's, then the kubelet's filesystem resize (each takes seconds, never no time).
    pub volume_expand_delay: Duration,
    /// The Kubernetes version to behave as (default the oldest supported, 1.28): what `/version`
    /// reports and which CEL functions new CRD expressions may use.
    pub kubernetes_version: KubernetesVersion,
    /// Which kubelet runs the pods: Ready on a timer, or real local processes.
    pub kubelet: KubeletKind,
    /// The `OwnerReferencesPermissionEnforcement` admission plugin (OpenShift and many hardened
    /// clusters): a client setting `blockOwnerDeletion: true` must be allowed, by the stored
    /// RBAC objects, to `update` the owner's `finalizers`. It applies to requests made as a user
    /// ([`SimServer::client_as`]); others are the admin's.
    pub owner_references_permission_enforcement: bool,
    /// Whether the process kubelet gives each claim's volume its real size (a `tmpfs` of the
    /// volume's capacity, grown online when the claim grows), so that a volume can fill up.
    /// Off by default: the tests that fill a disk ask for it.
    pub sized_volumes: bool,
    /// How many nodes the process kubelet runs pods on (`sim-node-0`…; the timer kubelet has
    /// one, `sim-node`, and no Node objects).
    pub nodes: usize,
    /// How often each node's kubelet renews its Lease in `kube-node-lease` (1.28: 10 s).
    pub node_lease_renew_interval: Duration,
    /// How often the node lifecycle controller looks at the nodes (`--node-monitor-period`, 5 s).
    pub node_monitor_period: Duration,
    /// How long a node's kubelet may be silent before its node turns `Ready=Unknown`
    /// (`--node-monitor-grace-period`, 40 s).
    pub node_monitor_grace_period: Duration,
    /// The `tolerationSeconds` the `DefaultTolerationSeconds` admission plugin gives each pod for
    /// the `not-ready` and `unreachable` taints: how long a pod stays bound to a lost node before
    /// it is evicted (300 s).
    pub default_toleration_seconds: u64,
}

/// The simulator's two kubelets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KubeletKind {
    /// Marks pods Running and Ready `pod_ready_delay` after it sees them; runs nothing (for scale).
    #[default]
    Timer,
    /// Runs each pod's containers as local processes on the pod's own loopback address
    /// ([`kubelet`]); needs root.
    Process,
}

impl Default for SimConfig {
    fn default() -> Self {
        Self {
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            pod_ready_delay: Duration::from_millis(200),
            history_limit: 10_000,
            streaming_lists: true,
            default_watch_timeout: Duration::from_secs(1800),
            bookmark_interval: Duration::from_secs(10),
            job_duration: Duration::from_secs(1),
            volume_expand_delay: Duration::from_secs(1),
            kubernetes_version: KubernetesVersion::OLDEST_SUPPORTED,
            kubelet: KubeletKind::Timer,
            owner_references_permission_enforcement: false,
            sized_volumes: false,
            nodes: 3,
            node_lease_renew_interval: Duration::from_secs(10),
            node_monitor_period: Duration::from_secs(5),
            node_monitor_grace_period: Duration::from_secs(40),
            default_toleration_seconds: 300,
        }
    }
}

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// Binding the listening socket failed.
    #[error("binding the simulated API server to {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// The I/O error.
        source: std::io::Error,
    },
}

/// Namespaces every cluster starts with.
const INITIAL_NAMESPACES: &[&str] = &["default", "kube-system", "kube-public", "kube-node-lease"];

/// The running simulated API server; it shuts down when dropped.
#[derive(Debug)]
pub struct SimServer {
    cluster: Arc<Cluster>,
    addr: SocketAddr,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl SimServer {
    /// Starts a server with [`SimConfig::default`].
    pub async fn start() -> Result<SimServer, SimError> {
        Self::start_with(SimConfig::default()).await
    }

    /// Starts a server with the given configuration.
    pub async fn start_with(mut config: SimConfig) -> Result<SimServer, SimError> {
        let listener = tokio::net::TcpListener::bind(config.addr)
            .await
            .map_err(|source| SimError::Bind { addr: config.addr, source })?;
        let addr = listener.local_addr().map_err(|source| SimError::Bind { addr: config.addr, source })?;
        config.addr = addr;
        let cluster = Arc::new(Cluster::new(config));
        cluster.write(|s| {
            let kind = s.registry.get("", "v1", "namespaces").expect("namespaces are a built-in kind");
            for ns in INITIAL_NAMESPACES {
                let obj = serde_json::json!({"metadata": {"name": ns}});
                // Invariant: a fresh store has none of these names, so creation cannot fail.
                ops::create(s, &kind, None, obj, &ops::WriteContext::controller("kube-apiserver"))
                    .expect("a fresh cluster accepts its initial namespaces");
            }
        });
        let tasks = vec![
            tokio::spawn(server::serve(cluster.clone(), listener)),
            tokio::spawn(cluster.clone().run_gc()),
            tokio::spawn(controllers::run(cluster.clone())),
        ];
        let mut tasks = tasks;
        if cluster.config.kubelet == KubeletKind::Process {
            tasks.push(tokio::spawn(nodes::run(cluster.clone())));
        }
        tracing::info!(%addr, "simulated API server listening");
        Ok(SimServer { cluster, addr, tasks })
    }

    /// The address the server listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A `kube` client for this server (default namespace `default`).
    pub fn client(&self) -> kube::Client {
        let url = self.base_url().parse().expect("http://IP:PORT is a valid URI");
        // Invariant: a plain-HTTP config without auth or TLS always builds a client.
        kube::Client::try_from(kube::Config::new(url)).expect("a plain-HTTP kube config builds a client")
    }

    /// A `kube` client whose requests are made as `user` (impersonated with the
    /// `Impersonate-User` header, as `kubectl --as` does), so RBAC-based admission judges them.
    pub fn client_as(&self, user: &str) -> kube::Client {
        let url = self.base_url().parse().expect("http://IP:PORT is a valid URI");
        let mut config = kube::Config::new(url);
        // Invariant: a user name that is not a valid header value is a test's mistake.
        let value = http::HeaderValue::from_str(user).expect("a user name is a valid header value");
        config.headers.push((http::HeaderName::from_static("impersonate-user"), value));
        kube::Client::try_from(config).expect("a plain-HTTP kube config builds a client")
    }

    /// A bearer token that this server's TokenReviews authenticate as `user` (with `groups`, and
    /// those the apiserver adds: `system:authenticated`, a ServiceAccount's own), as a
    /// ServiceAccount token is on a real cluster (see `reviews`).
    pub fn issue_token(&self, user: &str, groups: &[&str]) -> String {
        let groups = groups.iter().map(|g| (*g).to_owned()).collect();
        self.cluster.tokens.issue(authorizer::User::new(user, groups))
    }

    /// Every authorization the admission plugins asked for (see
    /// [`SimConfig::owner_references_permission_enforcement`]), oldest first.
    pub fn authorizations(&self) -> Vec<RequestRecord> {
        self.cluster.read(|s| s.authorizations.clone())
    }

    /// A kubeconfig pointing at this server, for kubectl or the operator's `run`.
    pub fn kubeconfig_yaml(&self) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: sim\n  cluster:\n    server: {}\ncontexts:\n- name: sim\n  context:\n    cluster: sim\n    user: sim\n    namespace: default\ncurrent-context: sim\nusers:\n- name: sim\n  user: {{}}\n",
            self.base_url()
        )
    }

    /// The address a cluster name (`<svc>.<ns>.svc.cluster.local`, `<pod>.<headless-svc>`…)
    /// resolves to for a pod in `namespace`, with the process kubelet (`None` with the timer
    /// kubelet, or for an unknown name). A client on the host connects there as a pod would.
    pub fn resolve(&self, namespace: &str, name: &str) -> Option<std::net::Ipv4Addr> {
        self.cluster.node.resolve(namespace, name)
    }

    /// Moves the simulated controller manager's clock `by` ahead (CronJobs fire at their
    /// scheduled times on it), for tests whose pods are real processes and so cannot pause time.
    pub fn advance_controller_clock(&self, by: std::time::Duration) {
        self.cluster.advance_controller_clock(by);
    }

    /// Fault injection for tests.
    pub fn faults(&self) -> &Faults {
        &self.cluster.faults
    }

    /// How many change events all watch streams have sent so far (bookmarks not counted).
    pub fn watch_events_sent(&self) -> u64 {
        self.cluster.watch_events_sent.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// How many watches were answered `410 Gone` so far.
    pub fn watch_gone_sent(&self) -> u64 {
        self.cluster.watch_gone_sent.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// How many streaming lists (watches with `sendInitialEvents=true`) were served so far.
    pub fn streaming_lists_sent(&self) -> u64 {
        self.cluster.streaming_lists_sent.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Every resource request so far, oldest first.
    pub fn request_log(&self) -> Vec<RequestRecord> {
        self.cluster.log.snapshot()
    }

    /// Stops accepting connections, ends every watch and background task, and waits for them.
    pub async fn shutdown(mut self) {
        self.cluster.shutdown.cancel();
        for task in self.tasks.drain(..) {
            let _ = task.await;
        }
    }
}

impl Drop for SimServer {
    fn drop(&mut self) {
        self.cluster.shutdown.cancel();
        self.cluster.node.kill_all();
    }
}
