//! Preparing the data directory for this instance's role (`instance init`, and again at the start
//! of `instance run`: a container restart does not rerun init containers). Idempotent: data
//! already in its role is kept. The decisions are [`super::decide`]'s; this file observes the
//! facts and carries them out:
//!
//! - primary: initdb into `$PGDATA.new`, then rename (a half-made directory is never taken for
//!   data); remove `standby.signal`; drop the primary settings from `postgresql.auto.conf`.
//! - both: copy the mounted certificates into the run directory ([`super::tls::install`]).
//! - standby: write the password file; compare system identifiers with the recorded primary;
//!   rewind, wait, or join without rewind as [`plan_standby`] says; clone over the slot until it
//!   succeeds (every 2 s); then `standby.signal` and `primary_conninfo`/`primary_slot_name`.
//!
//! Events (one JSON line each): initdb, cloning, re-cloning, rewinding, waiting for the primary,
//! joining without rewind. A restart that keeps its data logs nothing.

use std::path::{Path, PathBuf};
use std::time::Duration;

use thiserror::Error;

use super::auto_conf::{self, Upstream};
use super::decide::{PrimaryPlan, Role, StandbyFacts, StandbyPlan, plan_primary, plan_standby, role};
use super::local::observe_primary;
use super::secrets::{self, Login, SecretError, replication_conninfo, superuser_conninfo};
use super::settings::Settings;
use super::tools::{self, ToolError, clone_keywords};

/// How long to wait before looking at the primary again, or retrying a clone.
const RETRY: Duration = Duration::from_secs(2);

/// The preparation failed (the container exits non-zero and is restarted).
#[derive(Debug, Error)]
pub enum PrepareError {
    /// A file operation on the data directory failed.
    #[error("{what} {path}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The path.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A Secret is unreadable.
    #[error(transparent)]
    Secret(#[from] SecretError),
    /// A program failed.
    #[error(transparent)]
    Tool(#[from] ToolError),
    /// The certificates could not be copied into the run directory.
    #[error(transparent)]
    Tls(#[from] super::tls::TlsFileError),
}

fn io<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> PrepareError + 'a {
    move |source| PrepareError::Io { what, path: path.to_owned(), source }
}

fn has_data(pgdata: &Path) -> bool {
    pgdata.join("PG_VERSION").is_file()
}

/// `$PGDATA.new`: where initdb and clones write before the rename.
fn staging(pgdata: &Path) -> PathBuf {
    let mut name = pgdata.as_os_str().to_owned();
    name.push(".new");
    PathBuf::from(name)
}

fn remove_dir(path: &Path) -> Result<(), PrepareError> {
    match std::fs::remove_dir_all(path) {
        Err(error) if error.kind() != std::io::ErrorKind::NotFound => Err(io("removing", path)(error)),
        _ => Ok(()),
    }
}

/// Prepares the data for the role the record gives this pod; returns that role.
pub async fn prepare(settings: &Settings) -> Result<Role, PrepareError> {
    if let Some(parent) = settings.pgdata.parent() {
        std::fs::create_dir_all(parent).map_err(io("creating", parent))?;
    }
    std::fs::create_dir_all(&settings.run_dir).map_err(io("creating", &settings.run_dir))?;
    super::tls::install(settings)?;
    let recorded = settings.recorded_primary();
    let role = role(&recorded, &settings.pod_name);
    match role {
        Role::Primary => prepare_primary(settings).await?,
        Role::Standby => prepare_standby(settings, &recorded).await?,
    }
    use std::os::unix::fs::PermissionsExt;
    let private = std::fs::Permissions::from_mode(0o700);
    std::fs::set_permissions(&settings.pgdata, private).map_err(io("restricting", &settings.pgdata))?;
    Ok(role)
}

async fn prepare_primary(settings: &Settings) -> Result<(), PrepareError> {
    let pgdata = &settings.pgdata;
    let signal = pgdata.join("standby.signal");
    match plan_primary(has_data(pgdata), signal.exists()) {
        PrimaryPlan::Initdb => {
            tracing::info!("no data: initdb");
            let superuser = secrets::read(settings, Login::Superuser)?;
            let new = staging(pgdata);
            remove_dir(&new)?;
            tools::initdb(&new, &superuser.username).await?;
            remove_dir(pgdata)?;
            std::fs::rename(&new, pgdata).map_err(io("renaming", &new))?;
        }
        PrimaryPlan::LeaveRecovery => {
            tracing::info!("the operator names this instance primary: starting out of recovery");
            std::fs::remove_file(&signal).map_err(io("removing", &signal))?;
        }
        PrimaryPlan::Keep => {}
    }
    auto_conf::write(pgdata, None).map_err(io("writing postgresql.auto.conf in", pgdata))
}

/// This standby's upstream under the record.
pub fn upstream(settings: &Settings, recorded: &str, replication_user: &str) -> Upstream {
    Upstream {
        conninfo: replication_conninfo(settings, recorded, replication_user),
        slot: settings.slot_name(),
    }
}

async fn standby_facts(settings: &Settings, recorded: &str) -> Result<StandbyFacts, PrepareError> {
    let pgdata = &settings.pgdata;
    let superuser = secrets::read(settings, Login::Superuser)?;
    let primary = observe_primary(settings, recorded, &superuser).await;
    if !has_data(pgdata) {
        return Ok(StandbyFacts { primary, ..StandbyFacts::default() });
    }
    // Data another major wrote (its primary was upgraded): its control file is not read.
    let data_major = std::fs::read_to_string(pgdata.join("PG_VERSION")).unwrap_or_default();
    if data_major.trim() != tools::server_major().await? {
        tracing::info!(data_major = data_major.trim(), "the data directory is of another major version");
        return Ok(StandbyFacts { has_data: true, primary, other_major: true, ..StandbyFacts::default() });
    }
    let control = tools::controldata(pgdata).await?;
    Ok(StandbyFacts {
        has_data: true,
        local_system_id: Some(control.system_id),
        primary,
        standby_signal: pgdata.join("standby.signal").exists(),
        clean_shutdown: control.clean_primary_shutdown(),
        other_major: false,
    })
}

async fn prepare_standby(settings: &Settings, recorded: &str) -> Result<(), PrepareError> {
    secrets::write_pgpass(settings)?;
    let pgdata = &settings.pgdata;
    let host = settings.host_of(recorded);
    let mut waiting_logged = false;
    loop {
        let facts = standby_facts(settings, recorded).await?;
        match plan_standby(&facts) {
            StandbyPlan::Clone => break,
            StandbyPlan::Reclone => {
                let (mine, theirs) = (facts.local_system_id, facts.primary.map(|p| p.system_id));
                tracing::info!(
                    ?mine,
                    ?theirs,
                    other_major = facts.other_major,
                    "data belongs to another cluster (system identifiers differ) or major version: re-cloning"
                );
                remove_dir(pgdata)?;
                break;
            }
            StandbyPlan::Keep => break,
            StandbyPlan::JoinWithoutRewind => {
                tracing::info!(primary = %host, "shut down cleanly as primary while the recorded primary is not promoted yet (a switchover): starting as its standby without a rewind");
                break;
            }
            StandbyPlan::WaitForPrimary => {
                if !waiting_logged {
                    tracing::info!(primary = %host, "this instance's data last ran as primary; waiting for the recorded primary to accept writes before rewinding");
                    waiting_logged = true;
                }
                tokio::time::sleep(RETRY).await;
            }
            StandbyPlan::Rewind => {
                rewind_or_discard(settings, recorded).await?;
                break;
            }
        }
    }
    clone_until_done(settings, recorded).await?;
    let signal = pgdata.join("standby.signal");
    std::fs::write(&signal, "").map_err(io("writing", &signal))?;
    let user = secrets::username(settings, Login::Replication)?;
    auto_conf::write(pgdata, Some(&upstream(settings, recorded, &user)))
        .map_err(io("writing postgresql.auto.conf in", pgdata))
}

/// Rewinds onto the recorded primary's timeline; a failed rewind discards the data (re-cloned).
async fn rewind_or_discard(settings: &Settings, recorded: &str) -> Result<(), PrepareError> {
    let host = settings.host_of(recorded);
    tracing::info!(primary = %host, "rewinding onto the recorded primary's timeline");
    let superuser = secrets::read(settings, Login::Superuser)?;
    // pg_rewind reads the source's timeline from its control file: make it current.
    if let Err(error) = super::local::checkpoint_primary(settings, recorded, &superuser).await {
        tracing::warn!(%error, "the recorded primary did not make a checkpoint before the rewind");
    }
    let conninfo = superuser_conninfo(settings, recorded, &superuser.username);
    match tools::rewind(&settings.pgdata, &conninfo).await {
        Ok(()) => tracing::info!("rewound"),
        Err(error) => {
            tracing::warn!(%error, "pg_rewind failed: re-cloning");
            remove_dir(&settings.pgdata)?;
        }
    }
    Ok(())
}

/// Clones the recorded primary over this instance's slot until a clone succeeds (no data only).
async fn clone_until_done(settings: &Settings, recorded: &str) -> Result<(), PrepareError> {
    let pgdata = &settings.pgdata;
    if has_data(pgdata) {
        return Ok(());
    }
    let user = secrets::username(settings, Login::Replication)?;
    let tls = super::tls::replication_keywords(settings);
    let mut keywords = vec![("application_name", settings.pod_name.as_str())];
    keywords.extend(clone_keywords());
    keywords.extend(tls.iter().map(|(k, v)| (*k, v.as_str())));
    let conninfo = secrets::conninfo(settings, recorded, &user, &keywords);
    let (host, slot) = (settings.host_of(recorded), settings.slot_name());
    tracing::info!(primary = %host, %slot, "cloning {host} over slot {slot}");
    let new = staging(pgdata);
    loop {
        remove_dir(&new)?;
        match tools::basebackup(&new, &conninfo, &slot).await {
            Ok(()) => break,
            Err(error) => {
                tracing::warn!(%error, "clone failed; retrying in 2 s");
                tokio::time::sleep(RETRY).await;
            }
        }
    }
    remove_dir(pgdata)?;
    std::fs::rename(&new, pgdata).map_err(io("renaming", &new))
}
