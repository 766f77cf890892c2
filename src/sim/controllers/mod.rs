//! Simulated controllers, because the simulated cluster has no kube-controller-manager and no
//! kubelet: a kubelet that starts pods after `pod_ready_delay`, the StatefulSet controller, a
//! volume provisioner, binder and expander (with a default StorageClass; a grown claim's volume grows
//! `volume_expand_delay` later and its filesystem as long again after that), and the Job and CronJob controllers. One task runs them, reacting to each change event: a StatefulSet is reconciled
//! when it or one of its pods changed, a claim when it changed, a volume when it or its claim
//! did, the Jobs and CronJobs when one of them (or a Job's pod) did; and whenever a timer they
//! asked for is due. So the work per change does not grow with the number of objects stored, and
//! the state lock is held for a bounded batch of work at a time. All timing is `tokio::time`.

pub mod cron;
pub mod cronjobs;
pub mod jobs;
pub mod kubelet;
pub mod statefulset;
pub mod volumes;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde_json::Value;
use tokio::sync::mpsc::error::TryRecvError;
use tokio::time::Instant;

use crate::sim::KubeletKind;
use crate::sim::cluster::Cluster;
use crate::sim::kubelet::ProcessKubelet;
use crate::sim::ops::{self, WriteContext};
use crate::sim::state::State;
use crate::sim::store::{ObjectName, object_name};
use crate::sim::watch::{Event, EventType};

/// The field manager of the simulated controllers' writes.
pub const MANAGER: &str = "kube-controller-manager";

/// Whether an object carries a deletionTimestamp.
pub fn is_deleting(obj: &Value) -> bool {
    obj["metadata"]["deletionTimestamp"].is_string()
}

/// The name of an object's controller, if that is of kind `kind`.
pub fn controller_of<'a>(obj: &'a Value, kind: &str) -> Option<&'a str> {
    obj["metadata"]["ownerReferences"]
        .as_array()?
        .iter()
        .find(|r| r["controller"] == true && r["kind"] == kind)?["name"]
        .as_str()
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
    let created = match ops::create(state, &kind, namespace, obj, &WriteContext::controller(MANAGER)) {
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

/// The timer kubelet's one node, as the pods bound to it name it (`spec.nodeName`).
pub const NODE_NAME: &str = "sim-node";

/// Binds `pod` to `node` as the scheduler's `pods/binding` does: `spec.nodeName` set once,
/// before the pod runs. Returns the pod as stored after (unchanged when already bound, or `None`
/// when the write failed, e.g. the pod is gone).
pub fn bind(state: &mut State, pod: &Value, node: &str) -> Option<Value> {
    if pod["spec"]["nodeName"].is_string() {
        return Some(pod.clone());
    }
    let kind = state.registry.get("", "v1", "pods")?;
    let mut bound = pod.clone();
    bound["spec"]["nodeName"] = Value::String(node.to_owned());
    write(state, &kind, bound, None)
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
    match ops::update(state, kind, ns.as_deref(), &name, obj, subresource, &WriteContext::controller(MANAGER))
    {
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

/// How many StatefulSets, claims or volumes one pass reconciles at most, so that the state lock
/// is held briefly; the rest wait for the next pass, which follows at once.
const RECONCILES_PER_PASS: usize = 64;

/// What changed since the controllers last looked.
#[derive(Debug, Default)]
struct Changes {
    /// StatefulSets that changed or whose pods did.
    statefulsets: BTreeSet<ObjectName>,
    /// Claims that changed.
    claims: BTreeSet<ObjectName>,
    /// Volumes that changed or whose claims were deleted.
    volumes: BTreeSet<String>,
    /// Whether a StorageClass changed (every unbound claim may now bind).
    classes: bool,
    /// Whether a Job, a CronJob or a Job's pod changed, or the clock moved.
    jobs: bool,
}

/// Takes the first `n` names out of a set.
fn take_first<T: Ord>(set: &mut BTreeSet<T>, n: usize) -> Vec<T> {
    let mut taken = Vec::new();
    while taken.len() < n
        && let Some(name) = set.pop_first()
    {
        taken.push(name);
    }
    taken
}

/// The controllers' memory between passes.
#[derive(Debug)]
struct Controllers {
    kubelet: Kubelet,
    revisions: statefulset::Revisions,
    jobs: jobs::Jobs,
    /// Where provisioned volumes' directories go (the process kubelet's node).
    volumes_dir: std::path::PathBuf,
    changes: Changes,
    /// When the Job and CronJob controllers asked to run next.
    jobs_due: Option<Instant>,
    /// How long a grown claim waits for its expansion (`SimConfig::volume_expand_delay`).
    expand_delay: std::time::Duration,
    /// The grown claims waiting for their expansion, and when it is due.
    expansions: BTreeMap<ObjectName, Instant>,
}

impl Controllers {
    /// Notes what a change calls for.
    fn observe(&mut self, event: &Event, now: Instant) {
        if let Kubelet::Timer(timer) = &mut self.kubelet {
            timer.observe(event, now);
        }
        let gone = event.event_type == EventType::Deleted;
        let changes = &mut self.changes;
        match event.key.as_str() {
            "statefulsets.apps" if !gone => {
                changes.statefulsets.insert(object_name(&event.object));
            }
            "pods" => {
                if let Some(owner) = controller_of(&event.object, "StatefulSet") {
                    changes.statefulsets.insert((event.namespace.clone(), owner.to_string()));
                }
                changes.jobs |= controller_of(&event.object, "Job").is_some();
            }
            "persistentvolumeclaims" if gone => {
                if let Some(volume) = event.object["spec"]["volumeName"].as_str() {
                    changes.volumes.insert(volume.to_string());
                }
            }
            "persistentvolumeclaims" => {
                changes.claims.insert(object_name(&event.object));
            }
            "persistentvolumes" if !gone => {
                changes.volumes.insert(object_name(&event.object).1);
            }
            "storageclasses.storage.k8s.io" => changes.classes = true,
            "jobs.batch" | "cronjobs.batch" => changes.jobs = true,
            _ => {}
        }
    }

    /// Marks everything stored as changed (at start).
    fn resync(&mut self, state: &State, now: Instant) {
        if let Kubelet::Timer(timer) = &mut self.kubelet {
            timer.resync(state, now);
        }
        let changes = &mut self.changes;
        changes.statefulsets.extend(state.store.list("statefulsets.apps", None).map(object_name));
        changes.claims.extend(state.store.list("persistentvolumeclaims", None).map(object_name));
        changes.volumes.extend(state.store.list("persistentvolumes", None).map(|v| object_name(v).1));
        changes.jobs = true;
    }

    /// One bounded pass of every controller; returns when the next timer is due, if any (now,
    /// when changes are left for the next pass).
    fn pass(&mut self, state: &mut State, now: Instant) -> Option<Instant> {
        let kubelet_due = match &mut self.kubelet {
            Kubelet::Timer(timer) => timer.pass(state, now),
            Kubelet::Process(process) => {
                process.pass(state);
                None
            }
        };
        if std::mem::take(&mut self.changes.classes) {
            let unbound = state
                .store
                .list("persistentvolumeclaims", None)
                .filter(|c| c["spec"]["volumeName"].as_str().is_none_or(str::is_empty))
                .map(object_name);
            self.changes.claims.extend(unbound);
        }
        for name in take_first(&mut self.changes.statefulsets, RECONCILES_PER_PASS) {
            statefulset::reconcile_named(state, &mut self.revisions, &name);
        }
        for name in take_first(&mut self.changes.claims, RECONCILES_PER_PASS) {
            if volumes::reconcile_claim(state, &self.volumes_dir, &name) {
                self.expansions.entry(name).or_insert(now + self.expand_delay);
            }
        }
        let due: Vec<ObjectName> =
            self.expansions.iter().filter(|(_, due)| **due <= now).map(|(name, _)| name.clone()).collect();
        for name in due {
            self.expansions.remove(&name);
            if volumes::expand_claim(state, &name) {
                self.expansions.insert(name, now + self.expand_delay);
            }
        }
        for name in take_first(&mut self.changes.volumes, RECONCILES_PER_PASS) {
            volumes::reconcile_volume(state, &name);
        }
        if std::mem::take(&mut self.changes.jobs) || self.jobs_due.is_some_and(|due| due <= now) {
            self.jobs_due = self.jobs.pass(state, now);
        }
        let changes = &self.changes;
        let left =
            !changes.statefulsets.is_empty() || !changes.claims.is_empty() || !changes.volumes.is_empty();
        let expansion_due = self.expansions.values().min().copied();
        [kubelet_due, self.jobs_due, expansion_due, left.then_some(now)].into_iter().flatten().min()
    }
}

/// Runs the simulated controllers until the server shuts down.
pub async fn run(cluster: Arc<Cluster>) {
    let mut events = cluster.write(|s| s.store.hub.tap());
    let mut controllers = Controllers {
        kubelet: match cluster.config.kubelet {
            KubeletKind::Timer => Kubelet::Timer(kubelet::Kubelet::new(cluster.config.pod_ready_delay)),
            KubeletKind::Process => Kubelet::Process(ProcessKubelet::new(cluster.clone())),
        },
        revisions: statefulset::Revisions::default(),
        jobs: jobs::Jobs::new(cluster.clone()),
        volumes_dir: cluster.node.volumes_dir(),
        changes: Changes::default(),
        jobs_due: None,
        expand_delay: cluster.config.volume_expand_delay,
        expansions: BTreeMap::new(),
    };
    cluster.write(volumes::install_default_class);
    cluster.read(|s| controllers.resync(s, Instant::now()));
    loop {
        loop {
            match events.try_recv() {
                Ok(event) => controllers.observe(&event, Instant::now()),
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => return,
            }
        }
        let next = cluster.write(|s| controllers.pass(s, Instant::now()));
        if next.is_some_and(|due| due <= Instant::now()) {
            // More work now: let the request handlers have the lock first.
            tokio::task::yield_now().await;
            continue;
        }
        tokio::select! {
            received = events.recv() => match received {
                Some(event) => controllers.observe(&event, Instant::now()),
                None => return,
            },
            _ = tokio::time::sleep_until(next.unwrap_or_else(Instant::now)), if next.is_some() => {}
            _ = cluster.controllers_wake.notified() => controllers.changes.jobs = true,
            _ = cluster.shutdown.cancelled() => return,
        }
    }
}
