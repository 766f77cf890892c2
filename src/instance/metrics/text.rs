//! The Prometheus text exposition format (0.0.4), pure: metric families with their `# HELP` and
//! `# TYPE` lines, label values and help texts escaped, values written as Prometheus reads them
//! (`NaN`, `+Inf`, `-Inf`). Also what a metric or label name may be.

use std::fmt::Write;

/// A metric family's type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A value that goes up and down.
    Gauge,
    /// A value that only goes up (until the server restarts).
    Counter,
}

impl Kind {
    /// The name on the `# TYPE` line.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Gauge => "gauge",
            Kind::Counter => "counter",
        }
    }
}

/// One sample: its labels (name, value) and its value.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    /// The labels, in order.
    pub labels: Vec<(String, String)>,
    /// The value.
    pub value: f64,
}

/// One metric family: its name, type, help and samples.
#[derive(Clone, Debug, PartialEq)]
pub struct Family {
    /// The name.
    pub name: String,
    /// Gauge or counter.
    pub kind: Kind,
    /// The help line.
    pub help: String,
    /// The samples.
    pub samples: Vec<Sample>,
}

impl Family {
    /// A family without samples.
    pub fn new(name: &str, kind: Kind, help: &str) -> Family {
        Family { name: name.to_owned(), kind, help: help.to_owned(), samples: Vec::new() }
    }

    /// This family with one sample `value` labelled `labels`.
    pub fn with(mut self, labels: &[(&str, &str)], value: f64) -> Family {
        self.push(labels, value);
        self
    }

    /// Adds a sample.
    pub fn push(&mut self, labels: &[(&str, &str)], value: f64) {
        let labels = labels.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        self.samples.push(Sample { labels, value });
    }
}

/// A label value escaped for the text format.
fn escape_label(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// A help text escaped for the text format.
fn escape_help(value: &str) -> String {
    value.replace('\\', "\\\\").replace('\n', "\\n")
}

/// A value as the text format writes it.
fn value_text(value: f64) -> String {
    if value.is_nan() {
        "NaN".to_owned()
    } else if value.is_infinite() {
        if value > 0.0 { "+Inf" } else { "-Inf" }.to_owned()
    } else {
        value.to_string()
    }
}

/// The text exposition of `families`.
pub fn render(families: &[Family]) -> String {
    let mut text = String::new();
    for family in families {
        let (name, kind) = (&family.name, family.kind.as_str());
        let _ = writeln!(text, "# HELP {name} {}\n# TYPE {name} {kind}", escape_help(&family.help));
        for sample in &family.samples {
            let labels: Vec<String> =
                sample.labels.iter().map(|(k, v)| format!("{k}=\"{}\"", escape_label(v))).collect();
            let labels = if labels.is_empty() { String::new() } else { format!("{{{}}}", labels.join(",")) };
            let _ = writeln!(text, "{name}{labels} {}", value_text(sample.value));
        }
    }
    text
}

/// Whether `name` may name a metric: `[a-zA-Z_:][a-zA-Z0-9_:]*`.
pub fn is_metric_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    matches!(bytes.next(), Some(b) if b.is_ascii_alphabetic() || b == b'_' || b == b':')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b':')
}

/// Whether `name` may name a label: `[a-zA-Z_][a-zA-Z0-9_]*`, not starting with `__` (reserved).
pub fn is_label_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    matches!(bytes.next(), Some(b) if b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
        && !name.starts_with("__")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_render_as_prometheus_text() {
        let lag = Family::new("pg_replication_lag_bytes", Kind::Gauge, "Lag.")
            .with(&[("standby", "db-1")], 128.0)
            .with(&[("standby", "we\"ird\\name\n")], 0.5);
        let special = Family::new("x_total", Kind::Counter, "Two\nlines \\ here.")
            .with(&[], f64::NAN)
            .with(&[("a", "1"), ("b", "2")], f64::INFINITY)
            .with(&[], f64::NEG_INFINITY)
            .with(&[], 12_345_678_901.0);
        let cases: [(Vec<Family>, &str); 4] = [
            (Vec::new(), ""),
            (
                vec![Family::new("pg_up", Kind::Gauge, "Up.").with(&[], 1.0)],
                "# HELP pg_up Up.\n# TYPE pg_up gauge\npg_up 1\n",
            ),
            (
                vec![lag],
                "# HELP pg_replication_lag_bytes Lag.\n# TYPE pg_replication_lag_bytes gauge\n\
                 pg_replication_lag_bytes{standby=\"db-1\"} 128\n\
                 pg_replication_lag_bytes{standby=\"we\\\"ird\\\\name\\n\"} 0.5\n",
            ),
            (
                vec![special],
                "# HELP x_total Two\\nlines \\\\ here.\n# TYPE x_total counter\nx_total NaN\n\
                 x_total{a=\"1\",b=\"2\"} +Inf\nx_total -Inf\nx_total 12345678901\n",
            ),
        ];
        for (families, want) in cases {
            assert_eq!(render(&families), want);
        }
    }

    #[test]
    fn metric_and_label_names_follow_prometheus() {
        let cases = [
            ("pg_up", true, true),
            ("_x", true, true),
            ("a:b", true, false),
            ("__reserved", true, false),
            ("1abc", false, false),
            ("", false, false),
            ("has-dash", false, false),
            ("has space", false, false),
            ("Ünïcode", false, false),
        ];
        for (name, metric, label) in cases {
            assert_eq!((is_metric_name(name), is_label_name(name)), (metric, label), "{name:?}");
        }
    }
}
