//! The backup and restore programs the operator ships (`scripts/backup.sh`, `scripts/restore.sh`),
//! run directly against real PostgreSQL 15 servers on loopback, as the pods run them: the backup
//! holds exactly the rows committed before it, has a manifest that tells the truth, and restores
//! into a server that starts and accepts writes; retention keeps exactly the newest N; an
//! unreachable source fails with a message; the standby-first source order falls back to the
//! primary.
//!
//! Needs root (servers run as the `postgres` user) and the PostgreSQL 15 server binaries in
//! `/usr/lib/postgresql/15/bin`.
#![cfg(feature = "sim")]

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use dbcluster_operator::databasecluster::backup::{BACKUP_SCRIPT, RESTORE_SCRIPT};
use dbcluster_operator::databasecluster::tls::issue::{KeyPem, Leaf, issue_ca, issue_leaf};
use dbcluster_operator::sim::kubelet::addresses::{Lease, Range, allocate};
use serde_json::Value;

const BIN: &str = "/usr/lib/postgresql/15/bin";

/// The tests' CA: it signs each server's certificate and the replication client certificate.
fn ca() -> &'static KeyPem {
    static CA: std::sync::OnceLock<KeyPem> = std::sync::OnceLock::new();
    CA.get_or_init(|| issue_ca("tests/backup", jiff::Timestamp::now(), DAY).unwrap())
}

const DAY: std::time::Duration = std::time::Duration::from_secs(86_400);

/// Writes `files` into `dir`, owned by the `postgres` user, keys (`*.key`) mode 0600.
fn write_owned(dir: &Path, files: &[(&str, &str)]) {
    let (uid, gid) = postgres_ids();
    for (name, content) in files {
        let path = dir.join(name);
        fs::write(&path, content).unwrap();
        std::os::unix::fs::chown(&path, Some(uid), Some(gid)).unwrap();
        let mode = if name.ends_with(".key") { 0o600 } else { 0o644 };
        fs::set_permissions(&path, fs::Permissions::from_mode(mode)).unwrap();
    }
}

fn postgres_ids() -> (u32, u32) {
    let id = |flag: &str| {
        let out = Command::new("id").args([flag, "postgres"]).output().unwrap();
        String::from_utf8(out.stdout).unwrap().trim().parse::<u32>().unwrap()
    };
    (id("-u"), id("-g"))
}

/// A command run as the `postgres` user with the server binaries first on `PATH`.
fn as_postgres(program: &str) -> Command {
    let (uid, gid) = postgres_ids();
    let mut command = Command::new(program);
    command.uid(uid).gid(gid).env_clear().env("PATH", format!("{BIN}:/usr/bin:/bin")).env("LC_ALL", "C");
    command
}

fn check(output: Output, what: &str) -> String {
    assert!(
        output.status.success(),
        "{what} failed: {}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

/// A directory the `postgres` user owns, removed with the test.
fn owned_dir(root: &Path, name: &str) -> PathBuf {
    let dir = root.join(name);
    fs::create_dir_all(&dir).unwrap();
    let (uid, gid) = postgres_ids();
    std::os::unix::fs::chown(&dir, Some(uid), Some(gid)).unwrap();
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o700)).unwrap();
    dir
}

/// The port every server listens on: each has its own loopback address, as a pod does.
const PORT: u16 = 5432;

/// A running PostgreSQL server on its own leased loopback address, stopped on drop.
///
/// An address leased from the simulator's allocator, not a free port picked from the ephemeral
/// range: a port found free can be taken (by another server, or by an outgoing connection's
/// local end) before the server binds it, and then the server does not start.
struct Server {
    data: PathBuf,
    socket: PathBuf,
    address: Lease,
}

impl Server {
    /// Starts a server on `data` (which must hold a cluster), trusting local connections and
    /// letting `replicator` replicate over TLS with a client certificate only, as the operator's
    /// `pg_hba.conf` does; its certificate names its address.
    fn start(root: &Path, name: &str, data: PathBuf) -> Server {
        let socket = owned_dir(root, &format!("{name}-socket"));
        let hba = root.join(format!("{name}-hba.conf"));
        fs::write(
            &hba,
            "local all all trust\nhostssl replication replicator 127.0.0.0/8 cert\nhostssl all all 127.0.0.0/8 scram-sha-256\n",
        )
        .unwrap();
        fs::set_permissions(&hba, fs::Permissions::from_mode(0o644)).unwrap();
        let address = allocate(Range::Pods).expect("a loopback address for the server");
        let tls = owned_dir(root, &format!("{name}-tls"));
        let leaf = issue_leaf(ca(), &Leaf::Server(vec![address.ip.to_string()]), jiff::Timestamp::now(), DAY)
            .unwrap();
        write_owned(&tls, &[("server.crt", &leaf.cert), ("server.key", &leaf.key), ("ca.crt", &ca().cert)]);
        let options = format!(
            "-c listen_addresses={} -c port={PORT} -c unix_socket_directories={} -c hba_file={} -c wal_level=replica -c max_wal_senders=5 \
             -c ssl=on -c ssl_cert_file={tls}/server.crt -c ssl_key_file={tls}/server.key -c ssl_ca_file={tls}/ca.crt",
            address.ip,
            socket.display(),
            hba.display(),
            tls = tls.display()
        );
        let log = root.join(format!("{name}.log"));
        let started = as_postgres("pg_ctl")
            .args(["start", "-w", "-t", "60", "-D"])
            .arg(&data)
            .arg("-l")
            .arg(&log)
            .args(["-o", &options])
            .output()
            .unwrap();
        let server_log = fs::read_to_string(&log).unwrap_or_default();
        check(started, &format!("pg_ctl start on {} (server log:\n{server_log})", address.ip));
        Server { data, socket, address }
    }

    /// The address the server listens on, as the scripts are given it.
    fn host(&self) -> String {
        self.address.ip.to_string()
    }

    fn psql(&self, sql: &str) -> String {
        let out = as_postgres("psql")
            .args(["-XtAq", "-v", "ON_ERROR_STOP=1", "-h"])
            .arg(&self.socket)
            .args(["-p", &PORT.to_string(), "-U", "postgres", "-d", "postgres", "-c", sql])
            .output()
            .unwrap();
        check(out, sql).trim().to_owned()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = as_postgres("pg_ctl").args(["stop", "-m", "immediate", "-w", "-D"]).arg(&self.data).output();
    }
}

/// A fresh primary with an `items` table.
fn primary(root: &Path) -> Server {
    let data = owned_dir(root, "primary");
    check(
        as_postgres("initdb")
            .args(["-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C", "-D"])
            .arg(&data)
            .output()
            .unwrap(),
        "initdb",
    );
    let server = Server::start(root, "primary", data);
    server.psql("CREATE TABLE items (id int PRIMARY KEY)");
    server.psql("CREATE ROLE replicator REPLICATION LOGIN");
    server
}

/// The pod's view: the script, the mounted replication client certificate, the backup volume, a private
/// run directory and the termination log.
struct Pod {
    root: PathBuf,
    backups: PathBuf,
    secrets: PathBuf,
}

impl Pod {
    fn new(root: &Path) -> Pod {
        let secrets = owned_dir(root, "secrets");
        let client =
            issue_leaf(ca(), &Leaf::Client("replicator".into()), jiff::Timestamp::now(), DAY).unwrap();
        // As a Secret volume under fsGroup shows it: the key readable by the group.
        let tls = owned_dir(&secrets, "replication-tls");
        write_owned(&tls, &[("tls.crt", &client.cert), ("tls.key", &client.key)]);
        write_owned(&owned_dir(&secrets, "server-ca"), &[("ca.crt", &ca().cert)]);
        fs::set_permissions(tls.join("tls.key"), fs::Permissions::from_mode(0o640)).unwrap();
        for script in [("backup.sh", BACKUP_SCRIPT), ("restore.sh", RESTORE_SCRIPT)] {
            fs::write(root.join(script.0), script.1).unwrap();
        }
        Pod { root: root.to_owned(), backups: owned_dir(root, "backups"), secrets }
    }

    /// Runs backup.sh against `hosts` on `port`; returns whether it succeeded and its
    /// termination message.
    fn backup(&self, hosts: &str, port: u16, retention: &[(&str, &str)]) -> (bool, String) {
        let run = owned_dir(&self.root, "run");
        let log = run.join("termination-log");
        let _ = fs::remove_file(&log);
        let mut command = as_postgres("bash");
        command
            .arg(self.root.join("backup.sh"))
            .env("DBC_BACKUP_HOSTS", hosts)
            .env("DBC_PORT", port.to_string())
            .env("DBC_SECRETS", &self.secrets)
            .env("DBC_BACKUPS", &self.backups)
            .env("DBC_RUN", &run)
            .env("DBC_TERMINATION_LOG", &log);
        for (name, value) in retention {
            command.env(name, value);
        }
        let out = command.output().unwrap();
        let message = fs::read_to_string(&log).unwrap_or_default();
        if out.status.success() {
            assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), message, "stdout is the manifest");
        }
        (out.status.success(), message)
    }

    fn restore(&self, data: &Path, backup: &str) -> (bool, String) {
        let log = self.root.join("restore-termination-log");
        let _ = fs::remove_file(&log);
        let out = as_postgres("bash")
            .arg(self.root.join("restore.sh"))
            .env("PGDATA", data)
            .env("DBC_RESTORE_DIR", &self.backups)
            .env("DBC_RESTORE_BACKUP", backup)
            .env("DBC_TERMINATION_LOG", &log)
            .output()
            .unwrap();
        (out.status.success(), fs::read_to_string(&log).unwrap_or_default())
    }

    fn backup_names(&self) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(&self.backups)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        names
    }
}

#[test]
fn a_backup_restores_exactly_the_rows_committed_before_it_and_tells_the_truth_in_its_manifest() {
    let dir = tempfile::tempdir().unwrap();
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let root = &owned_dir(dir.path(), "root");
    let server = primary(root);
    server.psql("INSERT INTO items SELECT generate_series(1, 500)");
    let pod = Pod::new(root);

    // No standby answers at 127.0.0.77: the primary is the fallback source.
    let (ok, message) = pod.backup(&format!("127.0.0.77 {}", server.host()), PORT, &[]);
    assert!(ok, "{message}");
    let manifest: Value = serde_json::from_str(&message).unwrap();
    server.psql("INSERT INTO items SELECT generate_series(501, 600)");

    let name = manifest["name"].as_str().unwrap();
    assert!(name.len() == 16 && name.ends_with('Z'), "{name}");
    assert_eq!(pod.backup_names(), vec![name.to_owned()]);
    let dir = pod.backups.join(name);
    for file in ["base.tar.gz", "pg_wal.tar.gz", "manifest.json"] {
        assert!(dir.join(file).is_file(), "{file} is in the backup");
    }
    let on_disk: Value =
        serde_json::from_str(&fs::read_to_string(dir.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(on_disk, manifest);
    assert_eq!(manifest["source"], server.host());
    assert_eq!(manifest["postgresVersion"], server.psql("SHOW server_version"));
    assert_eq!(
        manifest["systemIdentifier"],
        server.psql("SELECT system_identifier FROM pg_control_system()")
    );
    assert!(manifest["sizeBytes"].as_i64().unwrap() > 1_000_000, "{manifest}");
    assert!(manifest["startTime"].as_str().unwrap() <= manifest["endTime"].as_str().unwrap());
    let (wal_start, wal_end) = (manifest["walStart"].as_str().unwrap(), manifest["walEnd"].as_str().unwrap());
    assert!(wal_start.contains('/') && wal_end.contains('/'), "{manifest}");
    assert_eq!(manifest["timeline"], 1);

    // Restore into an empty volume, as the restore Job does; "latest" is this backup.
    let volume = owned_dir(root, "restored-volume");
    let data = volume.join("pgdata");
    let (ok, restored) = pod.restore(&data, "latest");
    assert!(ok, "{restored}");
    assert_eq!(restored, name);
    let copy = Server::start(root, "restored", data.clone());
    assert_eq!(copy.psql("SELECT count(*), min(id), max(id) FROM items"), "500|1|500");
    assert_eq!(copy.psql("SELECT pg_is_in_recovery()"), "f");
    copy.psql("INSERT INTO items VALUES (501)");
    assert_eq!(copy.psql("SELECT count(*) FROM items"), "501");
    assert_eq!(copy.psql("SELECT system_identifier FROM pg_control_system()"), manifest["systemIdentifier"]);
    drop(copy);

    // Running the restore again leaves the restored (and since written) data alone.
    let (ok, again) = pod.restore(&data, "latest");
    assert!(ok && again == name, "{again}");
    // A volume holding data the restore did not put there is refused, not overwritten.
    let other = owned_dir(root, "other-volume").join("pgdata");
    fs::create_dir_all(&other).unwrap();
    fs::write(other.join("PG_VERSION"), "15\n").unwrap();
    let (ok, refusal) = pod.restore(&other, name);
    assert!(!ok && refusal.contains("refusing"), "{refusal}");
    let (ok, missing) = pod.restore(&owned_dir(root, "empty").join("pgdata"), "20000101T000000Z");
    assert!(!ok && missing.contains("not found"), "{missing}");
}

#[test]
fn retention_keeps_exactly_the_newest_n_and_an_unreachable_source_fails_with_a_message() {
    let dir = tempfile::tempdir().unwrap();
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let root = &owned_dir(dir.path(), "root");
    let server = primary(root);
    let pod = Pod::new(root);

    let (ok, message) = pod.backup("127.0.0.77", PORT, &[("DBC_KEEP_LAST", "2")]);
    assert!(!ok);
    assert!(message.starts_with("no instance answers at 127.0.0.77"), "{message}");
    assert!(pod.backup_names().is_empty(), "a failed backup leaves nothing behind");

    let mut taken = Vec::new();
    for _ in 0..4 {
        let (ok, message) = pod.backup(&server.host(), PORT, &[("DBC_KEEP_LAST", "2")]);
        assert!(ok, "{message}");
        let manifest: Value = serde_json::from_str(&message).unwrap();
        taken.push(manifest["name"].as_str().unwrap().to_owned());
        assert!(pod.backup_names().len() <= 2);
    }
    assert_eq!(pod.backup_names(), taken[2..].to_vec(), "the newest two are kept");

    // Keeping backups newer than a day keeps them all, whatever keepLast says.
    let (ok, message) =
        pod.backup(&server.host(), PORT, &[("DBC_KEEP_LAST", "1"), ("DBC_KEEP_NEWER_THAN_SECONDS", "86400")]);
    assert!(ok, "{message}");
    assert_eq!(pod.backup_names().len(), 3);
}
