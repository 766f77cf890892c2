//! The user's queries (`spec.monitoring.customQueriesConfigMap`, mounted as a file), pure: the
//! file's YAML in CloudNativePG's (and postgres_exporter's) shape turned into [`QuerySpec`]s, and
//! the bookkeeping that counts failures and logs each once.
//!
//! ```yaml
//! pg_orders:                       # the prefix of its metrics' names
//!   query: "SELECT region, count(*) AS waiting FROM orders GROUP BY region"
//!   primary: true                  # optional (`master` too): the primary only
//!   metrics:
//!     - region:  {usage: LABEL,  description: "The region"}
//!     - waiting: {usage: GAUGE,  description: "Orders waiting"}   # → pg_orders_waiting{region}
//! ```
//!
//! Usages: `LABEL`, `COUNTER`, `GAUGE`, `DISCARD` (any case). Each metric is named
//! `<query>_<column>`. A definition that cannot run (an unknown usage, a bad name, a name already
//! served, `target_databases`) fails like a query that errs; the other queries are still served. A
//! file that is not YAML of this shape serves no custom metric, and the built-in ones as ever.
//! Keys this program does not use (`cache_seconds`, `runonserver`…) are ignored.

use std::collections::{BTreeMap, BTreeSet};

use serde::Deserialize;
use serde_json::Value;

use super::query::{ColumnSpec, QuerySpec, RunsOn, Usage};
use super::text::{Family, Kind, is_label_name, is_metric_name};

/// The failures counter, by query.
pub const ERRORS: &str = "pg_custom_query_errors_total";
/// Whether the configured file was read and parsed.
pub const FILE_LOADED: &str = "pg_custom_queries_file_loaded";
/// The families this module serves itself.
pub const OWN_NAMES: [&str; 2] = [ERRORS, FILE_LOADED];

/// One query of the file: its name, a fingerprint of its definition, and the spec or why none.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Definition {
    /// The query's name (the YAML key).
    pub name: String,
    /// Changes whenever the definition does (a changed definition that fails is logged again).
    pub fingerprint: String,
    /// The spec, or why the definition cannot run.
    pub spec: Result<QuerySpec, String>,
}

#[derive(Debug, Deserialize)]
struct RawQuery {
    query: String,
    #[serde(default)]
    metrics: Vec<BTreeMap<String, RawColumn>>,
    #[serde(default)]
    master: bool,
    #[serde(default)]
    primary: bool,
    #[serde(default)]
    target_databases: Option<Value>,
}

#[derive(Debug, Deserialize)]
struct RawColumn {
    usage: String,
    #[serde(default)]
    description: String,
}

fn usage(text: &str) -> Result<Usage, String> {
    match text.to_ascii_uppercase().as_str() {
        "LABEL" => Ok(Usage::Label),
        "COUNTER" => Ok(Usage::Counter),
        "GAUGE" => Ok(Usage::Gauge),
        "DISCARD" => Ok(Usage::Discard),
        _ => Err(format!("usage {text:?} is not supported (LABEL, COUNTER, GAUGE or DISCARD)")),
    }
}

/// The spec of query `name` from its YAML value; `taken` holds the metric names served already
/// and receives this query's.
fn definition(name: &str, value: Value, taken: &mut BTreeSet<String>) -> Result<QuerySpec, String> {
    if !is_metric_name(name) {
        return Err(format!("{name:?} cannot prefix a metric name ([a-zA-Z_:][a-zA-Z0-9_:]*)"));
    }
    let raw: RawQuery = serde_json::from_value(value).map_err(|e| format!("not a query definition: {e}"))?;
    if raw.target_databases.is_some() {
        return Err("target_databases is not supported: the queries run in the application database".into());
    }
    if raw.query.trim().is_empty() {
        return Err("the query is empty".into());
    }
    let mut columns = Vec::new();
    for (column, spec) in raw.metrics.into_iter().flatten() {
        let usage = usage(&spec.usage)?;
        let metric = format!("{name}_{column}");
        match usage {
            Usage::Label if !is_label_name(&column) => return Err(format!("{column:?} cannot name a label")),
            Usage::Counter | Usage::Gauge if !is_metric_name(&metric) => {
                return Err(format!("{metric:?} cannot name a metric"));
            }
            Usage::Counter | Usage::Gauge if !taken.insert(metric.clone()) => {
                return Err(format!("{metric} is served already"));
            }
            _ => {}
        }
        columns.push(ColumnSpec::metric(&column, usage, &metric, &spec.description));
    }
    if !columns.iter().any(|c| matches!(c.usage, Usage::Counter | Usage::Gauge)) {
        return Err("no COUNTER or GAUGE column".into());
    }
    let runs_on = if raw.master || raw.primary { RunsOn::Primary } else { RunsOn::Any };
    Ok(QuerySpec { name: name.to_owned(), sql: raw.query, runs_on, columns })
}

/// The file's queries, in name order; `Err` when the file is not a YAML map of queries.
/// `reserved` are the names served besides (the built-in ones).
pub fn parse(text: &str, reserved: &[String]) -> Result<Vec<Definition>, String> {
    let map: Option<BTreeMap<String, Value>> = serde_saphyr::from_str(text).map_err(|e| e.to_string())?;
    let mut taken: BTreeSet<String> = reserved.iter().cloned().collect();
    let mut definitions = Vec::new();
    for (name, value) in map.unwrap_or_default() {
        let fingerprint = format!("{name}\u{0}{value}");
        let spec = definition(&name, value, &mut taken);
        definitions.push(Definition { name, fingerprint, spec });
    }
    Ok(definitions)
}

/// What to log about a query's outcome.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Report {
    /// It failed (first time since it last succeeded, or with a changed definition).
    Failed {
        /// The query.
        query: String,
        /// Why.
        error: String,
    },
    /// It succeeded again.
    Recovered {
        /// The query.
        query: String,
    },
}

/// Failures by query (the counter) and which are failing now (to log each failure once).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tracker {
    errors: BTreeMap<String, u64>,
    failing: BTreeMap<String, String>,
}

impl Tracker {
    /// Records one run of `query` (its definition's `fingerprint`); what to log, if anything.
    pub fn record(&mut self, query: &str, fingerprint: &str, outcome: Result<(), &str>) -> Option<Report> {
        match outcome {
            Err(error) => {
                *self.errors.entry(query.to_owned()).or_default() += 1;
                let known = self.failing.insert(query.to_owned(), fingerprint.to_owned());
                (known.as_deref() != Some(fingerprint))
                    .then(|| Report::Failed { query: query.to_owned(), error: error.to_owned() })
            }
            Ok(()) => self.failing.remove(query).map(|_| Report::Recovered { query: query.to_owned() }),
        }
    }

    /// `pg_custom_query_errors_total{query}`, every query that ever failed.
    pub fn family(&self) -> Family {
        let mut family =
            Family::new(ERRORS, Kind::Counter, "Runs of a custom query that failed (or could not run).");
        for (query, count) in &self.errors {
            family.push(&[("query", query)], *count as f64);
        }
        family
    }
}

/// The configured file's state, as last read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FileState {
    /// Not there (the ConfigMap or its key does not exist: the volume is optional).
    Missing,
    /// Unreadable, or not YAML of the expected shape.
    Invalid(String),
    /// Parsed, with this many queries.
    Loaded(usize),
}

impl FileState {
    /// `pg_custom_queries_file_loaded`.
    pub fn family(&self) -> Family {
        let loaded = if matches!(self, FileState::Loaded(_)) { 1.0 } else { 0.0 };
        Family::new(
            FILE_LOADED,
            Kind::Gauge,
            "1 when the custom queries file was read and parsed, 0 when it is missing or invalid.",
        )
        .with(&[], loaded)
    }
}

/// Whether a file state is news (logged once per change).
pub fn file_news(previous: Option<&FileState>, now: &FileState) -> bool {
    previous != Some(now)
}

#[cfg(test)]
mod tests;
