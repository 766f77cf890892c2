//! Simulated controllers, because the simulated cluster has no kube-controller-manager and no
//! kubelet: a kubelet that starts pods after `pod_ready_delay`, the StatefulSet controller, a
//! volume provisioner, binder and expander (with a default StorageClass), and the Job and CronJob
//! controllers. One task runs them: a pass over the
//! state after every change and whenever a timer they asked for is due. All timing is
//! `tokio::time`.

pub mod cron;
pub mod jobs;
pub mod kubelet;
pub mod statefulset;
pub mod volumes;

use std::sync::Arc;

use serde_json::{Value, json};
use tokio::sync::broadcast::error::TryRecvError;
use tokio::time::Instant;

use crate::sim::KubeletKind;
use crate::sim::cluster::Cluster;
use crate::sim::kubelet::ProcessKubelet;
use crate::sim::ops::{self, WriteContext};
use crate::sim::state::State;

/// The field manager of the simulated controllers' writes.
pub const MANAGER: &str = "kube-controller-manager";

/// Whether an object carries a deletionTimestamp.
pub fn is_deleting(obj: &Value) -> bool {
    obj["metadata"]["deletionTimestamp"].is_string()
}

/// Whether an object has a controller ownerReference to `uid`.
pub fn owned_by(obj: &Value, uid: &str) -> bool {
    obj["metadata"]["ownerReferences"]
        .as_array()
        .is_some_and(|refs| refs.iter().any(|r| r["uid"] == uid && r["controller"] == true))
}

/// Creates an object as a controller, then sets its status (a subresource) if given.
pub fn create_with_status(
    state: &mut State,
    group: &str,
    plural: &str,
    namespace: Option<&str>,
    obj: Value,
    status: Option<Value>,
) -> Option<Value> {
    let kind = state.registry.get(group, "v1", plural)?;
    let created = match ops::create(state, &kind, namespace, obj, &WriteContext::update(MANAGER)) {
        Ok(c) => c,
        Err(e) => {
            tracing::debug!(resource = plural, error = %e.message, "simulated controller could not create");
            return None;
        }
    };
    match status {
        Some(status) => {
            let mut with_status = created.clone();
            with_status["status"] = status;
            write(state, &kind, with_status, Some("status"))
        }
        None => Some(created),
    }
}

/// Replaces the status of the stored version of `obj` when it differs.
pub fn write_status(
    state: &mut State,
    group: &str,
    plural: &str,
    obj: &Value,
    status: Value,
) -> Option<Value> {
    if obj["status"] == status {
        return None;
    }
    let kind = state.registry.get(group, "v1", plural)?;
    let mut new = obj.clone();
    new["status"] = status;
    write(state, &kind, new, Some("status"))
}

/// Replaces an object (or its status) unconditionally, as a controller.
pub fn write(
    state: &mut State,
    kind: &crate::sim::resources::Kind,
    mut obj: Value,
    subresource: Option<&str>,
) -> Option<Value> {
    if let Some(m) = obj["metadata"].as_object_mut() {
        m.remove("resourceVersion");
    }
    let ns = obj["metadata"]["namespace"].as_str().map(String::from);
    let name = obj["metadata"]["name"].as_str().unwrap_or_default().to_string();
    match ops::update(state, kind, ns.as_deref(), &name, obj, subresource, &WriteContext::update(MANAGER)) {
        Ok(o) => Some(o),
        Err(e) => {
            tracing::debug!(object = %name, error = %e.message, "simulated controller could not write");
            None
        }
    }
}

/// The simulator's kubelet, as configured.
#[derive(Debug)]
enum Kubelet {
    /// Ready on a timer.
    Timer(kubelet::Kubelet),
    /// Real processes (`sim::kubelet`).
    Process(ProcessKubelet),
}

/// The controllers' memory between passes.
#[derive(Debug)]
struct Controllers {
    kubelet: Kubelet,
    revisions: statefulset::Revisions,
    jobs: jobs::Jobs,
    /// Where provisioned volumes' directories go (the process kubelet's node).
    volumes_dir: std::path::PathBuf,
}

impl Controllers {
    /// One pass of every controller; returns when the next timer is due, if any.
    fn pass(&mut self, state: &mut State, now: Instant) -> Option<Instant> {
        let kubelet_due = match &mut self.kubelet {
            Kubelet::Timer(timer) => timer.pass(state, now),
            Kubelet::Process(process) => {
                process.pass(state);
                None
            }
        };
        statefulset::reconcile_all(state, &mut self.revisions);
        volumes::reconcile_all(state, &self.volumes_dir);
        let jobs_due = self.jobs.pass(state, now);
        [kubelet_due, jobs_due].into_iter().flatten().min()
    }
}

/// Runs the simulated controllers until the server shuts down.
pub async fn run(cluster: Arc<Cluster>) {
    let mut events = cluster.read(|s| s.store.hub.subscribe());
    let mut controllers = Controllers {
        kubelet: match cluster.config.kubelet {
            KubeletKind::Timer => Kubelet::Timer(kubelet::Kubelet::new(cluster.config.pod_ready_delay)),
            KubeletKind::Process => Kubelet::Process(ProcessKubelet::new(cluster.clone())),
        },
        revisions: statefulset::Revisions::default(),
        jobs: jobs::Jobs::new(cluster.clone()),
        volumes_dir: cluster.node.volumes_dir(),
    };
    cluster.write(volumes::install_default_class);
    loop {
        let next = cluster.write(|s| controllers.pass(s, Instant::now()));
        tokio::select! {
            received = events.recv() => {
                if matches!(received, Err(tokio::sync::broadcast::error::RecvError::Closed)) {
                    return;
                }
                // One pass covers every change already published.
                while !matches!(events.try_recv(), Err(TryRecvError::Empty | TryRecvError::Closed)) {}
            }
            _ = tokio::time::sleep_until(next.unwrap_or_else(Instant::now)), if next.is_some() => {}
            _ = cluster.controllers_wake.notified() => {}
            _ = cluster.shutdown.cancelled() => return,
        }
    }
}

/// The condition list entry a controller writes.
pub fn condition(kind: &str, status: bool, reason: &str, message: &str, now: &str) -> Value {
    json!({
        "type": kind,
        "status": if status { "True" } else { "False" },
        "lastProbeTime": now,
        "lastTransitionTime": now,
        "reason": reason,
        "message": message,
    })
}
