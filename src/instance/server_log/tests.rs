//! Unit tests of `server_log`.

use serde_json::json;

use super::*;

const NOW: &str = "2026-12-07T15:00:00Z";

/// The JSON objects `lines` make, flushed at the end.
fn assemble(lines: &[&str]) -> Vec<Value> {
    let mut assembler = Assembler::default();
    let mut out: Vec<String> = lines.iter().filter_map(|l| assembler.push(l, NOW)).collect();
    out.extend(assembler.flush());
    out.iter().map(|l| serde_json::from_str(l).unwrap()).collect()
}

#[test]
fn prefixed_lines_become_records_with_their_fields() {
    let cases: Vec<(Vec<&str>, Vec<Value>)> = vec![
        (vec![], vec![]),
        (
            vec!["2026-12-07 15:00:50.622 GMT [4] LOG:  database system is ready to accept connections"],
            vec![json!({"timestamp": "2026-12-07T15:00:50.622Z", "level": "INFO", "logger": "postgres",
                "message": "database system is ready to accept connections", "severity": "LOG", "pid": 4,
                "time": "2026-12-07 15:00:50.622 GMT"})],
        ),
        (
            vec![
                "2026-12-07 15:00:50.622 UTC [27] ERROR:  relation \"t\" does not exist at character 15",
                "2026-12-07 15:00:50.622 UTC [27] STATEMENT:  SELECT *",
                "\tFROM t",
                "2026-12-07 15:00:50.700 UTC [28] FATAL:  password authentication failed for user \"app\"",
                "2026-12-07 15:00:50.700 UTC [28] DETAIL:  Connection matched pg_hba.conf line 4",
            ],
            vec![
                json!({"timestamp": "2026-12-07T15:00:50.622Z", "level": "ERROR", "logger": "postgres",
                    "message": "relation \"t\" does not exist at character 15", "severity": "ERROR", "pid": 27,
                    "time": "2026-12-07 15:00:50.622 UTC", "statement": "SELECT *\nFROM t"}),
                json!({"timestamp": "2026-12-07T15:00:50.700Z", "level": "ERROR", "logger": "postgres",
                    "message": "password authentication failed for user \"app\"", "severity": "FATAL", "pid": 28,
                    "time": "2026-12-07 15:00:50.700 UTC", "detail": "Connection matched pg_hba.conf line 4"}),
            ],
        ),
        (
            vec![
                "some line without a prefix",
                "\tits continuation",
                "2026-12-07 15:00:50.7 CET [3] WARNING:  w",
            ],
            vec![
                json!({"timestamp": NOW, "level": "INFO", "logger": "postgres",
                    "message": "some line without a prefix\nits continuation"}),
                json!({"timestamp": NOW, "level": "WARN", "logger": "postgres", "message": "w",
                    "severity": "WARNING", "pid": 3, "time": "2026-12-07 15:00:50.7 CET"}),
            ],
        ),
        (
            // A DETAIL of another backend is a record of its own; a lone tab line too.
            vec!["2026-12-07 15:00:50.622 UTC [1] LOG:  a", "2026-12-07 15:00:50.622 UTC [2] DETAIL:  b"],
            vec![
                json!({"timestamp": "2026-12-07T15:00:50.622Z", "level": "INFO", "logger": "postgres", "message": "a",
                    "severity": "LOG", "pid": 1, "time": "2026-12-07 15:00:50.622 UTC"}),
                json!({"timestamp": "2026-12-07T15:00:50.622Z", "level": "INFO", "logger": "postgres", "message": "b",
                    "severity": "DETAIL", "pid": 2, "time": "2026-12-07 15:00:50.622 UTC"}),
            ],
        ),
        (
            vec!["\tstray"],
            vec![json!({"timestamp": NOW, "level": "INFO", "logger": "postgres", "message": "\tstray"})],
        ),
    ];
    for (lines, want) in cases {
        assert_eq!(assemble(&lines), want, "{lines:?}");
    }
}

#[test]
fn severities_map_to_levels_and_only_the_default_prefix_parses() {
    let levels = [
        ("DEBUG1", "DEBUG"),
        ("LOG", "INFO"),
        ("NOTICE", "INFO"),
        ("WARNING", "WARN"),
        ("ERROR", "ERROR"),
        ("FATAL", "ERROR"),
        ("PANIC", "ERROR"),
    ];
    for (severity, want) in levels {
        assert_eq!(level(severity), want, "{severity}");
    }
    let refused = [
        "LOG:  no prefix",
        "2026-12-07 15:00:50 UTC [x] LOG:  pid not a number",
        "2026-12-07 15:00:50 UTC [1] log:  lower case",
        "short [1] LOG:  too short a time",
        "2026-12-07 15:00:50 UTC [1] LOG: one space",
    ];
    for line in refused {
        assert_eq!(parse(line), None, "{line}");
    }
    assert_eq!(rfc3339("2026-12-07 15:00:50 UTC").as_deref(), Some("2026-12-07T15:00:50Z"));
    assert_eq!(rfc3339("2026-12-07 15:00:50 CET"), None);
}

#[tokio::test]
async fn a_pipe_is_read_to_its_end_whatever_its_bytes() {
    // Not UTF-8, no final newline, a long line: read to the end (the output goes to stderr).
    let mut bytes = b"2026-12-07 15:00:50 UTC [1] LOG:  \xff\xfe\n".to_vec();
    bytes.extend(std::iter::repeat_n(b'x', 100_000));
    let reading = forward(std::io::Cursor::new(bytes));
    tokio::time::timeout(Duration::from_secs(5), reading).await.expect("forward ends with its input");
}
