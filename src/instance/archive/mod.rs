//! Continuous WAL archiving to an object store, from the instance manager's side.
//!
//! With `spec.backup.objectStore` the operator gives each instance the store's settings as
//! environment variables and its credentials as files ([`config`]); the manager then starts the
//! server with `archive_mode=on`, `archive_timeout` and an `archive_command` that runs this same
//! binary (`instance wal-archive %p`, [`server_options`]), and PostgreSQL's archiver calls it for
//! each finished segment and history file ([`wal::archive`]). `instance wal-restore %f %p` fetches
//! one back ([`wal::restore`]).
//!
//! Each object is the file compressed (gzip, or as it is), with the SHA-256 of the file's own bytes
//! in its metadata. An upload never overwrites: it is a conditional put (`If-None-Match: *`), and an
//! object already there with the same checksum counts as archived (PostgreSQL retries a segment
//! whose first upload succeeded but whose answer was lost), while one with a different checksum is
//! an error that PostgreSQL keeps retrying and the manager reports. A failure is recorded in the
//! run directory ([`state`]) with the store's message, scrubbed of the credentials; `/status`
//! reports it beside PostgreSQL's own `pg_stat_archiver` counters.
//!
//! Base backups go to the same store ([`base_backup`], `instance base-backup` in the backup Job's
//! pod), described by a manifest written last ([`manifest`]) and pruned by the recovery window
//! ([`retention`]); they stream through multipart uploads ([`stream`]). A new cluster recovers
//! from them to a point in time with `instance recover` ([`recover`], [`target`]).

pub mod base_backup;
pub mod config;
pub mod manifest;
pub mod recover;
pub mod retention;
pub mod state;
pub mod store;
pub mod stream;
pub mod target;
pub mod wal;

pub use config::{StoreConfig, server_options};

use std::time::Duration;

use super::local::Local;

/// How long the wake-up [`wake_checkpointer`] asks for may take.
const CHECKPOINT_LIMIT: Duration = Duration::from_secs(30);

/// Wakes PostgreSQL's checkpointer on a primary that archives WAL. The checkpointer forces
/// `archive_timeout`'s segment switches, but it starts during recovery and then sleeps for
/// `checkpoint_timeout` (5 minutes by default) without regard to `archive_timeout`; a
/// `CHECKPOINT` request wakes it, so the first switch comes within `archive_timeout` of a write.
/// A failure is logged: the switches then start at the checkpointer's next wake-up.
pub async fn wake_checkpointer(local: &Local) {
    if config::archive_timeout(|name| std::env::var(name).ok()).is_none() {
        return;
    }
    let work = |c: tokio_postgres::Client| async move { c.batch_execute("CHECKPOINT").await };
    if let Err(error) = local.with(CHECKPOINT_LIMIT, work).await {
        tracing::warn!(%error, "waking the checkpointer for archive_timeout failed");
    }
}
