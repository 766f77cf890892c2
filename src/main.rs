//! The `dbcluster-operator` binary: `run` against a cluster, `status` of one DatabaseCluster,
//! `demo` on the embedded simulated cluster (with the `sim` feature, on by default), `crd` to
//! print the CustomResourceDefinition, `install-plugin` to make it `kubectl dbc`; called as
//! `kubectl-dbc`, it is that kubectl plugin.

// No function over 100 lines (clippy.toml sets the threshold).
#![deny(clippy::too_many_lines)]

use std::io::Write;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// jemalloc serves the process's allocations with the `jemalloc` feature (the image's build): the
/// operator's CPU fell by a fifth against glibc's malloc on the e2e bench (see Cargo.toml).
#[cfg(feature = "jemalloc")]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// A PostgreSQL DatabaseCluster operator on a controller runtime written in the open.
#[derive(Debug, Parser)]
#[command(name = "dbcluster-operator", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the operator against a Kubernetes cluster.
    Run(Box<dbcluster_operator::cli::RunArgs>),
    /// Show one DatabaseCluster: phase, conditions, instances (role, version, replication lag),
    /// children, backups, recent Events and the operator's view.
    Status(dbcluster_operator::cli::StatusArgs),
    /// Start the embedded simulated cluster, run the operator on it and show a sample cluster's progress.
    #[cfg(feature = "sim")]
    Demo(dbcluster_operator::cli::demo::DemoArgs),
    /// Run inside a PostgreSQL pod: prepare its data, run and supervise the server, serve its probes.
    Instance(dbcluster_operator::instance::InstanceArgs),
    /// Print the DatabaseCluster CustomResourceDefinition as YAML.
    Crd,
    /// Install this program as the kubectl plugin `kubectl dbc` (a link named kubectl-dbc).
    InstallPlugin {
        /// A directory on PATH (default: ~/.local/bin).
        #[arg(long, value_name = "DIR")]
        dir: Option<std::path::PathBuf>,
    },
}

fn main() -> ExitCode {
    let argv0 = std::env::args_os().next().unwrap_or_default();
    if dbcluster_operator::cli::plugin::called_as_plugin(&argv0) {
        return dbcluster_operator::cli::plugin::main(dbcluster_operator::cli::plugin::PluginCli::parse());
    }
    let cli = Cli::parse();
    match cli.command {
        Command::InstallPlugin { dir } => {
            let home = std::env::var_os("HOME").map(std::path::PathBuf::from).unwrap_or_default();
            dbcluster_operator::cli::plugin::install(&dir.unwrap_or_else(|| home.join(".local/bin")))
        }
        Command::Crd => print_crd(),
        Command::Instance(args) => dbcluster_operator::instance::main(args),
        #[cfg(feature = "sim")]
        Command::Demo(args) => dbcluster_operator::cli::demo::main(args),
        Command::Run(args) => dbcluster_operator::cli::run::main(*args),
        Command::Status(args) => dbcluster_operator::cli::snapshot::main(args),
    }
}

/// Writes the CRD YAML to stdout; a closed pipe (`| head`) is a failure, not a panic.
fn print_crd() -> ExitCode {
    let yaml = dbcluster_operator::databasecluster::api::types::crd_yaml();
    match std::io::stdout().lock().write_all(yaml.as_bytes()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("writing the CRD to stdout: {error}");
            ExitCode::FAILURE
        }
    }
}
