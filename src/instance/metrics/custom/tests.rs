//! Unit tests of `custom`.

use super::*;

const SAMPLE: &str = r#"
pg_orders:
  query: "SELECT region, count(*) AS waiting, 7 AS skip FROM orders GROUP BY region"
  primary: true
  cache_seconds: 30
  metrics:
    - region:
        usage: "LABEL"
        description: "The region"
    - waiting:
        usage: "gauge"
        description: "Orders waiting"
    - skip:
        usage: DISCARD
pg_legacy:
  master: true
  query: SELECT 1 AS one
  metrics:
    - one: {usage: COUNTER, description: "One."}
anywhere:
  query: SELECT 1 AS v
  metrics:
    - v: {usage: GAUGE}
"#;

fn specs(text: &str) -> Vec<(String, Result<QuerySpec, String>)> {
    parse(text, &["pg_up".to_owned()]).unwrap().into_iter().map(|d| (d.name, d.spec)).collect()
}

#[test]
fn the_cloudnativepg_shape_parses() {
    let parsed = specs(SAMPLE);
    let names: Vec<&str> = parsed.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["anywhere", "pg_legacy", "pg_orders"]);
    let orders = parsed[2].1.clone().unwrap();
    assert_eq!(orders.runs_on, RunsOn::Primary);
    assert_eq!(
        orders.columns,
        [
            ColumnSpec::metric("region", Usage::Label, "pg_orders_region", "The region"),
            ColumnSpec::metric("waiting", Usage::Gauge, "pg_orders_waiting", "Orders waiting"),
            ColumnSpec::metric("skip", Usage::Discard, "pg_orders_skip", ""),
        ]
    );
    assert_eq!(parsed[1].1.clone().unwrap().runs_on, RunsOn::Primary, "master: true");
    assert_eq!(parsed[0].1.clone().unwrap().runs_on, RunsOn::Any);
}

#[test]
fn a_definition_that_cannot_run_is_refused_alone() {
    let cases = [
        (
            "bad-name:\n  query: SELECT 1 AS v\n  metrics: [{v: {usage: GAUGE}}]",
            "cannot prefix a metric name",
        ),
        (
            "q:\n  query: SELECT 1 AS v\n  metrics: [{v: {usage: HISTOGRAM}}]",
            "usage \"HISTOGRAM\" is not supported",
        ),
        ("q:\n  query: SELECT 1 AS v\n  metrics: [{v: {usage: MAPPEDMETRIC}}]", "is not supported"),
        ("q:\n  query: SELECT 1 AS v\n  metrics: [{v: {usage: LABEL}}]", "no COUNTER or GAUGE column"),
        ("q:\n  query: SELECT 1 AS v\n  metrics: []", "no COUNTER or GAUGE column"),
        (
            "q:\n  query: SELECT 1 AS \"a b\"\n  metrics: [{\"a b\": {usage: LABEL}}, {v: {usage: GAUGE}}]",
            "cannot name a label",
        ),
        ("q:\n  query: SELECT 1 AS \"a-b\"\n  metrics: [{\"a-b\": {usage: GAUGE}}]", "cannot name a metric"),
        ("q:\n  query: \"  \"\n  metrics: [{v: {usage: GAUGE}}]", "the query is empty"),
        ("q:\n  metrics: [{v: {usage: GAUGE}}]", "not a query definition"),
        ("q: just a string", "not a query definition"),
        ("q:\n  query: SELECT 1\n  metrics: not-a-list", "not a query definition"),
        (
            "q:\n  query: SELECT 1 AS v\n  target_databases: ['*']\n  metrics: [{v: {usage: GAUGE}}]",
            "target_databases",
        ),
        ("pg:\n  query: SELECT 1 AS up\n  metrics: [{up: {usage: GAUGE}}]", "pg_up is served already"),
    ];
    for (text, want) in cases {
        let with_good =
            format!("{text}\nzz_good:\n  query: SELECT 1 AS v\n  metrics: [{{v: {{usage: GAUGE}}}}]\n");
        let parsed = specs(&with_good);
        let error = parsed[0].1.clone().unwrap_err();
        assert!(error.contains(want), "{text:?}: {error}");
        assert!(parsed.last().unwrap().1.is_ok(), "the other query stays: {text:?}");
    }
}

#[test]
fn a_metric_name_is_served_by_the_first_query_that_makes_it() {
    let text = "a:\n  query: SELECT 1 AS b_c\n  metrics: [{b_c: {usage: GAUGE}}]\n\
                a_b:\n  query: SELECT 1 AS c\n  metrics: [{c: {usage: GAUGE}}]\n";
    let parsed = specs(text);
    assert!(parsed[0].1.is_ok());
    assert_eq!(parsed[1].1.clone().unwrap_err(), "a_b_c is served already");
}

#[test]
fn a_file_that_is_not_a_map_of_queries_is_invalid_and_an_empty_one_holds_none() {
    for text in ["- a\n- b\n", "just text", "q: [unclosed", "{a: 1"] {
        assert!(parse(text, &[]).is_err(), "{text:?}");
    }
    for text in ["", "# only a comment\n", "{}"] {
        assert_eq!(parse(text, &[]), Ok(Vec::new()), "{text:?}");
    }
}

#[test]
fn fingerprints_change_with_the_definition() {
    let one = parse("q:\n  query: SELECT 1 AS v\n  metrics: [{v: {usage: GAUGE}}]", &[]).unwrap();
    let two = parse("q:\n  query: SELECT 2 AS v\n  metrics: [{v: {usage: GAUGE}}]", &[]).unwrap();
    assert_ne!(one[0].fingerprint, two[0].fingerprint);
    assert_eq!(one, parse("q:\n  query: SELECT 1 AS v\n  metrics: [{v: {usage: GAUGE}}]", &[]).unwrap());
}

#[test]
fn each_failure_is_counted_and_logged_once_until_it_recovers_or_changes() {
    use Report::*;
    let failed = |q: &str, e: &str| Some(Failed { query: q.into(), error: e.into() });
    type Step<'a> = (&'a str, &'a str, Result<(), &'a str>, Option<Report>);
    let steps: [Step; 9] = [
        ("a", "v1", Ok(()), None),
        ("a", "v1", Err("boom"), failed("a", "boom")),
        ("a", "v1", Err("boom"), None),
        ("a", "v1", Err("other error"), None),
        ("b", "v1", Err("x"), failed("b", "x")),
        ("a", "v2", Err("boom"), failed("a", "boom")),
        ("a", "v2", Ok(()), Some(Recovered { query: "a".into() })),
        ("a", "v2", Ok(()), None),
        ("a", "v2", Err("again"), failed("a", "again")),
    ];
    let mut tracker = Tracker::default();
    for (query, fingerprint, outcome, want) in steps {
        assert_eq!(tracker.record(query, fingerprint, outcome), want, "{query} {fingerprint} {outcome:?}");
    }
    let family = tracker.family();
    let counts: Vec<(String, f64)> =
        family.samples.iter().map(|s| (s.labels[0].1.clone(), s.value)).collect();
    assert_eq!(counts, [("a".to_owned(), 5.0), ("b".to_owned(), 1.0)]);
}

#[test]
fn the_file_state_is_news_once_per_change() {
    let cases = [
        (None, FileState::Missing, true),
        (Some(FileState::Missing), FileState::Missing, false),
        (Some(FileState::Missing), FileState::Loaded(2), true),
        (Some(FileState::Loaded(2)), FileState::Loaded(2), false),
        (Some(FileState::Loaded(2)), FileState::Loaded(3), true),
        (Some(FileState::Invalid("a".into())), FileState::Invalid("a".into()), false),
        (Some(FileState::Invalid("a".into())), FileState::Invalid("b".into()), true),
    ];
    for (previous, now, want) in cases {
        assert_eq!(file_news(previous.as_ref(), &now), want, "{previous:?} → {now:?}");
    }
    assert_eq!(FileState::Loaded(0).family().samples[0].value, 1.0);
    assert_eq!(FileState::Missing.family().samples[0].value, 0.0);
}
