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
//! - the mounted Secrets are compared with what was last applied ([`super::decide::credentials_action`],
//!   by their versions): a primary sets the passwords again, a standby rewrites its password file.
//!   So a Secret the operator regenerates, or a user rotates, reaches the database without the
//!   operator logging in; `/status` reports the versions applied.
//!
//! - the mounted certificates are copied again when they changed, and the server reloaded when
//!   its own did (a renewal or a user's replacement, with no restart).
//!
//! A server that does not answer in time is left alone for this tick; one that answers "starting
//! up" (SQLSTATE 57P03) is in recovery.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::auto_conf;
use super::credentials::{self, Mounted};
use super::decide::{Applied, CredentialsAction, Role, WatchAction, credentials_action, role, watch};
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
        refresh_certificates(settings, postmaster);
        let recorded = settings.recorded_primary();
        let role = role(&recorded, &settings.pod_name);
        if role == Role::Primary {
            refresh_credentials(&shared, role, None).await;
            continue;
        }
        let in_recovery = recovery(shared.local.in_recovery(ADMIN_LIMIT).await);
        refresh_credentials(&shared, role, in_recovery).await;
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

/// Applies the mounted Secrets again when they are not the ones applied in `role`
/// ([`credentials_action`]); `in_recovery` is what the server said this tick, if it was asked
/// (a primary is asked only when something is to apply).
async fn refresh_credentials(shared: &Shared, role: Role, in_recovery: Option<bool>) {
    let settings = &shared.settings;
    let mounted = match Mounted::read(settings) {
        Ok(mounted) => mounted.versions(),
        Err(error) => {
            tracing::debug!(%error, "the mounted Secrets are unreadable this tick");
            return;
        }
    };
    let applied = shared.applied.lock().clone();
    let started = shared.started.load(Ordering::Acquire);
    // What the decision would say without asking the server: spare the primary a session.
    if !started || applied.as_ref().is_some_and(|a| a.role == role && a.versions == mounted) {
        return;
    }
    let in_recovery = match in_recovery {
        Some(known) => Some(known),
        None => recovery(shared.local.in_recovery(ADMIN_LIMIT).await),
    };
    let versions = match credentials_action(role, started, in_recovery, &mounted, applied.as_ref()) {
        CredentialsAction::Nothing => return,
        CredentialsAction::Apply => {
            credentials::apply(settings, &shared.local).await.map_err(|e| e.to_string())
        }
        CredentialsAction::WritePasswordFile => {
            credentials::write_password_file(settings).map_err(|e| e.to_string())
        }
    };
    match versions {
        Ok(versions) => {
            tracing::info!(
                role = role.as_str(),
                "credentials applied from the mounted Secrets (changed, or a new role)"
            );
            *shared.applied.lock() = Some(Applied { role, versions });
        }
        Err(error) => tracing::warn!(%error, "applying the changed Secrets failed; retrying"),
    }
}

/// Copies the mounted certificates that changed ([`super::tls::install`]) and reloads the server
/// when its own did: PostgreSQL re-reads its certificate, key and CA on `SIGHUP`, so a renewed
/// or replaced certificate needs no restart (sessions open keep theirs).
fn refresh_certificates(settings: &super::settings::Settings, postmaster: u32) {
    match super::tls::install(settings) {
        Ok(false) => {}
        Ok(true) => {
            tracing::info!("the mounted server certificate changed: reloading the server");
            if let Err(error) = signal::send(postmaster, Signal::Reload) {
                tracing::warn!(%error, "reloading the server failed");
            }
        }
        Err(error) => tracing::debug!(%error, "the mounted certificates are unreadable this tick"),
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
    let user = secrets::username(settings, Login::Replication)?;
    let upstream = super::prepare::upstream(settings, recorded, &user);
    auto_conf::write(&settings.pgdata, Some(&upstream)).map_err(FollowError::Conf)?;
    signal::send(postmaster, Signal::Reload).map_err(FollowError::Reload)
}
