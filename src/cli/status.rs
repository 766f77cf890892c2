//! `dbcluster-operator status`, the rendering half: pure functions from a fetched [`Snapshot`]
//! (the DatabaseCluster as JSON, its children, its recent Events, the operator's view of the key)
//! to the text a user reads first, like `kubectl cnpg status`. Fields not every version of the
//! status has (`instances`, backups) are shown when present and skipped when absent. Each figure
//! says how old it is, counted from the snapshot's time: the instances' figures from
//! `status.instancesObservedAt` (when the operator observed them; "observation time not
//! recorded" for a status without it), a condition from its `lastTransitionTime`, the last backup
//! from its end ([`crate::databasecluster::view::age`] says the ages). The fetch is
//! [`crate::cli::snapshot`].

use std::fmt::Write;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use serde_json::Value;

use crate::databasecluster::api::backup::Schedule;
use crate::databasecluster::view::age::ago_text;

/// How many Events the status shows (the newest).
pub const RECENT_EVENTS: usize = 10;

/// The operator's view of the key, from its `/debug/queue`.
#[derive(Debug, Clone, PartialEq)]
pub enum RuntimeView {
    /// The key's entry in `/debug/queue` (`None`: the operator does not know the key).
    Key(Option<Value>),
    /// `/debug/queue` could not be read; why.
    Unreachable(String),
}

/// One object the cluster owns (or its StatefulSet owns, for Pods), as one line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Child {
    /// `StatefulSet`, `Service`, `Secret`, `Pod`.
    pub kind: &'static str,
    /// Its name.
    pub name: String,
    /// What a user checks first about it (readiness, type); may be empty.
    pub detail: String,
}

/// Everything `status` shows, as fetched.
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    /// The DatabaseCluster, as the API server returned it.
    pub cluster: Value,
    /// Its children, in the order shown.
    pub children: Vec<Child>,
    /// Events about it, in any order ([`render`] shows the newest [`RECENT_EVENTS`], oldest first).
    pub events: Vec<Event>,
    /// The operator's view of it.
    pub view: RuntimeView,
    /// When it was fetched (the next backup is the schedule's first time after it).
    pub now: jiff::Timestamp,
}

/// The key's entry in a `/debug/queue` report (`key` is `namespace/name`), if any controller has it.
pub fn key_view(queue_report: &Value, key: &str) -> RuntimeView {
    let entry = array(queue_report, "/controllers")
        .iter()
        .flat_map(|controller| array(controller, "/keys"))
        .find(|entry| entry.get("key").and_then(Value::as_str) == Some(key));
    RuntimeView::Key(entry.cloned())
}

/// A StatefulSet's line: ready over desired replicas.
pub fn statefulset_child(sts: &StatefulSet) -> Child {
    let desired = sts.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    let ready = sts.status.as_ref().and_then(|s| s.ready_replicas).unwrap_or(0);
    Child {
        kind: "StatefulSet",
        name: sts.metadata.name.clone().unwrap_or_default(),
        detail: format!("ready {ready}/{desired}"),
    }
}

/// A Pod's line: its phase and whether it is ready.
pub fn pod_child(pod: &Pod) -> Child {
    let status = pod.status.as_ref();
    let phase = status.and_then(|s| s.phase.as_deref()).unwrap_or("Pending");
    let ready = status
        .and_then(|s| s.conditions.as_ref())
        .and_then(|conditions| conditions.iter().find(|c| c.type_ == "Ready"))
        .is_some_and(|c| c.status == "True");
    let detail = format!("{phase}, {}", if ready { "ready" } else { "not ready" });
    Child { kind: "Pod", name: pod.metadata.name.clone().unwrap_or_default(), detail }
}

/// The status text of `snapshot`.
pub fn render(snapshot: &Snapshot) -> String {
    let cluster = &snapshot.cluster;
    let mut out = String::new();
    let pair = |a: &str, b: &str| format!("{}/{}", text(cluster, a), text(cluster, b));
    for (label, value) in [
        ("Cluster", pair("/metadata/namespace", "/metadata/name")),
        ("Phase", text(cluster, "/status/phase")),
        ("Ready", pair("/status/readyReplicas", "/spec/replicas")),
        ("Version", text(cluster, "/status/currentVersion")),
    ] {
        let _ = writeln!(out, "{:<11}{value}", format!("{label}:"));
    }
    render_conditions(&mut out, cluster, snapshot.now);
    render_instances(&mut out, cluster, snapshot.now);
    if let Some(value) = cluster.pointer("/status/lastBackupTime") {
        let age = value.as_str().and_then(|at| ago_text(at, snapshot.now));
        let _ = writeln!(
            out,
            "Last backup: {}{}",
            display(value),
            age.map(|a| format!(" ({a})")).unwrap_or_default()
        );
    }
    if let Some(next) = next_backup(cluster, snapshot.now) {
        let _ = writeln!(out, "Next backup: {next}");
    }
    let _ = writeln!(out, "\nChildren:");
    for child in &snapshot.children {
        let _ = writeln!(out, "  {:<12} {:<32} {}", child.kind, child.name, child.detail);
    }
    let _ = writeln!(out, "\nEvents:");
    for event in recent(&snapshot.events) {
        let _ = writeln!(
            out,
            "  {:<8} {:<22} {}",
            event.type_.as_deref().unwrap_or("-"),
            event.reason.as_deref().unwrap_or("-"),
            event.note.as_deref().unwrap_or("")
        );
    }
    let _ = writeln!(out, "\nOperator:");
    render_view(&mut out, &snapshot.view);
    out.lines().map(str::trim_end).collect::<Vec<_>>().join("\n") + "\n"
}

/// Each condition, with how long ago it last changed.
fn render_conditions(out: &mut String, cluster: &Value, now: jiff::Timestamp) {
    let _ = writeln!(out, "\nConditions:");
    for condition in array(cluster, "/status/conditions") {
        let changed = condition
            .pointer("/lastTransitionTime")
            .and_then(Value::as_str)
            .and_then(|at| ago_text(at, now))
            .map(|age| format!(" (since {age})"))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "  {:<20} {:<7} {:<26} {}{changed}",
            text(condition, "/type"),
            text(condition, "/status"),
            text(condition, "/reason"),
            text(condition, "/message")
        );
    }
}

/// Each instance as last observed, each line ending with how long ago that was.
fn render_instances(out: &mut String, cluster: &Value, now: jiff::Timestamp) {
    let instances = array(cluster, "/status/instances");
    if instances.is_empty() {
        return;
    }
    let observed = cluster
        .pointer("/status/instancesObservedAt")
        .and_then(Value::as_str)
        .and_then(|at| ago_text(at, now))
        .map_or_else(|| "observation time not recorded".to_owned(), |age| format!("observed {age}"));
    let _ = writeln!(out, "\nInstances:");
    for instance in instances {
        let _ = writeln!(
            out,
            "  {:<28} {:<8} ready={:<5} version={:<6} {}, {observed}",
            text(instance, "/name"),
            text(instance, "/role"),
            text(instance, "/ready"),
            text(instance, "/version"),
            replication(instance)
        );
        if let Some(message) = instance.get("message").and_then(Value::as_str) {
            let _ = writeln!(out, "      {message}");
        }
    }
}

fn render_view(out: &mut String, view: &RuntimeView) {
    match view {
        RuntimeView::Unreachable(why) => {
            let _ = writeln!(out, "  operator unreachable ({why})");
        }
        RuntimeView::Key(None) => {
            let _ = writeln!(out, "  the operator has no entry for this cluster");
        }
        RuntimeView::Key(Some(key)) => {
            let _ = writeln!(out, "  state: {}, requeues: {}", text(key, "/state"), text(key, "/requeues"));
            if let Some(left) = key.pointer("/waiting_seconds_left") {
                let _ = writeln!(out, "  next pass in {}s", display(left));
            }
            if key.pointer("/last_pass").is_some_and(|v| !v.is_null()) {
                let _ = writeln!(
                    out,
                    "  last pass: {} ({}s ago, took {}s), error: {}",
                    text(key, "/last_pass/result"),
                    text(key, "/last_pass/finished_seconds_ago"),
                    text(key, "/last_pass/took_seconds"),
                    text(key, "/last_pass/error")
                );
                let _ = writeln!(out, "  last pass triggered by: {}", text(key, "/last_pass/trigger"));
            }
            if let Some(pending) = key.pointer("/pending_causes/kept/0/text") {
                let _ = writeln!(out, "  queued because: {}", display(pending));
            }
        }
    }
}

/// A standby's replication as its primary last saw it: `lag=<bytes> B (<state>, <sync state>)`,
/// or `lag=- (not streaming[, <sync state last recorded>])` while the primary sees no connection
/// from it; `lag=- (not observed)` for an instance the operator could not ask; `lag=-` for the
/// primary.
fn replication(instance: &Value) -> String {
    let field = |name: &str| instance.get(name).and_then(Value::as_str);
    let lag = instance.get("lagBytes").and_then(Value::as_i64);
    let state = match (field("replicationState"), field("role")) {
        (Some(state), _) => state,
        (None, Some("replica")) => "not streaming",
        (None, Some("primary")) => return "lag=-".into(),
        (None, _) => return "lag=- (not observed)".into(),
    };
    let lag = lag.map_or_else(|| "-".into(), |bytes| format!("{bytes} B"));
    let how: Vec<&str> = [Some(state), field("syncState")].into_iter().flatten().collect();
    format!("lag={lag} ({})", how.join(", "))
}

/// When the cluster's backup schedule (`spec.backup.schedule`, or the deprecated
/// `spec.backupSchedule`) runs next after `now`, with the schedule; `suspended` if it is.
fn next_backup(cluster: &Value, now: jiff::Timestamp) -> Option<String> {
    let schedule = ["/spec/backup/schedule", "/spec/backupSchedule"]
        .iter()
        .find_map(|pointer| cluster.pointer(pointer).and_then(Value::as_str))?;
    if cluster.pointer("/spec/backup/suspend") == Some(&Value::Bool(true)) {
        return Some(format!("suspended (schedule {schedule})"));
    }
    let next = Schedule::parse(schedule).ok()?.next_after(now)?;
    Some(format!("{next} (schedule {schedule})"))
}

/// The newest [`RECENT_EVENTS`] of `events`, oldest first (by `eventTime`, else creation time).
fn recent(events: &[Event]) -> Vec<&Event> {
    let when = |e: &Event| {
        e.event_time.as_ref().map(|t| t.0).or_else(|| e.metadata.creation_timestamp.as_ref().map(|t| t.0))
    };
    let mut sorted: Vec<&Event> = events.iter().collect();
    sorted.sort_by_key(|e| when(e));
    let skip = sorted.len().saturating_sub(RECENT_EVENTS);
    sorted.split_off(skip)
}

fn text(value: &Value, pointer: &str) -> String {
    value.pointer(pointer).map(display).unwrap_or_else(|| "-".into())
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
    use k8s_openapi::api::core::v1::{PodCondition, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
    use serde_json::json;

    use super::*;
    use crate::databasecluster::api::types::InstanceStatus;

    fn cluster(instances: bool) -> Value {
        let mut cluster = json!({
            "metadata": {"name": "pg", "namespace": "default"},
            "spec": {"replicas": 3},
            "status": {"phase": "Degraded", "readyReplicas": 2, "currentVersion": "15.4",
                "conditions": [{"type": "ReconcileSucceeded", "status": "False", "reason": "ReconcileError",
                    "message": "Service pg is controlled by ConfigMap x", "lastTransitionTime": "2026-01-01T10:26:00Z"}]}
        });
        if instances {
            // Built from the status type itself, so the field names are the ones the operator writes.
            let instance = |name: &str, role: &str| InstanceStatus {
                name: name.into(),
                role: role.into(),
                ready: true,
                version: Some("15.4".into()),
                ..InstanceStatus::default()
            };
            let streaming = InstanceStatus {
                replication_state: Some("streaming".into()),
                lag_bytes: Some(4096),
                sync_state: Some("async".into()),
                ..instance("pg-1", "replica")
            };
            let down = InstanceStatus {
                ready: false,
                sync_state: Some("sync".into()),
                message: Some("container postgres: CrashLoopBackOff".into()),
                ..instance("pg-2", "replica")
            };
            let unasked = instance("pg-3", "unknown");
            cluster["status"]["instances"] =
                serde_json::to_value([instance("pg-0", "primary"), streaming, down, unasked]).unwrap();
            cluster["status"]["instancesObservedAt"] = json!("2026-01-01T10:29:48Z");
        }
        cluster
    }

    fn event(reason: &str, second: i64) -> Event {
        Event {
            type_: Some("Normal".into()),
            reason: Some(reason.into()),
            event_time: Some(MicroTime(jiff::Timestamp::from_second(second).unwrap())),
            ..Event::default()
        }
    }

    fn snapshot(cluster: Value, events: Vec<Event>, view: RuntimeView) -> Snapshot {
        Snapshot { cluster, children: Vec::new(), events, view, now: "2026-01-01T10:30:00Z".parse().unwrap() }
    }

    #[test]
    fn shows_phase_conditions_children_events_and_the_runtime_view() {
        let warning = Event { type_: Some("Warning".into()), ..event("ReconcileError", 5) };
        let key = json!({"state": "waiting", "requeues": 2, "waiting_seconds_left": 4.5,
            "last_pass": {"result": "error", "error": "boom", "trigger": "\"StatefulSet default/pg modified rv=7\" (+1)"},
            "pending_causes": {"kept": [{"type": "retry", "text": "retry after error: boom"}], "more": 0}});
        let mut snapshot = snapshot(cluster(true), vec![warning], RuntimeView::Key(Some(key)));
        snapshot.children = vec![Child { kind: "Service", name: "pg".into(), detail: String::new() }];
        let text = render(&snapshot);
        assert!(text.contains("Phase:     Degraded"), "{text}");
        assert!(text.contains("Ready:     2/3"), "{text}");
        assert!(text.contains("ReconcileError") && text.contains("controlled by ConfigMap x"), "{text}");
        let line = |name: &str| text.lines().find(|l| l.contains(name)).unwrap_or_default().to_owned();
        assert!(
            line("pg-0").contains("primary") && line("pg-0").ends_with("lag=-, observed 12 s ago"),
            "{text}"
        );
        assert!(line("pg-1").ends_with("lag=4096 B (streaming, async), observed 12 s ago"), "{text}");
        assert!(
            line("pg-2").contains("ready=false")
                && line("pg-2").ends_with("lag=- (not streaming, sync), observed 12 s ago"),
            "{text}"
        );
        assert!(line("pg-3").ends_with("lag=- (not observed), observed 12 s ago"), "{text}");
        assert!(line("ReconcileSucceeded").ends_with("ConfigMap x (since 4 min ago)"), "{text}");
        assert!(text.contains("\n      container postgres: CrashLoopBackOff\n"), "{text}");
        assert!(text.contains("\n  Service      pg\n"), "a child without detail, no trailing blanks: {text}");
        assert!(text.contains("state: waiting, requeues: 2") && text.contains("error: boom"), "{text}");
        assert!(text.contains("next pass in 4.5s"), "{text}");
        assert!(
            text.contains("last pass triggered by: \"StatefulSet default/pg modified rv=7\" (+1)"),
            "{text}"
        );
        assert!(text.contains("queued because: retry after error: boom"), "{text}");
    }

    #[test]
    fn tolerates_a_status_without_instances_and_an_unreachable_operator() {
        let text =
            render(&snapshot(cluster(false), vec![], RuntimeView::Unreachable("connection refused".into())));
        assert!(!text.contains("Instances:"), "{text}");
        assert!(text.contains("operator unreachable (connection refused)"), "{text}");
        let mut unstamped = cluster(true);
        unstamped["status"].as_object_mut().unwrap().remove("instancesObservedAt");
        let text = render(&snapshot(unstamped, vec![], RuntimeView::Key(None)));
        assert!(text.contains("lag=4096 B (streaming, async), observation time not recorded"), "{text}");
    }

    #[test]
    fn shows_the_newest_events_oldest_first() {
        let events: Vec<Event> = (0..15).rev().map(|i| event(&format!("Reason{i:02}"), i)).collect();
        let text = render(&snapshot(cluster(false), events, RuntimeView::Key(None)));
        assert!(!text.contains("Reason04") && text.contains("Reason05"), "{text}");
        let (first, last) = (text.find("Reason05").unwrap(), text.find("Reason14").unwrap());
        assert!(first < last, "{text}");
        assert!(text.contains("the operator has no entry"), "{text}");
    }

    #[test]
    fn the_next_backup_follows_the_schedule() {
        let mut with_backups = cluster(false);
        with_backups["spec"]["backup"] = json!({"schedule": "@daily"});
        with_backups["status"]["lastBackupTime"] = json!("2026-01-01T00:00:05Z");
        let text = render(&snapshot(with_backups.clone(), vec![], RuntimeView::Key(None)));
        assert!(text.contains("Last backup: 2026-01-01T00:00:05Z (10 h 29 min ago)"), "{text}");
        assert!(text.contains("Next backup: 2026-01-02T00:00:00Z (schedule @daily)"), "{text}");
        with_backups["spec"]["backup"]["suspend"] = json!(true);
        let text = render(&snapshot(with_backups, vec![], RuntimeView::Key(None)));
        assert!(text.contains("Next backup: suspended (schedule @daily)"), "{text}");
        let mut old_field = cluster(false);
        old_field["spec"]["backupSchedule"] = json!("0 3 * * *");
        let text = render(&snapshot(old_field, vec![], RuntimeView::Key(None)));
        assert!(text.contains("Next backup: 2026-01-02T03:00:00Z (schedule 0 3 * * *)"), "{text}");
        assert!(!render(&snapshot(cluster(false), vec![], RuntimeView::Key(None))).contains("backup"));
    }

    #[test]
    fn finds_the_key_in_a_queue_report() {
        let report = json!({"controllers": [
            {"controller": "other", "keys": []},
            {"controller": "databasecluster", "keys": [{"key": "default/other"}, {"key": "default/pg", "state": "idle"}]}
        ]});
        assert_eq!(
            key_view(&report, "default/pg"),
            RuntimeView::Key(Some(json!({"key": "default/pg", "state": "idle"})))
        );
        assert_eq!(key_view(&report, "prod/pg"), RuntimeView::Key(None));
    }

    #[test]
    fn children_say_how_ready_they_are() {
        let mut sts = StatefulSet::default();
        sts.metadata.name = Some("pg".into());
        sts.spec = Some(Default::default());
        sts.spec.as_mut().unwrap().replicas = Some(3);
        sts.status = Some(Default::default());
        sts.status.as_mut().unwrap().ready_replicas = Some(2);
        assert_eq!(statefulset_child(&sts).detail, "ready 2/3");

        let mut pod = Pod::default();
        pod.metadata.name = Some("pg-0".into());
        assert_eq!(pod_child(&pod).detail, "Pending, not ready");
        pod.status = Some(PodStatus {
            phase: Some("Running".into()),
            conditions: Some(vec![PodCondition {
                type_: "Ready".into(),
                status: "True".into(),
                ..Default::default()
            }]),
            ..Default::default()
        });
        assert_eq!(pod_child(&pod).detail, "Running, ready");
    }
}
