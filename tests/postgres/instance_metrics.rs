//! The instance manager's `/metrics` against real PostgreSQL 15 processes, with the pods of
//! `instance_program`'s fixture: every instance's families in valid text, a standby's replay lag
//! while its replay is paused and back to 0 once resumed, and the user's custom queries (served,
//! a failing one counted and logged once while the others are served, an invalid file leaving
//! the built-in metrics served).
#![cfg(feature = "sim")]

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::common::postgres::eventually_some;
use crate::instance_program::{Fixture, connect, primary_and_standby};

/// The manager's metrics port.
const METRICS_PORT: u16 = 9187;

/// How long a scrape may take (Prometheus' default timeout): the custom queries may take 3 s.
const SCRAPE_LIMIT: Duration = Duration::from_secs(10);

/// Pod `ordinal`'s metrics: each sample line as `series → value`, the text checked on the way
/// (every sample's family has `# HELP` and `# TYPE` lines before it, every value parses); `None`
/// when nothing answers within [`SCRAPE_LIMIT`].
async fn scrape(fixture: &Fixture, ordinal: usize) -> Option<BTreeMap<String, f64>> {
    let exchange = async {
        let mut stream =
            tokio::net::TcpStream::connect((fixture.ip(ordinal).as_str(), METRICS_PORT)).await.ok()?;
        let request = "GET /metrics HTTP/1.1\r\nHost: pod\r\nConnection: close\r\n\r\n";
        stream.write_all(request.as_bytes()).await.ok()?;
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.ok()?;
        Some(answer)
    };
    let answer = tokio::time::timeout(SCRAPE_LIMIT, exchange).await.ok().flatten()?;
    let (head, body) = answer.split_once("\r\n\r\n")?;
    assert!(head.starts_with("HTTP/1.1 200"), "{answer}");
    Some(parse(body))
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

/// Custom queries: two served, one primary-only, one showing the role they run as, and three that
/// fail (a missing table, a write, one slower than the statement timeout).
const QUERIES: &str = r#"
pg_test_orders:
  query: "SELECT 'eu' AS region, 3 AS waiting UNION ALL SELECT 'us', 5"
  metrics:
    - region: {usage: LABEL, description: "The region"}
    - waiting: {usage: GAUGE, description: "Orders waiting"}
pg_test_primary:
  primary: true
  query: SELECT 1 AS only
  metrics:
    - only: {usage: GAUGE}
pg_test_role:
  query: SELECT current_user AS who, count(*) AS backends FROM pg_stat_activity
  metrics:
    - who: {usage: LABEL}
    - backends: {usage: GAUGE}
broken:
  query: SELECT n FROM no_such_table
  metrics:
    - n: {usage: COUNTER}
writer:
  query: CREATE TABLE written_by_a_metric (n int)
  metrics:
    - n: {usage: GAUGE}
zz_slow:
  query: SELECT 1 AS v FROM pg_sleep(5)
  metrics:
    - v: {usage: GAUGE}
"#;

/// How many lines of pod `ordinal`'s log hold every one of `needles`.
fn log_lines(fixture: &Fixture, ordinal: usize, needles: &[&str]) -> usize {
    fixture.log(ordinal).lines().filter(|l| needles.iter().all(|n| l.contains(n))).count()
}

#[tokio::test]
async fn custom_queries_are_served_and_a_failing_one_is_counted_and_logged_once() {
    let mut fixture = Fixture::new(42, &[]).await;
    let dir = fixture.root.join("monitoring");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("queries.yaml");
    fixture.env.push(("DBC_CUSTOM_QUERIES".into(), file.display().to_string()));
    fixture.init(0).await;
    fixture.start(0).await;
    let su = fixture.superuser(0);
    let client = connect(&su).await.unwrap();
    client.batch_execute("SELECT pg_create_physical_replication_slot('instance_1')").await.unwrap();
    fixture.init(1).await;
    fixture.start(1).await;

    // No file yet (a ConfigMap not created): the built-in metrics, the state, one log line.
    for _ in 0..2 {
        let samples = scrape(&fixture, 0).await.unwrap();
        assert_eq!((value(&samples, "pg_up"), value(&samples, "pg_custom_queries_file_loaded")), (1.0, 0.0));
    }
    assert_eq!(log_lines(&fixture, 0, &["the custom queries file is missing"]), 1, "{}", fixture.log(0));

    std::fs::write(&file, QUERIES).unwrap();
    let primary = eventually_some("the custom queries are served", || async {
        let samples = scrape(&fixture, 0).await?;
        samples.contains_key("pg_test_orders_waiting{region=\"eu\"}").then_some(samples)
    })
    .await;
    assert_eq!(value(&primary, "pg_test_orders_waiting{region=\"eu\"}"), 3.0);
    assert_eq!(value(&primary, "pg_test_orders_waiting{region=\"us\"}"), 5.0);
    assert_eq!(value(&primary, "pg_test_primary_only"), 1.0);
    assert!(value(&primary, "pg_test_role_backends{who=\"pg_monitor\"}") >= 1.0, "run as pg_monitor");
    assert_eq!(value(&primary, "pg_custom_queries_file_loaded"), 1.0);
    for failing in ["broken", "writer", "zz_slow"] {
        assert!(value(&primary, &format!("pg_custom_query_errors_total{{query=\"{failing}\"}}")) >= 1.0);
    }
    assert!(value(&primary, "pg_backends{state=\"active\"}") >= 1.0, "the built-in metrics are served");
    let standby = scrape(&fixture, 1).await.unwrap();
    assert_eq!(value(&standby, "pg_test_orders_waiting{region=\"eu\"}"), 3.0);
    assert!(!standby.contains_key("pg_test_primary_only"), "primary: true runs on the primary only");

    // Each scrape counts each failure again; each is logged once.
    let broken = "pg_custom_query_errors_total{query=\"broken\"}";
    let before = value(&primary, broken);
    let again = scrape(&fixture, 0).await.unwrap();
    assert!(value(&again, broken) > before);
    assert_eq!(log_lines(&fixture, 0, &["\"query\":\"broken\"", "no_such_table"]), 1, "{}", fixture.log(0));
    assert_eq!(log_lines(&fixture, 0, &["\"query\":\"writer\"", "read-only transaction"]), 1);
    assert_eq!(log_lines(&fixture, 0, &["\"query\":\"zz_slow\"", "statement timeout"]), 1);
    assert_eq!(log_lines(&fixture, 0, &["no_such_table"]), 1, "the server does not log it at each scrape");

    // Invalid YAML: the built-in metrics stay, logged once; fixed, the queries are back.
    std::fs::write(&file, "pg_test: [unclosed").unwrap();
    for _ in 0..2 {
        let samples = scrape(&fixture, 0).await.unwrap();
        assert_eq!(value(&samples, "pg_custom_queries_file_loaded"), 0.0);
        assert!(!samples.contains_key("pg_test_orders_waiting{region=\"eu\"}"));
        assert_eq!(value(&samples, "pg_up"), 1.0);
        value(&samples, "pg_xact_commit_total{datname=\"app\"}");
    }
    assert_eq!(log_lines(&fixture, 0, &["the custom queries file is invalid"]), 1);
    std::fs::write(&file, QUERIES).unwrap();
    let fixed = scrape(&fixture, 0).await.unwrap();
    assert_eq!(value(&fixed, "pg_test_orders_waiting{region=\"eu\"}"), 3.0);
    assert_eq!(
        log_lines(&fixture, 0, &["\"query\":\"broken\""]),
        1,
        "an unchanged definition is not logged again"
    );
}
