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

pub mod config;
pub mod state;
pub mod store;
pub mod wal;

pub use config::{StoreConfig, server_options};
