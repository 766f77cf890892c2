//! The flags of `dbcluster-operator run` and `dbcluster-operator status`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, ValueEnum};

/// The leader election Lease's name unless `--leader-election-id` says otherwise; the demo's
/// in-process operator holds the same one, so a `run` pointed at the demo waits as a standby.
pub const LEASE_NAME: &str = "dbcluster-operator";

/// How log lines are written to stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line, for log collectors.
    Json,
}

/// Run the operator against a Kubernetes cluster.
#[derive(Debug, Clone, PartialEq, Eq, Parser)]
#[command(
    name = "run",
    after_help = "Cluster access is found in this order: --kubeconfig, $KUBECONFIG, the in-cluster service account, \
~/.kube/config.\nLog filtering follows RUST_LOG (default: info), e.g. RUST_LOG=info,dbcluster_operator=debug.\n\
SIGTERM or SIGINT stops intake, lets reconciles in flight finish within --shutdown-timeout, releases the leader \
lease and exits 0; a second signal exits at once."
)]
pub struct RunArgs {
    /// Path to a kubeconfig file (before $KUBECONFIG, the in-cluster service account and ~/.kube/config).
    #[arg(long, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,

    /// The kubeconfig context to use (default: the current context; ignored in-cluster).
    #[arg(long, value_name = "NAME")]
    pub context: Option<String>,

    /// Watch DatabaseClusters in this namespace only (default: all namespaces).
    #[arg(long, short = 'n', value_name = "NAMESPACE")]
    pub namespace: Option<String>,

    /// How many DatabaseClusters are reconciled at once (never the same one twice).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..))]
    pub workers: u16,

    /// Where /metrics is served. The default listens on every interface, as a pod must for
    /// Prometheus to scrape it; outside a cluster, pass 127.0.0.1:8080 to keep it on loopback.
    #[arg(long, value_name = "ADDR", default_value = "0.0.0.0:8080")]
    pub metrics_addr: SocketAddr,

    /// Where /debug/queue and /debug/cache are served. They show keys, object names and errors, so
    /// the default is loopback only (reach it with `kubectl port-forward`); 0.0.0.0:8082 exposes them.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8082")]
    pub debug_addr: SocketAddr,

    /// Serve /metrics (and /debug/* unless on a loopback listener of its own) only to requests with a bearer token that
    /// the API server authenticates (TokenReview) and whose user may `get` the path
    /// (SubjectAccessReview; RBAC `nonResourceURLs`, see rbac.yaml's metrics reader), as
    /// controller-runtime's secure metrics serving does, and over HTTPS only (a self-signed
    /// certificate made at start unless --metrics-cert-dir gives one). The probes stay open, and
    /// plain HTTP on --health-addr.
    #[arg(long)]
    pub metrics_secure: bool,

    /// With --metrics-secure, serve the certificate in this directory: tls.crt (PEM, with its
    /// chain) and tls.key (PEM), e.g. a kubernetes.io/tls Secret's volume. Read again when the
    /// files change; a bad change keeps the old certificate.
    #[arg(long, value_name = "DIR", requires = "metrics_secure")]
    pub metrics_cert_dir: Option<PathBuf>,

    /// The operator's own image, which every PostgreSQL pod copies the instance manager from
    /// (an init container). The Deployment sets it to its own image.
    #[arg(long, env = "OPERATOR_IMAGE", value_name = "IMAGE",
          default_value = crate::databasecluster::specs::instance_pod::DEFAULT_INSTANCE_IMAGE)]
    pub instance_image: String,

    /// How long the certificates the operator issues for each cluster's servers and clients are
    /// valid, in seconds (90 days by default). The CA is valid 10 years.
    #[arg(long, env = "CERTIFICATE_VALIDITY", value_name = "SECONDS", default_value_t = 90 * 86_400)]
    pub certificate_validity: u64,

    /// How long before its expiry a certificate is issued again, in seconds (30 days by default);
    /// less than --certificate-validity.
    #[arg(long, env = "CERTIFICATE_RENEW_BEFORE", value_name = "SECONDS", default_value_t = 30 * 86_400)]
    pub certificate_renew_before: u64,

    /// Where the /healthz and /readyz probes are served. The default listens on every interface,
    /// as the kubelet's probes need in a pod; outside a cluster, pass 127.0.0.1:8081.
    #[arg(long, value_name = "ADDR", default_value = "0.0.0.0:8081")]
    pub health_addr: SocketAddr,

    /// Elect a leader through a Lease so that only one operator reconciles (replicas, or a `run` on a
    /// laptop beside the operator in the cluster); the others keep warm and wait. On by default;
    /// `--leader-elect=false` acts at once without a Lease.
    #[arg(long, value_name = "BOOL", default_value_t = true, num_args = 0..=1,
          default_missing_value = "true", action = clap::ArgAction::Set)]
    pub leader_elect: bool,

    /// Namespace of the leader election Lease (default: the pod's namespace, or the kubeconfig's).
    #[arg(long, value_name = "NAMESPACE")]
    pub leader_election_namespace: Option<String>,

    /// Name of the leader election Lease.
    #[arg(long, value_name = "NAME", default_value = LEASE_NAME)]
    pub leader_election_id: String,

    /// Log line format on stderr.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// How long reconciles in flight may take to finish after SIGTERM (e.g. 30s, 1m, 500ms).
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    pub shutdown_timeout: Duration,
}

/// Show one DatabaseCluster: phase, conditions, instances (role, version, replication lag),
/// children, backups, recent Events and the operator's view.
#[derive(Debug, Clone, PartialEq, Eq, Parser)]
#[command(
    name = "status",
    after_help = "Reads the cluster with your kubeconfig (--kubeconfig, $KUBECONFIG, ~/.kube/config). The operator's \
view comes from its /debug/queue at --operator-url (run's --debug-addr; in a cluster, first \
`kubectl -n dbcluster-system port-forward deploy/dbcluster-operator 8082`); without it the rest is still shown.\n\
An https:// URL (a listener of `run --metrics-secure`) is verified against --operator-ca-file, or the system's \
roots without it; --operator-token-file's bearer token is sent over https only."
)]
pub struct StatusArgs {
    /// The DatabaseCluster's name.
    pub name: String,

    /// Its namespace (default: the kubeconfig context's).
    #[arg(long, short = 'n', value_name = "NAMESPACE")]
    pub namespace: Option<String>,

    /// Path to a kubeconfig file (before $KUBECONFIG and ~/.kube/config).
    #[arg(long, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,

    /// The kubeconfig context to use (default: the current context).
    #[arg(long, value_name = "NAME")]
    pub context: Option<String>,

    /// Where the operator serves /debug/queue.
    #[arg(long, value_name = "URL", default_value = "http://127.0.0.1:8082")]
    pub operator_url: String,

    /// A file holding the bearer token sent to an https:// --operator-url (its user needs `get`
    /// on the nonResourceURL /debug/*), e.g. from `kubectl create token`.
    #[arg(long, value_name = "PATH")]
    pub operator_token_file: Option<PathBuf>,

    /// PEM certificates an https:// --operator-url's certificate is verified against (the CA that
    /// signed the operator's --metrics-cert-dir certificate, or the self-signed one it serves).
    #[arg(long, value_name = "PATH")]
    pub operator_ca_file: Option<PathBuf>,
}

/// Parses `30s`, `1m 30s`, `500ms`, ISO 8601 `PT30S`, or a bare number of seconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    if let Ok(seconds) = text.trim().parse::<u64>() {
        return Ok(Duration::from_secs(seconds));
    }
    let signed: jiff::SignedDuration =
        text.parse().map_err(|_| format!("{text:?} is not a duration like 30s, 1m or 500ms"))?;
    Duration::try_from(signed).map_err(|_| format!("{text:?} is negative"))
}
