//! The instance manager: the operator's own binary run as each PostgreSQL pod's main process
//! (`dbcluster-operator instance …`), in place of a shell script.
//!
//! - `instance copy-binary <dir>` (an init container of the operator's image): copies this
//!   executable into `<dir>` (an emptyDir shared with the `postgres` container).
//! - `instance init` (an init container of the `postgres` image): prepares the data directory for
//!   this pod's role ([`prepare`]).
//! - `instance wal-archive %p`, `instance wal-restore %f %p`: PostgreSQL's archive and restore
//!   commands with an object store ([`archive`]).
//! - `instance base-backup` (the backup Job's pod, with an object store) and `instance recover`
//!   (the restore Job's pod of `spec.bootstrap.recovery`): base backups into the store and
//!   point-in-time recovery from it ([`archive::base_backup`], [`archive::recover`]).
//! - `instance run [-- postgres options]` (the `postgres` container): the same preparation, then
//!   the server as its child, the probes, `/status` and the operator's commands ([`http`],
//!   [`commands`]), `/metrics` ([`metrics`]), the record watcher ([`watcher`]: fencing, following,
//!   credentials re-applied when the mounted Secrets change), SIGTERM → fast shutdown, and the
//!   server's exit status as its own ([`run`]).
//!
//! The environment is [`settings`]'s; the role always comes from the record file
//! `$DBC_CONFIG/primary`. Decisions are pure functions in [`decide`]; the rest are the I/O edges:
//! PostgreSQL's programs ([`tools`], [`postmaster`]), libpq sessions ([`local`]), the Secrets
//! ([`secrets`], [`credentials`]) and `postgresql.auto.conf` ([`auto_conf`]). Logs: one JSON line
//! per event on stderr (`RUST_LOG` filters), nothing on a healthy restart, and PostgreSQL's own
//! messages as JSON lines there too ([`server_log`]): `kubectl logs` shows JSON only.

pub mod archive;
pub mod auto_conf;
pub mod commands;
pub mod credentials;
pub mod decide;
pub mod disk;
pub mod http;
pub mod local;
pub mod metrics;
pub mod postmaster;
pub mod prepare;
pub mod run;
pub mod secrets;
pub mod server_log;
pub mod settings;
pub mod signal;
pub mod status;
pub mod tls;
pub mod tls_connect;
pub mod tools;
pub mod watcher;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// The file name the binary is copied under.
pub const BINARY_NAME: &str = "dbcluster-operator";

/// `dbcluster-operator instance`'s arguments.
#[derive(Debug, clap::Args)]
pub struct InstanceArgs {
    #[command(subcommand)]
    verb: Verb,
}

#[derive(Debug, clap::Subcommand)]
enum Verb {
    /// Prepare the data directory for this pod's role (initdb, clone, rewind), then exit.
    Init,
    /// Prepare, then run PostgreSQL under the manager (probes, /status, the record watcher).
    Run {
        /// Extra `postgres` arguments, after `--`.
        #[arg(last = true)]
        postgres_args: Vec<String>,
    },
    /// Copy this executable into DIR (an emptyDir the postgres container runs it from).
    CopyBinary {
        /// The directory.
        dir: PathBuf,
    },
    /// Archive one WAL file to the object store (PostgreSQL's `archive_command`, `%p`).
    WalArchive {
        /// The file, relative to the data directory.
        path: PathBuf,
    },
    /// Fetch one WAL file from the object store (PostgreSQL's `restore_command`, `%f %p`).
    WalRestore {
        /// The WAL file's name.
        name: String,
        /// Where to write it.
        path: PathBuf,
    },
    /// Take one base backup into the object store (the backup Job's program).
    BaseBackup,
    /// Fill an empty data directory from the object store, replayed to the recovery target and
    /// promoted (the recovery Job's program).
    Recover,
}

/// The log filter without `RUST_LOG`: the manager's events, the driver's warnings only.
const DEFAULT_FILTER: &str = "info,tokio_postgres=warn";

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(DEFAULT_FILTER));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .json()
        .flatten_event(true)
        .with_current_span(false)
        .try_init();
}

/// Runs `dbcluster-operator instance …`.
pub fn main(args: InstanceArgs) -> ExitCode {
    init_logging();
    if let Verb::CopyBinary { dir } = &args.verb {
        return match copy_binary(dir) {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => {
                tracing::error!(%error, dir = %dir.display(), "copying the binary failed");
                ExitCode::FAILURE
            }
        };
    }
    if let Verb::BaseBackup | Verb::Recover = &args.verb {
        let recover = matches!(args.verb, Verb::Recover);
        return match runtime() {
            Ok(runtime) => ExitCode::from(runtime.block_on(async move {
                if recover {
                    archive::recover::command().await
                } else {
                    archive::base_backup::command().await
                }
            })),
            Err(error) => {
                tracing::error!(%error, "starting the async runtime failed");
                ExitCode::FAILURE
            }
        };
    }
    let settings = match settings::Settings::from_env() {
        Ok(settings) => settings,
        Err(error) => {
            tracing::error!(%error, "the environment is incomplete");
            return ExitCode::from(2);
        }
    };
    let runtime = match runtime() {
        Ok(runtime) => runtime,
        Err(error) => {
            tracing::error!(%error, "starting the async runtime failed");
            return ExitCode::FAILURE;
        }
    };
    let outcome = runtime.block_on(async move {
        match args.verb {
            Verb::Init => prepare::prepare(&settings).await.map(|_| 0).map_err(|e| e.to_string()),
            Verb::Run { postgres_args } => {
                let manager = std::env::current_exe().map_err(|e| format!("finding this executable: {e}"))?;
                let timeout = archive::config::archive_timeout(|name| std::env::var(name).ok());
                let args =
                    archive::server_options(&manager, timeout).into_iter().chain(postgres_args).collect();
                run::run(settings, args).await.map_err(|e| e.to_string())
            }
            Verb::WalArchive { path } => Ok(archive::wal::archive_command(&settings, &path).await),
            Verb::WalRestore { name, path } => {
                Ok(archive::wal::restore_command(&settings, &name, &path).await)
            }
            Verb::CopyBinary { .. } | Verb::BaseBackup | Verb::Recover => Ok(0),
        }
    });
    // Children still running (a killed clone) are not waited for.
    runtime.shutdown_background();
    match outcome {
        Ok(code) => ExitCode::from(code),
        Err(error) => {
            tracing::error!(%error, "the instance manager failed");
            ExitCode::FAILURE
        }
    }
}

fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()
}

/// Copies the current executable to `<dir>/dbcluster-operator` (mode 0755, written whole, then
/// renamed into place).
pub fn copy_binary(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let source = std::env::current_exe()?;
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join(format!(".{BINARY_NAME}.tmp"));
    std::fs::copy(&source, &tmp)?;
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755))?;
    std::fs::rename(&tmp, dir.join(BINARY_NAME))
}
