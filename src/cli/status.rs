//! `dbcluster-operator status`, the rendering half: a pure function from a fetched snapshot (the
//! DatabaseCluster as JSON, its recent Events, the operator's view of the key) to the text a user
//! reads first, like `kubectl cnpg status`. Fields not every version of the status has
//! (`instances`, backups) are shown when present and skipped when absent. The fetch and the
//! subcommand are not wired yet.

use std::fmt::Write;

use k8s_openapi::api::events::v1::Event;
use serde_json::Value;

/// The operator's view of the key, from its `/debug/queue`.
#[derive(Debug, Clone, PartialEq)]
pub enum RuntimeView {
    /// The key's entry in `/debug/queue` (`None`: the operator does not know the key).
    Key(Option<Value>),
    /// `/debug/queue` could not be read; why.
    Unreachable(String),
}

/// The status text of `cluster` with its `events` (newest last) and the runtime's `view`.
pub fn render(cluster: &Value, events: &[Event], view: &RuntimeView) -> String {
    let mut out = String::new();
    let text =
        |value: &Value, pointer: &str| value.pointer(pointer).map(display).unwrap_or_else(|| "-".into());
    let _ = writeln!(
        out,
        "Cluster:   {}/{}",
        text(cluster, "/metadata/namespace"),
        text(cluster, "/metadata/name")
    );
    let _ = writeln!(out, "Phase:     {}", text(cluster, "/status/phase"));
    let _ = writeln!(
        out,
        "Ready:     {}/{}",
        text(cluster, "/status/readyReplicas"),
        text(cluster, "/spec/replicas")
    );
    let _ = writeln!(out, "Version:   {}", text(cluster, "/status/currentVersion"));
    let _ = writeln!(out, "\nConditions:");
    for condition in array(cluster, "/status/conditions") {
        let _ = writeln!(
            out,
            "  {:<20} {:<7} {:<26} {}",
            text(condition, "/type"),
            text(condition, "/status"),
            text(condition, "/reason"),
            text(condition, "/message")
        );
    }
    let instances = array(cluster, "/status/instances");
    if !instances.is_empty() {
        let _ = writeln!(out, "\nInstances:");
        for instance in instances {
            let _ = writeln!(
                out,
                "  {:<28} {:<8} ready={:<5} version={:<6} lag={}",
                text(instance, "/name"),
                text(instance, "/role"),
                text(instance, "/ready"),
                text(instance, "/version"),
                text(instance, "/lag")
            );
        }
    }
    for (label, pointer) in
        [("Last backup", "/status/lastBackupTime"), ("Next backup", "/status/nextBackupTime")]
    {
        if let Some(value) = cluster.pointer(pointer) {
            let _ = writeln!(out, "{label}: {}", display(value));
        }
    }
    let _ = writeln!(out, "\nEvents:");
    for event in events {
        let _ = writeln!(
            out,
            "  {:<8} {:<22} {}",
            event.type_.as_deref().unwrap_or("-"),
            event.reason.as_deref().unwrap_or("-"),
            event.note.as_deref().unwrap_or("")
        );
    }
    let _ = writeln!(out, "\nOperator:");
    match view {
        RuntimeView::Unreachable(why) => {
            let _ = writeln!(out, "  operator unreachable ({why})");
        }
        RuntimeView::Key(None) => {
            let _ = writeln!(out, "  the operator has no entry for this cluster");
        }
        RuntimeView::Key(Some(key)) => {
            let _ = writeln!(out, "  state: {}, requeues: {}", text(key, "/state"), text(key, "/requeues"));
            if key.pointer("/last_pass").is_some_and(|v| !v.is_null()) {
                let _ = writeln!(
                    out,
                    "  last pass: {} ({}s ago), error: {}",
                    text(key, "/last_pass/result"),
                    text(key, "/last_pass/finished_seconds_ago"),
                    text(key, "/last_pass/error")
                );
            }
        }
    }
    out
}

fn array<'a>(value: &'a Value, pointer: &str) -> &'a [Value] {
    value.pointer(pointer).and_then(Value::as_array).map_or(&[], Vec::as_slice)
}

fn display(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cluster(instances: bool) -> Value {
        let mut cluster = json!({
            "metadata": {"name": "pg", "namespace": "default"},
            "spec": {"replicas": 3},
            "status": {"phase": "Degraded", "readyReplicas": 2, "currentVersion": "15.4",
                "conditions": [{"type": "ReconcileSucceeded", "status": "False", "reason": "ReconcileError",
                    "message": "Service pg is controlled by ConfigMap x"}]}
        });
        if instances {
            cluster["status"]["instances"] =
                json!([{"name": "pg-0", "role": "primary", "ready": true, "version": "15.4", "lag": 0}]);
        }
        cluster
    }

    #[test]
    fn shows_phase_conditions_events_and_the_runtime_view() {
        let event = Event {
            type_: Some("Warning".into()),
            reason: Some("ReconcileError".into()),
            ..Event::default()
        };
        let key =
            json!({"state": "waiting", "requeues": 2, "last_pass": {"result": "error", "error": "boom"}});
        let text = render(&cluster(true), &[event], &RuntimeView::Key(Some(key)));
        assert!(text.contains("Phase:     Degraded"), "{text}");
        assert!(text.contains("Ready:     2/3"), "{text}");
        assert!(text.contains("ReconcileError") && text.contains("controlled by ConfigMap x"), "{text}");
        assert!(text.contains("pg-0") && text.contains("primary") && text.contains("lag=0"), "{text}");
        assert!(text.contains("state: waiting, requeues: 2") && text.contains("error: boom"), "{text}");
    }

    #[test]
    fn tolerates_a_status_without_instances_and_an_unreachable_operator() {
        let text = render(&cluster(false), &[], &RuntimeView::Unreachable("connection refused".into()));
        assert!(!text.contains("Instances:"), "{text}");
        assert!(text.contains("operator unreachable (connection refused)"), "{text}");
    }
}
