//! `instance run`: the container's first process. Prepares the data for its role, starts the
//! postmaster as its child, applies the mounted Secrets' passwords on a primary, serves the probes
//! and `/status`, watches the record, turns SIGTERM (and SIGINT) into a fast shutdown, and exits
//! with the server's status once the postmaster is gone.
//!
//! Nothing starts while the data volume is full ([`disk`]): the manager waits for room.
//!
//! The listener is bound before the preparation (a taken port fails at once; the probes fail
//! meanwhile, as the server does not answer). A SIGTERM during the preparation ends it (children
//! killed) with status 143.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use thiserror::Error;
use tokio::signal::unix::{SignalKind, signal};
use tokio_util::sync::CancellationToken;

use crate::runtime::observe::tls::ServedCertificate;

use super::credentials::{self, ApplyError};
use super::decide::{Applied, Role};
use super::disk;
use super::http::{self, Endpoints, Shared};
use super::local::{Local, PROBE_LIMIT};
use super::postmaster;
use super::prepare::{PrepareError, prepare};
use super::secrets::{self, Login, SecretError};
use super::server_log;
use super::settings::Settings;
use super::signal::{self as sig, Signal};

/// How often the start waits for the server to answer before applying the credentials.
const STARTUP_POLL: Duration = Duration::from_millis(200);
/// How long the server's last log lines may take to arrive once it exited.
const LOG_DRAIN: Duration = Duration::from_secs(2);

/// `instance run` could not run the server.
#[derive(Debug, Error)]
pub enum RunError {
    /// Installing the signal handlers, binding the listener or starting postgres.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// Why.
        source: std::io::Error,
    },
    /// A Secret is unreadable.
    #[error(transparent)]
    Secret(#[from] SecretError),
    /// The preparation failed.
    #[error(transparent)]
    Prepare(#[from] PrepareError),
    /// The server certificate the status port serves is missing or unusable.
    #[error("the status port's certificate: {0}")]
    Tls(#[from] crate::runtime::observe::tls::TlsError),
}

fn io(what: &'static str) -> impl FnOnce(std::io::Error) -> RunError {
    move |source| RunError::Io { what, source }
}

/// Runs the instance; the exit code to leave with.
pub async fn run(settings: Settings, extra: Vec<String>) -> Result<u8, RunError> {
    let mut term = signal(SignalKind::terminate()).map_err(io("installing the SIGTERM handler"))?;
    let mut int = signal(SignalKind::interrupt()).map_err(io("installing the SIGINT handler"))?;
    let listener =
        http::bind(&settings, settings.status_port).await.map_err(io("binding the status listener"))?;
    let metrics_listener =
        http::bind(&settings, settings.metrics_port).await.map_err(io("binding the metrics listener"))?;
    let superuser = secrets::read(&settings, Login::Superuser)?.username;
    let local = Local::new(&settings, &superuser);
    let metrics = super::metrics::Exporter::new(&settings, &local);
    let shared = Arc::new(Shared::new(settings, local, metrics));
    let stop = CancellationToken::new();
    // The status port serves the cluster's server certificate, read again when it changes.
    let certificate_dir = shared.settings.secrets_dir.join(super::tls::SERVER_DIR);
    let certificate = Arc::new(ServedCertificate::load(Some(&certificate_dir))?);
    tokio::spawn(certificate.clone().watch(stop.clone()));
    let tls = Some(certificate.acceptor());
    tokio::spawn(http::serve(listener, shared.clone(), Endpoints::Status, tls, stop.clone()));
    tokio::spawn(http::serve(metrics_listener, shared.clone(), Endpoints::Metrics, None, stop.clone()));
    let _stop_on_exit = stop.clone().drop_guard();

    tokio::select! {
        () = wait_for_room(&shared.settings) => {}
        _ = term.recv() => return Ok(143),
        _ = int.recv() => return Ok(130),
    }
    let role = tokio::select! {
        prepared = prepare(&shared.settings) => prepared?,
        _ = term.recv() => return Ok(143),
        _ = int.recv() => return Ok(130),
    };
    let mut child = postmaster::spawn(&shared.settings, &extra).map_err(io("starting postgres"))?;
    let logs = forward_logs(&mut child);
    let Some(pid) = child.id() else {
        // The child was already reaped: only possible once it exited.
        let status = child.wait().await.map_err(io("waiting for postgres"))?;
        return Ok(postmaster::exit_code(status));
    };
    tokio::spawn(super::watcher::run(shared.clone(), pid, stop.clone()));
    let startup = start(&shared, role, pid);
    tokio::pin!(startup);
    let mut starting = true;
    let status = loop {
        tokio::select! {
            status = child.wait() => break status.map_err(io("waiting for postgres"))?,
            () = &mut startup, if starting => starting = false,
            _ = term.recv() => fast_shutdown(pid, "SIGTERM"),
            _ = int.recv() => fast_shutdown(pid, "SIGINT"),
        }
    };
    // The server's last lines (its children may hold the pipes a moment longer).
    let _ = tokio::time::timeout(LOG_DRAIN, futures::future::join_all(logs)).await;
    let code = postmaster::exit_code(status);
    if code != 0 {
        tracing::warn!(code, "postgres exited unsuccessfully");
    }
    Ok(code)
}

/// Returns once the data volume has room for the server ([`disk`]), saying once why it waits.
async fn wait_for_room(settings: &Settings) {
    let mut said = false;
    while let Some(space) = disk::full(&settings.pgdata) {
        if !said {
            tracing::warn!(available = space.available, total = space.total, "{}", disk::describe(&space));
            said = true;
        }
        tokio::time::sleep(disk::LOOK_EVERY).await;
    }
    if said {
        tracing::info!("the data volume has room again: starting PostgreSQL");
    }
}

/// Forwards the server's stdout and stderr as JSON lines ([`server_log`]).
fn forward_logs(child: &mut tokio::process::Child) -> Vec<tokio::task::JoinHandle<()>> {
    let mut tasks = Vec::new();
    if let Some(stderr) = child.stderr.take() {
        tasks.push(tokio::spawn(server_log::forward(stderr)));
    }
    if let Some(stdout) = child.stdout.take() {
        tasks.push(tokio::spawn(server_log::forward(stdout)));
    }
    tasks
}

fn fast_shutdown(pid: u32, why: &str) {
    tracing::info!("{why}: fast shutdown");
    if let Err(error) = sig::send(pid, Signal::FastShutdown) {
        tracing::warn!(%error, "signalling the postmaster failed");
    }
}

/// Waits for the server to answer, applies the credentials on a primary (a failure shuts the
/// server down: the container restarts and tries again) or writes a standby's password file
/// again (a failure leaves it to the watcher), then marks the instance started.
async fn start(shared: &Shared, role: Role, pid: u32) {
    while shared.local.ping(PROBE_LIMIT).await.is_err() {
        tokio::time::sleep(STARTUP_POLL).await;
    }
    let applied = match role {
        Role::Primary => match credentials::apply(&shared.settings, &shared.local).await {
            Ok(versions) => {
                super::archive::wake_checkpointer(&shared.local).await;
                Some(versions)
            }
            Err(error) => {
                report_apply_failure(&error);
                fast_shutdown(pid, "applying the credentials failed");
                return;
            }
        },
        Role::Standby => credentials::write_password_file(&shared.settings)
            .inspect_err(|error| tracing::warn!(%error, "writing the password file failed; retrying"))
            .ok(),
    };
    *shared.applied.lock() = applied.map(|versions| Applied { role, versions });
    shared.started.store(true, Ordering::Release);
}

fn report_apply_failure(error: &ApplyError) {
    tracing::error!(%error, "applying the credentials failed");
}
