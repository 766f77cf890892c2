//! The `dbcluster-operator` binary: `run` against a cluster, `demo` on the embedded simulated
//! cluster, `crd` to print the CustomResourceDefinition.

use std::io::Write;
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
    Demo,
    /// Print the DatabaseCluster CustomResourceDefinition as YAML.
    Crd,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Crd => print_crd(),
        Command::Run(args) => dbcluster_operator::cli::run::main(*args),
        Command::Demo => {
            eprintln!("not implemented yet: {:?}", cli.command);
            ExitCode::FAILURE
        }
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
