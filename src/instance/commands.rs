//! The commands the operator gives an instance, as `POST` requests on the status port, each
//! authorized by the same bearer token as `/status` (`super::http`), each bounded in time, each
//! run over the local socket (so the operator never logs in to PostgreSQL):
//!
//! | request | does | answers |
//! |---|---|---|
//! | `POST /promote` | `pg_promote(true, `[`PROMOTE_WAIT_SECONDS`]`)` | 200 promoted; 202 not finished in time |
//! | `POST /checkpoint` | `CHECKPOINT` (before a switchover's shutdown), within [`CHECKPOINT_LIMIT`] | 200 |
//! | `POST /reload` | `pg_reload_conf()` | 200 |
//! | `POST /slots` | creates and drops physical slots ([`SlotChanges`], JSON) | 200; 400 for a slot that is not an instance's |
//!
//! A server that fails or does not answer in time gives 503 with the reason. A slot created that
//! exists already, or dropped that does not exist, counts as done: the operator decides from a
//! report that may be a pass old.

use std::time::Duration;

use bytes::Bytes;
use http::StatusCode;
use serde::{Deserialize, Serialize};
use tokio_postgres::error::SqlState;

use super::decide::slot_name_allowed;
use super::local::{ADMIN_LIMIT, ClientError, Local};

/// How long `POST /promote` lets PostgreSQL take to leave recovery.
pub const PROMOTE_WAIT_SECONDS: i32 = 30;
/// How long `POST /promote` may take in all (connecting and the wait).
pub const PROMOTE_LIMIT: Duration = Duration::from_secs(PROMOTE_WAIT_SECONDS as u64 + 5);
/// How long `POST /checkpoint` may take.
pub const CHECKPOINT_LIMIT: Duration = Duration::from_secs(30);
/// The largest `POST /slots` body read.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// One of the commands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Command {
    /// `POST /promote`.
    Promote,
    /// `POST /checkpoint`.
    Checkpoint,
    /// `POST /reload`.
    Reload,
    /// `POST /slots`.
    Slots,
}

impl Command {
    /// Every command.
    pub const ALL: [Command; 4] = [Command::Promote, Command::Checkpoint, Command::Reload, Command::Slots];

    /// Its path.
    pub fn path(self) -> &'static str {
        match self {
            Command::Promote => "/promote",
            Command::Checkpoint => "/checkpoint",
            Command::Reload => "/reload",
            Command::Slots => "/slots",
        }
    }

    /// The command at `path`.
    pub fn at(path: &str) -> Option<Command> {
        Command::ALL.into_iter().find(|c| c.path() == path)
    }
}

/// The body of `POST /slots`: the physical slots to create (reserving WAL at once, so a standby
/// cloning over one misses nothing) and to drop. Shared with the operator, which sends it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct SlotChanges {
    /// Slots to create.
    pub create: Vec<String>,
    /// Slots to drop.
    pub drop: Vec<String>,
}

impl SlotChanges {
    /// Whether there is nothing to do.
    pub fn is_empty(&self) -> bool {
        self.create.is_empty() && self.drop.is_empty()
    }
}

/// A command's answer: the status code and a line of text.
pub type Answer = (StatusCode, String);

fn failed(error: &ClientError) -> Answer {
    (StatusCode::SERVICE_UNAVAILABLE, error.to_string())
}

/// Runs `command` with `body` (read already, at most [`MAX_BODY_BYTES`]) on the local server.
pub async fn run(command: Command, body: &Bytes, local: &Local) -> Answer {
    match command {
        Command::Promote => promote(local).await,
        Command::Checkpoint => {
            let work = |c: tokio_postgres::Client| async move { c.batch_execute("CHECKPOINT").await };
            match local.with(CHECKPOINT_LIMIT, work).await {
                Ok(()) => (StatusCode::OK, "checkpoint done".to_owned()),
                Err(error) => failed(&error),
            }
        }
        Command::Reload => match local.reload().await {
            Ok(()) => (StatusCode::OK, "configuration reloaded".to_owned()),
            Err(error) => failed(&error),
        },
        Command::Slots => match serde_json::from_slice::<SlotChanges>(body) {
            Err(error) => (StatusCode::BAD_REQUEST, format!("not a slot change: {error}")),
            Ok(changes) => slots(local, changes).await,
        },
    }
}

async fn promote(local: &Local) -> Answer {
    let work = |c: tokio_postgres::Client| async move {
        let row = c.query_one("SELECT pg_promote(true, $1)", &[&PROMOTE_WAIT_SECONDS]).await?;
        Ok(row.get::<_, bool>(0))
    };
    match local.with(PROMOTE_LIMIT, work).await {
        Ok(true) => {
            tracing::info!("promoted at the operator's request");
            (StatusCode::OK, "promoted".to_owned())
        }
        Ok(false) => {
            (StatusCode::ACCEPTED, format!("the promotion has not finished within {PROMOTE_WAIT_SECONDS} s"))
        }
        Err(error) => failed(&error),
    }
}

/// Whether a slot statement's failure means the change is already made.
fn already_done(error: &tokio_postgres::Error, creating: bool) -> bool {
    let wanted = if creating { SqlState::DUPLICATE_OBJECT } else { SqlState::UNDEFINED_OBJECT };
    error.code() == Some(&wanted)
}

async fn slots(local: &Local, changes: SlotChanges) -> Answer {
    if let Some(name) = changes.create.iter().chain(&changes.drop).find(|n| !slot_name_allowed(n)) {
        return (StatusCode::BAD_REQUEST, format!("{name:?} is not an instance's slot"));
    }
    let work = |c: tokio_postgres::Client| async move {
        let mut failures = Vec::new();
        let statements = [("SELECT pg_create_physical_replication_slot($1, true)", true, &changes.create)];
        let drops = [("SELECT pg_drop_replication_slot($1)", false, &changes.drop)];
        for (statement, creating, names) in statements.into_iter().chain(drops) {
            for name in names {
                match c.execute(statement, &[name]).await {
                    Ok(_) => {
                        let verb = if creating { "created" } else { "dropped" };
                        tracing::info!(slot = %name, "replication slot {verb}");
                    }
                    Err(error) if already_done(&error, creating) => {}
                    Err(error) => failures.push(format!("{name}: {error}")),
                }
            }
        }
        Ok::<_, tokio_postgres::Error>(failures)
    };
    match local.with(ADMIN_LIMIT, work).await {
        Ok(failures) if failures.is_empty() => (StatusCode::OK, "slots changed".to_owned()),
        Ok(failures) => (StatusCode::INTERNAL_SERVER_ERROR, failures.join("; ")),
        Err(error) => failed(&error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_command_has_its_path() {
        for command in Command::ALL {
            assert_eq!(Command::at(command.path()), Some(command));
        }
        for path in ["/", "/status", "/promote/", "/PROMOTE", "/slots?x=1"] {
            assert_eq!(Command::at(path), None, "{path}");
        }
    }

    #[test]
    fn a_slot_change_reads_what_the_operator_writes() {
        let changes = SlotChanges { create: vec!["instance_1".into()], drop: vec![] };
        let text = serde_json::to_string(&changes).unwrap();
        assert_eq!(serde_json::from_str::<SlotChanges>(&text).unwrap(), changes);
        assert_eq!(serde_json::from_str::<SlotChanges>("{}").unwrap(), SlotChanges::default());
        assert!(SlotChanges::default().is_empty() && !changes.is_empty());
    }

    #[tokio::test]
    async fn a_slot_that_is_not_an_instances_is_refused_before_any_session() {
        let settings = super::super::settings::Settings::sample();
        let local = Local::new(&settings, "postgres");
        let body = Bytes::from(r#"{"drop": ["instance_1", "someone_elses"]}"#);
        let (code, text) = run(Command::Slots, &body, &local).await;
        assert_eq!(code, StatusCode::BAD_REQUEST);
        assert!(text.contains("someone_elses"), "{text}");
        let (code, _) = run(Command::Slots, &Bytes::from("not json"), &local).await;
        assert_eq!(code, StatusCode::BAD_REQUEST);
    }
}
