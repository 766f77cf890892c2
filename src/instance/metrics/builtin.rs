//! The built-in metrics, as data: each a query on the instance's own server (PostgreSQL 15's
//! statistics views, read as the superuser over the local socket) and the meaning of its columns
//! ([`super::query`]). Every name is `pg_`-prefixed, documented in the README's monitoring
//! section (a test holds the two together), and a counter's ends in `_total`.
//!
//! | query | runs on | metrics |
//! |---|---|---|
//! | `replication` | primary | `pg_replication_lag_bytes{standby}`, `pg_replication_lag_seconds{standby}` |
//! | `wal_receiver` | standby | `pg_wal_receiver_streaming{status}` (`stopped` when no receiver runs) |
//! | `wal_receiver_age` | standby | `pg_wal_receiver_last_message_age_seconds` |
//! | `replay` | standby | `pg_wal_replay_lag_bytes`, `pg_wal_replay_lag_seconds`, `pg_wal_replay_paused` |
//! | `backends` | any | `pg_backends{state}` |
//! | `databases` | any | `pg_xact_commit_total`, `pg_xact_rollback_total`, `pg_deadlocks_total`, `pg_conflicts_total`, `pg_database_size_bytes` (each `{datname}`) |
//! | `conflicts` | any | `pg_conflicts_by_reason_total{datname,reason}` |
//! | `archiver` | any | `pg_archiver_archived_total`, `pg_archiver_failed_total`, `pg_archiver_last_archived_timestamp_seconds`, `pg_archiver_last_failure_timestamp_seconds`, `pg_archiver_failing` |
//! | `checkpoints` | any | `pg_checkpoints_total{kind}` |
//! | `buffers_written` | any | `pg_buffers_written_total{writer}` |
//! | `bgwriter` | any | `pg_checkpoint_write_seconds_total`, `pg_checkpoint_sync_seconds_total`, `pg_buffers_allocated_total` |
//!
//! Besides these: `pg_up` and `pg_in_recovery` ([`super`]), and the custom queries' own
//! ([`super::custom`]).

use super::query::{ColumnSpec, QuerySpec, RunsOn, Usage};

/// `pg_up`: whether the server answered.
pub const UP: &str = "pg_up";
/// `pg_in_recovery`: 1 on a standby.
pub const IN_RECOVERY: &str = "pg_in_recovery";

fn spec(name: &str, runs_on: RunsOn, sql: &str, columns: Vec<ColumnSpec>) -> QuerySpec {
    QuerySpec { name: name.to_owned(), sql: sql.to_owned(), runs_on, columns }
}

fn gauge(column: &str, metric: &str, help: &str) -> ColumnSpec {
    ColumnSpec::metric(column, Usage::Gauge, metric, help)
}

fn counter(column: &str, metric: &str, help: &str) -> ColumnSpec {
    ColumnSpec::metric(column, Usage::Counter, metric, help)
}

fn replication() -> Vec<QuerySpec> {
    vec![
        // Grouped by name: a clone's two walsenders carry the standby's name too.
        spec(
            "replication",
            RunsOn::Primary,
            "SELECT application_name AS standby, \
             max(coalesce(pg_wal_lsn_diff(pg_current_wal_lsn(), replay_lsn), 0)) AS lag_bytes, \
             max(coalesce(extract(epoch FROM replay_lag), 0)) AS lag_seconds \
             FROM pg_stat_replication GROUP BY 1 ORDER BY 1",
            vec![
                ColumnSpec::label("standby"),
                gauge(
                    "lag_bytes",
                    "pg_replication_lag_bytes",
                    "WAL bytes a standby has yet to replay, as the primary sees it.",
                ),
                gauge(
                    "lag_seconds",
                    "pg_replication_lag_seconds",
                    "A standby's replay lag, as the primary sees it.",
                ),
            ],
        ),
        spec(
            "wal_receiver",
            RunsOn::Standby,
            "SELECT coalesce(r.status, 'stopped') AS status, coalesce(r.status = 'streaming', false) AS streaming \
             FROM (SELECT 1) AS one LEFT JOIN pg_stat_wal_receiver AS r ON true",
            vec![
                ColumnSpec::label("status"),
                gauge(
                    "streaming",
                    "pg_wal_receiver_streaming",
                    "1 while the standby's WAL receiver streams; its status as a label (stopped when none runs).",
                ),
            ],
        ),
        spec(
            "wal_receiver_age",
            RunsOn::Standby,
            "SELECT extract(epoch FROM now() - last_msg_receipt_time) AS age FROM pg_stat_wal_receiver",
            vec![gauge(
                "age",
                "pg_wal_receiver_last_message_age_seconds",
                "Seconds since the WAL receiver last heard from the primary.",
            )],
        ),
        spec(
            "replay",
            RunsOn::Standby,
            "SELECT greatest(coalesce(pg_wal_lsn_diff(pg_last_wal_receive_lsn(), pg_last_wal_replay_lsn()), 0), 0) AS lag_bytes, \
             CASE WHEN pg_last_wal_receive_lsn() IS NULL OR pg_last_wal_receive_lsn() <= pg_last_wal_replay_lsn() THEN 0 \
             ELSE coalesce(extract(epoch FROM now() - pg_last_xact_replay_timestamp()), 0) END AS lag_seconds, \
             pg_get_wal_replay_pause_state() <> 'not paused' AS paused",
            vec![
                gauge(
                    "lag_bytes",
                    "pg_wal_replay_lag_bytes",
                    "WAL bytes this standby received and has yet to replay.",
                ),
                gauge(
                    "lag_seconds",
                    "pg_wal_replay_lag_seconds",
                    "Seconds since the last replayed transaction, while received WAL waits to be replayed (0 when all is replayed).",
                ),
                gauge("paused", "pg_wal_replay_paused", "1 while replay is paused (pg_wal_replay_pause())."),
            ],
        ),
    ]
}

fn activity() -> Vec<QuerySpec> {
    vec![
        spec(
            "backends",
            RunsOn::Any,
            "SELECT coalesce(state, 'unknown') AS state, count(*) AS backends FROM pg_stat_activity \
             WHERE backend_type = 'client backend' GROUP BY 1 ORDER BY 1",
            vec![ColumnSpec::label("state"), gauge("backends", "pg_backends", "Client backends by state.")],
        ),
        spec(
            "databases",
            RunsOn::Any,
            "SELECT datname, xact_commit, xact_rollback, deadlocks, conflicts, pg_database_size(datid) AS size \
             FROM pg_stat_database WHERE datname IS NOT NULL ORDER BY 1",
            vec![
                ColumnSpec::label("datname"),
                counter("xact_commit", "pg_xact_commit_total", "Transactions committed, per database."),
                counter("xact_rollback", "pg_xact_rollback_total", "Transactions rolled back, per database."),
                counter("deadlocks", "pg_deadlocks_total", "Deadlocks detected, per database."),
                counter(
                    "conflicts",
                    "pg_conflicts_total",
                    "Queries cancelled by conflicts with recovery (on a standby), per database.",
                ),
                gauge("size", "pg_database_size_bytes", "Disk space used, per database."),
            ],
        ),
        spec(
            "conflicts",
            RunsOn::Any,
            "SELECT c.datname, v.reason, v.n FROM pg_stat_database_conflicts AS c, LATERAL (VALUES \
             ('tablespace', c.confl_tablespace), ('lock', c.confl_lock), ('snapshot', c.confl_snapshot), \
             ('bufferpin', c.confl_bufferpin), ('deadlock', c.confl_deadlock)) AS v(reason, n) \
             WHERE c.datname IS NOT NULL ORDER BY 1, 2",
            vec![
                ColumnSpec::label("datname"),
                ColumnSpec::label("reason"),
                counter(
                    "n",
                    "pg_conflicts_by_reason_total",
                    "Queries cancelled by conflicts with recovery, per database and reason.",
                ),
            ],
        ),
    ]
}

fn background() -> Vec<QuerySpec> {
    vec![
        spec(
            "archiver",
            RunsOn::Any,
            "SELECT archived_count, failed_count, \
             coalesce(extract(epoch FROM last_archived_time), 0) AS last_archived, \
             coalesce(extract(epoch FROM last_failed_time), 0) AS last_failed, \
             coalesce(last_failed_time > coalesce(last_archived_time, '-infinity'), false) AS failing \
             FROM pg_stat_archiver",
            vec![
                counter("archived_count", "pg_archiver_archived_total", "WAL files archived."),
                counter("failed_count", "pg_archiver_failed_total", "Failed attempts to archive a WAL file."),
                gauge(
                    "last_archived",
                    "pg_archiver_last_archived_timestamp_seconds",
                    "When the last WAL file was archived (Unix time; 0 never).",
                ),
                gauge(
                    "last_failed",
                    "pg_archiver_last_failure_timestamp_seconds",
                    "When archiving last failed (Unix time; 0 never).",
                ),
                gauge("failing", "pg_archiver_failing", "1 when the last archiving attempt failed."),
            ],
        ),
        spec(
            "checkpoints",
            RunsOn::Any,
            "SELECT v.kind, v.n FROM pg_stat_bgwriter AS b, \
             LATERAL (VALUES ('timed', b.checkpoints_timed), ('requested', b.checkpoints_req)) AS v(kind, n)",
            vec![
                ColumnSpec::label("kind"),
                counter("n", "pg_checkpoints_total", "Checkpoints, scheduled (timed) or requested."),
            ],
        ),
        spec(
            "buffers_written",
            RunsOn::Any,
            "SELECT v.writer, v.n FROM pg_stat_bgwriter AS b, LATERAL (VALUES ('checkpoint', b.buffers_checkpoint), \
             ('bgwriter', b.buffers_clean), ('backend', b.buffers_backend)) AS v(writer, n)",
            vec![
                ColumnSpec::label("writer"),
                counter(
                    "n",
                    "pg_buffers_written_total",
                    "Buffers written, by the checkpointer, the background writer or backends.",
                ),
            ],
        ),
        spec(
            "bgwriter",
            RunsOn::Any,
            "SELECT checkpoint_write_time / 1000.0 AS write_seconds, checkpoint_sync_time / 1000.0 AS sync_seconds, \
             buffers_alloc FROM pg_stat_bgwriter",
            vec![
                counter(
                    "write_seconds",
                    "pg_checkpoint_write_seconds_total",
                    "Time checkpoints spent writing files.",
                ),
                counter(
                    "sync_seconds",
                    "pg_checkpoint_sync_seconds_total",
                    "Time checkpoints spent syncing files.",
                ),
                counter("buffers_alloc", "pg_buffers_allocated_total", "Buffers allocated."),
            ],
        ),
    ]
}

/// The built-in queries, in the order their families are served.
pub fn queries() -> Vec<QuerySpec> {
    let mut all = replication();
    all.extend(activity());
    all.extend(background());
    all
}

/// Every built-in family name (the custom queries may not reuse one).
pub fn names() -> Vec<String> {
    let mut names = vec![UP.to_owned(), IN_RECOVERY.to_owned()];
    for query in queries() {
        names.extend(query.metric_names().map(str::to_owned));
    }
    names.extend(super::custom::OWN_NAMES.iter().map(|n| (*n).to_owned()));
    names
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::super::text::{is_label_name, is_metric_name};
    use super::*;

    #[test]
    fn every_name_is_unique_prefixed_and_a_counter_ends_in_total() {
        let names = names();
        let unique: BTreeSet<&String> = names.iter().collect();
        assert_eq!(unique.len(), names.len(), "{names:?}");
        for name in &names {
            assert!(name.starts_with("pg_") && is_metric_name(name), "{name}");
        }
        for query in queries() {
            for column in &query.columns {
                match column.usage {
                    Usage::Counter => assert!(column.metric.ends_with("_total"), "{}", column.metric),
                    Usage::Gauge => assert!(!column.metric.ends_with("_total"), "{}", column.metric),
                    Usage::Label => assert!(is_label_name(&column.column), "{}", column.column),
                    Usage::Discard => {}
                }
            }
        }
    }

    #[test]
    fn the_monitoring_guide_documents_every_name() {
        let guide = include_str!("../../../docs/monitoring.md");
        let section = guide.split("## Metrics").nth(1).expect("docs/monitoring.md has a metrics section");
        for name in names() {
            assert!(section.contains(&format!("`{name}")), "docs/monitoring.md's metrics table lacks {name}");
        }
    }
}
