//! Talking to the instances (the I/O edge): what each one says about itself, and the few commands
//! the operator gives them. Everything is decided elsewhere ([`crate::databasecluster::instances::topology`], [`crate::databasecluster::instances::roll`]).
//!
//! The operator logs in to each instance's pod IP on 5432 with `tokio-postgres` as the superuser
//! (the `<name>-superuser` Secret: observation needs `pg_stat_replication` and `pg_file_settings`;
//! commands need slot management, `pg_reload_conf()` and `ALTER ROLE`). Every connection has a
//! [`CONNECT_TIMEOUT`], so an unreachable instance (a pod IP the operator's host cannot route to,
//! say behind a partition) costs one short wait, and the pass goes on with the instance reported
//! as `unknown`; a pod whose address refuses (the simulator's timer kubelet: nothing listens)
//! costs a round trip. A pass asks its instances all at once. Connections are plain TCP: the
//! instances serve no TLS yet.
//!
//! The operator's sessions commit with `synchronous_commit = local`: what it writes (passwords,
//! roles) is re-applied on any later pass, and must not wait for a synchronous standby that may be
//! the very thing it is repairing.
//!
//! Passwords never travel in SQL text: [`set_password`] sends the SCRAM-SHA-256 verifier computed
//! here.

pub mod roll;
pub mod storage;
pub mod topology;

use std::time::Duration;

use thiserror::Error;
use tokio_postgres::{Client, Config, NoTls};

use crate::databasecluster::specs::config::CONFIG_HASH_PARAMETER;

/// How long a connection attempt to an instance may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// How long one observation (connect and queries) may take in all.
const OBSERVE_TIMEOUT: Duration = Duration::from_secs(5);

/// Where and as whom to log in.
#[derive(Clone)]
pub struct Target {
    /// The instance's address (its pod IP).
    pub host: String,
    /// The port (5432).
    pub port: u16,
    /// The user.
    pub user: String,
    /// The password (never logged).
    pub password: String,
    /// The database.
    pub database: String,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target")
            .field("host", &self.host)
            .field("user", &self.user)
            .field("database", &self.database)
            .finish_non_exhaustive()
    }
}

/// What an instance says about itself.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InstanceFacts {
    /// `pg_is_in_recovery()`: a standby.
    pub in_recovery: bool,
    /// `server_version`, e.g. `15.4`.
    pub version: String,
    /// The configuration hash in the file on disk (`pg_file_settings`), i.e. what a reload applies.
    pub config_hash_on_disk: Option<String>,
    /// The configuration hash in force.
    pub config_hash_applied: Option<String>,
    /// On a standby: how far WAL was received (`pg_last_wal_receive_lsn()`, in bytes); `None` when
    /// it has not streamed since it started, and on a primary.
    pub received_lsn: Option<i64>,
    /// On a standby: how far WAL was replayed (`pg_last_wal_replay_lsn()`, in bytes).
    pub replay_lsn: Option<i64>,
    /// Where its control file's last checkpoint (or restartpoint) starts, in bytes: for a primary
    /// shut down cleanly and started as a standby, its shutdown checkpoint, its last WAL record.
    pub checkpoint_lsn: Option<i64>,
    /// On a primary: its standbys as `pg_stat_replication` lists them.
    pub standbys: Vec<StandbyFact>,
    /// On a primary: its physical replication slots.
    pub slots: Vec<SlotFact>,
    /// The lines of its configuration files that PostgreSQL would not apply, a change that waits
    /// for a restart aside (`pg_file_settings`, which reads the files on disk as they are now).
    pub refused_settings: Vec<RefusedSetting>,
}

/// A line of an instance's configuration that PostgreSQL does not apply: a value it refuses
/// (`work_mem = 'lots'`), or a name it does not know. A server that starts with such a file
/// fails, and a reload applies nothing (an unknown name) or all but that line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RefusedSetting {
    /// The parameter's name as written (empty for a line PostgreSQL could not parse).
    pub name: String,
    /// The value as written.
    pub setting: String,
    /// PostgreSQL's reason (`setting could not be applied`, `unrecognized configuration parameter`).
    pub error: String,
}

/// One row of the primary's `pg_stat_replication`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StandbyFact {
    /// `application_name`: the standby's pod name.
    pub name: String,
    /// `state`, e.g. `streaming`.
    pub state: String,
    /// Bytes of WAL between the primary's current position and the standby's replay position.
    pub lag_bytes: i64,
    /// `sync_state`: `sync` or `quorum` when commits wait for it, `potential` or `async` when not.
    pub sync_state: String,
}

/// One physical replication slot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlotFact {
    /// The slot's name.
    pub name: String,
    /// Whether a standby is connected to it.
    pub active: bool,
}

/// Why an instance could not be asked or told something.
#[derive(Debug, Error)]
pub enum InstanceError {
    /// The instance did not answer in time.
    #[error("{host}: no answer within {timeout:?}")]
    Timeout {
        /// The instance's address.
        host: String,
        /// The limit.
        timeout: Duration,
    },
    /// The instance refused the password (SQLSTATE 28P01).
    #[error("{host}: password refused for {user}")]
    PasswordRefused {
        /// The instance's address.
        host: String,
        /// The user.
        user: String,
    },
    /// Any other failure.
    #[error("{host}: {source}")]
    Postgres {
        /// The instance's address.
        host: String,
        /// The driver's error.
        source: tokio_postgres::Error,
    },
}

impl InstanceError {
    /// Whether the instance refused the password.
    pub fn is_password_refused(&self) -> bool {
        matches!(self, InstanceError::PasswordRefused { .. })
    }
}

fn postgres_error(target: &Target, source: tokio_postgres::Error) -> InstanceError {
    if source.code() == Some(&tokio_postgres::error::SqlState::INVALID_PASSWORD) {
        InstanceError::PasswordRefused { host: target.host.clone(), user: target.user.clone() }
    } else {
        InstanceError::Postgres { host: target.host.clone(), source }
    }
}

/// Opens a session; its connection task ends when the client is dropped.
pub async fn connect(target: &Target) -> Result<Client, InstanceError> {
    let mut config = Config::new();
    config
        .host(&target.host)
        .port(target.port)
        .user(&target.user)
        .password(&target.password)
        .dbname(&target.database)
        .application_name("dbcluster-operator")
        .options("-c synchronous_commit=local")
        .connect_timeout(CONNECT_TIMEOUT);
    let attempt = tokio::time::timeout(CONNECT_TIMEOUT, config.connect(NoTls));
    let (client, connection) = attempt
        .await
        .map_err(|_| InstanceError::Timeout { host: target.host.clone(), timeout: CONNECT_TIMEOUT })?
        .map_err(|source| postgres_error(target, source))?;
    tokio::spawn(async move {
        if let Err(error) = connection.await {
            tracing::debug!(%error, "instance connection ended");
        }
    });
    Ok(client)
}

/// Logs in and out: whether `login` is accepted.
pub async fn check_login(target: &Target) -> Result<(), InstanceError> {
    connect(target).await.map(drop)
}

/// Asks the instance at `login` what it is.
pub async fn observe(target: &Target) -> Result<InstanceFacts, InstanceError> {
    let work = async {
        let client = connect(target).await?;
        let err = |source| postgres_error(target, source);
        // The configuration files are read once (`files`, a CTE used twice is materialised): the
        // hash on disk, and the lines PostgreSQL would not apply. A changed parameter that only a
        // restart applies reports an error too, with `pending_restart` set: a roll applies it, so
        // it is not refused.
        let row = client
            .query_one(
                "WITH files AS (SELECT seqno, name, setting, error FROM pg_file_settings), \
                 refused AS (SELECT f.seqno, coalesce(f.name, '') AS name, coalesce(f.setting, '') AS setting, \
                 f.error FROM files f LEFT JOIN pg_settings s ON s.name = f.name \
                 WHERE f.error IS NOT NULL AND NOT coalesce(s.pending_restart, false)) \
                 SELECT pg_is_in_recovery(), current_setting('server_version'), \
                 current_setting($1, true), \
                 (SELECT setting FROM files WHERE name = $1 ORDER BY seqno DESC LIMIT 1), \
                 pg_wal_lsn_diff(pg_last_wal_receive_lsn(), '0/0')::bigint, \
                 pg_wal_lsn_diff(pg_last_wal_replay_lsn(), '0/0')::bigint, \
                 pg_wal_lsn_diff((pg_control_checkpoint()).checkpoint_lsn, '0/0')::bigint, \
                 ARRAY(SELECT name FROM refused ORDER BY seqno), \
                 ARRAY(SELECT setting FROM refused ORDER BY seqno), \
                 ARRAY(SELECT error FROM refused ORDER BY seqno)",
                &[&CONFIG_HASH_PARAMETER],
            )
            .await
            .map_err(err)?;
        let (names, settings, errors): (Vec<String>, Vec<String>, Vec<String>) =
            (row.get(7), row.get(8), row.get(9));
        let refused_settings = names
            .into_iter()
            .zip(settings)
            .zip(errors)
            .map(|((name, setting), error)| RefusedSetting { name, setting, error })
            .collect();
        let mut facts = InstanceFacts {
            in_recovery: row.get(0),
            version: row.get::<_, String>(1).split_whitespace().next().unwrap_or_default().to_owned(),
            config_hash_applied: row.get::<_, Option<String>>(2).filter(|s| !s.is_empty()),
            config_hash_on_disk: row.get(3),
            received_lsn: row.get(4),
            replay_lsn: row.get(5),
            checkpoint_lsn: row.get(6),
            refused_settings,
            ..InstanceFacts::default()
        };
        if !facts.in_recovery {
            let standbys = client
                .query(
                    "SELECT application_name, coalesce(state, ''), \
                     coalesce(pg_wal_lsn_diff(pg_current_wal_lsn(), replay_lsn), 0)::bigint, \
                     coalesce(sync_state, '') FROM pg_stat_replication",
                    &[],
                )
                .await
                .map_err(err)?;
            facts.standbys = standbys
                .iter()
                .map(|r| StandbyFact {
                    name: r.get(0),
                    state: r.get(1),
                    lag_bytes: r.get(2),
                    sync_state: r.get(3),
                })
                .collect();
            let slots = client
                .query(
                    "SELECT slot_name::text, active FROM pg_replication_slots WHERE slot_type = 'physical'",
                    &[],
                )
                .await
                .map_err(err)?;
            facts.slots = slots.iter().map(|r| SlotFact { name: r.get(0), active: r.get(1) }).collect();
        }
        Ok(facts)
    };
    tokio::time::timeout(OBSERVE_TIMEOUT, work)
        .await
        .map_err(|_| InstanceError::Timeout { host: target.host.clone(), timeout: OBSERVE_TIMEOUT })?
}

/// Creates a physical slot that reserves WAL at once (so a standby cloning over it misses nothing).
pub async fn create_slot(client: &Client, target: &Target, slot: &str) -> Result<(), InstanceError> {
    client
        .execute("SELECT pg_create_physical_replication_slot($1, true)", &[&slot])
        .await
        .map(drop)
        .map_err(|source| postgres_error(target, source))
}

/// Drops a slot no standby uses.
pub async fn drop_slot(client: &Client, target: &Target, slot: &str) -> Result<(), InstanceError> {
    client
        .execute("SELECT pg_drop_replication_slot($1)", &[&slot])
        .await
        .map(drop)
        .map_err(|source| postgres_error(target, source))
}

/// Promotes a standby, waiting up to [`PROMOTE_WAIT_SECONDS`] for it to accept writes.
pub async fn promote(client: &Client, target: &Target) -> Result<bool, InstanceError> {
    client
        .query_one("SELECT pg_promote(true, $1)", &[&PROMOTE_WAIT_SECONDS])
        .await
        .map(|row| row.get(0))
        .map_err(|source| postgres_error(target, source))
}

/// How long [`promote`] waits for the promotion to finish.
pub const PROMOTE_WAIT_SECONDS: i32 = 30;

/// Writes a checkpoint now (so that a shutdown right after has little left to write).
pub async fn checkpoint(client: &Client, target: &Target) -> Result<(), InstanceError> {
    client.batch_execute("CHECKPOINT").await.map_err(|source| postgres_error(target, source))
}

/// Makes the server re-read its configuration files.
pub async fn reload(client: &Client, target: &Target) -> Result<(), InstanceError> {
    client
        .execute("SELECT pg_reload_conf()", &[])
        .await
        .map(drop)
        .map_err(|source| postgres_error(target, source))
}

/// Sets `user`'s password, sent as a SCRAM-SHA-256 verifier (the plaintext stays here).
pub async fn set_password(
    client: &Client,
    target: &Target,
    user: &str,
    password: &str,
) -> Result<(), InstanceError> {
    let verifier = postgres_protocol::password::scram_sha_256(password.as_bytes());
    let statement = format!("ALTER ROLE {} PASSWORD '{verifier}'", quote_ident(user));
    client.batch_execute(&statement).await.map_err(|source| postgres_error(target, source))
}

/// An SQL identifier, double-quoted.
fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_are_quoted() {
        assert_eq!(quote_ident("app"), "\"app\"");
        assert_eq!(quote_ident("a\"b"), "\"a\"\"b\"");
    }

    #[test]
    fn a_login_never_prints_its_password() {
        let target = Target {
            host: "127.0.0.1".into(),
            port: 5432,
            user: "postgres".into(),
            password: "s3cret-UNIQUE".into(),
            database: "postgres".into(),
        };
        assert!(!format!("{target:?}").contains("s3cret-UNIQUE"));
    }
}
