//! The record watcher, while the server runs: every second it reads `$DBC_CONFIG/primary` (the
//! kubelet refreshes the mounted ConfigMap) and acts as [`super::decide::watch`] says:
//!
//! - a server out of recovery that the record no longer names is fenced: fast shutdown (SIGINT to
//!   the postmaster); the manager then exits with the server's status, the container restarts,
//!   and its preparation rejoins it as the new primary's standby.
//! - a standby whose record names a new primary rewrites the password file and `primary_conninfo`
//!   / `primary_slot_name`, and reloads (SIGHUP: works even while the server does not accept
//!   connections yet); `recovery_target_timeline = latest` makes it follow the promotion.
//!
//! A server that does not answer in time is left alone for this tick; one that answers "starting
//! up" (SQLSTATE 57P03) is in recovery.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::auto_conf;
use super::decide::{WatchAction, watch};
use super::http::Shared;
use super::local::{ADMIN_LIMIT, ClientError};
use super::secrets::{self, Login};
use super::signal::{self, Signal};

/// How often the record is read.
const TICK: Duration = Duration::from_secs(1);

/// Whether the server is in recovery: `None` when it did not say.
fn recovery(answer: Result<bool, ClientError>) -> Option<bool> {
    match answer {
        Ok(in_recovery) => Some(in_recovery),
        Err(ClientError::Postgres { source, .. })
            if source.code() == Some(&tokio_postgres::error::SqlState::CANNOT_CONNECT_NOW) =>
        {
            Some(true)
        }
        Err(_) => None,
    }
}

/// Watches until `stop` is cancelled or the server was fenced.
pub async fn run(shared: Arc<Shared>, postmaster: u32, stop: CancellationToken) {
    let settings = &shared.settings;
    let mut followed = settings.recorded_primary();
    let mut ticks = tokio::time::interval(TICK);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = ticks.tick() => {}
        }
        let recorded = settings.recorded_primary();
        if recorded == settings.pod_name {
            continue;
        }
        let in_recovery = recovery(shared.local.in_recovery(ADMIN_LIMIT).await);
        match watch(&settings.pod_name, &recorded, &followed, in_recovery) {
            WatchAction::Nothing => {}
            WatchAction::Fence { recorded } => {
                tracing::warn!(%recorded, "fencing: the record names another primary; fast shutdown, then rejoin as its standby");
                if let Err(error) = signal::send(postmaster, Signal::FastShutdown) {
                    tracing::error!(%error, "fencing: signalling the postmaster failed");
                }
                return;
            }
            WatchAction::Follow { recorded } => match follow(&shared, &recorded, postmaster) {
                Ok(()) => {
                    tracing::info!(%recorded, "following the new primary");
                    followed = recorded;
                }
                Err(error) => tracing::warn!(%recorded, %error, "following the new primary failed; retrying"),
            },
        }
    }
}

/// Following a new primary failed.
#[derive(Debug, thiserror::Error)]
enum FollowError {
    /// The Secrets or the password file.
    #[error(transparent)]
    Secret(#[from] secrets::SecretError),
    /// Writing `postgresql.auto.conf`.
    #[error("writing postgresql.auto.conf: {0}")]
    Conf(std::io::Error),
    /// Signalling the postmaster.
    #[error("reloading the server: {0}")]
    Reload(std::io::Error),
}

/// Re-points this standby at `recorded` and reloads.
fn follow(shared: &Shared, recorded: &str, postmaster: u32) -> Result<(), FollowError> {
    let settings = &shared.settings;
    secrets::write_pgpass(settings)?;
    let user = secrets::read(settings, Login::Replication)?.username;
    let upstream = super::prepare::upstream(settings, recorded, &user);
    auto_conf::write(&settings.pgdata, Some(&upstream)).map_err(FollowError::Conf)?;
    signal::send(postmaster, Signal::Reload).map_err(FollowError::Reload)
}
