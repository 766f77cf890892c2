//! `instance base-backup`: one base backup of the cluster into the object store, run by the backup
//! Job's pod (the CronJob's, or an on-demand one) instead of `scripts/backup.sh` when
//! `spec.backup.objectStore` is set.
//!
//! 1. Source: the first of `$DBC_BACKUP_HOSTS` (the `-ro` Service, then `-rw`) that answers a
//!    replication connection, so a streaming standby is preferred and the primary is the fallback;
//!    over TLS (verify-full) as the replication user, by its client certificate.
//! 2. `pg_basebackup -Ft -D - -X fetch` (the WAL of its own span inside, so it is consistent on
//!    its own as well; compressed by the server's client with `-z` unless the
//!    store's compression is `none`), its output streamed straight into a multipart upload
//!    `base/<name>/data.tar[.gz]` ([`super::stream`]): never the whole backup in memory or on disk.
//! 3. The WAL the backup needs (start to end segment, from pg_basebackup's log) is waited for in
//!    the archive (the primary archives it within `archiveTimeout`); only then the manifest
//!    `base/<name>/backup.json` is written, never overwriting ([`super::manifest`]).
//! 4. Retention by the recovery window ([`super::retention`]), then the report: one line of JSON
//!    as the container's termination message (name, times, size, source, the first
//!    recoverability point), which is how the operator learns of it.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use jiff::Timestamp;
use serde::Serialize;
use tokio::io::AsyncReadExt;
use tokio::process::Command;

use super::config::{archive_timeout, from_lookup};
use super::manifest::{BackupManifest, BackupWal, backup_name, segments_between};
use super::retention::{self, Catalog};
use super::store::{Store, StoreError, install_crypto_provider, suffix};
use super::wal::object_name;
use crate::databasecluster::api::object_store::Compression;

/// How long one part upload or a download request may take.
pub const TRANSFER_TIMEOUT: Duration = Duration::from_secs(1800);
/// The WAL wait beyond twice `archiveTimeout`.
const WAL_WAIT_MARGIN: Duration = Duration::from_secs(120);
/// How often the archive is looked at while waiting.
const WAL_POLL: Duration = Duration::from_secs(2);

/// Why a base backup failed (the termination message says it).
#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    /// A variable is missing.
    #[error("the environment variable {0} is required")]
    Missing(&'static str),
    /// The store's settings.
    #[error(transparent)]
    Config(#[from] super::config::ConfigError),
    /// The store.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// No instance answered.
    #[error("no instance answers at {hosts}: {last_error}")]
    NoSource {
        /// The hosts tried.
        hosts: String,
        /// The last one's error.
        last_error: String,
    },
    /// A local file or program.
    #[error("{what}: {source}")]
    Io {
        /// What was done.
        what: String,
        /// Why it failed.
        source: std::io::Error,
    },
    /// pg_basebackup failed.
    #[error("pg_basebackup from {host} failed: {message}")]
    BaseBackup {
        /// The source.
        host: String,
        /// Its last line.
        message: String,
    },
    /// The WAL the backup needs did not reach the archive in time.
    #[error(
        "WAL segment {segment}, which the backup needs, was not archived within {seconds} s; the backup does not count"
    )]
    WalMissing {
        /// The first missing segment.
        segment: String,
        /// How long was waited.
        seconds: u64,
    },
    /// Serialising the manifest.
    #[error("writing the manifest: {0}")]
    Manifest(#[from] serde_json::Error),
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> BackupError {
    let what = what.into();
    move |source| BackupError::Io { what, source }
}

/// The backup Job's environment.
#[derive(Debug)]
struct Env {
    hosts: String,
    port: String,
    secrets: PathBuf,
    run: PathBuf,
}

impl Env {
    fn from_env() -> Result<Env, BackupError> {
        let get = |name: &'static str| std::env::var(name).ok().filter(|v| !v.is_empty());
        Ok(Env {
            hosts: get("DBC_BACKUP_HOSTS").ok_or(BackupError::Missing("DBC_BACKUP_HOSTS"))?,
            port: get("DBC_PORT").unwrap_or_else(|| "5432".to_owned()),
            secrets: get("DBC_SECRETS").ok_or(BackupError::Missing("DBC_SECRETS"))?.into(),
            run: get("DBC_RUN").ok_or(BackupError::Missing("DBC_RUN"))?.into(),
        })
    }

    /// A libpq connection string to `host` as the replication user, by its client certificate,
    /// verify-full.
    fn conninfo(&self, host: &str) -> String {
        let secrets = self.secrets.display();
        format!(
            "host={host} port={} user=replicator sslmode=verify-full sslrootcert={secrets}/server-ca/ca.crt \
             sslcert={secrets}/replication-tls/tls.crt sslkey={} connect_timeout=5 application_name=dbc-backup",
            self.port,
            self.run.join("client.key").display()
        )
    }
}

/// The store for the backup programs: the environment's settings, long transfer timeouts.
pub fn transfer_store(secrets: &Path) -> Result<Store, BackupError> {
    install_crypto_provider();
    let config = from_lookup(|name| std::env::var(name).ok(), secrets)?
        .ok_or(BackupError::Missing(super::config::ENV_DESTINATION))?;
    Ok(Store::with_request_timeout(&config, TRANSFER_TIMEOUT)?)
}

/// The termination message of a complete backup.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Report<'a> {
    name: &'a str,
    start_time: &'a str,
    end_time: &'a str,
    size_bytes: u64,
    source: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    first_recoverability_point: Option<String>,
    deleted_backups: Vec<String>,
}

/// `instance base-backup`: the exit code; the report or the failure as the termination message.
pub async fn command() -> u8 {
    let outcome = take().await;
    let (code, message) = match outcome {
        Ok(report) => (0, report),
        Err(error) => {
            tracing::error!(%error, "the base backup failed");
            (1, error.to_string())
        }
    };
    let path = std::env::var("DBC_TERMINATION_LOG").unwrap_or_else(|_| "/dev/termination-log".to_owned());
    if let Err(error) = std::fs::write(&path, &message) {
        tracing::warn!(%error, %path, "writing the termination message failed");
    }
    code
}

async fn take() -> Result<String, BackupError> {
    let env = Env::from_env()?;
    let store = transfer_store(&env.secrets)?;
    // libpq refuses a key others may read: a private copy of the mounted one.
    let key = tokio::fs::read(env.secrets.join("replication-tls/tls.key"))
        .await
        .map_err(io("reading the client key"))?;
    write_private(&env.run.join("client.key"), &key)?;
    let (host, system_identifier, version) = find_source(&env).await?;
    let start = Timestamp::now();
    let name = backup_name(start);
    if store.get(&BackupManifest::object_name(&name)).await?.is_some() {
        return Err(BackupError::Store(StoreError::Store(format!("a backup named {name} exists already"))));
    }
    let compression = store.compression();
    let data_object = format!("data.tar{}", suffix(compression));
    tracing::info!(source = %host, %name, "base backup started");
    let (transferred, wal) =
        stream_backup(&env, &store, &host, &format!("base/{name}/{data_object}"), compression).await?;
    let (start_wal, end_wal) = wal.segments();
    if let Err(error) = await_wal(&store, &start_wal, &end_wal).await {
        // Without its WAL the data is no backup: it gets no manifest and does not stay.
        let _ = store.delete(&format!("base/{name}/{data_object}")).await;
        return Err(error);
    }
    let end = Timestamp::now();
    let manifest = BackupManifest {
        name: name.clone(),
        start_time: second(start),
        end_time: second(end),
        start_lsn: wal.start_lsn.clone(),
        end_lsn: wal.end_lsn.clone(),
        timeline: wal.timeline,
        start_wal,
        end_wal,
        system_identifier,
        postgres_version: version,
        data_object,
        compression: compression.as_str().to_owned(),
        size_bytes: transferred.bytes,
        sha256: transferred.sha256,
        source: host.clone(),
    };
    store.put_new(&BackupManifest::object_name(&name), &serde_json::to_vec(&manifest)?).await?;
    tracing::info!(%name, size = manifest.size_bytes, "base backup complete");
    let catalog = Catalog::read(&store).await?;
    let window = std::env::var(retention::ENV_RECOVERY_WINDOW).ok().and_then(|s| s.parse().ok());
    let deleted = match window {
        Some(seconds) => {
            retention::apply(&store, &catalog, Duration::from_secs(seconds), Timestamp::now()).await?
        }
        None => Vec::new(),
    };
    let catalog = if deleted.is_empty() { catalog } else { Catalog::read(&store).await? };
    let report = Report {
        name: &name,
        start_time: &manifest.start_time,
        end_time: &manifest.end_time,
        size_bytes: manifest.size_bytes,
        source: &host,
        first_recoverability_point: catalog.first_recoverability_point(),
        deleted_backups: deleted,
    };
    Ok(serde_json::to_string(&report)?)
}

/// `time` to the second, RFC 3339.
pub fn second(time: Timestamp) -> String {
    Timestamp::from_second(time.as_second()).unwrap_or(time).to_string()
}

fn write_private(path: &Path, bytes: &[u8]) -> Result<(), BackupError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(io(format!("writing {}", path.display())))?;
    file.write_all(bytes).map_err(io(format!("writing {}", path.display())))
}

/// The first host answering a replication connection: (host, system identifier, version).
async fn find_source(env: &Env) -> Result<(String, String, String), BackupError> {
    let mut last_error = String::from("no host given");
    for host in env.hosts.split_whitespace() {
        let conninfo = format!("{} replication=true", env.conninfo(host));
        match replication_query(&conninfo, "IDENTIFY_SYSTEM").await {
            Ok(identity) => {
                let system = identity.split('|').next().unwrap_or_default().to_owned();
                let version = replication_query(&conninfo, "SHOW server_version").await.unwrap_or_default();
                return Ok((host.to_owned(), system, version));
            }
            Err(error) => {
                tracing::info!(%host, %error, "does not answer");
                last_error = error;
            }
        }
    }
    Err(BackupError::NoSource { hosts: env.hosts.clone(), last_error })
}

async fn replication_query(conninfo: &str, query: &str) -> Result<String, String> {
    let output = Command::new("psql")
        .args([conninfo, "-XtAc", query])
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(15), output)
        .await
        .map_err(|_| "no answer within 15 s".to_owned())?
        .map_err(|e| format!("starting psql: {e}"))?;
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
    } else {
        let stderr = String::from_utf8_lossy(&output.stderr);
        Err(stderr.lines().last().unwrap_or("psql failed").to_owned())
    }
}

/// Runs pg_basebackup into the upload of `object`; what was stored and the WAL it needs.
async fn stream_backup(
    env: &Env,
    store: &Store,
    host: &str,
    object: &str,
    compression: Compression,
) -> Result<(super::stream::Transferred, BackupWal), BackupError> {
    let mut args = vec!["-d".to_owned(), env.conninfo(host)];
    args.extend(
        ["-D", "-", "-Ft", "-X", "fetch", "--checkpoint=fast", "--no-password", "--verbose"]
            .map(String::from),
    );
    if compression == Compression::Gzip {
        args.push("-z".to_owned());
    }
    let mut child = Command::new("pg_basebackup")
        .args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(io("starting pg_basebackup"))?;
    let stdout = child.stdout.take().ok_or_else(|| BackupError::Io {
        what: "pg_basebackup's output".into(),
        source: std::io::ErrorKind::BrokenPipe.into(),
    })?;
    let mut stderr = child.stderr.take();
    let log = tokio::spawn(async move {
        let mut text = String::new();
        if let Some(stderr) = stderr.as_mut() {
            let _ = stderr.read_to_string(&mut text).await;
        }
        text
    });
    let uploaded = store.upload_stream(object, stdout).await;
    if uploaded.is_err() {
        let _ = child.start_kill();
    }
    let status = child.wait().await.map_err(io("waiting for pg_basebackup"))?;
    let log = log.await.unwrap_or_default();
    eprint!("{log}");
    if !status.success() {
        let message = log
            .lines()
            .rev()
            .find(|l| !l.contains("initiating") && !l.contains("checkpoint") && !l.contains("waiting"))
            .unwrap_or("no message")
            .to_owned();
        if uploaded.is_ok() {
            // A stored object of a failed run is no backup (it has no manifest); remove it.
            let _ = store.delete(object).await;
        }
        return Err(BackupError::BaseBackup { host: host.to_owned(), message });
    }
    let transferred = uploaded?;
    let wal = BackupWal::from_log(&log).ok_or_else(|| BackupError::BaseBackup {
        host: host.to_owned(),
        message: "its log does not say the backup's WAL start and end points".to_owned(),
    })?;
    Ok((transferred, wal))
}

/// Waits until every segment from `first` to `last` is in the archive.
async fn await_wal(store: &Store, first: &str, last: &str) -> Result<(), BackupError> {
    let timeout = archive_timeout(|name| std::env::var(name).ok()).unwrap_or(60);
    let limit = Duration::from_secs(2 * timeout) + WAL_WAIT_MARGIN;
    let deadline = tokio::time::Instant::now() + limit;
    let needed = segments_between(first, last);
    loop {
        let missing = first_missing(store, &needed).await?;
        let Some(segment) = missing else { return Ok(()) };
        if tokio::time::Instant::now() >= deadline {
            return Err(BackupError::WalMissing { segment, seconds: limit.as_secs() });
        }
        tokio::time::sleep(WAL_POLL).await;
    }
}

async fn first_missing(store: &Store, needed: &[String]) -> Result<Option<String>, BackupError> {
    let mut listed: std::collections::BTreeMap<String, Vec<String>> = std::collections::BTreeMap::new();
    for segment in needed {
        let Some(object) = object_name(segment) else { continue };
        let folder = object.rsplit_once('/').map(|(dir, _)| dir.to_owned()).unwrap_or_default();
        if !listed.contains_key(&folder) {
            let names = store.list(&folder).await?;
            listed.insert(folder.clone(), names);
        }
        let present = listed[&folder].iter().any(|n| n.trim_end_matches(".gz") == object);
        if !present {
            return Ok(Some(segment.clone()));
        }
    }
    Ok(None)
}
