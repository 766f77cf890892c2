//! The process kubelet's simulated nodes, as a cluster has them: a Node object per node
//! (`SimConfig::nodes`, three by default, named `sim-node-0`, `sim-node-1`…, labelled
//! `kubernetes.io/hostname`), each node's kubelet heartbeat (its Lease in `kube-node-lease`
//! renewed every `node_lease_renew_interval`, and `Ready=True` posted in the Node's status when it
//! starts or comes back), the scheduler's choice of a node for a pod (`scheduler`), and the node
//! lifecycle controller (`lifecycle`).
//!
//! Which nodes are lost (`Faults::lose_node`) is host-side state kept here: a lost node's
//! kubelet posts nothing (no heartbeat, no pod status) and acts on nothing (its pods' deletions
//! wait), and its pods' processes are frozen (`kubelet::freeze`), until it is restored.
//!
//! The timer kubelet keeps its one node, `sim-node` ([`crate::sim::controllers::NODE_NAME`]),
//! with no Node object.

pub mod lifecycle;
pub mod scheduler;

use std::collections::BTreeSet;
use std::sync::Arc;

use serde_json::{Value, json};
use tokio::sync::watch;

use crate::sim::cluster::Cluster;
use crate::sim::controllers::{create_with_status, write, write_status};
use crate::sim::meta;
use crate::sim::state::State;

/// The namespace of the nodes' Leases.
pub const LEASE_NAMESPACE: &str = "kube-node-lease";

/// The simulated nodes and which of them are lost.
#[derive(Debug)]
pub struct SimNodes {
    names: Vec<String>,
    lost: watch::Sender<BTreeSet<String>>,
    /// Bumped whenever something a waiting pod's scheduling depends on may have changed.
    scheduling: watch::Sender<u64>,
}

impl SimNodes {
    /// `count` nodes (at least one).
    pub fn new(count: usize) -> Self {
        let names = (0..count.max(1)).map(|i| format!("sim-node-{i}")).collect();
        Self { names, lost: watch::Sender::new(BTreeSet::new()), scheduling: watch::Sender::new(0) }
    }

    /// The nodes' names.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// Whether node `name` is lost.
    pub fn is_lost(&self, name: &str) -> bool {
        self.lost.borrow().contains(name)
    }

    /// Marks `name` lost (or back); whether that changed anything.
    pub(crate) fn set_lost(&self, name: &str, lost: bool) -> bool {
        self.lost.send_if_modified(|set| if lost { set.insert(name.to_owned()) } else { set.remove(name) })
    }

    /// A gate that is open while node `node` (none: no node yet) is not lost.
    pub fn reachable(&self, node: Option<String>) -> Reachable {
        Reachable { lost: self.lost.subscribe(), node }
    }

    /// Tells the pods waiting for a node to look again (after any change in the store).
    pub(crate) fn poke(&self) {
        self.scheduling.send_modify(|generation| *generation = generation.wrapping_add(1));
    }

    /// Changes when the pods waiting for a node should look again.
    pub(crate) fn scheduling(&self) -> watch::Receiver<u64> {
        self.scheduling.subscribe()
    }
}

/// Open while a node is not lost ([`SimNodes::reachable`]).
#[derive(Debug, Clone)]
pub struct Reachable {
    lost: watch::Receiver<BTreeSet<String>>,
    node: Option<String>,
}

impl Reachable {
    /// Returns when the node is not lost (at once, usually).
    pub async fn wait(&self) {
        let Some(node) = &self.node else { return };
        let mut lost = self.lost.clone();
        let _ = lost.wait_for(|lost| !lost.contains(node)).await;
    }
}

/// A Lease's `renewTime` for now (a MicroTime).
fn micro_now() -> String {
    jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
}

/// The Node object of node `name`, without status.
fn node_object(name: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {
            scheduler::HOSTNAME_LABEL: name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
        }},
        "spec": {},
    })
}

/// The status a running kubelet posts: `Ready=True` with a fresh heartbeat, keeping the
/// transition time while it stays true (`setNodeReadyCondition` in pkg/kubelet/nodestatus).
fn ready_status(old: &Value, now: &str) -> Value {
    let was_ready = old["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Ready")
        .filter(|c| c["status"] == "True")
        .and_then(|c| c["lastTransitionTime"].as_str())
        .map(str::to_owned);
    json!({
        "conditions": [{
            "type": "Ready", "status": "True", "reason": "KubeletReady",
            "message": "kubelet is posting ready status",
            "lastHeartbeatTime": now, "lastTransitionTime": was_ready.as_deref().unwrap_or(now),
        }],
        "nodeInfo": {"kubeletVersion": "v1.28.0", "operatingSystem": "linux", "architecture": "amd64"},
    })
}

/// Creates the Node objects and their Leases (a cluster's nodes register when they start).
pub fn install(state: &mut State, names: &[String]) {
    let now = meta::now();
    for name in names {
        if state.store.get("nodes", "", name).is_none() {
            create_with_status(
                state,
                "",
                "nodes",
                None,
                node_object(name),
                Some(ready_status(&Value::Null, &now)),
            );
        }
        let lease = json!({
            "metadata": {"name": name, "namespace": LEASE_NAMESPACE},
            "spec": {"holderIdentity": name, "leaseDurationSeconds": 40, "renewTime": micro_now()},
        });
        if state.store.get("leases.coordination.k8s.io", LEASE_NAMESPACE, name).is_none() {
            create_with_status(state, "coordination.k8s.io", "leases", Some(LEASE_NAMESPACE), lease, None);
        }
    }
}

/// One heartbeat of node `name`'s kubelet: its Lease renewed (`renewTime` now) and, unless the
/// Node already says so, `Ready=True` posted.
pub fn heartbeat(state: &mut State, name: &str) {
    if let Some(lease) = state.store.get("leases.coordination.k8s.io", LEASE_NAMESPACE, name).cloned()
        && let Some(kind) = state.registry.get("coordination.k8s.io", "v1", "leases")
    {
        let mut renewed = lease;
        renewed["spec"]["renewTime"] = json!(micro_now());
        write(state, &kind, renewed, None);
    }
    if let Some(node) = state.store.get("nodes", "", name).cloned() {
        let ready = node["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Ready" && c["status"] == "True");
        if !ready {
            write_status(state, "", "nodes", &node, ready_status(&node["status"], &meta::now()));
        }
    }
}

/// Sets or clears `spec.unschedulable` of node `name` (`kubectl cordon`/`uncordon`).
pub fn set_unschedulable(state: &mut State, name: &str, unschedulable: bool) {
    let Some(node) = state.store.get("nodes", "", name).cloned() else { return };
    if (node["spec"]["unschedulable"] == true) == unschedulable {
        return;
    }
    let Some(kind) = state.registry.get("", "v1", "nodes") else { return };
    let mut changed = node;
    if unschedulable {
        changed["spec"]["unschedulable"] = json!(true);
    } else if let Some(spec) = changed["spec"].as_object_mut() {
        spec.remove("unschedulable");
    }
    write(state, &kind, changed, None);
}

/// Runs the nodes' kubelets' heartbeats and the node lifecycle controller until shutdown.
pub async fn run(cluster: Arc<Cluster>) {
    let names = cluster.nodes.names().to_vec();
    cluster.write(|s| install(s, &names));
    let config = &cluster.config;
    let mut controller =
        lifecycle::Lifecycle::new(lifecycle::Settings { grace: config.node_monitor_grace_period });
    let mut beats = tokio::time::interval(config.node_lease_renew_interval);
    let mut monitor = tokio::time::interval(config.node_monitor_period);
    let mut lost = cluster.nodes.lost.subscribe();
    loop {
        tokio::select! {
            _ = beats.tick() => {}
            _ = monitor.tick() => {
                let now = tokio::time::Instant::now();
                cluster.write(|s| controller.monitor(s, now));
                continue;
            }
            _ = lost.changed() => {}
            _ = cluster.shutdown.cancelled() => return,
        }
        let lost_now = lost.borrow_and_update().clone();
        cluster.write(|s| {
            for name in names.iter().filter(|n| !lost_now.contains(*n)) {
                heartbeat(s, name);
            }
        });
    }
}
