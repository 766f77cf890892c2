//! `instance recover`: the restore Job's program for `spec.bootstrap.recovery`. It fills
//! instance 0's empty data volume from the source's object store and replays the archived WAL to
//! the target, before the new cluster's StatefulSet exists; the new primary then starts from a
//! promoted, cleanly shut down data directory and archives to its own store.
//!
//! 1. The base backup ([`super::target::choose`]) is downloaded as a stream into `tar -x` in
//!    `<PGDATA>.recovering`, its SHA-256 checked against the manifest.
//! 2. `recovery.signal`, and in `postgresql.auto.conf` `restore_command` (this binary's
//!    `instance wal-restore %f %p`, reading the source's store from this pod's environment and
//!    credentials), the target and `recovery_target_action = promote`.
//! 3. PostgreSQL runs there without TCP (`listen_addresses=''`, a private socket directory, no
//!    hot standby) until it has promoted (`recovery.signal` gone and `pg_controldata` says
//!    `in production`); a server that
//!    exits first (e.g. `recovery ended before configured recovery target was reached`) fails the
//!    Job with its last log lines. `archive_mode=on` with no `archive_command` keeps the new
//!    timeline's history file and last segment `.ready`, for the new primary to archive.
//! 4. A fast shutdown, `postgresql.auto.conf` put back as the backup had it, then the directory
//!    renamed to `$PGDATA` and the marker `restored-from` written beside it. A volume this program
//!    already restored is left alone; one holding other data is refused, never overwritten.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

use super::base_backup::transfer_store;
use super::manifest::BackupManifest;
use super::retention::Catalog;
use super::target::{ENV_BACKUP, Target, choose};
use crate::instance::signal::{Signal, send};
use crate::instance::tools::controldata;

/// How often the recovering server is looked at.
const POLL: Duration = Duration::from_millis(500);
/// The log lines of the recovering server kept for the failure message.
const LOG_TAIL: usize = 8;

fn fail(message: impl std::fmt::Display) -> String {
    message.to_string()
}

/// `instance recover`: the exit code; the outcome as the termination message.
pub async fn command() -> u8 {
    let (code, message) = match recover().await {
        Ok(name) => (0, name),
        Err(error) => {
            tracing::error!(%error, "the recovery failed");
            (1, error)
        }
    };
    let path = std::env::var("DBC_TERMINATION_LOG").unwrap_or_else(|_| "/dev/termination-log".to_owned());
    if let Err(error) = std::fs::write(&path, &message) {
        tracing::warn!(%error, %path, "writing the termination message failed");
    }
    code
}

async fn recover() -> Result<String, String> {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let pgdata = PathBuf::from(var("PGDATA").ok_or("PGDATA is required")?);
    let run = PathBuf::from(var("DBC_RUN").ok_or("DBC_RUN is required")?);
    let secrets = PathBuf::from(var("DBC_SECRETS").ok_or("DBC_SECRETS is required")?);
    let marker = pgdata.parent().unwrap_or(Path::new("/")).join("restored-from");
    if pgdata.join("PG_VERSION").exists() {
        return match std::fs::read_to_string(&marker) {
            Ok(name) => Ok(name.trim().to_owned()),
            Err(_) => Err(format!(
                "{} holds data that was not restored here: refusing to overwrite it",
                pgdata.display()
            )),
        };
    }
    let target = Target::from_lookup(|name| std::env::var(name).ok())?;
    let requested = var(ENV_BACKUP).unwrap_or_else(|| "latest".to_owned());
    let store = transfer_store(&secrets).map_err(fail)?;
    let catalog = Catalog::read(&store).await.map_err(fail)?;
    let backup = choose(&catalog.backups, &requested, &target)?.clone();
    tracing::info!(backup = %backup.name, ?target, "recovery started");
    let work = pgdata.with_extension("recovering");
    if work.exists() {
        std::fs::remove_dir_all(&work).map_err(|e| format!("removing {}: {e}", work.display()))?;
    }
    unpack(&store, &backup, &work).await?;
    let auto_conf = work.join("postgresql.auto.conf");
    let original = std::fs::read_to_string(&auto_conf).unwrap_or_default();
    let manager = std::env::current_exe().map_err(|e| format!("finding this executable: {e}"))?;
    let mut settings = vec![("restore_command", format!("{} instance wal-restore %f %p", manager.display()))];
    settings.extend(target.settings());
    let added: String =
        settings.iter().map(|(k, v)| format!("{k} = '{}'\n", v.replace('\'', "''"))).collect();
    let write = |path: &Path, text: &str| {
        std::fs::write(path, text).map_err(|e| format!("writing {}: {e}", path.display()))
    };
    write(&auto_conf, &format!("{original}\n{added}"))?;
    let _ = std::fs::remove_file(work.join("standby.signal"));
    write(&work.join("recovery.signal"), "")?;
    replay(&work, &run).await?;
    write(&auto_conf, &original)?;
    std::fs::rename(&work, &pgdata).map_err(|e| format!("renaming into {}: {e}", pgdata.display()))?;
    write(&marker, &format!("{}\n", backup.name))?;
    tracing::info!(backup = %backup.name, "recovered and promoted");
    Ok(backup.name)
}

/// Downloads `backup`'s data into `tar -x` in `dir` and checks its checksum.
async fn unpack(store: &super::store::Store, backup: &BackupManifest, dir: &Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(fail)?;
    let flags = if backup.compression == "gzip" { "-xzf" } else { "-xf" };
    let mut tar = Command::new("tar")
        .args([flags, "-", "-C"])
        .arg(dir)
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("starting tar: {e}"))?;
    let mut input = tar.stdin.take().ok_or("tar's input")?;
    let got = store.download_stream(&backup.data_object_name(), &mut input).await.map_err(fail)?;
    drop(input);
    let output = tar.wait_with_output().await.map_err(|e| format!("waiting for tar: {e}"))?;
    if !output.status.success() {
        return Err(format!("unpacking {}: {}", backup.name, String::from_utf8_lossy(&output.stderr).trim()));
    }
    if got.sha256 != backup.sha256 || got.bytes != backup.size_bytes {
        return Err(format!(
            "backup {} is damaged: {} bytes with sha256 {}, its manifest says {} bytes with {}",
            backup.name, got.bytes, got.sha256, backup.size_bytes, backup.sha256
        ));
    }
    Ok(())
}

/// Runs PostgreSQL on `dir` until it has promoted, then shuts it down.
async fn replay(dir: &Path, run: &Path) -> Result<(), String> {
    let option = |name: &str, value: &str| ["-c".to_owned(), format!("{name}={value}")];
    let mut args = vec!["-D".to_owned(), dir.display().to_string()];
    for (name, value) in [
        ("listen_addresses", ""),
        ("unix_socket_directories", &run.display().to_string()),
        ("hot_standby", "off"),
        ("ssl", "off"),
        ("archive_mode", "on"),
        ("archive_command", ""),
        ("logging_collector", "off"),
    ] {
        args.extend(option(name, value));
    }
    let mut server = Command::new("postgres")
        .args(&args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("starting postgres: {e}"))?;
    let stderr = server.stderr.take().ok_or("postgres's log")?;
    let log = tokio::spawn(async move {
        let mut tail = std::collections::VecDeque::new();
        let mut lines = BufReader::new(stderr).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            eprintln!("{line}");
            tail.push_back(line);
            if tail.len() > LOG_TAIL {
                tail.pop_front();
            }
        }
        tail.into_iter().collect::<Vec<_>>().join("\n")
    });
    loop {
        if let Some(status) = server.try_wait().map_err(fail)? {
            let tail = log.await.unwrap_or_default();
            return Err(format!("PostgreSQL stopped during recovery ({status}): {tail}"));
        }
        // The backup's own pg_control says `in production` too: promoted is when the server has
        // also removed `recovery.signal`, which it does at the end of recovery, after which it
        // writes `in production` again.
        let ended = !dir.join("recovery.signal").exists();
        if ended && controldata(dir).await.is_ok_and(|c| c.state == "in production") {
            break;
        }
        tokio::time::sleep(POLL).await;
    }
    let pid = server.id().ok_or("the server's pid")?;
    send(pid, Signal::FastShutdown).map_err(|e| format!("stopping the server: {e}"))?;
    let status = server.wait().await.map_err(fail)?;
    let _ = log.await;
    if !status.success() {
        return Err(format!("PostgreSQL did not shut down cleanly after promoting ({status})"));
    }
    Ok(())
}
