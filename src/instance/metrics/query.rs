//! A metrics query and what its result becomes, pure: a [`QuerySpec`] says which columns of the
//! result are labels and which are gauges or counters (and under which metric names);
//! [`families`] turns a result [`Table`] (every value as PostgreSQL's text, as the simple query
//! protocol returns it) into metric families. Both the built-in metrics ([`super::builtin`]) and
//! the user's queries ([`super::custom`]) are specs of this shape.
//!
//! A value is a number as PostgreSQL writes it (`42`, `1.5e3`, `NaN`, `Infinity`) or a boolean
//! (`t`/`f` → 1/0); a NULL value leaves its row out of that metric; a NULL label is the empty
//! string. A result that lacks a named column, holds a value that is not a number, or gives one
//! metric two samples with the same labels fails the whole query (no family of it is served).

use std::collections::BTreeSet;

use thiserror::Error;

use super::text::{Family, Kind};

/// What a column of the result is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Usage {
    /// A label of every metric of the row, named as the column.
    Label,
    /// A counter.
    Counter,
    /// A gauge.
    Gauge,
    /// Ignored.
    Discard,
}

/// Where a query runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunsOn {
    /// Every instance.
    Any,
    /// The primary only (out of recovery).
    Primary,
    /// Standbys only (in recovery).
    Standby,
}

impl RunsOn {
    /// Whether a query of this kind runs on a server whose `pg_is_in_recovery()` is `in_recovery`.
    pub fn runs(self, in_recovery: bool) -> bool {
        match self {
            RunsOn::Any => true,
            RunsOn::Primary => !in_recovery,
            RunsOn::Standby => in_recovery,
        }
    }
}

/// One column of a query's result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ColumnSpec {
    /// The column's name in the result.
    pub column: String,
    /// What it is.
    pub usage: Usage,
    /// The metric's name (for a gauge or a counter).
    pub metric: String,
    /// The metric's help.
    pub help: String,
}

impl ColumnSpec {
    /// A label column.
    pub fn label(column: &str) -> ColumnSpec {
        ColumnSpec {
            column: column.to_owned(),
            usage: Usage::Label,
            metric: String::new(),
            help: String::new(),
        }
    }

    /// A metric column.
    pub fn metric(column: &str, usage: Usage, metric: &str, help: &str) -> ColumnSpec {
        ColumnSpec { column: column.to_owned(), usage, metric: metric.to_owned(), help: help.to_owned() }
    }

    fn kind(&self) -> Option<Kind> {
        match self.usage {
            Usage::Gauge => Some(Kind::Gauge),
            Usage::Counter => Some(Kind::Counter),
            Usage::Label | Usage::Discard => None,
        }
    }
}

/// A query and the meaning of its columns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QuerySpec {
    /// Its name (in logs and in `pg_custom_query_errors_total{query}`).
    pub name: String,
    /// The SQL.
    pub sql: String,
    /// Where it runs.
    pub runs_on: RunsOn,
    /// Its columns.
    pub columns: Vec<ColumnSpec>,
}

impl QuerySpec {
    /// The names of the metric families it makes.
    pub fn metric_names(&self) -> impl Iterator<Item = &str> {
        self.columns.iter().filter(|c| c.kind().is_some()).map(|c| c.metric.as_str())
    }
}

/// A query's result: column names and rows of text values (`None` for NULL).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Table {
    /// The column names.
    pub columns: Vec<String>,
    /// The rows.
    pub rows: Vec<Vec<Option<String>>>,
}

/// Why a result does not make metrics.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum ResultError {
    /// A column the spec names is not in the result.
    #[error("the result has no column {0:?}")]
    MissingColumn(String),
    /// A metric column holds something else than a number or a boolean.
    #[error("column {column:?} holds {value:?}, not a number")]
    NotANumber {
        /// The column.
        column: String,
        /// The value.
        value: String,
    },
    /// Two rows give a metric the same labels.
    #[error("two rows give {metric} the same labels {labels:?}")]
    Duplicate {
        /// The metric.
        metric: String,
        /// The labels.
        labels: Vec<(String, String)>,
    },
}

/// A value as a sample: a number or a boolean.
pub fn parse_value(text: &str) -> Option<f64> {
    match text.trim() {
        "t" | "true" => Some(1.0),
        "f" | "false" => Some(0.0),
        number => number.parse().ok(),
    }
}

/// The metric families `spec` makes of `table`, in the spec's column order.
pub fn families(spec: &QuerySpec, table: &Table) -> Result<Vec<Family>, ResultError> {
    let index = |column: &str| {
        table
            .columns
            .iter()
            .position(|c| c == column)
            .ok_or_else(|| ResultError::MissingColumn(column.to_owned()))
    };
    let labels: Vec<(&str, usize)> = if table.rows.is_empty() {
        Vec::new()
    } else {
        let columns = spec.columns.iter().filter(|c| c.usage == Usage::Label);
        columns.map(|c| Ok((c.column.as_str(), index(&c.column)?))).collect::<Result<_, ResultError>>()?
    };
    let mut families = Vec::new();
    let mut seen = BTreeSet::new();
    for column in &spec.columns {
        let Some(kind) = column.kind() else { continue };
        let mut family = Family::new(&column.metric, kind, &column.help);
        if !table.rows.is_empty() {
            let at = index(&column.column)?;
            for row in &table.rows {
                let Some(text) = row.get(at).cloned().flatten() else { continue };
                let value = parse_value(&text)
                    .ok_or_else(|| ResultError::NotANumber { column: column.column.clone(), value: text })?;
                let labels: Vec<(String, String)> = labels
                    .iter()
                    .map(|(name, i)| ((*name).to_owned(), row.get(*i).cloned().flatten().unwrap_or_default()))
                    .collect();
                if !seen.insert((column.metric.clone(), labels.clone())) {
                    return Err(ResultError::Duplicate { metric: column.metric.clone(), labels });
                }
                family.samples.push(super::text::Sample { labels, value });
            }
        }
        families.push(family);
    }
    Ok(families)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> QuerySpec {
        QuerySpec {
            name: "q".into(),
            sql: "SELECT".into(),
            runs_on: RunsOn::Any,
            columns: vec![
                ColumnSpec::label("datname"),
                ColumnSpec::metric("size", Usage::Gauge, "q_size", "Size."),
                ColumnSpec::metric("ignored", Usage::Discard, "", ""),
                ColumnSpec::metric("n", Usage::Counter, "q_n", "Count."),
            ],
        }
    }

    fn table(columns: &[&str], rows: &[&[Option<&str>]]) -> Table {
        Table {
            columns: columns.iter().map(|c| (*c).to_owned()).collect(),
            rows: rows.iter().map(|r| r.iter().map(|v| v.map(str::to_owned)).collect()).collect(),
        }
    }

    /// The families as `name{labels} value` lines, for comparing.
    fn lines(families: &[Family]) -> Vec<String> {
        let text = super::super::text::render(families);
        text.lines().filter(|l| !l.starts_with('#')).map(str::to_owned).collect()
    }

    #[test]
    fn results_become_families_or_the_reason_they_cannot() {
        let all = ["datname", "size", "ignored", "n"];
        type Want = Result<Vec<&'static str>, ResultError>;
        let cases: Vec<(Table, Want)> = vec![
            (table(&all, &[]), Ok(vec![])),
            (table(&[], &[]), Ok(vec![])),
            (
                table(
                    &all,
                    &[
                        &[Some("app"), Some("8192"), Some("x"), Some("3")],
                        &[Some("postgres"), Some("1.5e3"), None, Some("t")],
                    ],
                ),
                Ok(vec![
                    "q_size{datname=\"app\"} 8192",
                    "q_size{datname=\"postgres\"} 1500",
                    "q_n{datname=\"app\"} 3",
                    "q_n{datname=\"postgres\"} 1",
                ]),
            ),
            (table(&all, &[&[None, None, None, Some("Infinity")]]), Ok(vec!["q_n{datname=\"\"} +Inf"])),
            (
                table(&["datname", "size"], &[&[Some("app"), Some("1")]]),
                Err(ResultError::MissingColumn("n".into())),
            ),
            (
                table(&["size", "n"], &[&[Some("1"), Some("1")]]),
                Err(ResultError::MissingColumn("datname".into())),
            ),
            (
                table(&all, &[&[Some("app"), Some("lots"), None, Some("1")]]),
                Err(ResultError::NotANumber { column: "size".into(), value: "lots".into() }),
            ),
            (
                table(
                    &all,
                    &[&[Some("app"), Some("1"), None, Some("1")], &[Some("app"), Some("2"), None, Some("2")]],
                ),
                Err(ResultError::Duplicate {
                    metric: "q_size".into(),
                    labels: vec![("datname".into(), "app".into())],
                }),
            ),
        ];
        for (table, want) in cases {
            let got = families(&spec(), &table).map(|f| lines(&f));
            let want = want.map(|w| w.into_iter().map(str::to_owned).collect::<Vec<_>>());
            assert_eq!(got, want, "{table:?}");
        }
    }

    #[test]
    fn a_result_without_rows_still_declares_its_families() {
        let families = families(&spec(), &Table::default()).unwrap();
        let names: Vec<&str> = families.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["q_size", "q_n"]);
        assert_eq!(spec().metric_names().collect::<Vec<_>>(), ["q_size", "q_n"]);
    }

    #[test]
    fn values_are_numbers_or_booleans() {
        let cases = [
            ("42", Some(42.0)),
            (" -1.5 ", Some(-1.5)),
            ("t", Some(1.0)),
            ("f", Some(0.0)),
            ("true", Some(1.0)),
            ("", None),
            ("12abc", None),
        ];
        for (text, want) in cases {
            assert_eq!(parse_value(text), want, "{text:?}");
        }
        assert!(parse_value("NaN").is_some_and(f64::is_nan));
    }

    #[test]
    fn a_query_runs_where_it_is_meant_to() {
        let cases = [
            (RunsOn::Any, false, true),
            (RunsOn::Any, true, true),
            (RunsOn::Primary, false, true),
            (RunsOn::Primary, true, false),
            (RunsOn::Standby, false, false),
            (RunsOn::Standby, true, true),
        ];
        for (runs_on, in_recovery, want) in cases {
            assert_eq!(runs_on.runs(in_recovery), want, "{runs_on:?} in recovery {in_recovery}");
        }
    }
}
