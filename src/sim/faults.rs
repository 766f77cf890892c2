//! Fault injection controlled by tests: end open watches, fail the next requests for a resource,
//! answer the next watch with 410, add latency, forget the watch history; and on the process
//! kubelet's nodes: cordon them, lose one (its kubelet silent, its pods' processes frozen) and
//! restore it, hang one pod's processes and resume them.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::watch;

use crate::sim::kubelet::Node;
use crate::sim::nodes::{self, SimNodes};
use crate::sim::state::State;

#[derive(Debug, Default)]
struct Pending {
    failures: HashMap<String, (usize, u16)>,
    gone_watches: HashSet<String>,
    latency: Duration,
    watch_event_latency: Duration,
    failing_jobs: usize,
}

/// The faults to inject, shared by the server's request handlers.
#[derive(Debug)]
pub struct Faults {
    pending: Mutex<Pending>,
    close_watches: watch::Sender<u64>,
    state: Arc<Mutex<State>>,
    /// Requests answered with an injected failure so far, by the resource the fault named.
    injected: Mutex<HashMap<String, u64>>,
    /// The process kubelet's host side (its pods' processes).
    node: Arc<Node>,
    /// The process kubelet's nodes.
    nodes: Arc<SimNodes>,
}

impl Faults {
    pub(crate) fn new(state: Arc<Mutex<State>>, node: Arc<Node>, nodes: Arc<SimNodes>) -> Self {
        Self {
            pending: Mutex::default(),
            close_watches: watch::Sender::new(0),
            state,
            injected: Mutex::default(),
            node,
            nodes,
        }
    }

    /// Cordons every node of the process kubelet, as `kubectl cordon` would: a pod created from
    /// now on is not scheduled (`PodScheduled=False`, reason `Unschedulable`, no `Ready`
    /// condition, phase `Pending`, as 1.28's scheduler leaves it) until [`Faults::uncordon`];
    /// pods already scheduled keep running. What a lost node does to a pod that must be recreated.
    pub fn cordon(&self) {
        for name in self.nodes.names() {
            self.cordon_node(name);
        }
    }

    /// Undoes [`Faults::cordon`]: the pods waiting for a node are scheduled.
    pub fn uncordon(&self) {
        for name in self.nodes.names() {
            self.uncordon_node(name);
        }
    }

    /// Cordons node `name` (`spec.unschedulable`): the scheduler places no new pod there.
    pub fn cordon_node(&self, name: &str) {
        nodes::set_unschedulable(&mut self.state.lock(), name, true);
    }

    /// Uncordons node `name`.
    pub fn uncordon_node(&self, name: &str) {
        nodes::set_unschedulable(&mut self.state.lock(), name, false);
    }

    /// Loses node `name` as a machine that freezes or drops off the network: its kubelet stops
    /// reporting (no Lease renewal, no pod status; it acts on nothing), and its pods' processes
    /// are stopped (SIGSTOP), not killed. The node lifecycle controller does the rest, on its
    /// timers (`SimConfig::node_monitor_grace_period`…). Returns how many pods were frozen.
    pub fn lose_node(&self, name: &str) -> usize {
        self.nodes.set_lost(name, true);
        let frozen = self.node.freeze_pods(|pod| pod.node.get().is_some_and(|n| n == name), true);
        tracing::info!(node = name, pods = frozen, "node lost");
        frozen
    }

    /// Brings node `name` back: its pods' processes resume (SIGCONT), its kubelet reports again
    /// (`Ready=True`, the latest pod status) and carries out what it missed (deletions).
    pub fn restore_node(&self, name: &str) {
        self.node.freeze_pods(|pod| pod.node.get().is_some_and(|n| n == name), false);
        self.nodes.set_lost(name, false);
        tracing::info!(node = name, "node restored");
    }

    /// Hangs pod `namespace/name`: every process of its running containers is stopped
    /// (SIGSTOP) while its kubelet keeps probing it. Whether the pod runs on this kubelet.
    pub fn hang_pod(&self, namespace: &str, name: &str) -> bool {
        self.freeze_pod(namespace, name, true)
    }

    /// Resumes the processes of a pod hung by [`Faults::hang_pod`] (SIGCONT).
    pub fn resume_pod(&self, namespace: &str, name: &str) -> bool {
        self.freeze_pod(namespace, name, false)
    }

    fn freeze_pod(&self, namespace: &str, name: &str, stop: bool) -> bool {
        let uid = self
            .state
            .lock()
            .store
            .get("pods", namespace, name)
            .and_then(|p| p["metadata"]["uid"].as_str().map(str::to_owned));
        let Some(uid) = uid else { return false };
        self.node.freeze_pods(|pod| pod.uid == uid, stop) > 0
    }

    /// Ends every open watch now (clients see the stream end and re-watch).
    pub fn close_watches(&self) {
        self.close_watches.send_modify(|generation| *generation += 1);
    }

    /// Answers the next `n` requests for `resource` (plural name) with `status`: 429 comes with
    /// `Retry-After: 1`, anything else is an internal error with that code. `resource` may name a
    /// subresource (`databaseclusters/status`) to fail only the requests for it.
    pub fn fail_next(&self, resource: &str, n: usize, status: u16) {
        self.pending.lock().failures.insert(resource.to_string(), (n, status));
    }

    /// Withdraws every pending fault and sets the latencies to zero (what already happened stays).
    pub fn clear(&self) {
        *self.pending.lock() = Pending::default();
    }

    /// How many requests were answered with a failure from [`Faults::fail_next`] for `resource`
    /// (as named there) so far.
    pub fn injected_failures(&self, resource: &str) -> u64 {
        self.injected.lock().get(resource).copied().unwrap_or(0)
    }

    /// Answers the next watch of `resource` with a 410 Gone error event.
    pub fn gone_next_watch(&self, resource: &str) {
        self.pending.lock().gone_watches.insert(resource.to_string());
    }

    /// Makes the next `n` Jobs the simulated Job controller finishes fail instead of succeed.
    pub fn fail_next_jobs(&self, n: usize) {
        self.pending.lock().failing_jobs = n;
    }

    /// Delays every request by `d` before it is handled.
    pub fn set_latency(&self, d: Duration) {
        self.pending.lock().latency = d;
    }

    /// Forgets all watch history: a watch from any earlier resourceVersion answers 410.
    pub fn compact_history(&self) {
        let mut state = self.state.lock();
        let current = state.store.resource_version();
        state.store.hub.compact(current);
    }

    pub(crate) fn latency(&self) -> Duration {
        self.pending.lock().latency
    }

    /// Delays every watch event (and bookmark) by `d` before it is sent: the watch lags behind
    /// the writes, as a busy apiserver's does.
    pub fn set_watch_event_latency(&self, d: Duration) {
        self.pending.lock().watch_event_latency = d;
    }

    pub(crate) fn watch_event_latency(&self) -> Duration {
        self.pending.lock().watch_event_latency
    }

    /// The injected status for this request of `resource`, if one is pending (and consumes it).
    pub(crate) fn take_failure(&self, resource: &str) -> Option<u16> {
        let mut pending = self.pending.lock();
        let entry = pending.failures.get_mut(resource)?;
        let status = entry.1;
        entry.0 -= 1;
        if entry.0 == 0 {
            pending.failures.remove(resource);
        }
        drop(pending);
        *self.injected.lock().entry(resource.to_string()).or_default() += 1;
        Some(status)
    }

    /// Whether the Job being finished now must fail (and consumes the fault).
    pub(crate) fn take_job_failure(&self) -> bool {
        let mut pending = self.pending.lock();
        let fail = pending.failing_jobs > 0;
        pending.failing_jobs = pending.failing_jobs.saturating_sub(1);
        fail
    }

    /// Whether this watch of `resource` must answer 410 (and consumes the fault).
    pub(crate) fn take_gone_watch(&self, resource: &str) -> bool {
        self.pending.lock().gone_watches.remove(resource)
    }

    /// A receiver that changes whenever `close_watches` is called.
    pub(crate) fn watch_closer(&self) -> watch::Receiver<u64> {
        self.close_watches.subscribe()
    }
}
