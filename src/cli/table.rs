//! The demo's live table of DatabaseClusters, as pure data: one header, then a row per change —
//! NAMESPACE, NAME, PHASE, READY as `ready/desired` (never more ready than desired: the instances
//! a scale-down is removing do not count), STATUS (the `Ready` condition's reason, so a cluster
//! that runs but refused part of its configuration says `InvalidConfiguration`, as
//! `kubectl get dbc` shows it), PRIMARY, VERSION, AGE. Cells never overrun their
//! column (a long one is cut and ends in `…`), a change that leaves every cell but AGE as last
//! printed prints no row, and a deleted cluster's row says `deleted`. No I/O, no clock: the
//! caller passes the time in.

use std::collections::HashMap;

use serde_json::Value;

/// The columns and their widths (the last, AGE, is not padded).
const COLUMNS: [(&str, usize); 8] = [
    ("NAMESPACE", 12),
    ("NAME", 24),
    ("PHASE", 13),
    ("READY", 7),
    ("STATUS", 22),
    ("PRIMARY", 26),
    ("VERSION", 9),
    ("AGE", 0),
];

/// What was last printed for each cluster, to leave out rows that repeat it.
#[derive(Debug, Default)]
pub struct Table {
    last: HashMap<(String, String), Vec<String>>,
}

impl Table {
    /// The header line.
    pub fn header() -> String {
        format_row(COLUMNS.iter().map(|(name, _)| (*name).to_owned()).collect())
    }

    /// The clusters shown and not deleted, as (namespace, name), sorted.
    pub fn clusters(&self) -> Vec<(String, String)> {
        let mut shown: Vec<(String, String)> = self
            .last
            .iter()
            .filter(|(_, cells)| cells.get(2).map(String::as_str) != Some("deleted"))
            .map(|(key, _)| key.clone())
            .collect();
        shown.sort();
        shown
    }

    /// The row for `cluster` (as the API returns it) at `now`, or `None` if it would repeat the
    /// last row printed for that cluster; `deleted` for a cluster's Deleted watch event.
    pub fn row(&mut self, cluster: &Value, deleted: bool, now: jiff::Timestamp) -> Option<String> {
        let text = |pointer: &str| match cluster.pointer(pointer) {
            None | Some(Value::Null) => String::new(),
            Some(Value::String(s)) => s.clone(),
            Some(other) => other.to_string(),
        };
        let key = (text("/metadata/namespace"), text("/metadata/name"));
        let phase = if deleted { "deleted".to_owned() } else { text("/status/phase") };
        let ready = match cluster.pointer("/spec/replicas").and_then(Value::as_i64) {
            None => String::new(),
            Some(desired) => {
                let ready = cluster.pointer("/status/readyReplicas").and_then(Value::as_i64).unwrap_or(0);
                format!("{}/{desired}", ready.min(desired))
            }
        };
        let conditions = cluster.pointer("/status/conditions").and_then(Value::as_array);
        let ready_reason = conditions
            .and_then(|all| all.iter().find(|c| c["type"] == "Ready"))
            .and_then(|c| c["reason"].as_str())
            .unwrap_or_default()
            .to_owned();
        let version = text("/status/currentVersion");
        let created = cluster.pointer("/metadata/creationTimestamp").and_then(Value::as_str);
        let primary = text("/status/currentPrimary");
        let cells = vec![key.0.clone(), key.1.clone(), phase, ready, ready_reason, primary, version];
        if self.last.get(&key) == Some(&cells) {
            return None;
        }
        self.last.insert(key, cells.clone());
        let mut cells = cells;
        cells.push(crate::sim::age(created, now));
        Some(format_row(cells))
    }
}

/// The cells padded to their columns, each cut to leave at least one space before the next.
fn format_row(cells: Vec<String>) -> String {
    let mut line = String::new();
    for (cell, (_, width)) in cells.into_iter().zip(COLUMNS) {
        if width == 0 {
            line.push_str(&cell);
            continue;
        }
        let cut = if cell.chars().count() >= width {
            cell.chars().take(width - 2).chain(['…']).collect()
        } else {
            cell
        };
        line.push_str(&format!("{cut:<width$}"));
    }
    line.trim_end().to_owned()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn cluster(name: &str, phase: &str, ready: i64) -> Value {
        json!({"metadata": {"name": name, "namespace": "default", "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"replicas": 3},
            "status": {"phase": phase, "readyReplicas": ready, "currentVersion": "15.4",
                "currentPrimary": format!("{name}-0"),
                "conditions": [{"type": "Ready", "status": if ready >= 3 { "True" } else { "False" },
                    "reason": if ready >= 3 { "AllReplicasReady" } else { "ReplicasNotReady" }}]}})
    }

    fn now() -> jiff::Timestamp {
        "2026-01-01T00:00:05Z".parse().unwrap()
    }

    #[test]
    fn rows_show_the_namespace_and_ready_over_desired() {
        let mut table = Table::default();
        assert!(Table::header().starts_with("NAMESPACE   NAME"), "{}", Table::header());
        let row = table.row(&cluster("pg", "Degraded", 2), false, now()).unwrap();
        let cells: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(cells, ["default", "pg", "Degraded", "2/3", "ReplicasNotReady", "pg-0", "15.4", "5s"]);
        let fresh = json!({"metadata": {"name": "new", "namespace": "prod"}, "spec": {"replicas": 2}});
        let row = table.row(&fresh, false, now()).unwrap();
        assert_eq!(row.split_whitespace().collect::<Vec<_>>(), ["prod", "new", "0/2", "<unknown>"], "{row}");
    }

    /// A running cluster whose configuration PostgreSQL refused is not shown as healthy, and a
    /// scale-down never shows more ready than desired.
    #[test]
    fn the_status_names_a_problem_and_ready_never_exceeds_desired() {
        let mut table = Table::default();
        let mut refused = cluster("pg", "Running", 3);
        refused["status"]["conditions"][0] =
            json!({"type": "Ready", "status": "False", "reason": "InvalidConfiguration"});
        let row = table.row(&refused, false, now()).unwrap();
        assert_eq!(row.split_whitespace().nth(4), Some("InvalidConfiguration"), "{row}");
        let mut shrinking = cluster("pg", "Scaling", 5);
        shrinking["spec"]["replicas"] = json!(3);
        let row = table.row(&shrinking, false, now()).unwrap();
        assert_eq!(row.split_whitespace().nth(3), Some("3/3"), "{row}");
    }

    #[test]
    fn a_long_name_is_cut_and_keeps_the_columns_aligned() {
        let mut table = Table::default();
        let long = "a-very-long-database-cluster-name-indeed";
        let row = table.row(&cluster(long, "Running", 3), false, now()).unwrap();
        let header = Table::header();
        let column = |line: &str, cell: &str| line[..line.find(cell).unwrap()].chars().count();
        assert_eq!(column(&row, "Running"), column(&header, "PHASE"), "{header}\n{row}");
        assert!(row.contains("a-very-long-database-c… "), "{row}");
    }

    #[test]
    fn a_repeated_row_is_left_out_and_a_deleted_cluster_says_so() {
        let mut table = Table::default();
        assert!(table.row(&cluster("pg", "Running", 3), false, now()).is_some());
        let later = "2026-01-01T00:01:00Z".parse().unwrap();
        assert_eq!(table.row(&cluster("pg", "Running", 3), false, later), None, "only AGE changed");
        let other = json!({"metadata": {"name": "pg", "namespace": "prod"}, "spec": {"replicas": 3},
            "status": {"phase": "Running", "readyReplicas": 3, "currentVersion": "15.4"}});
        assert!(
            table.row(&other, false, now()).is_some(),
            "the same name in another namespace is another row"
        );
        assert_eq!(table.clusters().len(), 2);
        let gone = table.row(&cluster("pg", "Running", 3), true, later).unwrap();
        assert_eq!(gone.split_whitespace().nth(2), Some("deleted"), "{gone}");
        assert_eq!(
            table.clusters(),
            [("prod".to_owned(), "pg".to_owned())],
            "a deleted cluster is not offered"
        );
    }
}
