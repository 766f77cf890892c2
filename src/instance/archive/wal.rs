//! `instance wal-archive %p` (PostgreSQL's `archive_command`) and `instance wal-restore %f %p`
//! (`restore_command`).
//!
//! A segment `TTTTTTTTXXXXXXXXYYYYYYYY` is stored as `wal/TTTTTTTTXXXXXXXX/<segment>` (a folder
//! per timeline and 4 GiB of WAL, so listing one range stays short); history files, backup labels
//! and partial segments as `wal/<name>`. The exit status is what PostgreSQL reads: 0 archived (or
//! restored), 1 not (PostgreSQL keeps the segment and retries; for a restore, the file is not
//! there and recovery looks elsewhere).

use std::path::Path;
use std::time::Duration;

use super::config::{StoreConfig, from_lookup};
use super::state::{ArchiveFailure, clear_failure, record_failure};
use super::store::{Put, Store, StoreError, install_crypto_provider};
use crate::instance::settings::Settings;

/// The most one `wal-archive` or `wal-restore` may take before it gives up (PostgreSQL retries).
pub const COMMAND_LIMIT: Duration = Duration::from_secs(45);

/// Why a WAL file could not be archived or restored.
#[derive(Debug, thiserror::Error)]
pub enum WalError {
    /// The name is not one PostgreSQL archives.
    #[error("{0:?} is not a WAL segment, history, backup label or partial segment name")]
    Name(String),
    /// No object store is configured.
    #[error("no object store is configured (DBC_OBJECT_STORE_DESTINATION is unset)")]
    NoStore,
    /// The settings are unusable.
    #[error(transparent)]
    Config(#[from] super::config::ConfigError),
    /// Reading or writing the local file.
    #[error("{what} {path}: {source}")]
    File {
        /// What was done.
        what: &'static str,
        /// The file.
        path: String,
        /// Why it failed.
        source: std::io::Error,
    },
    /// The store.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The command took longer than [`COMMAND_LIMIT`].
    #[error("the object store did not answer within {} s", COMMAND_LIMIT.as_secs())]
    Timeout,
}

fn is_hex(text: &str) -> bool {
    !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit() || (b'A'..=b'F').contains(&b))
}

/// The object name of WAL file `file` (a file name, not a path), if PostgreSQL archives such files.
pub fn object_name(file: &str) -> Option<String> {
    let segment = |name: &str| name.len() == 24 && is_hex(name);
    if segment(file) {
        return Some(format!("wal/{}/{file}", &file[..16]));
    }
    let other = match file.split_once('.') {
        Some((timeline, "history")) => timeline.len() == 8 && is_hex(timeline),
        Some((name, "partial")) => segment(name),
        Some((name, rest)) => {
            segment(name)
                && rest.strip_suffix(".backup").is_some_and(|offset| offset.len() == 8 && is_hex(offset))
        }
        None => false,
    };
    other.then(|| format!("wal/{file}"))
}

fn store_for(settings: &Settings) -> Result<Store, WalError> {
    install_crypto_provider();
    let config: StoreConfig =
        from_lookup(|name| std::env::var(name).ok(), &settings.secrets_dir)?.ok_or(WalError::NoStore)?;
    Ok(Store::new(&config)?)
}

/// Archives the WAL file at `path` (relative to the data directory, PostgreSQL's `%p`).
pub async fn archive(store: &Store, path: &Path) -> Result<Put, WalError> {
    let file = path.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default();
    let name = object_name(&file).ok_or_else(|| WalError::Name(file.clone()))?;
    let plain = tokio::fs::read(path).await.map_err(|source| WalError::File {
        what: "reading",
        path: path.display().to_string(),
        source,
    })?;
    Ok(store.put_new(&name, &plain).await?)
}

/// Restores WAL file `file` (`%f`) to `destination` (`%p`): `false` when the archive has none.
pub async fn restore(store: &Store, file: &str, destination: &Path) -> Result<bool, WalError> {
    let name = object_name(file).ok_or_else(|| WalError::Name(file.to_owned()))?;
    let Some(content) = store.get(&name).await? else { return Ok(false) };
    let write = |source| WalError::File { what: "writing", path: destination.display().to_string(), source };
    let tmp = destination.with_extension("dbc-restoring");
    tokio::fs::write(&tmp, &content).await.map_err(write)?;
    tokio::fs::rename(&tmp, destination).await.map_err(write)?;
    Ok(true)
}

/// `instance wal-archive <path>`: the exit code PostgreSQL reads, the failure recorded for `/status`.
pub async fn archive_command(settings: &Settings, path: &Path) -> u8 {
    let file = path.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default();
    let outcome = async { archive(&store_for(settings)?, path).await };
    let outcome = tokio::time::timeout(COMMAND_LIMIT, outcome).await.unwrap_or(Err(WalError::Timeout));
    match outcome {
        Ok(put) => {
            if let Err(error) = clear_failure(&settings.run_dir) {
                tracing::warn!(%error, "clearing the archiver's failure record failed");
            }
            let already = put == Put::AlreadyThere;
            tracing::info!(wal = %file, already_archived = already, "WAL archived");
            0
        }
        Err(error) => {
            let failure = ArchiveFailure {
                wal: file.clone(),
                time: jiff::Timestamp::now().to_string(),
                error: error.to_string(),
            };
            if let Err(io) = record_failure(&settings.run_dir, &failure) {
                tracing::warn!(error = %io, "recording the archiver's failure failed");
            }
            tracing::error!(wal = %file, %error, "archiving WAL failed");
            1
        }
    }
}

/// `instance wal-restore <file> <path>`: 0 restored, 1 not (absent, or the store failed).
pub async fn restore_command(settings: &Settings, file: &str, destination: &Path) -> u8 {
    let outcome = async { restore(&store_for(settings)?, file, destination).await };
    match tokio::time::timeout(COMMAND_LIMIT, outcome).await.unwrap_or(Err(WalError::Timeout)) {
        Ok(true) => {
            tracing::info!(wal = %file, "WAL restored from the object store");
            0
        }
        Ok(false) => 1,
        Err(error) => {
            tracing::error!(wal = %file, %error, "restoring WAL failed");
            1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wal_files_are_stored_by_timeline_and_range() {
        assert_eq!(
            object_name("000000010000000A000000FF").as_deref(),
            Some("wal/000000010000000A/000000010000000A000000FF")
        );
        assert_eq!(object_name("00000002.history").as_deref(), Some("wal/00000002.history"));
        assert_eq!(
            object_name("000000010000000000000002.00000028.backup").as_deref(),
            Some("wal/000000010000000000000002.00000028.backup")
        );
        assert_eq!(
            object_name("000000010000000000000002.partial").as_deref(),
            Some("wal/000000010000000000000002.partial")
        );
        for bad in [
            "",
            "../etc/passwd",
            "00000001000000000000000g",
            "0000000100000000000000021",
            "x.history",
            "archive_status",
        ] {
            assert_eq!(object_name(bad), None, "{bad}");
        }
    }
}
