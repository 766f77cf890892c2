//! PostgreSQL's log as JSON lines on the manager's stderr, so that `kubectl logs` shows JSON
//! only: the server logs to its stderr (`log_destination=stderr`, no logging collector, set on
//! its command line by [`super::postmaster`]), a pipe the manager reads; each message becomes one
//! JSON object with `"logger":"postgres"`, written whole under the same lock as the manager's own
//! lines (so lines never interleave).
//!
//! A line in the default `log_line_prefix` (`%m [%p] `), `2026-01-02 03:04:05.678 UTC [42] LOG:
//! message`, gives `pid`, `severity`, `message`, `level` (`DEBUG`, `INFO`, `WARN`, `ERROR`) and,
//! for a UTC or GMT time, `timestamp` (RFC 3339, else the time the manager read it). Its
//! `DETAIL`, `HINT`, `CONTEXT`, `STATEMENT`, `QUERY` and `LOCATION` lines (same pid) become fields
//! of the message, and tab-indented continuation lines (a multi-line statement) join the text they
//! continue. Any other line (another prefix) is kept whole as `message`, level `INFO`. A message
//! is written once the next one starts, or after [`FLUSH_AFTER`] without a line.
//!
//! Why stderr and not the logging collector with `jsonlog`: the collector writes files, which the
//! manager would have to tail through rotations, and the server writes to stderr anyway before the
//! collector starts (a bad setting's `FATAL` included); one pipe covers every line.

use std::io::Write;
use std::time::Duration;

use serde_json::{Map, Value};
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};

/// How long a message waits for a continuation before it is written.
pub const FLUSH_AFTER: Duration = Duration::from_millis(200);

/// The severities of lines that belong to the message before them, and their field names.
const ATTACHED: [(&str, &str); 6] = [
    ("DETAIL", "detail"),
    ("HINT", "hint"),
    ("CONTEXT", "context"),
    ("STATEMENT", "statement"),
    ("QUERY", "query"),
    ("LOCATION", "location"),
];

/// A line in the default prefix: its time, pid, severity and text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Parsed<'a> {
    /// `%m`, e.g. `2026-01-02 03:04:05.678 UTC`.
    pub time: &'a str,
    /// `%p`.
    pub pid: u64,
    /// `LOG`, `ERROR`, `DETAIL`…
    pub severity: &'a str,
    /// The rest.
    pub text: &'a str,
}

/// `line` read in the default `log_line_prefix`, if it is in it.
pub fn parse(line: &str) -> Option<Parsed<'_>> {
    let (time, rest) = line.split_once(" [")?;
    let (pid, rest) = rest.split_once("] ")?;
    let (severity, text) = rest.split_once(":  ")?;
    let pid = pid.parse().ok()?;
    let known =
        severity.bytes().all(|b| b.is_ascii_uppercase() || b.is_ascii_digit()) && !severity.is_empty();
    (known && time.len() >= 19 && time.as_bytes()[4] == b'-').then_some(Parsed { time, pid, severity, text })
}

/// The manager's level of a PostgreSQL severity.
pub fn level(severity: &str) -> &'static str {
    match severity {
        s if s.starts_with("DEBUG") => "DEBUG",
        "WARNING" => "WARN",
        "ERROR" | "FATAL" | "PANIC" => "ERROR",
        _ => "INFO",
    }
}

/// `%m` as RFC 3339 when its zone is UTC or GMT (`2026-01-02T03:04:05.678Z`).
pub fn rfc3339(time: &str) -> Option<String> {
    let (local, zone) = time.rsplit_once(' ')?;
    let (date, clock) = local.split_once(' ')?;
    (matches!(zone, "UTC" | "GMT") && date.len() == 10 && clock.len() >= 8)
        .then(|| format!("{date}T{clock}Z"))
}

/// Messages being assembled from lines.
#[derive(Debug, Default)]
pub struct Assembler {
    pending: Option<(Option<u64>, Map<String, Value>, &'static str)>,
}

impl Assembler {
    /// Takes one line (without its newline); the JSON line of a message it completes, if any.
    /// `now` is the time to record when the line carries none.
    pub fn push(&mut self, line: &str, now: &str) -> Option<String> {
        if let Some(rest) = line.strip_prefix('\t')
            && let Some((_, record, last)) = self.pending.as_mut()
        {
            append(record, last, rest);
            return None;
        }
        let parsed = parse(line);
        if let (Some(parsed), Some((pid, record, last))) = (&parsed, self.pending.as_mut())
            && *pid == Some(parsed.pid)
            && let Some((_, field)) = ATTACHED.iter().find(|(s, _)| *s == parsed.severity)
        {
            record.insert((*field).to_owned(), Value::String(parsed.text.to_owned()));
            *last = field;
            return None;
        }
        let done = self.flush();
        let mut record = Map::new();
        let timestamp = parsed.as_ref().and_then(|p| rfc3339(p.time)).unwrap_or_else(|| now.to_owned());
        record.insert("timestamp".into(), Value::String(timestamp));
        let severity = parsed.as_ref().map_or("LOG", |p| p.severity);
        record.insert("level".into(), Value::String(level(severity).to_owned()));
        record.insert("logger".into(), Value::String("postgres".to_owned()));
        record.insert("message".into(), Value::String(parsed.as_ref().map_or(line, |p| p.text).to_owned()));
        if let Some(parsed) = &parsed {
            record.insert("severity".into(), Value::String(parsed.severity.to_owned()));
            record.insert("pid".into(), Value::from(parsed.pid));
            record.insert("time".into(), Value::String(parsed.time.to_owned()));
        }
        self.pending = Some((parsed.map(|p| p.pid), record, "message"));
        done
    }

    /// The JSON line of the message being assembled, if any.
    pub fn flush(&mut self) -> Option<String> {
        self.pending.take().map(|(_, record, _)| Value::Object(record).to_string())
    }
}

fn append(record: &mut Map<String, Value>, field: &str, text: &str) {
    if let Some(Value::String(value)) = record.get_mut(field) {
        value.push('\n');
        value.push_str(text);
    }
}

fn now() -> String {
    jiff::Timestamp::now().to_string()
}

fn emit(line: Option<String>) {
    if let Some(mut line) = line {
        line.push('\n');
        // The lock the manager's own log lines take too: whole lines, never interleaved. A
        // failed write (stderr closed) has nowhere to be reported.
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
    }
}

/// Reads `output` (the server's stderr or stdout) to its end, writing each message as a JSON line
/// (bytes that are not UTF-8 replaced, never a reason to stop reading: a pipe nobody reads would
/// block the server).
pub async fn forward(output: impl AsyncRead + Unpin) {
    let mut reader = BufReader::new(output);
    let mut assembler = Assembler::default();
    let mut buffer = Vec::new();
    loop {
        // `read_until` keeps what it read when the timeout cancels it: the line goes on next time.
        match tokio::time::timeout(FLUSH_AFTER, reader.read_until(b'\n', &mut buffer)).await {
            Err(_) => emit(assembler.flush()),
            Ok(Ok(0)) | Ok(Err(_)) => break,
            Ok(Ok(_)) => {
                let text = String::from_utf8_lossy(&buffer);
                emit(assembler.push(text.trim_end_matches(['\n', '\r']), &now()));
                buffer.clear();
            }
        }
    }
    if !buffer.is_empty() {
        let text = String::from_utf8_lossy(&buffer);
        emit(assembler.push(text.trim_end_matches(['\n', '\r']), &now()));
    }
    emit(assembler.flush());
}

#[cfg(test)]
mod tests;
