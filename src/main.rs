//! The `dbcluster-operator` binary: `run` against a cluster, `demo` on the embedded simulated
//! cluster, `crd` to print the CustomResourceDefinition.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

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
    /// Start the embedded simulated cluster, run the operator on it and show a sample cluster's progress.
    Demo(DemoArgs),
    /// Print the DatabaseCluster CustomResourceDefinition as YAML.
    Crd,
}

/// Options of `demo`.
#[derive(Debug, clap::Args)]
struct DemoArgs {
    /// Address of the simulated API server (loopback; port 0 picks a free one).
    #[arg(long, default_value = "127.0.0.1:0")]
    addr: SocketAddr,
    /// Where to write the kubeconfig for kubectl.
    #[arg(long, default_value = "target/demo.kubeconfig")]
    kubeconfig_out: PathBuf,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Crd => print_crd(),
        Command::Demo(args) => demo(args),
        Command::Run(args) => dbcluster_operator::cli::run::main(*args),
    }
}

/// Writes the CRD YAML to stdout; a closed pipe (`| head`) is a failure, not a panic.
fn print_crd() -> ExitCode {
    let yaml = dbcluster_operator::databasecluster::types::crd_yaml();
    match std::io::stdout().lock().write_all(yaml.as_bytes()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("writing the CRD to stdout: {error}");
            ExitCode::FAILURE
        }
    }
}

/// Runs the demo on a multi-threaded runtime until Ctrl-C.
fn demo(args: DemoArgs) -> ExitCode {
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(error) => {
            eprintln!("starting the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let options =
        dbcluster_operator::sim::demo::DemoOptions { addr: args.addr, kubeconfig_out: args.kubeconfig_out };
    match runtime.block_on(dbcluster_operator::sim::demo::run(options)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("demo: {error}");
            ExitCode::FAILURE
        }
    }
}
