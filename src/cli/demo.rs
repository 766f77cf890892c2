//! `dbcluster-operator demo`: the simulated cluster on loopback with a kubeconfig for kubectl, the
//! DatabaseCluster CRD installed, the sample cluster applied, the operator running in process
//! under the same [`Manager`] as `run` (so `/metrics`, `/healthz`, `/readyz` and `/debug/*` are
//! served), and the clusters' progress printed as a live table like
//! `kubectl get databasecluster -w -A` ([`crate::cli::table`]), until a signal stops it.
//!
//! The table owns the terminal, so the operator's log goes to a file (text, no colours) whose
//! path is printed at start with the endpoints' addresses. Keys ([`crate::cli::demo_keys`]): `s`
//! prints the selected cluster's status between the rows (the view `dbcluster-operator status`
//! prints, the operator's view of the key included), `n` selects the next cluster. The endpoints default to free loopback
//! ports, so two demos never collide.
//!
//! The pods run on the process kubelet (real PostgreSQL) when this host can run it, else on the
//! timer kubelet (`--kubelet` chooses; [`choice`] decides and says why, printed first). With the
//! process kubelet, once a cluster is Running the demo prints how to reach it with `psql` from the
//! host: the address its app Secret's `host` resolves to here, and a `kubectl get secret … |
//! base64 -d` recipe for the password (the password itself is never printed nor logged).

use std::future::Future;
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::WatchParams;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams, PostParams, WatchEvent};
use serde_json::Value;

use crate::cli::args::LEASE_NAME;
use crate::cli::demo_keys::{self, Action, Selection};
use crate::cli::table::Table;
use crate::cli::terminal::KeyReader;
use crate::cli::{logging, run, snapshot, status};
use crate::databasecluster::api::types::{self, DatabaseCluster};
use crate::databasecluster::controller::operator;
use crate::databasecluster::specs::credentials::{Login, mounted_secret_name};
use crate::runtime::manager::leader::{self, LeaseConfig};
use crate::runtime::manager::{Manager, ManagerConfig, ManagerError, os_signals};
use crate::sim::kubelet::choice;
use crate::sim::{KubeletKind, KubernetesVersion, SimConfig, SimError, SimServer};

/// The sample the demo applies: the seed's `production-postgres`.
const SAMPLE: &str = include_str!("../../manifests/samples/databasecluster.yaml");

/// Concurrent reconciles in the demo (as many as the operator's default).
const DEMO_WORKERS: usize = 4;

/// The PostgreSQL major version of the sample (`15.4`): the binaries the process kubelet needs.
const SAMPLE_MAJOR: u32 = 15;

/// How long reconciles in flight may take after Ctrl-C.
const DEMO_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(30);

/// Start the embedded simulated cluster, run the operator on it and show a sample cluster's progress.
#[derive(Debug, Clone, clap::Args)]
pub struct DemoArgs {
    /// Address of the simulated API server (loopback; port 0 picks a free one).
    #[arg(long, default_value = "127.0.0.1:0")]
    pub addr: SocketAddr,
    /// Where to write the kubeconfig for kubectl.
    #[arg(long, default_value = "target/demo.kubeconfig")]
    pub kubeconfig_out: PathBuf,
    /// Where the operator's /metrics, /debug/queue and /debug/cache are served (port 0: a free one).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:0")]
    pub metrics_addr: SocketAddr,
    /// Where the operator's /healthz and /readyz are served (the same address: one listener for all).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:0")]
    pub health_addr: SocketAddr,
    /// Where the operator's log is written (text), since the table owns the terminal.
    #[arg(long, value_name = "PATH", default_value = "target/demo.log")]
    pub log_file: PathBuf,
    /// The Kubernetes version the simulated server behaves as (1.28 to 1.34): `/version`, and
    /// which CEL functions new CRD rules may use.
    #[arg(long, value_name = "MAJOR.MINOR", default_value = "1.28")]
    pub kubernetes_version: KubernetesVersion,
    /// Which kubelet runs the pods: `process` (real PostgreSQL processes; the default when this
    /// host can run them: root and the PostgreSQL 15 server binaries) or `timer` (pods turn Ready
    /// on a timer, nothing runs).
    #[arg(long, value_name = "KIND", value_parser = parse_kubelet)]
    pub kubelet: Option<KubeletKind>,
}

/// `--kubelet process|timer`.
fn parse_kubelet(text: &str) -> Result<KubeletKind, String> {
    match text {
        "process" => Ok(KubeletKind::Process),
        "timer" => Ok(KubeletKind::Timer),
        other => Err(format!("{other:?} is not a kubelet: process or timer")),
    }
}

/// Where the simulated server listens and writes its kubeconfig.
#[derive(Debug, Clone)]
pub struct DemoOptions {
    /// Listening address; port 0 picks a free one.
    pub addr: SocketAddr,
    /// Where to write the kubeconfig for kubectl.
    pub kubeconfig_out: PathBuf,
    /// Which kubelet runs the pods.
    pub kubelet: KubeletKind,
    /// The Kubernetes version the server behaves as.
    pub kubernetes_version: KubernetesVersion,
}

/// Why the demo stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    /// The server did not start.
    #[error(transparent)]
    Start(#[from] SimError),
    /// A file the demo writes (the kubeconfig, the log) could not be written.
    #[error("writing {path}: {source}")]
    File {
        /// The path asked for.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A request to the simulated server failed.
    #[error("{what}: {source}")]
    Api {
        /// What the demo was doing.
        what: &'static str,
        /// The client error.
        source: kube::Error,
    },
    /// The embedded sample or CRD is not what the demo expects.
    #[error("{0}")]
    Manifest(String),
    /// The operator's manager could not start or ended with an error.
    #[error(transparent)]
    Manager(#[from] ManagerError),
    /// The async runtime could not start.
    #[error("starting the async runtime: {0}")]
    Runtime(std::io::Error),
    /// The manager's task panicked.
    #[error("the operator's task failed: {0}")]
    Task(String),
    /// Printing the table failed.
    #[error("printing the table: {0}")]
    Output(#[from] std::io::Error),
    /// The kubelet asked for cannot run here.
    #[error("{0}")]
    Kubelet(String),
}

fn api_error(what: &'static str) -> impl FnOnce(kube::Error) -> DemoError {
    move |source| DemoError::Api { what, source }
}

/// A started demo: the server, with the CRD and the sample in it.
#[derive(Debug)]
pub struct Demo {
    server: SimServer,
    clusters: Api<DynamicObject>,
    /// The sample's name and namespace.
    sample: (String, String),
    kubelet: KubeletKind,
}

impl Demo {
    /// Starts the server, writes the kubeconfig, installs the CRD and applies the sample.
    pub async fn start(options: &DemoOptions) -> Result<Demo, DemoError> {
        let server = SimServer::start_with(SimConfig {
            addr: options.addr,
            kubernetes_version: options.kubernetes_version,
            kubelet: options.kubelet,
            ..SimConfig::default()
        })
        .await?;
        write_creating_dirs(&options.kubeconfig_out, server.kubeconfig_yaml().as_bytes())?;

        let client = server.client();
        let crd = types::crd();
        Api::<CustomResourceDefinition>::all(client.clone())
            .create(&PostParams::default(), &crd)
            .await
            .map_err(api_error("installing the DatabaseCluster CRD"))?;
        let resource = ApiResource::erase::<DatabaseCluster>(&());
        let sample: Value = serde_saphyr::from_str(SAMPLE).map_err(|e| DemoError::Manifest(e.to_string()))?;
        let name = sample["metadata"]["name"].as_str().unwrap_or_default().to_string();
        let namespace = sample["metadata"]["namespace"].as_str().unwrap_or("default").to_string();
        Api::<DynamicObject>::namespaced_with(client.clone(), &namespace, &resource)
            .patch(&name, &PatchParams::apply("dbcluster-demo"), &Patch::Apply(&sample))
            .await
            .map_err(api_error("applying the sample DatabaseCluster"))?;
        let clusters = Api::all_with(client, &resource);
        Ok(Demo { server, clusters, sample: (name, namespace), kubelet: options.kubelet })
    }

    /// The running server (its address, kubeconfig, faults).
    pub fn server(&self) -> &SimServer {
        &self.server
    }

    /// How to point kubectl at the demo.
    pub fn instructions(&self, kubeconfig: &Path) -> String {
        format!(
            "Simulated Kubernetes API server listening on {url}\n\
             kubeconfig written to {path}; in another terminal:\n\
             \n  export KUBECONFIG={path}\n  kubectl get databaseclusters\n  kubectl get statefulsets,pods,pvc,pv\n\n",
            url = self.server.base_url(),
            path = kubeconfig.display(),
        )
    }

    /// Prints the clusters as a table, then one row per change, until `stop` completes; then
    /// shuts the server down.
    pub async fn watch_until(
        self,
        stop: impl Future<Output = ()>,
        out: &mut impl Write,
    ) -> Result<(), DemoError> {
        let (_, no_keys) = tokio::sync::mpsc::channel(1);
        self.watch_with_keys(stop, no_keys, "", out).await
    }

    /// The status view of `namespace/name`, framed for the table ([`demo_keys::status_block`]):
    /// what `dbcluster-operator status` prints, read from this server, with the operator's view
    /// from `operator_url`.
    pub async fn status_view(&self, namespace: &str, name: &str, operator_url: &str) -> String {
        let text = match snapshot::fetch(
            &self.server.client(),
            namespace,
            name,
            &snapshot::Operator::at(operator_url),
        )
        .await
        {
            Ok(snapshot) => status::render(&snapshot),
            Err(error) => format!("{error}\n"),
        };
        demo_keys::status_block(namespace, name, &text)
    }

    /// [`Demo::watch_until`], and each key from `keys` handled as [`Selection::press`] says (the
    /// status view from the operator at `operator_url`), the table's header printed again after it.
    pub async fn watch_with_keys(
        self,
        stop: impl Future<Output = ()>,
        mut keys: tokio::sync::mpsc::Receiver<u8>,
        operator_url: &str,
        out: &mut impl Write,
    ) -> Result<(), DemoError> {
        tokio::pin!(stop);
        let mut selection = Selection::default();
        let mut table = Table::default();
        let mut connectable = std::collections::HashSet::new();
        writeln!(out, "{}", Table::header())?;
        let list = self.clusters.list(&ListParams::default()).await.map_err(api_error("listing clusters"))?;
        for c in &list.items {
            print_row(out, &mut table, c, false)?;
            self.print_connect_once(c, &mut connectable, out).await?;
        }
        out.flush()?;
        let mut rv = list.metadata.resource_version.unwrap_or_default();
        'rewatch: loop {
            let stream = self
                .clusters
                .watch(&WatchParams::default(), &rv)
                .await
                .map_err(api_error("watching clusters"))?;
            let mut stream = stream.boxed();
            loop {
                let event = tokio::select! {
                    _ = &mut stop => break 'rewatch,
                    Some(key) = keys.recv() => {
                        self.press(key, &mut selection, &table, operator_url, out).await?;
                        continue;
                    }
                    event = stream.try_next() => event,
                };
                match event {
                    Ok(Some(WatchEvent::Added(c) | WatchEvent::Modified(c))) => {
                        rv = c.metadata.resource_version.clone().unwrap_or(rv);
                        print_row(out, &mut table, &c, false)?;
                        self.print_connect_once(&c, &mut connectable, out).await?;
                        out.flush()?;
                    }
                    Ok(Some(WatchEvent::Deleted(c))) => {
                        rv = c.metadata.resource_version.clone().unwrap_or(rv);
                        print_row(out, &mut table, &c, true)?;
                    }
                    Ok(Some(WatchEvent::Bookmark(b))) => rv = b.metadata.resource_version,
                    // The server ended the watch (timeout) or it failed: watch again from `rv`.
                    Ok(Some(WatchEvent::Error(_)) | None) | Err(_) => continue 'rewatch,
                }
            }
        }
        self.server.shutdown().await;
        Ok(())
    }

    /// Does what `key` asks for (see [`Selection::press`]) among the clusters `table` shows.
    async fn press(
        &self,
        key: u8,
        selection: &mut Selection,
        table: &Table,
        operator_url: &str,
        out: &mut impl Write,
    ) -> Result<(), DemoError> {
        match selection.press(key, &table.clusters()) {
            Action::Status { namespace, name } => {
                write!(out, "{}", self.status_view(&namespace, &name, operator_url).await)?;
                writeln!(out, "{}", Table::header())?;
            }
            Action::Selected { namespace, name } => {
                writeln!(out, "selected {namespace}/{name}: press s for its status")?;
            }
            Action::NoCluster => writeln!(out, "no cluster to show yet")?,
            Action::Help => writeln!(out, "{}", demo_keys::HELP)?,
            Action::Nothing => {}
        }
        out.flush()?;
        Ok(())
    }

    /// With the process kubelet, prints [`Demo::connect_lines`] the first time `cluster` is
    /// Running (`printed` holds the clusters already shown).
    async fn print_connect_once(
        &self,
        cluster: &DynamicObject,
        printed: &mut std::collections::HashSet<String>,
        out: &mut impl Write,
    ) -> Result<(), DemoError> {
        let key = format!(
            "{}/{}",
            cluster.metadata.namespace.as_deref().unwrap_or_default(),
            cluster.metadata.name.as_deref().unwrap_or_default()
        );
        if self.kubelet != KubeletKind::Process
            || cluster.data["status"]["phase"] != "Running"
            || printed.contains(&key)
        {
            return Ok(());
        }
        if let Some(lines) = self.connect_lines(cluster).await {
            write!(out, "{lines}")?;
            printed.insert(key);
        }
        Ok(())
    }

    /// How to reach `cluster` with `psql` from the host: its app Secret's `host` as a pod resolves
    /// it, and the password through kubectl (never the password itself). `None` while the Secret
    /// or the address is not there yet.
    pub async fn connect_lines(&self, cluster: &DynamicObject) -> Option<String> {
        let namespace = cluster.metadata.namespace.clone().unwrap_or_else(|| "default".into());
        let own_secret = cluster.data["spec"]["appSecretName"].as_str();
        let secret_name = mounted_secret_name(Login::App, cluster.metadata.name.as_deref()?, own_secret);
        let secrets: Api<k8s_openapi::api::core::v1::Secret> =
            Api::namespaced(self.server.client(), &namespace);
        let secret = secrets.get(&secret_name).await.ok()?;
        let data = secret.data?;
        let field = |key: &str| data.get(key).map(|v| String::from_utf8_lossy(&v.0).into_owned());
        let (host, port, user, dbname) =
            (field("host")?, field("port")?, field("username")?, field("dbname")?);
        let ip = self.server.resolve(&namespace, &host)?;
        let name = cluster.metadata.name.as_deref()?;
        let service = |suffix: &str| {
            let service = format!("{name}-{suffix}");
            let ip =
                self.server.resolve(&namespace, &service).map_or_else(|| "-".to_owned(), |ip| ip.to_string());
            format!("{service} {ip}")
        };
        Some(format!(
            "Connect with psql from this host (the Secret {secret_name}'s host {host} is {ip} from here):\n\
             \x20 PGPASSWORD=\"$(kubectl get secret {secret_name} -n {namespace} -o jsonpath='{{.data.password}}' | base64 -d)\" psql -h {ip} -p {port} -U {user} {dbname}\n\
             Services from this host: {rw} (the primary), {ro} (the standbys), {any} (any instance)\n",
            rw = service("rw"),
            ro = service("ro"),
            any = service("r"),
        ))
    }
}

/// Prints `cluster`'s row unless it repeats the last one printed for it.
fn print_row(
    out: &mut impl Write,
    table: &mut Table,
    cluster: &DynamicObject,
    deleted: bool,
) -> std::io::Result<()> {
    let obj = serde_json::to_value(cluster).unwrap_or_default();
    if let Some(row) = table.row(&obj, deleted, jiff::Timestamp::now()) {
        writeln!(out, "{row}")?;
        out.flush()?;
    }
    Ok(())
}

fn write_creating_dirs(path: &Path, contents: &[u8]) -> Result<(), DemoError> {
    let file_error = |source| DemoError::File { path: path.to_path_buf(), source };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(file_error)?;
    }
    std::fs::write(path, contents).map_err(file_error)
}

/// Where the operator's endpoints and log are, and the `status` command for the sample, as
/// printed at start.
fn operator_lines(
    manager: &Manager,
    log_file: &Path,
    kubeconfig: &Path,
    sample: &(String, String),
) -> String {
    let (name, namespace) = sample;
    let (metrics, debug, health) = (manager.metrics_addr, manager.debug_addr, manager.health_addr);
    // The path of this very program, so that the command works as printed (`cargo run` puts
    // nothing on PATH).
    let program =
        std::env::current_exe().map_or_else(|_| "dbcluster-operator".to_owned(), |p| p.display().to_string());
    format!(
        "Operator metrics: http://{metrics}/metrics  http://{debug}/debug/queue  http://{debug}/debug/cache\n\
         Live page:        http://{debug}/debug/\n\
         Operator probes:  http://{health}/healthz  http://{health}/readyz\n\
         Operator log:     {log}\n\
         Status:           {program} status {name} -n {namespace} --kubeconfig {kubeconfig} --operator-url http://{debug}\n\n\
         {keys} Press Ctrl-C to stop.\n",
        keys = demo_keys::HELP,
        log = log_file.display(),
        kubeconfig = kubeconfig.display(),
    )
}

/// Runs the demo until SIGINT or SIGTERM: start the server and the operator's manager, print the
/// instructions, the endpoints and the log's path, then the live table. On a signal the manager
/// shuts the operator down in order first, then the table stops and the server with it.
pub async fn run(args: DemoArgs) -> Result<(), DemoError> {
    // Handlers are installed before anything is printed, so a signal is never missed.
    let signals = os_signals();
    let chosen = choice::choose(args.kubelet, SAMPLE_MAJOR).map_err(DemoError::Kubelet)?;
    tracing::info!(kubelet = ?chosen.kind, reason = %chosen.reason, "kubelet chosen");
    let options = DemoOptions {
        addr: args.addr,
        kubeconfig_out: args.kubeconfig_out.clone(),
        kubernetes_version: args.kubernetes_version,
        kubelet: chosen.kind,
    };
    let demo = Demo::start(&options).await?;
    let config = ManagerConfig {
        namespace: None,
        workers: DEMO_WORKERS,
        metrics_addr: args.metrics_addr,
        // /debug/* beside /metrics: the demo's addresses are loopback.
        debug_addr: args.metrics_addr,
        health_addr: args.health_addr,
        // The Lease `run` takes, in the namespace `run` with the demo's kubeconfig would use: a
        // second operator pointed at the demo waits instead of acting beside this one.
        leader_election: Some(LeaseConfig::new(
            demo.server().client().default_namespace(),
            LEASE_NAME,
            leader::default_identity(),
        )),
        shutdown_timeout: DEMO_SHUTDOWN_TIMEOUT,
        // Loopback only, as the demo is.
        metrics_secure: false,
        metrics_cert_dir: None,
    };
    let manager = run::start(demo.server().client(), &demo.server().base_url(), config).await?;
    let mut out = std::io::stdout();
    write!(
        out,
        "Kubelet: {}\n{}{}",
        chosen.reason,
        demo.instructions(&options.kubeconfig_out),
        operator_lines(&manager, &args.log_file, &options.kubeconfig_out, &demo.sample)
    )?;
    let operator_url = format!("http://{}", manager.debug_addr);
    let running = tokio::spawn(manager.run(operator::workload, signals));
    let mut ended = None;
    // Restores the terminal when the demo ends.
    let (_reader, keys) = KeyReader::start();
    demo.watch_with_keys(async { ended = Some(running.await) }, keys, &operator_url, &mut out).await?;
    match ended {
        Some(Ok(Ok(()))) | None => {}
        Some(Ok(Err(error))) => return Err(error.into()),
        Some(Err(error)) => return Err(DemoError::Task(error.to_string())),
    }
    writeln!(out, "stopped")?;
    Ok(())
}

/// `dbcluster-operator demo`: logs to `--log-file`, runs [`fn@run`] on a multi-threaded runtime and
/// prints one `demo: …` line on failure.
pub fn main(args: DemoArgs) -> ExitCode {
    let result = logging::init_file(&args.log_file)
        .map_err(|source| DemoError::File { path: args.log_file.clone(), source })
        .and_then(|()| {
            let runtime = tokio::runtime::Runtime::new().map_err(DemoError::Runtime)?;
            runtime.block_on(run(args))
        });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("demo: {error}");
            ExitCode::FAILURE
        }
    }
}
