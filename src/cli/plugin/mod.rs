//! `kubectl dbc …`: the same binary as a kubectl plugin. kubectl runs `kubectl-dbc` from `PATH`
//! for `kubectl dbc`; `dbcluster-operator install-plugin` puts that name there as a link to this
//! program, and `main` parses the plugin's commands when it is called by that name.
//!
//! The commands, as CloudNativePG's users know them from `kubectl cnpg`:
//! - `status NAME`: what `dbcluster-operator status` shows;
//! - `promote NAME POD`: a switchover to `POD` (sets `spec.primary`);
//! - `backup NAME`: an on-demand backup (a new `backup-now` token);
//! - `restart NAME`: a rolling restart, standbys first and the primary by switchover (a new
//!   `restartedAt` annotation, which the operator copies into the pod template);
//! - `hibernate NAME on|off`: no pods, volumes kept (`replicas: 0`, the count remembered in an
//!   annotation), and back;
//! - `psql NAME [-- ARGS]`: `kubectl exec` of `psql` in the primary, as the superuser over the
//!   local socket;
//! - `report NAME`: a support bundle (the cluster, its children, Events, the operator's view of
//!   the key, the pods' recent logs; never a Secret's data) in one `.tar.gz`.
//!
//! Each command is a function of a [`kube::Client`] and its arguments ([`actions`], [`report`]),
//! so tests drive them against the simulator; [`main`] only parses and connects.

pub mod actions;
pub mod report;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use kube::Client;

use crate::cli::{StatusArgs, cluster, snapshot};

/// The name kubectl looks for on `PATH` for `kubectl dbc`.
pub const PLUGIN_NAME: &str = "kubectl-dbc";

/// `kubectl dbc`: DatabaseClusters from kubectl.
#[derive(Debug, Parser)]
#[command(name = "kubectl dbc", version, about = "kubectl dbc: manage dbcluster-operator's DatabaseClusters")]
pub struct PluginCli {
    /// Path to a kubeconfig file (before $KUBECONFIG and ~/.kube/config).
    #[arg(long, global = true, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use (default: the current context).
    #[arg(long, global = true, value_name = "NAME")]
    pub context: Option<String>,
    /// The cluster's namespace (default: the kubeconfig context's).
    #[arg(long, short = 'n', global = true, value_name = "NAMESPACE")]
    pub namespace: Option<String>,
    /// What to do.
    #[command(subcommand)]
    pub command: PluginCommand,
}

/// `on` or `off`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Switch {
    /// Hibernate.
    On,
    /// Wake up.
    Off,
}

/// The plugin's commands (see the module docs).
#[derive(Debug, Subcommand)]
pub enum PluginCommand {
    /// Show the cluster: phase, conditions, instances, children, backups, Events, the operator's view.
    Status {
        /// The DatabaseCluster.
        name: String,
        /// Where the operator serves /debug/queue.
        #[arg(long, value_name = "URL", default_value = "http://127.0.0.1:8082")]
        operator_url: String,
    },
    /// Switch the primary over to POD (sets spec.primary).
    Promote {
        /// The DatabaseCluster.
        name: String,
        /// The instance to make the primary (a pod name, or its ordinal).
        pod: String,
    },
    /// Take an on-demand backup now (spec.backup must be set).
    Backup {
        /// The DatabaseCluster.
        name: String,
    },
    /// Restart every instance, standbys first and the primary by switchover.
    Restart {
        /// The DatabaseCluster.
        name: String,
    },
    /// Hibernate the cluster (no pods, volumes kept) or wake it up.
    Hibernate {
        /// The DatabaseCluster.
        name: String,
        /// `on` or `off`.
        state: Switch,
    },
    /// Open psql in the primary as the superuser (`kubectl exec`); arguments after `--` go to psql.
    Psql {
        /// The DatabaseCluster.
        name: String,
        /// psql's arguments.
        #[arg(last = true)]
        args: Vec<String>,
    },
    /// Write a support bundle: the cluster, its children, Events, the operator's view and the
    /// pods' recent logs (never a Secret's data).
    Report {
        /// The DatabaseCluster.
        name: String,
        /// The archive to write (default: `report-NAMESPACE-NAME.tar.gz`).
        #[arg(long, short = 'o', value_name = "PATH")]
        output: Option<PathBuf>,
        /// Where the operator serves /debug/queue.
        #[arg(long, value_name = "URL", default_value = "http://127.0.0.1:8082")]
        operator_url: String,
    },
}

/// Whether this program was called by the plugin's name (`argv[0]`).
pub fn called_as_plugin(argv0: &std::ffi::OsStr) -> bool {
    std::path::Path::new(argv0).file_name().is_some_and(|name| name == PLUGIN_NAME)
}

/// Runs one plugin command; one `error: …` line and exit 1 on failure.
pub fn main(cli: PluginCli) -> ExitCode {
    if let PluginCommand::Status { name, operator_url } = &cli.command {
        let args = StatusArgs {
            name: name.clone(),
            namespace: cli.namespace.clone(),
            kubeconfig: cli.kubeconfig.clone(),
            context: cli.context.clone(),
            operator_url: operator_url.clone(),
            operator_token_file: None,
            operator_ca_file: None,
        };
        return snapshot::main(args);
    }
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(said) => {
            println!("{said}");
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: PluginCli) -> Result<String, actions::PluginError> {
    let source = cluster::source_from_environment(cli.kubeconfig.as_deref());
    let config = cluster::load_config(&source, cli.context.as_deref())
        .await
        .map_err(|e| actions::PluginError::Connect(cluster::one_line(&e)))?;
    let namespace = cli.namespace.clone().unwrap_or_else(|| config.default_namespace.clone());
    let client =
        Client::try_from(config).map_err(|e| actions::PluginError::Connect(cluster::one_line(&e)))?;
    let now = jiff::Timestamp::now();
    match cli.command {
        PluginCommand::Status { .. } => unreachable!("handled before connecting"),
        PluginCommand::Promote { name, pod } => actions::promote(&client, &namespace, &name, &pod).await,
        PluginCommand::Backup { name } => actions::backup(&client, &namespace, &name, now).await,
        PluginCommand::Restart { name } => actions::restart(&client, &namespace, &name, now).await,
        PluginCommand::Hibernate { name, state } => {
            actions::hibernate(&client, &namespace, &name, state == Switch::On).await
        }
        PluginCommand::Psql { name, args } => {
            let primary = actions::primary_of(&client, &namespace, &name).await?;
            actions::exec_psql(cli.kubeconfig.as_deref(), cli.context.as_deref(), &namespace, &primary, &args)
        }
        PluginCommand::Report { name, output, operator_url } => {
            let output = output.unwrap_or_else(|| PathBuf::from(format!("report-{namespace}-{name}.tar.gz")));
            let operator = snapshot::Operator::at(operator_url);
            report::write(&client, &namespace, &name, &operator, &output).await
        }
    }
}

/// `dbcluster-operator install-plugin`: links `DIR/kubectl-dbc` to this program, so that
/// `kubectl dbc …` runs it (DIR must be on `PATH`).
pub fn install(dir: &std::path::Path) -> ExitCode {
    let link = dir.join(PLUGIN_NAME);
    let result = std::env::current_exe().and_then(|program| {
        std::fs::create_dir_all(dir)?;
        if link.symlink_metadata().is_ok() {
            std::fs::remove_file(&link)?;
        }
        std::os::unix::fs::symlink(&program, &link)
    });
    match result {
        Ok(()) => {
            println!(
                "installed {}: `kubectl dbc --help` runs it when {} is on PATH",
                link.display(),
                dir.display()
            );
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("error: linking {}: {error}", link.display());
            ExitCode::FAILURE
        }
    }
}
