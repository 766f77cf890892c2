//! `/metrics` on the manager's metrics port (`$DBC_METRICS_PORT`, 9187, the container port
//! `metrics`): Prometheus text, `pg_`-prefixed, read over the local socket within
//! [`ADMIN_LIMIT`]:
//!
//! - `pg_up` (1 when the server answered), `pg_in_recovery`;
//! - on a primary, per standby: `pg_replication_lag_bytes`, `pg_replication_lag_seconds`;
//! - `pg_backends{state}` (client backends by state);
//! - per database: `pg_xact_commit_total`, `pg_xact_rollback_total`, `pg_deadlocks_total`,
//!   `pg_database_size_bytes`.
//!
//! A server that does not answer gives `pg_up 0` and nothing else.

use std::fmt::Write;

use super::local::{ADMIN_LIMIT, ClientError, Local};

/// One metric family: its name, type, help and samples (labels, value).
#[derive(Clone, Debug, PartialEq)]
pub struct Family {
    /// The name.
    pub name: &'static str,
    /// `gauge` or `counter`.
    pub kind: &'static str,
    /// The help line.
    pub help: &'static str,
    /// The samples.
    pub samples: Vec<(Vec<(&'static str, String)>, f64)>,
}

impl Family {
    fn new(name: &'static str, kind: &'static str, help: &'static str) -> Family {
        Family { name, kind, help, samples: Vec::new() }
    }
}

/// A label value escaped for the text format.
fn escape(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// The text exposition of `families` (pure).
pub fn render(families: &[Family]) -> String {
    let mut text = String::new();
    for family in families {
        let _ =
            writeln!(text, "# HELP {} {}\n# TYPE {} {}", family.name, family.help, family.name, family.kind);
        for (labels, value) in &family.samples {
            let labels: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{}\"", escape(v))).collect();
            let labels = if labels.is_empty() { String::new() } else { format!("{{{}}}", labels.join(",")) };
            let _ = writeln!(text, "{}{labels} {value}", family.name);
        }
    }
    text
}

fn up(value: f64) -> Family {
    let mut family = Family::new("pg_up", "gauge", "Whether the server answered on its local socket.");
    family.samples.push((Vec::new(), value));
    family
}

async fn read(client: tokio_postgres::Client) -> Result<Vec<Family>, tokio_postgres::Error> {
    let in_recovery: bool = client.query_one("SELECT pg_is_in_recovery()", &[]).await?.get(0);
    let mut recovery =
        Family::new("pg_in_recovery", "gauge", "1 on a standby (in recovery), 0 on a primary.");
    recovery.samples.push((Vec::new(), if in_recovery { 1.0 } else { 0.0 }));
    let mut lag_bytes = Family::new(
        "pg_replication_lag_bytes",
        "gauge",
        "WAL bytes a standby has yet to replay, as the primary sees it.",
    );
    let mut lag_seconds =
        Family::new("pg_replication_lag_seconds", "gauge", "A standby's replay lag, as the primary sees it.");
    if !in_recovery {
        let rows = client
            .query(
                "SELECT application_name, coalesce(pg_wal_lsn_diff(pg_current_wal_lsn(), replay_lsn), 0)::float8, \
                 coalesce(extract(epoch FROM replay_lag), 0)::float8 FROM pg_stat_replication",
                &[],
            )
            .await?;
        for row in rows {
            let standby: String = row.get(0);
            lag_bytes.samples.push((vec![("standby", standby.clone())], row.get(1)));
            lag_seconds.samples.push((vec![("standby", standby)], row.get(2)));
        }
    }
    let mut backends = Family::new("pg_backends", "gauge", "Client backends by state.");
    let rows = client
        .query(
            "SELECT coalesce(state, 'unknown'), count(*)::float8 FROM pg_stat_activity \
             WHERE backend_type = 'client backend' GROUP BY 1 ORDER BY 1",
            &[],
        )
        .await?;
    backends.samples = rows.iter().map(|r| (vec![("state", r.get::<_, String>(0))], r.get(1))).collect();
    let mut commits = Family::new("pg_xact_commit_total", "counter", "Transactions committed, per database.");
    let mut rollbacks =
        Family::new("pg_xact_rollback_total", "counter", "Transactions rolled back, per database.");
    let mut deadlocks = Family::new("pg_deadlocks_total", "counter", "Deadlocks detected, per database.");
    let mut sizes = Family::new("pg_database_size_bytes", "gauge", "Disk space used, per database.");
    let rows = client
        .query(
            "SELECT datname::text, xact_commit::float8, xact_rollback::float8, deadlocks::float8, \
             pg_database_size(datid)::float8 FROM pg_stat_database WHERE datname IS NOT NULL ORDER BY 1",
            &[],
        )
        .await?;
    for row in rows {
        let label = || vec![("datname", row.get::<_, String>(0))];
        commits.samples.push((label(), row.get(1)));
        rollbacks.samples.push((label(), row.get(2)));
        deadlocks.samples.push((label(), row.get(3)));
        sizes.samples.push((label(), row.get(4)));
    }
    Ok(vec![up(1.0), recovery, lag_bytes, lag_seconds, backends, commits, rollbacks, deadlocks, sizes])
}

/// The metrics text; a server that does not answer in time gives `pg_up 0`.
pub async fn scrape(local: &Local) -> String {
    match local.with(ADMIN_LIMIT, read).await {
        Ok(families) => render(&families),
        Err(error) => {
            let error: ClientError = error;
            tracing::debug!(%error, "metrics: the server did not answer");
            render(&[up(0.0)])
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_render_as_prometheus_text() {
        let mut lag = Family::new("pg_replication_lag_bytes", "gauge", "Lag.");
        lag.samples.push((vec![("standby", "db-1".into())], 128.0));
        lag.samples.push((vec![("standby", "we\"ird\\name\n".into())], 0.5));
        let cases: [(Vec<Family>, &str); 3] = [
            (
                vec![up(1.0)],
                "# HELP pg_up Whether the server answered on its local socket.\n# TYPE pg_up gauge\npg_up 1\n",
            ),
            (
                vec![up(0.0)],
                "# HELP pg_up Whether the server answered on its local socket.\n# TYPE pg_up gauge\npg_up 0\n",
            ),
            (
                vec![lag],
                "# HELP pg_replication_lag_bytes Lag.\n# TYPE pg_replication_lag_bytes gauge\n\
                 pg_replication_lag_bytes{standby=\"db-1\"} 128\n\
                 pg_replication_lag_bytes{standby=\"we\\\"ird\\\\name\\n\"} 0.5\n",
            ),
        ];
        for (families, want) in cases {
            assert_eq!(render(&families), want);
        }
    }

    #[tokio::test]
    async fn a_server_that_does_not_answer_is_down() {
        let dir = tempfile::tempdir().unwrap();
        let mut settings = super::super::settings::Settings::sample();
        settings.run_dir = dir.path().to_owned();
        let text = scrape(&Local::new(&settings, "postgres")).await;
        assert!(text.ends_with("pg_up 0\n") && !text.contains("pg_in_recovery"), "{text}");
    }
}
