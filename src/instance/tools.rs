//! The PostgreSQL programs the manager runs as child processes (found on `PATH`, as the `postgres`
//! image installs them): `initdb`, `pg_basebackup`, `pg_rewind`, `pg_controldata`. Each runs with
//! its output captured (quiet logs: a failure's error reports the tail of its stderr), is killed
//! when the manager drops it, and is bounded by a time limit. Passwords come from the password file
//! named in the connection strings, never from arguments. Each runs in `/`, a working directory
//! any user can enter (they go back to theirs after finding their own executable, and complain
//! when they cannot).

use std::ffi::OsString;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use thiserror::Error;
use tokio::process::Command;

/// How long `initdb` may take.
const INITDB_LIMIT: Duration = Duration::from_secs(300);
/// How long `pg_controldata` may take.
const CONTROLDATA_LIMIT: Duration = Duration::from_secs(30);
/// How long a clone may take: its duration is the data's size over the network, so the bound is
/// generous; a dead primary is noticed sooner by the connection's keepalives and
/// `tcp_user_timeout` (see [`clone_keywords`]).
const BASEBACKUP_LIMIT: Duration = Duration::from_secs(6 * 3600);
/// How long a rewind may take.
const REWIND_LIMIT: Duration = Duration::from_secs(3600);
/// How much of a failed program's stderr its error keeps.
const STDERR_TAIL: usize = 2000;

/// A program failed, did not start, or overran its limit.
#[derive(Debug, Error)]
pub enum ToolError {
    /// It could not be started.
    #[error("starting {program}: {source}")]
    Spawn {
        /// The program.
        program: &'static str,
        /// Why.
        source: std::io::Error,
    },
    /// It exited unsuccessfully.
    #[error("{program} failed ({status}): {stderr}")]
    Failed {
        /// The program.
        program: &'static str,
        /// Its exit status.
        status: std::process::ExitStatus,
        /// The tail of its stderr.
        stderr: String,
    },
    /// It overran its limit and was killed.
    #[error("{program} did not finish within {limit:?}; killed")]
    Timeout {
        /// The program.
        program: &'static str,
        /// The limit.
        limit: Duration,
    },
    /// Its output lacked what was asked for.
    #[error("{program}'s output has no {field:?}")]
    Output {
        /// The program.
        program: &'static str,
        /// The missing field.
        field: &'static str,
    },
}

/// Runs `program` with `args` to completion within `limit`; its stdout on success.
async fn run(program: &'static str, args: Vec<OsString>, limit: Duration) -> Result<String, ToolError> {
    let child = Command::new(program)
        .args(args)
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|source| ToolError::Spawn { program, source })?;
    let output = tokio::time::timeout(limit, child.wait_with_output())
        .await
        .map_err(|_| ToolError::Timeout { program, limit })?
        .map_err(|source| ToolError::Spawn { program, source })?;
    if output.status.success() {
        return Ok(String::from_utf8_lossy(&output.stdout).into_owned());
    }
    let stderr = String::from_utf8_lossy(&output.stderr);
    let mut from = stderr.len().saturating_sub(STDERR_TAIL);
    while !stderr.is_char_boundary(from) {
        from += 1;
    }
    Err(ToolError::Failed { program, status: output.status, stderr: stderr[from..].trim().to_owned() })
}

fn os(values: &[&str]) -> Vec<OsString> {
    values.iter().map(OsString::from).collect()
}

/// What `pg_controldata` says about a data directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ControlData {
    /// `Database system identifier`.
    pub system_id: u64,
    /// `Database cluster state`: `shut down` after a clean shutdown out of recovery, `shut down in
    /// recovery`, `in production` (running, or crashed), `in archive recovery`…
    pub state: String,
}

impl ControlData {
    /// A clean shutdown out of recovery (a primary's).
    pub fn clean_primary_shutdown(&self) -> bool {
        self.state == "shut down"
    }
}

/// Reads `pg_controldata`'s output (pure).
pub fn parse_controldata(text: &str) -> Result<ControlData, ToolError> {
    let field = |name: &'static str| {
        text.lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(':').map(str::trim))
            .ok_or(ToolError::Output { program: "pg_controldata", field: name })
    };
    let system_id = field("Database system identifier")?
        .parse()
        .map_err(|_| ToolError::Output { program: "pg_controldata", field: "Database system identifier" })?;
    Ok(ControlData { system_id, state: field("Database cluster state")?.to_owned() })
}

/// `pg_controldata <pgdata>`.
pub async fn controldata(pgdata: &Path) -> Result<ControlData, ToolError> {
    let text = run("pg_controldata", vec![pgdata.into()], CONTROLDATA_LIMIT).await?;
    parse_controldata(&text)
}

/// The major version of the server on `PATH` (`postgres --version`: `postgres (PostgreSQL) 18.4`).
pub async fn server_major() -> Result<String, ToolError> {
    let text = run("postgres", os(&["--version"]), CONTROLDATA_LIMIT).await?;
    let version =
        text.split_whitespace().nth(2).ok_or(ToolError::Output { program: "postgres", field: "version" })?;
    Ok(version.split('.').next().unwrap_or(version).to_owned())
}

/// `initdb` into `target` with `superuser` as the bootstrap superuser: local connections trusted,
/// TCP ones by SCRAM. No password here: the manager sets every password when the server starts.
pub async fn initdb(target: &Path, superuser: &str) -> Result<(), ToolError> {
    let mut args = vec![OsString::from("-D"), target.into()];
    args.extend(os(&[
        "-U",
        superuser,
        "--auth-local=trust",
        "--auth-host=scram-sha-256",
        "-E",
        "UTF8",
        "--locale=C",
    ]));
    run("initdb", args, INITDB_LIMIT).await.map(drop)
}

/// libpq keywords that make a clone notice a dead primary within about 30 s.
pub fn clone_keywords() -> [(&'static str, &'static str); 4] {
    [
        ("keepalives_idle", "10"),
        ("keepalives_interval", "5"),
        ("keepalives_count", "3"),
        ("tcp_user_timeout", "30000"),
    ]
}

/// `pg_basebackup` of the primary at `conninfo` into `target`, over `slot`, streaming WAL.
pub async fn basebackup(target: &Path, conninfo: &str, slot: &str) -> Result<(), ToolError> {
    let mut args = vec![OsString::from("-D"), target.into()];
    args.extend(os(&["-d", conninfo, "-S", slot, "-X", "stream", "--checkpoint=fast", "--no-password"]));
    run("pg_basebackup", args, BASEBACKUP_LIMIT).await.map(drop)
}

/// `pg_rewind` of `pgdata` onto the server at `conninfo` (it finishes a crash recovery first).
pub async fn rewind(pgdata: &Path, conninfo: &str) -> Result<(), ToolError> {
    let mut args = vec![OsString::from("-D"), pgdata.into()];
    args.push(format!("--source-server={conninfo}").into());
    run("pg_rewind", args, REWIND_LIMIT).await.map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "pg_control version number:            1300\n\
        Catalog version number:               202209061\n\
        Database system identifier:           7312345678901234567\n\
        Database cluster state:               shut down in recovery\n";

    #[test]
    fn controldata_gives_the_identifier_and_the_state() {
        let cases = [
            (SAMPLE, Some((7_312_345_678_901_234_567, "shut down in recovery", false))),
            (
                "Database system identifier: 42\nDatabase cluster state: shut down\n",
                Some((42, "shut down", true)),
            ),
            (
                "Database system identifier: 42\nDatabase cluster state:   in production\n",
                Some((42, "in production", false)),
            ),
            ("Database cluster state: shut down\n", None),
            ("Database system identifier: x\nDatabase cluster state: shut down\n", None),
            ("", None),
        ];
        for (text, want) in cases {
            let got = parse_controldata(text)
                .ok()
                .map(|c| (c.system_id, c.state.clone(), c.clean_primary_shutdown()));
            assert_eq!(got, want.map(|(id, state, clean)| (id, state.to_owned(), clean)), "{text:?}");
        }
    }

    #[tokio::test]
    async fn a_failing_program_reports_its_stderr_and_a_hung_one_is_killed() {
        let failed =
            run("sh", os(&["-c", "echo oops >&2; exit 3"]), Duration::from_secs(10)).await.unwrap_err();
        assert!(matches!(&failed, ToolError::Failed { stderr, .. } if stderr == "oops"), "{failed}");
        let hung = run("sleep", os(&["30"]), Duration::from_millis(100)).await.unwrap_err();
        assert!(matches!(hung, ToolError::Timeout { .. }), "{hung}");
        let missing = run("dbc-no-such-program", Vec::new(), Duration::from_secs(1)).await.unwrap_err();
        assert!(matches!(missing, ToolError::Spawn { .. }), "{missing}");
    }
}
