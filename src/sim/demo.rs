//! The `demo` command: the simulated cluster on loopback with a kubeconfig for kubectl, the
//! DatabaseCluster CRD installed, the sample cluster applied, and the clusters' progress printed
//! as a live table like `kubectl get databasecluster -w`, until asked to stop.
//!
//! [`run`] also runs the DatabaseCluster operator in process against the simulated cluster, so
//! the table shows the sample go from Provisioning to Running 3/3 (and whatever kubectl changes
//! afterwards).

use std::future::Future;
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::databasecluster::operator::{OperatorOptions, run_operator};
use crate::sim::resources::{PrinterColumn, crd_kinds};
use crate::sim::{SimConfig, SimError, SimServer, table};

/// The sample the demo applies: the seed's `production-postgres`.
const SAMPLE: &str = include_str!("../../manifests/samples/databasecluster.yaml");

/// Where the demo listens and writes its kubeconfig.
#[derive(Debug, Clone)]
pub struct DemoOptions {
    /// Listening address; port 0 picks a free one.
    pub addr: SocketAddr,
    /// Where to write the kubeconfig for kubectl.
    pub kubeconfig_out: PathBuf,
}

/// Why the demo stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    /// The server did not start.
    #[error(transparent)]
    Start(#[from] SimError),
    /// The kubeconfig could not be written.
    #[error("writing the kubeconfig to {path}: {source}")]
    Kubeconfig {
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
    /// Printing the table failed.
    #[error("printing the table: {0}")]
    Output(#[from] std::io::Error),
}

fn api_error(what: &'static str) -> impl FnOnce(kube::Error) -> DemoError {
    move |source| DemoError::Api { what, source }
}

/// A started demo: the server, with the CRD and the sample in it.
#[derive(Debug)]
pub struct Demo {
    server: SimServer,
    clusters: Api<DynamicObject>,
    columns: Vec<PrinterColumn>,
}

impl Demo {
    /// Starts the server, writes the kubeconfig, installs the CRD and applies the sample.
    pub async fn start(options: &DemoOptions) -> Result<Demo, DemoError> {
        let server = SimServer::start_with(SimConfig { addr: options.addr, ..SimConfig::default() }).await?;
        if let Some(dir) = options.kubeconfig_out.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .map_err(|source| DemoError::Kubeconfig { path: options.kubeconfig_out.clone(), source })?;
        }
        std::fs::write(&options.kubeconfig_out, server.kubeconfig_yaml())
            .map_err(|source| DemoError::Kubeconfig { path: options.kubeconfig_out.clone(), source })?;

        let client = server.client();
        let crd = crate::databasecluster::types::crd();
        Api::<CustomResourceDefinition>::all(client.clone())
            .create(&PostParams::default(), &crd)
            .await
            .map_err(api_error("installing the DatabaseCluster CRD"))?;
        let crd_json = serde_json::to_value(&crd).map_err(|e| DemoError::Manifest(e.to_string()))?;
        let kind = crd_kinds(&crd_json)
            .ok()
            .and_then(|kinds| kinds.into_iter().next())
            .ok_or_else(|| DemoError::Manifest("the CRD serves no version".into()))?;
        let resource = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(&kind.group, &kind.version, &kind.kind),
            &kind.plural,
        );
        let sample: Value = serde_saphyr::from_str(SAMPLE).map_err(|e| DemoError::Manifest(e.to_string()))?;
        let name = sample["metadata"]["name"].as_str().unwrap_or_default().to_string();
        let namespace = sample["metadata"]["namespace"].as_str().unwrap_or("default").to_string();
        Api::<DynamicObject>::namespaced_with(client.clone(), &namespace, &resource)
            .patch(&name, &PatchParams::apply("dbcluster-demo"), &Patch::Apply(&sample))
            .await
            .map_err(api_error("applying the sample DatabaseCluster"))?;
        let clusters = Api::all_with(client, &resource);
        Ok(Demo { server, clusters, columns: kind.printer_columns })
    }

    /// The running server (its address, kubeconfig, faults).
    pub fn server(&self) -> &SimServer {
        &self.server
    }

    /// How to point kubectl at the demo.
    pub fn instructions(&self, kubeconfig: &std::path::Path) -> String {
        format!(
            "Simulated Kubernetes API server listening on {url}\n\
             kubeconfig written to {path}; in another terminal:\n\
             \n  export KUBECONFIG={path}\n  kubectl get databaseclusters\n  kubectl get statefulsets,pods\n\n\
             Press Ctrl-C to stop.\n",
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
        tokio::pin!(stop);
        writeln!(out, "{}", self.header())?;
        let list = self.clusters.list(&ListParams::default()).await.map_err(api_error("listing clusters"))?;
        for c in &list.items {
            writeln!(out, "{}", self.row(c))?;
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
                    event = stream.try_next() => event,
                };
                match event {
                    Ok(Some(WatchEvent::Added(c) | WatchEvent::Modified(c) | WatchEvent::Deleted(c))) => {
                        rv = c.metadata.resource_version.clone().unwrap_or(rv);
                        writeln!(out, "{}", self.row(&c))?;
                        out.flush()?;
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

    fn header(&self) -> String {
        let mut cells = vec!["NAME".to_string()];
        cells.extend(self.columns.iter().filter(|c| c.priority == 0).map(|c| c.name.to_uppercase()));
        format_row(&cells)
    }

    fn row(&self, cluster: &DynamicObject) -> String {
        let obj = serde_json::to_value(cluster).unwrap_or_default();
        let now = jiff::Timestamp::now();
        let mut cells = vec![cluster.metadata.name.clone().unwrap_or_default()];
        for c in self.columns.iter().filter(|c| c.priority == 0) {
            let cell = match (c.column_type.as_str(), table::json_path(&obj, &c.json_path)) {
                (_, None | Some(Value::Null)) => String::new(),
                ("date", Some(Value::String(s))) => table::age(Some(&s), now),
                (_, Some(Value::String(s))) => s,
                (_, Some(v)) => v.to_string(),
            };
            cells.push(cell);
        }
        format_row(&cells)
    }
}

fn format_row(cells: &[String]) -> String {
    let mut line = String::new();
    for (i, cell) in cells.iter().enumerate() {
        let width = if i == 0 { 24 } else { 14 };
        line.push_str(&format!("{cell:<width$}"));
    }
    line.trim_end().to_string()
}

/// Runs the demo until Ctrl-C (or SIGTERM): start, print instructions, print the live table.
pub async fn run(options: DemoOptions) -> Result<(), DemoError> {
    // Handlers are installed before anything is printed, so a signal is never missed.
    let stop = stop_signal()?;
    let demo = Demo::start(&options).await?;
    let stopping = CancellationToken::new();
    let operator = tokio::spawn(run_operator(
        demo.server().client(),
        OperatorOptions::default(),
        stopping.clone().cancelled_owned(),
    ));
    let mut out = std::io::stdout();
    write!(out, "{}", demo.instructions(&options.kubeconfig_out))?;
    // On a signal the operator stops first (finishing its passes), then the server.
    let stop_operator_first = async move {
        stop.await;
        stopping.cancel();
        match operator.await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => tracing::error!(%error, "the operator stopped with an error"),
            Err(error) => tracing::error!(%error, "the operator task failed"),
        }
    };
    demo.watch_until(stop_operator_first, &mut out).await?;
    writeln!(out, "stopped")?;
    Ok(())
}

/// A future that completes on SIGINT or SIGTERM, with the handlers installed now.
#[cfg(unix)]
fn stop_signal() -> std::io::Result<impl Future<Output = ()>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut terminate = signal(SignalKind::terminate())?;
    Ok(async move {
        tokio::select! {
            _ = interrupt.recv() => {}
            _ = terminate.recv() => {}
        }
    })
}

/// A future that completes on Ctrl-C.
#[cfg(not(unix))]
fn stop_signal() -> std::io::Result<impl Future<Output = ()>> {
    Ok(async {
        let _ = tokio::signal::ctrl_c().await;
    })
}
