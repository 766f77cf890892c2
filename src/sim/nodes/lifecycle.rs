//! The node lifecycle controller, as 1.28's kube-controller-manager runs it
//! (pkg/controller/nodelifecycle/node_lifecycle_controller.go), every `node_monitor_period`:
//!
//! 1. `tryUpdateNodeHealth`: a node's probe time is when this controller last saw its Lease's
//!    `renewTime` or its `Ready` condition's `lastHeartbeatTime` change (its own clock, not the
//!    times written). Silent for longer than `node_monitor_grace_period` (40 s by default) → every
//!    condition turns `Unknown`, reason `NodeStatusUnknown`, "Kubelet stopped posting node
//!    status.", and a `NodeNotReady` Event says so (`RecordNodeStatusChange`).
//! 2. `monitorNodeHealth`: the pods of a node that is not `Ready=True` get `Ready=False`
//!    (`MarkPodsNotReady` in pkg/controller/util/node: `False`, not `Unknown`, with a Warning
//!    Event `NodeNotReady`, "Node is not ready").
//! 3. `doNoExecuteTaintingPass` / `doNoScheduleTaintingPass`: a node whose `Ready` is `Unknown`
//!    carries `node.kubernetes.io/unreachable` with effects `NoExecute` (with `timeAdded`) and
//!    `NoSchedule`; both go when it is `Ready=True` again.
//! 4. The taint manager (`processPodOnNode` in pkg/controller/nodelifecycle/scheduler): a pod on
//!    a node with a `NoExecute` taint it does not tolerate is deleted at once; one tolerating
//!    every such taint is deleted after the smallest `tolerationSeconds` of the tolerations used
//!    (`getMinTolerationTime`; none: never), counted from when the controller first saw the pod
//!    under the taint, with the Event `TaintManagerEviction`. Pods get those tolerations (300 s)
//!    from the `DefaultTolerationSeconds` admission plugin ([`default_tolerations`]).
//!
//! The deletion is graceful: a lost node's kubelet does not confirm it, so the pod stays
//! terminating until the node comes back, as on a real cluster.

use std::collections::HashMap;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::time::Instant;

use crate::sim::controllers::{MANAGER, write, write_status};
use crate::sim::meta;
use crate::sim::nodes::LEASE_NAMESPACE;
use crate::sim::nodes::scheduler::tolerates;
use crate::sim::ops::{self, DeleteOptions, WriteContext};
use crate::sim::state::State;

/// The taint of a node whose kubelet stopped reporting.
pub const UNREACHABLE_TAINT: &str = "node.kubernetes.io/unreachable";

/// The taint of a node whose kubelet reports it not ready.
pub const NOT_READY_TAINT: &str = "node.kubernetes.io/not-ready";

/// What the controller is configured with.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    /// `--node-monitor-grace-period`.
    pub grace: Duration,
}

/// What the controller remembers of a node's reports.
#[derive(Debug)]
struct Health {
    /// The Lease's `renewTime` and the `Ready` condition's `lastHeartbeatTime`, as last seen.
    observed: (Value, Value),
    /// When they last changed, by this controller's clock.
    probe: Instant,
}

/// The controller's memory between passes.
#[derive(Debug)]
pub struct Lifecycle {
    settings: Settings,
    health: HashMap<String, Health>,
    /// When each pod (by uid) was first seen on a node with a `NoExecute` taint.
    tainted_since: HashMap<String, Instant>,
}

/// The `DefaultTolerationSeconds` admission plugin (on pod creation): a pod that tolerates
/// neither `not-ready` nor `unreachable` `NoExecute` taints gets a toleration of each for
/// `seconds` (`--default-not-ready-toleration-seconds`, `--default-unreachable-toleration-seconds`,
/// 300 by default).
pub fn default_tolerations(pod: &mut Value, seconds: u64) {
    for key in [NOT_READY_TAINT, UNREACHABLE_TAINT] {
        if tolerates(pod, key, "", "NoExecute").is_some() {
            continue;
        }
        let toleration =
            json!({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": seconds});
        match pod["spec"]["tolerations"].as_array_mut() {
            Some(list) => list.push(toleration),
            None => pod["spec"]["tolerations"] = json!([toleration]),
        }
    }
}

/// The status of a node's `Ready` condition, if it has one.
fn ready_of(node: &Value) -> Option<&str> {
    node["status"]["conditions"].as_array()?.iter().find(|c| c["type"] == "Ready")?["status"].as_str()
}

/// The node status with every condition `Unknown` (what `tryUpdateNodeHealth` writes when the
/// kubelet is silent past the grace period); heartbeats are kept, transitions are `now`.
pub fn unknown_status(status: &Value, now: &str) -> Value {
    let mut status = status.clone();
    for condition in status["conditions"].as_array_mut().into_iter().flatten() {
        if condition["status"] != "Unknown" {
            condition["status"] = json!("Unknown");
            condition["reason"] = json!("NodeStatusUnknown");
            condition["message"] = json!("Kubelet stopped posting node status.");
            condition["lastTransitionTime"] = json!(now);
        }
    }
    status
}

/// The taints a node should carry for its `Ready` status, besides the ones not the
/// controller's (kept in place): `unreachable` for `Unknown`, `not-ready` for `False`.
pub fn wanted_taints(taints: &Value, ready: Option<&str>, now: &str) -> Value {
    let ours = |t: &Value| t["key"] == UNREACHABLE_TAINT || t["key"] == NOT_READY_TAINT;
    let key = match ready {
        Some("Unknown") => Some(UNREACHABLE_TAINT),
        Some("False") => Some(NOT_READY_TAINT),
        _ => None,
    };
    let mut wanted: Vec<Value> =
        taints.as_array().into_iter().flatten().filter(|t| !ours(t)).cloned().collect();
    for effect in ["NoSchedule", "NoExecute"] {
        let Some(key) = key else { break };
        let existing =
            taints.as_array().into_iter().flatten().find(|t| t["key"] == key && t["effect"] == effect);
        wanted.push(existing.cloned().unwrap_or_else(|| match effect {
            "NoExecute" => json!({"key": key, "effect": effect, "timeAdded": now}),
            _ => json!({"key": key, "effect": effect}),
        }));
    }
    Value::Array(wanted)
}

/// How long `pod` may stay under the node's `NoExecute` taints (`processPodOnNode`): `Some(None)`
/// for ever, `Some(Some(d))` for `d`, `None` when one taint is not tolerated (evict at once);
/// no taint at all: for ever.
pub fn toleration(pod: &Value, taints: &Value) -> Option<Option<Duration>> {
    let mut least: Option<Duration> = None;
    for taint in taints.as_array().into_iter().flatten().filter(|t| t["effect"] == "NoExecute") {
        let key = taint["key"].as_str().unwrap_or_default();
        let used = tolerates(pod, key, taint["value"].as_str().unwrap_or_default(), "NoExecute")?;
        if let Some(seconds) = used["tolerationSeconds"].as_i64() {
            let d = Duration::from_secs(u64::try_from(seconds).unwrap_or(0));
            least = Some(least.map_or(d, |l| l.min(d)));
        }
    }
    Some(least)
}

/// Records an Event about `involved` (a reference) from the node controller.
fn record(state: &mut State, involved: Value, kind: &str, reason: &str, message: String) {
    let Some(events) = state.registry.get("", "v1", "events") else { return };
    let now = meta::now();
    let ns = involved["namespace"].as_str().filter(|n| !n.is_empty()).unwrap_or("default").to_owned();
    let name =
        format!("{}.{}", involved["name"].as_str().unwrap_or_default(), meta::new_uid().replace('-', ""));
    let event = json!({
        "metadata": {"name": name, "namespace": ns}, "involvedObject": involved,
        "type": kind, "reason": reason, "message": message,
        "source": {"component": "node-controller"},
        "firstTimestamp": now, "lastTimestamp": now, "count": 1,
    });
    let _ = ops::create(state, &events, Some(&ns), event, &WriteContext::controller(MANAGER));
}

fn reference(obj: &Value, kind: &str) -> Value {
    json!({"apiVersion": "v1", "kind": kind, "name": obj["metadata"]["name"],
           "namespace": obj["metadata"]["namespace"].as_str().unwrap_or_default(), "uid": obj["metadata"]["uid"]})
}

impl Lifecycle {
    /// A controller with `settings`.
    pub fn new(settings: Settings) -> Self {
        Self { settings, health: HashMap::new(), tainted_since: HashMap::new() }
    }

    /// One pass over every node at `now` (rules 1–4).
    pub fn monitor(&mut self, state: &mut State, now: Instant) {
        let nodes: Vec<Value> = state.store.list("nodes", None).cloned().collect();
        for node in nodes {
            let node = self.update_health(state, node, now);
            let node = sync_taints(state, node);
            let name = node["metadata"]["name"].as_str().unwrap_or_default().to_owned();
            let pods: Vec<Value> = state
                .store
                .list("pods", None)
                .filter(|p| p["spec"]["nodeName"] == name.as_str())
                .cloned()
                .collect();
            for pod in &pods {
                if ready_of(&node) != Some("True") {
                    mark_not_ready(state, pod);
                }
                self.evict_if_due(state, pod, &node["spec"]["taints"], now);
            }
        }
    }

    /// Rule 1; the node as stored after.
    fn update_health(&mut self, state: &mut State, node: Value, now: Instant) -> Value {
        let name = node["metadata"]["name"].as_str().unwrap_or_default().to_owned();
        let lease = state.store.get("leases.coordination.k8s.io", LEASE_NAMESPACE, &name);
        let renewed = lease.map_or(Value::Null, |l| l["spec"]["renewTime"].clone());
        let ready =
            node["status"]["conditions"].as_array().into_iter().flatten().find(|c| c["type"] == "Ready");
        let observed = (renewed, ready.map_or(Value::Null, |c| c["lastHeartbeatTime"].clone()));
        let health =
            self.health.entry(name.clone()).or_insert(Health { observed: observed.clone(), probe: now });
        if health.observed != observed {
            *health = Health { observed, probe: now };
        }
        if now.duration_since(health.probe) <= self.settings.grace || ready_of(&node) == Some("Unknown") {
            return node;
        }
        tracing::info!(node = %name, "node stopped posting status; marking it Unknown");
        let status = unknown_status(&node["status"], &meta::now());
        let Some(written) = write_status(state, "", "nodes", &node, status) else { return node };
        record(
            state,
            reference(&written, "Node"),
            "Normal",
            "NodeNotReady",
            format!("Node {name} status is now: NodeNotReady"),
        );
        written
    }

    /// Rule 4 for one pod.
    fn evict_if_due(&mut self, state: &mut State, pod: &Value, taints: &Value, now: Instant) {
        let uid = pod["metadata"]["uid"].as_str().unwrap_or_default().to_owned();
        let under_taint = taints.as_array().into_iter().flatten().any(|t| t["effect"] == "NoExecute");
        if !under_taint || pod["metadata"]["deletionTimestamp"].is_string() {
            self.tainted_since.remove(&uid);
            return;
        }
        let since = *self.tainted_since.entry(uid.clone()).or_insert(now);
        let due = match toleration(pod, taints) {
            None => true,
            Some(None) => false,
            Some(Some(tolerated)) => now.duration_since(since) >= tolerated,
        };
        if !due {
            return;
        }
        let (ns, name) = (
            pod["metadata"]["namespace"].as_str().unwrap_or_default(),
            pod["metadata"]["name"].as_str().unwrap_or_default(),
        );
        tracing::info!(namespace = ns, pod = name, "evicting a pod from a tainted node");
        record(
            state,
            reference(pod, "Pod"),
            "Normal",
            "TaintManagerEviction",
            format!("Marking for deletion Pod {ns}/{name}"),
        );
        if let Some(kind) = state.registry.get("", "v1", "pods") {
            let _ = ops::delete(state, &kind, Some(ns), name, &DeleteOptions::default());
        }
        self.tainted_since.remove(&uid);
    }
}

/// Rule 3: writes the taints the node's `Ready` status calls for; the node as stored after.
fn sync_taints(state: &mut State, node: Value) -> Value {
    let wanted = wanted_taints(&node["spec"]["taints"], ready_of(&node), &meta::now());
    let current = node["spec"]["taints"].as_array().cloned().unwrap_or_default();
    if wanted.as_array().is_some_and(|w| *w == current) {
        return node;
    }
    let Some(kind) = state.registry.get("", "v1", "nodes") else { return node };
    let mut changed = node.clone();
    if wanted.as_array().is_some_and(Vec::is_empty) {
        if let Some(spec) = changed["spec"].as_object_mut() {
            spec.remove("taints");
        }
    } else {
        changed["spec"]["taints"] = wanted;
    }
    write(state, &kind, changed, None).unwrap_or(node)
}

/// Rule 2 for one pod: its `Ready` condition turned `False` unless it is already.
fn mark_not_ready(state: &mut State, pod: &Value) {
    let Some(conditions) = pod["status"]["conditions"].as_array() else { return };
    if !conditions.iter().any(|c| c["type"] == "Ready" && c["status"] != "False") {
        return;
    }
    let mut status = pod["status"].clone();
    let now = meta::now();
    for condition in status["conditions"].as_array_mut().into_iter().flatten() {
        if condition["type"] == "Ready" {
            condition["status"] = json!("False");
            condition["lastTransitionTime"] = json!(now);
        }
    }
    if write_status(state, "", "pods", pod, status).is_some() {
        record(state, reference(pod, "Pod"), "Warning", "NodeNotReady", "Node is not ready".to_owned());
    }
}

#[cfg(test)]
mod tests;
