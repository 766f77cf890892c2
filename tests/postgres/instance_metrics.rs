//! The instance manager's `/metrics` against real PostgreSQL 15 processes, with the pods of
//! `instance_program`'s fixture: every instance's families in valid text, a standby's replay lag
//! while its replay is paused and back to 0 once resumed, and the user's custom queries (served,
//! a failing one counted and logged once while the others are served, an invalid file leaving
//! the built-in metrics served).
#![cfg(feature = "sim")]

use std::collections::BTreeMap;

use dbcluster_operator::databasecluster::instances::connect;

use crate::common::postgres::eventually_some;
use crate::instance_program::{Fixture, primary_and_standby};

/// The manager's metrics port.
const METRICS_PORT: u16 = 9187;

/// Pod `ordinal`'s metrics: each sample line as `series → value`, the text checked on the way
/// (every sample's family has `# HELP` and `# TYPE` lines before it, every value parses).
async fn scrape(fixture: &Fixture, ordinal: usize) -> Option<BTreeMap<String, f64>> {
    let (code, body) = fixture.get_on(ordinal, METRICS_PORT, "/metrics", None).await?;
    assert_eq!(code, 200, "{body}");
    Some(parse(&body))
}

/// The samples of a text exposition, its format checked.
fn parse(text: &str) -> BTreeMap<String, f64> {
    let mut declared: BTreeMap<String, (bool, bool)> = BTreeMap::new();
    let mut samples = BTreeMap::new();
    for line in text.lines().filter(|l| !l.is_empty()) {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            declared.entry(rest.split(' ').next().unwrap().to_owned()).or_default().0 = true;
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap();
            assert!(matches!(kind, "gauge" | "counter"), "{line}");
            declared.entry(name.to_owned()).or_default().1 = true;
            continue;
        }
        let (series, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("not a sample: {line:?}"));
        let name = series.split('{').next().unwrap();
        assert_eq!(declared.get(name), Some(&(true, true)), "{name} lacks HELP or TYPE:\n{text}");
        let value: f64 = match value {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            value => value.parse().unwrap_or_else(|_| panic!("not a value: {line:?}")),
        };
        assert!(samples.insert(series.to_owned(), value).is_none(), "{series} twice:\n{text}");
    }
    samples
}

/// `series`' value, or what the scrape held when it is missing.
fn value(samples: &BTreeMap<String, f64>, series: &str) -> f64 {
    *samples.get(series).unwrap_or_else(|| panic!("no {series} in {samples:#?}"))
}

#[tokio::test]
async fn each_instance_serves_its_metrics_and_a_paused_standbys_lag_comes_and_goes() {
    let fixture = primary_and_standby(41).await;
    let primary = eventually_some("the primary sees its standby", || async {
        let samples = scrape(&fixture, 0).await?;
        samples.contains_key("pg_replication_lag_bytes{standby=\"db-1\"}").then_some(samples)
    })
    .await;
    for series in [
        "pg_archiver_archived_total",
        "pg_archiver_failing",
        "pg_checkpoints_total{kind=\"timed\"}",
        "pg_checkpoints_total{kind=\"requested\"}",
        "pg_buffers_written_total{writer=\"checkpoint\"}",
        "pg_buffers_allocated_total",
        "pg_checkpoint_write_seconds_total",
        "pg_conflicts_total{datname=\"app\"}",
        "pg_conflicts_by_reason_total{datname=\"app\",reason=\"snapshot\"}",
        "pg_xact_commit_total{datname=\"postgres\"}",
        "pg_database_size_bytes{datname=\"app\"}",
        "pg_backends{state=\"active\"}",
    ] {
        value(&primary, series);
    }
    assert_eq!((value(&primary, "pg_up"), value(&primary, "pg_in_recovery")), (1.0, 0.0));
    assert!(!primary.keys().any(|k| k.starts_with("pg_wal_")), "no standby metrics on the primary");

    let standby = scrape(&fixture, 1).await.expect("the standby's manager answers");
    assert_eq!(value(&standby, "pg_in_recovery"), 1.0);
    assert_eq!(value(&standby, "pg_wal_receiver_streaming{status=\"streaming\"}"), 1.0);
    assert_eq!(value(&standby, "pg_wal_replay_paused"), 0.0);
    assert!(value(&standby, "pg_wal_receiver_last_message_age_seconds") >= 0.0);
    assert!(!standby.keys().any(|k| k.starts_with("pg_replication_lag")), "no primary metrics on a standby");

    // Replay paused on the standby, then a write on the primary: the standby receives WAL it
    // does not replay, and the primary sees the standby behind.
    let standby_su = fixture.superuser(1);
    let standby_client = connect(&standby_su).await.unwrap();
    standby_client.batch_execute("SELECT pg_wal_replay_pause()").await.unwrap();
    let primary_client = connect(&fixture.superuser(0)).await.unwrap();
    primary_client
        .batch_execute("CREATE TABLE lagging (i int); INSERT INTO lagging SELECT generate_series(1, 50000)")
        .await
        .unwrap();
    eventually_some("the paused standby's lag shows on both sides", || async {
        let (primary, standby) = (scrape(&fixture, 0).await?, scrape(&fixture, 1).await?);
        (value(&standby, "pg_wal_replay_paused") == 1.0
            && value(&standby, "pg_wal_replay_lag_bytes") > 0.0
            && value(&primary, "pg_replication_lag_bytes{standby=\"db-1\"}") > 0.0)
            .then_some(())
    })
    .await;

    standby_client.batch_execute("SELECT pg_wal_replay_resume()").await.unwrap();
    eventually_some("the lag returns to 0 once replay resumes", || async {
        let (primary, standby) = (scrape(&fixture, 0).await?, scrape(&fixture, 1).await?);
        (value(&standby, "pg_wal_replay_paused") == 0.0
            && value(&standby, "pg_wal_replay_lag_bytes") == 0.0
            && value(&standby, "pg_wal_replay_lag_seconds") == 0.0
            && value(&primary, "pg_replication_lag_bytes{standby=\"db-1\"}") == 0.0)
            .then_some(())
    })
    .await;
}
