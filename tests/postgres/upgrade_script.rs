//! The upgrade Job's program (`upgrade/pg_upgrade.sh`) run directly as the Job runs it (the old
//! binaries under `DBC_OLD_ROOT`, here `/`, where Debian installs PostgreSQL 15; the new ones first
//! on `PATH`): it refuses data not shut down cleanly and changes nothing; it upgrades clean data,
//! keeping the old directory beside the new one, untouched and still startable by 15.
//!
//! Needs root (the servers run as the `postgres` user), PostgreSQL 15 and 18 (`scripts/install-postgres-18`).
#![cfg(feature = "sim")]

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use dbcluster_operator::databasecluster::upgrade::job::UPGRADE_SCRIPT;
use dbcluster_operator::sim::kubelet::images;

const OLD_BIN: &str = "/usr/lib/postgresql/15/bin";

/// A program run as `postgres` with `bin` first on `PATH`.
fn as_postgres(program: &str, bin: &Path) -> Command {
    let id = |flag: &str| {
        let out = Command::new("id").args([flag, "postgres"]).output().unwrap();
        String::from_utf8(out.stdout).unwrap().trim().parse::<u32>().unwrap()
    };
    let mut command = Command::new(program);
    command.uid(id("-u")).gid(id("-g")).env_clear();
    command.env("PATH", format!("{}:/usr/bin:/bin", bin.display())).env("LC_ALL", "C");
    command
}

fn ok(output: Output, what: &str) -> String {
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    assert!(output.status.success(), "{what}: {}{}", text(&output.stdout), text(&output.stderr));
    text(&output.stdout).trim().to_owned()
}

/// A scratch directory the `postgres` user owns (removed with the returned guard).
fn scratch() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let status =
        Command::new("chown").args(["postgres:postgres", &dir.path().display().to_string()]).status();
    assert!(status.unwrap().success());
    dir
}

/// `pg_ctl` of `bin` on `data`, listening only on a socket in `root`, the server's output in a
/// file (a started server must not hold the pipes `output` reads to their end).
fn pg_ctl(bin: &Path, data: &Path, root: &Path, args: &[&str]) -> Output {
    let options = format!("-c listen_addresses='' -c unix_socket_directories={}", root.display());
    let log = root.join("server.log");
    let mut command = as_postgres(&format!("{}/pg_ctl", bin.display()), bin);
    command.arg("-D").arg(data).args(["-o", &options, "-w", "-l"]).arg(log).args(args).output().unwrap()
}

/// A server started by [`Server::start`]; stopped with `mode` by [`Server::stop`], or immediately
/// when dropped (a failed assertion leaves no server behind).
struct Server<'a> {
    bin: PathBuf,
    data: &'a Path,
    root: &'a Path,
    stopped: bool,
}

impl<'a> Server<'a> {
    fn start(bin: &Path, data: &'a Path, root: &'a Path, what: &str) -> Server<'a> {
        ok(pg_ctl(bin, data, root, &["start"]), what);
        Server { bin: bin.to_owned(), data, root, stopped: false }
    }

    fn stop(mut self, mode: &str) {
        self.stopped = true;
        ok(pg_ctl(&self.bin, self.data, self.root, &["stop", "-m", mode]), "stop");
    }
}

impl Drop for Server<'_> {
    fn drop(&mut self) {
        if !self.stopped {
            pg_ctl(&self.bin, self.data, self.root, &["stop", "-m", "immediate"]);
        }
    }
}

fn sql(root: &Path, query: &str) -> String {
    let mut command = as_postgres("psql", Path::new(OLD_BIN));
    ok(
        command
            .args(["-h", &root.display().to_string(), "-U", "postgres", "-XtA", "-c", query])
            .output()
            .unwrap(),
        query,
    )
}

/// A PostgreSQL 15 data directory in `root` with a table of 100 rows, stopped with `mode`.
fn old_data(root: &Path, mode: &str) -> PathBuf {
    let data = root.join("pgdata");
    let old = Path::new(OLD_BIN);
    let mut initdb = as_postgres(&format!("{OLD_BIN}/initdb"), old);
    ok(
        initdb.arg("-D").arg(&data).args(["-U", "postgres", "-E", "UTF8", "--locale=C"]).output().unwrap(),
        "initdb",
    );
    let server = Server::start(old, &data, root, "start 15");
    sql(root, "CREATE TABLE kept AS SELECT g AS n FROM generate_series(1, 100) g");
    server.stop(mode);
    data
}

/// Runs the upgrade script on `data`; its success and termination message.
fn upgrade(root: &Path, data: &Path) -> (bool, String) {
    let new_bin = images::postgres_bin_dir(18).expect("PostgreSQL 18: run scripts/test");
    let work = root.join("work");
    std::fs::create_dir_all(&work).unwrap();
    Command::new("chown").args(["postgres:postgres", &work.display().to_string()]).status().unwrap();
    let log = work.join("termination-log");
    let mut command = as_postgres("bash", &new_bin);
    command
        .args(["-c", UPGRADE_SCRIPT])
        .env("PGDATA", data)
        .env("DBC_OLD_MAJOR", "15")
        .env("DBC_NEW_MAJOR", "18");
    command
        .env("DBC_OLD_ROOT", "/")
        .env("DBC_SUPERUSER", "postgres")
        .env("DBC_WORK", &work)
        .env("TMPDIR", &work);
    let output = command.env("DBC_TERMINATION_LOG", &log).output().unwrap();
    (output.status.success(), std::fs::read_to_string(&log).unwrap_or_default())
}

fn controldata_state(bin: &str, data: &Path) -> String {
    let out = ok(Command::new(format!("{bin}/pg_controldata")).arg(data).output().unwrap(), "pg_controldata");
    out.lines().find_map(|l| l.strip_prefix("Database cluster state:")).unwrap_or_default().trim().to_owned()
}

#[test]
fn data_not_shut_down_cleanly_is_refused_and_nothing_changes() {
    let root = scratch();
    let data = old_data(root.path(), "immediate");
    let (succeeded, message) = upgrade(root.path(), &data);
    assert!(!succeeded);
    assert!(
        message.contains("not shut down cleanly") && message.contains("nothing was changed"),
        "{message}"
    );
    assert_eq!(std::fs::read_to_string(data.join("PG_VERSION")).unwrap().trim(), "15");
    assert!(!root.path().join("pgdata.next").exists());
}

#[test]
fn clean_data_is_upgraded_and_the_old_directory_is_kept_untouched_beside_it() {
    let root = scratch();
    let data = old_data(root.path(), "fast");
    assert_eq!(controldata_state(OLD_BIN, &data), "shut down");
    let (succeeded, message) = upgrade(root.path(), &data);
    assert!(succeeded, "{message}");
    assert!(
        message.contains("upgraded from PostgreSQL 15 to 18") && message.contains("pgdata-15"),
        "{message}"
    );
    assert_eq!(std::fs::read_to_string(data.join("PG_VERSION")).unwrap().trim(), "18");
    let kept = root.path().join("pgdata-15");
    assert_eq!(controldata_state(OLD_BIN, &kept), "shut down", "the old directory was never started by 18");

    let new_bin = images::postgres_bin_dir(18).unwrap();
    let server = Server::start(&new_bin, &data, root.path(), "start 18");
    assert_eq!(sql(root.path(), "SELECT sum(n) FROM kept"), "5050");
    server.stop("fast");
    let server = Server::start(Path::new(OLD_BIN), &kept, root.path(), "the kept 15 directory starts");
    assert_eq!(sql(root.path(), "SELECT sum(n) FROM kept"), "5050");
    server.stop("fast");
}
