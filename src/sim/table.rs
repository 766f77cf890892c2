//! kubectl's Table responses (`Accept: application/json;as=Table;g=meta.k8s.io;v=v1`): NAME,
//! the kind's printer columns (a CRD's `additionalPrinterColumns`) and AGE.

use serde_json::{Value, json};

use crate::sim::handlers::Query;
use crate::sim::resources::{Kind, PrinterColumn};

/// What each row carries besides its cells (`includeObject`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IncludeObject {
    /// No object.
    None,
    /// The object's metadata as `PartialObjectMetadata` (the default).
    Metadata,
    /// The whole object.
    Object,
}

/// Table options of a request, if it asked for a Table.
#[derive(Debug, Clone, Copy)]
pub struct TableOptions {
    /// The `includeObject` parameter.
    pub include_object: IncludeObject,
}

/// `Some` when the Accept header prefers a Table.
pub fn requested(accept: &str, query: &Query) -> Option<TableOptions> {
    let first = accept.split(',').next().unwrap_or_default();
    if !first.contains("as=Table") {
        return None;
    }
    let include_object = match query.get("includeObject").map(String::as_str) {
        Some("None") => IncludeObject::None,
        Some("Object") => IncludeObject::Object,
        _ => IncludeObject::Metadata,
    };
    Some(TableOptions { include_object })
}

fn column(name: &str, column_type: &str, format: &str, description: &str, priority: i64) -> Value {
    json!({"name": name, "type": column_type, "format": format, "description": description, "priority": priority})
}

fn columns(kind: &Kind) -> Vec<Value> {
    let mut cols = vec![column("Name", "string", "name", "Name must be unique within a namespace.", 0)];
    let has_age = kind.printer_columns.iter().any(|c| c.name.eq_ignore_ascii_case("age"));
    for c in &kind.printer_columns {
        cols.push(column(&c.name, &c.column_type, "", &c.description, c.priority));
    }
    if !has_age {
        cols.push(column(
            "Age",
            "date",
            "",
            "CreationTimestamp is a timestamp representing the server time when this object was created.",
            0,
        ));
    }
    cols
}

/// A Table of the objects (already presented in the requested version).
pub fn table(kind: &Kind, objects: &[Value], opts: &TableOptions, resource_version: Value) -> Value {
    let now = jiff::Timestamp::now();
    let rows: Vec<Value> = objects.iter().map(|o| row(kind, o, opts, now)).collect();
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": resource_version},
        "columnDefinitions": columns(kind),
        "rows": rows,
    })
}

fn row(kind: &Kind, obj: &Value, opts: &TableOptions, now: jiff::Timestamp) -> Value {
    let mut cells = vec![obj["metadata"]["name"].clone()];
    let has_age = kind.printer_columns.iter().any(|c| c.name.eq_ignore_ascii_case("age"));
    for c in &kind.printer_columns {
        cells.push(cell(c, obj, now));
    }
    if !has_age {
        cells.push(json!(age(obj["metadata"]["creationTimestamp"].as_str(), now)));
    }
    let mut row = json!({"cells": cells});
    match opts.include_object {
        IncludeObject::None => {}
        IncludeObject::Metadata => {
            row["object"] = json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj["metadata"]});
        }
        IncludeObject::Object => row["object"] = obj.clone(),
    }
    row
}

fn cell(c: &PrinterColumn, obj: &Value, now: jiff::Timestamp) -> Value {
    if let Some(name) = c.json_path.strip_prefix('#') {
        return computed(name, obj);
    }
    let v = json_path(obj, &c.json_path);
    match (c.column_type.as_str(), v) {
        (_, None) => Value::Null,
        ("date", Some(Value::String(s))) => json!(age(Some(&s), now)),
        (_, Some(v)) => v,
    }
}

/// The cells the apiserver's built-in printers compute (`1/1` ready, restarts, job status).
fn computed(name: &str, obj: &Value) -> Value {
    let count = |v: &Value| v.as_i64().unwrap_or(0);
    let statuses = obj["status"]["containerStatuses"].as_array().map(Vec::as_slice).unwrap_or_default();
    match name {
        "pod-ready" => {
            let total = obj["spec"]["containers"].as_array().map_or(0, Vec::len);
            let ready = statuses.iter().filter(|s| s["ready"] == true).count();
            json!(format!("{ready}/{total}"))
        }
        "pod-status" => json!(pod_status(obj)),
        "pod-restarts" => json!(statuses.iter().map(|s| count(&s["restartCount"])).sum::<i64>().to_string()),
        "pod-ip" => or_none(&obj["status"]["podIP"]),
        "pod-node" => or_none(&obj["spec"]["nodeName"]),
        "nominated-node" => or_none(&obj["status"]["nominatedNodeName"]),
        "readiness-gates" => match obj["spec"]["readinessGates"].as_array().map(Vec::len) {
            None | Some(0) => json!("<none>"),
            Some(n) => json!(format!("0/{n}")),
        },
        "containers" => template_containers(obj, "name"),
        "images" => template_containers(obj, "image"),
        "service-external-ip" => service_external_ip(obj),
        "service-ports" => service_ports(obj),
        "service-selector" => selector_text(&obj["spec"]["selector"]),
        "job-selector" => selector_text(&obj["spec"]["selector"]["matchLabels"]),
        "access-modes" => access_modes(obj),
        "job-duration" => job_duration(obj),
        "cronjob-active" => json!(obj["status"]["active"].as_array().map_or(0, Vec::len)),
        "statefulset-ready" => {
            json!(format!(
                "{}/{}",
                count(&obj["status"]["readyReplicas"]),
                obj["spec"]["replicas"].as_i64().unwrap_or(1)
            ))
        }
        "job-status" => job_status(obj),
        "pv-claim" => {
            match (obj["spec"]["claimRef"]["namespace"].as_str(), obj["spec"]["claimRef"]["name"].as_str()) {
                (Some(ns), Some(name)) => json!(format!("{ns}/{name}")),
                _ => json!(""),
            }
        }
        "job-completions" => {
            json!(format!(
                "{}/{}",
                count(&obj["status"]["succeeded"]),
                obj["spec"]["completions"].as_i64().unwrap_or(1)
            ))
        }
        _ => Value::Null,
    }
}

/// The containers' `field` (name or image) of a workload's pod template, comma-separated.
fn template_containers(obj: &Value, field: &str) -> Value {
    let containers = obj["spec"]["template"]["spec"]["containers"]
        .as_array()
        .or_else(|| obj["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"].as_array());
    let values: Vec<&str> = containers.into_iter().flatten().filter_map(|c| c[field].as_str()).collect();
    json!(values.join(","))
}

/// A Service's external IPs, `<pending>` for a load balancer without one.
fn service_external_ip(obj: &Value) -> Value {
    let ips = obj["spec"]["externalIPs"].as_array().map(Vec::as_slice).unwrap_or_default();
    let ips: Vec<&str> = ips.iter().filter_map(Value::as_str).collect();
    match (obj["spec"]["type"].as_str(), ips.is_empty()) {
        (_, false) => json!(ips.join(",")),
        (Some("LoadBalancer"), true) => json!("<pending>"),
        (Some("ExternalName"), true) => obj["spec"]["externalName"].clone(),
        _ => json!("<none>"),
    }
}

/// A Service's ports as `port[:nodePort]/protocol`.
fn service_ports(obj: &Value) -> Value {
    let count = |v: &Value| v.as_i64().unwrap_or(0);
    let ports = obj["spec"]["ports"].as_array().map(Vec::as_slice).unwrap_or_default();
    let shown: Vec<String> = ports
        .iter()
        .map(|p| {
            let protocol = p["protocol"].as_str().unwrap_or("TCP");
            match p["nodePort"].as_i64() {
                Some(node) => format!("{}:{node}/{protocol}", count(&p["port"])),
                None => format!("{}/{protocol}", count(&p["port"])),
            }
        })
        .collect();
    json!(if shown.is_empty() { "<none>".to_owned() } else { shown.join(",") })
}

/// A volume's or claim's access modes, abbreviated (`RWO`, `ROX`, `RWX`, `RWOP`).
fn access_modes(obj: &Value) -> Value {
    let modes = obj["spec"]["accessModes"].as_array().map(Vec::as_slice).unwrap_or_default();
    let short: Vec<&str> = modes
        .iter()
        .filter_map(|m| match m.as_str()? {
            "ReadWriteOnce" => Some("RWO"),
            "ReadOnlyMany" => Some("ROX"),
            "ReadWriteMany" => Some("RWX"),
            "ReadWriteOncePod" => Some("RWOP"),
            _ => None,
        })
        .collect();
    json!(short.join(","))
}

/// How long a Job ran (or has run so far); empty before it started.
fn job_duration(obj: &Value) -> Value {
    let at = |field: &str| obj["status"][field].as_str().and_then(|t| t.parse::<jiff::Timestamp>().ok());
    match at("startTime") {
        None => json!(""),
        Some(start) => {
            let end = at("completionTime").unwrap_or_else(jiff::Timestamp::now);
            json!(age(Some(&start.to_string()), end))
        }
    }
}

/// A Job's state: Complete, Failed or Running.
fn job_status(obj: &Value) -> Value {
    let has = |t: &str| {
        obj["status"]["conditions"]
            .as_array()
            .is_some_and(|c| c.iter().any(|c| c["type"] == t && c["status"] == "True"))
    };
    json!(if has("Complete") {
        "Complete"
    } else if has("Failed") {
        "Failed"
    } else {
        "Running"
    })
}

/// A value, or `<none>` as 1.28's printers show an empty one.
fn or_none(value: &Value) -> Value {
    match value.as_str() {
        Some(text) if !text.is_empty() => json!(text),
        _ => json!("<none>"),
    }
}

/// A label map as `a=b,c=d` (sorted), `<none>` when empty.
fn selector_text(labels: &Value) -> Value {
    let Some(map) = labels.as_object().filter(|m| !m.is_empty()) else { return json!("<none>") };
    let mut pairs: Vec<String> =
        map.iter().map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default())).collect();
    pairs.sort();
    json!(pairs.join(","))
}

/// A pod's STATUS as 1.28's `printPod` shows it: `Terminating` while deleted, the reason of an
/// init container still to finish (`Init:…`) or of a waiting or failed container
/// (`ContainerCreating`, `CrashLoopBackOff`, `Error`…), else the pod's reason or phase.
fn pod_status(pod: &Value) -> String {
    let status = &pod["status"];
    if pod["metadata"]["deletionTimestamp"].is_string() {
        return "Terminating".into();
    }
    let mut reason = status["reason"].as_str().or(status["phase"].as_str()).unwrap_or_default().to_owned();
    let inits = status["initContainerStatuses"].as_array().map(Vec::as_slice).unwrap_or_default();
    for (i, init) in inits.iter().enumerate() {
        let state = &init["state"];
        if state["terminated"]["exitCode"] == 0 {
            continue;
        }
        return match (state["terminated"]["reason"].as_str(), state["waiting"]["reason"].as_str()) {
            (Some(why), _) => format!("Init:{why}"),
            (None, Some(why)) if why != "PodInitializing" => format!("Init:{why}"),
            _ => format!("Init:{i}/{}", inits.len()),
        };
    }
    let containers = status["containerStatuses"].as_array().map(Vec::as_slice).unwrap_or_default();
    for container in containers.iter().rev() {
        let state = &container["state"];
        if let Some(why) = state["waiting"]["reason"].as_str().filter(|w| !w.is_empty()) {
            reason = why.to_owned();
        } else if let Some(why) = state["terminated"]["reason"].as_str() {
            reason = why.to_owned();
        }
    }
    reason
}

/// Evaluates a simple JSONPath: `.a.b`, `.a[0]`, `.a[?(@.type=="Ready")].status`.
pub fn json_path(obj: &Value, path: &str) -> Option<Value> {
    let mut cur = obj.clone();
    let path = path.trim().trim_start_matches('{').trim_end_matches('}');
    let mut rest = path.trim_start_matches('$');
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('.') {
            let end = r.find(['.', '[']).unwrap_or(r.len());
            cur = cur.get(&r[..end])?.clone();
            rest = &r[end..];
        } else if let Some(r) = rest.strip_prefix('[') {
            let end = r.find(']')?;
            let inner = &r[..end];
            rest = &r[end + 1..];
            if let Some(filter) = inner.strip_prefix("?(@.").and_then(|f| f.strip_suffix(')')) {
                let (field, want) = filter.split_once("==")?;
                let want = want.trim().trim_matches(|c| c == '\'' || c == '"');
                cur = cur.as_array()?.iter().find(|e| e[field.trim()].as_str() == Some(want))?.clone();
            } else {
                cur = cur.get(inner.parse::<usize>().ok()?)?.clone();
            }
        } else {
            return None;
        }
    }
    Some(cur)
}

/// kubectl's short human age: `45s`, `3m20s`, `5h`, `2d3h`, `400d`.
pub fn age(created: Option<&str>, now: jiff::Timestamp) -> String {
    let Some(created) = created.and_then(|c| c.parse::<jiff::Timestamp>().ok()) else {
        return "<unknown>".into();
    };
    let secs = now.as_second() - created.as_second();
    if secs < 0 {
        return "0s".into();
    }
    let (m, h, d) = (secs / 60, secs / 3600, secs / 86400);
    let with = |big: i64, bu: &str, small: i64, su: &str| {
        if small == 0 { format!("{big}{bu}") } else { format!("{big}{bu}{small}{su}") }
    };
    match () {
        _ if secs < 120 => format!("{secs}s"),
        _ if m < 10 => with(m, "m", secs % 60, "s"),
        _ if h < 3 => format!("{m}m"),
        _ if h < 8 => with(h, "h", m % 60, "m"),
        _ if h < 48 => format!("{h}h"),
        _ if h < 192 => with(d, "d", h % 24, "h"),
        _ if d < 365 * 2 => format!("{d}d"),
        _ => format!("{}y", d / 365),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn computed_cells_for_built_in_kinds() {
        let pod = json!({"spec": {"containers": [{}, {}]}, "status": {"phase": "Running", "containerStatuses": [{"ready": true, "restartCount": 2}, {"ready": false, "restartCount": 1}]}});
        assert_eq!(computed("pod-ready", &pod), json!("1/2"));
        // A string, as 1.28's printPod writes it (it may carry `(2m ago)`).
        assert_eq!(computed("pod-restarts", &pod), json!("3"));
        assert_eq!(computed("pod-status", &pod), json!("Running"));
        let sts = json!({"spec": {"replicas": 3}, "status": {"readyReplicas": 2}});
        assert_eq!(computed("statefulset-ready", &sts), json!("2/3"));
    }

    #[test]
    fn json_paths_and_ages() {
        let obj = json!({"status": {"phase": "Running", "conditions": [{"type": "A", "status": "x"}, {"type": "Ready", "status": "True"}]}, "spec": {"l": [1, 2]}});
        assert_eq!(json_path(&obj, ".status.phase"), Some(json!("Running")));
        assert_eq!(json_path(&obj, ".status.conditions[?(@.type==\"Ready\")].status"), Some(json!("True")));
        assert_eq!(json_path(&obj, ".spec.l[1]"), Some(json!(2)));
        assert_eq!(json_path(&obj, ".spec.missing"), None);
        let now: jiff::Timestamp = "2026-01-01T10:00:00Z".parse().unwrap();
        assert_eq!(age(Some("2026-01-01T09:59:15Z"), now), "45s");
        assert_eq!(age(Some("2026-01-01T09:56:40Z"), now), "3m20s");
        assert_eq!(age(Some("2026-01-01T05:00:00Z"), now), "5h");
        assert_eq!(age(Some("2025-12-29T07:00:00Z"), now), "3d3h");
    }
}
