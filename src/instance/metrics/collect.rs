//! Running the metrics queries (I/O): each query's rows read with the simple query protocol
//! (every value as PostgreSQL's text) into a [`Table`] and made families by
//! [`super::query::families`]. The sessions ([`QUIET`]) keep their errors out of the server's
//! log: the exporter logs each failing query once itself, where the server would log it at every
//! scrape.

use std::time::Duration;

use tokio::time::Instant;
use tokio_postgres::{Client, SimpleQueryMessage};

use super::query::{QuerySpec, Table, families};
use super::text::Family;
use super::{CUSTOM_BUDGET, QUERY_LIMIT};

/// The metrics sessions' options: no server log line for their errors and statements.
pub const QUIET: &str = "-c log_min_messages=fatal -c log_min_error_statement=panic";

/// One query's outcome: its name, and its families or why none.
pub type Outcome = (String, Result<Vec<Family>, String>);

/// How long past its statement timeout a custom query may take before the session is given up.
const GRACE: Duration = Duration::from_secs(1);
/// A custom query is not started with less time than this left.
const LEAST: Duration = Duration::from_millis(100);

/// The server's words for `error` (the driver's own say only `db error`).
pub fn describe(error: &tokio_postgres::Error) -> String {
    match error.as_db_error() {
        Some(db) => format!("{}: {} ({})", db.severity(), db.message(), db.code().code()),
        None => error.to_string(),
    }
}

/// The rows of `sql`; rows of several shapes (several statements) are refused.
pub async fn table(client: &Client, sql: &str) -> Result<Table, String> {
    let mut table = Table::default();
    for message in client.simple_query(sql).await.map_err(|e| describe(&e))? {
        let SimpleQueryMessage::Row(row) = message else { continue };
        let columns: Vec<String> = row.columns().iter().map(|c| c.name().to_owned()).collect();
        if table.rows.is_empty() {
            table.columns = columns;
        } else if table.columns != columns {
            return Err("the rows are of different shapes (more than one statement?)".into());
        }
        table.rows.push((0..row.len()).map(|i| row.get(i).map(str::to_owned)).collect());
    }
    Ok(table)
}

async fn run(client: &Client, spec: &QuerySpec) -> Result<Vec<Family>, String> {
    let table = table(client, &spec.sql).await?;
    families(spec, &table).map_err(|e| e.to_string())
}

/// Whether the server is in recovery, and the outcome of each built-in query that runs there.
pub async fn builtin(
    client: Client,
    specs: &[QuerySpec],
) -> Result<(bool, Vec<Outcome>), tokio_postgres::Error> {
    let in_recovery: bool = client.query_one("SELECT pg_is_in_recovery()", &[]).await?.get(0);
    let mut outcomes = Vec::new();
    for spec in specs.iter().filter(|s| s.runs_on.runs(in_recovery)) {
        outcomes.push((spec.name.clone(), run(&client, spec).await));
    }
    Ok((in_recovery, outcomes))
}

/// Each custom query in its own read-only transaction as `pg_monitor`, with a statement
/// timeout, all within [`CUSTOM_BUDGET`]: those left when it is spent (or after a query the
/// server did not cancel in time) fail without running.
pub async fn custom(client: Client, specs: &[&QuerySpec]) -> Result<Vec<Outcome>, tokio_postgres::Error> {
    let deadline = Instant::now() + CUSTOM_BUDGET;
    let mut usable = true;
    let mut outcomes = Vec::new();
    for spec in specs {
        let left = deadline.saturating_duration_since(Instant::now());
        if !usable || left < LEAST {
            outcomes.push((spec.name.clone(), Err("not run: the custom queries' time ran out".to_owned())));
            continue;
        }
        let limit = left.min(QUERY_LIMIT);
        let attempt = async {
            let begin = format!(
                "BEGIN READ ONLY; SET LOCAL statement_timeout = {}; SET LOCAL ROLE pg_monitor",
                limit.as_millis()
            );
            client.batch_execute(&begin).await.map_err(|e| describe(&e))?;
            let made = run(&client, spec).await;
            client.batch_execute("ROLLBACK").await.map_err(|e| describe(&e))?;
            made
        };
        let outcome = match tokio::time::timeout(limit + GRACE, attempt).await {
            Ok(outcome) => outcome,
            Err(_) => {
                usable = false;
                Err(format!("no answer within {limit:?}"))
            }
        };
        outcomes.push((spec.name.clone(), outcome));
    }
    Ok(outcomes)
}
