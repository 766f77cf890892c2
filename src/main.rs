//! The `dbcluster-operator` binary: `run` against a cluster, `demo` on the embedded simulated
//! cluster, `crd` to print the CustomResourceDefinition.

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
    Run,
    /// Start the embedded simulated cluster, run the operator on it and show a sample cluster's progress.
    Demo,
    /// Print the DatabaseCluster CustomResourceDefinition as YAML.
    Crd,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Run | Command::Demo | Command::Crd => {
            eprintln!("not implemented yet: {:?}", cli.command);
            ExitCode::FAILURE
        }
    }
}
