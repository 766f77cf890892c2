//! One pod's life on the process kubelet: images, volumes, init containers in order, then every
//! container supervised at once, its status published after each change; on deletion every
//! container is stopped (grace period, `preStop`) and the pod object removed.
//!
//! Rules:
//! 1. An image with no host program (`images`) leaves the pod `Pending`, that container waiting
//!    `ErrImagePull` with a message naming the image; nothing of the pod runs.
//! 2. Volumes must exist before anything runs: a claim not yet there keeps the pod `Pending`
//!    (containers waiting `ContainerCreating`). A claim still missing or unbound at the second
//!    look makes the pod unschedulable, as the scheduler reports it (`PodScheduled=False`,
//!    reason `Unschedulable`, no IP), until the claim is bound.
//! 3. Init containers run one at a time, in order, each to a zero exit; a failing one is retried
//!    with back-off (its `restartCount` grows), or fails the pod when `restartPolicy` is `Never`.
//! 4. Then every container starts; each is supervised by `container`'s rules.
//! 5. The pod's user: `runAsUser`/`runAsGroup` (the container's over the pod's), `fsGroup` and
//!    `supplementalGroups` as supplementary groups. The `postgres` image run without a user (or
//!    as root) runs as its `postgres` user, uid 999, as the image's entrypoint drops to it.
//! 6. Pods share the host's network, so a pod's loopback is its pod IP: the argument `127.0.0.1`
//!    in a command, its args or an exec probe/hook is that pod's IP (and `localhost` resolves to it).
//! 7. The scheduler (`nodes::scheduler`) binds the pod to a node (`spec.nodeName`). While no node
//!    can take it (every node cordoned, [`crate::sim::Faults::cordon`], tainted, or holding a pod
//!    its required anti-affinity excludes) it is not scheduled: `PodScheduled=False`, reason
//!    `Unschedulable`, with the scheduler's message, no IP and no other condition; nothing of it
//!    runs meanwhile, and it is looked at again after every change in the cluster.
//! 8. While the pod's node is lost ([`crate::sim::Faults::lose_node`]) its kubelet is silent:
//!    no status is written (the latest is written when the node is back), no probe runs and no
//!    container starts.

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::sim::cluster::Cluster;
use crate::sim::controllers::{bind, write_status};
use crate::sim::kubelet::Node;
use crate::sim::kubelet::container::{self, Ending};
use crate::sim::kubelet::env::Sources;
use crate::sim::kubelet::images::{self, Image};
use crate::sim::kubelet::probes::ExecContext;
use crate::sim::kubelet::status::{self, ContainerState, PodModel};
use crate::sim::kubelet::volumes::PodDirs;
use crate::sim::meta;
use crate::sim::nodes::scheduler;
use crate::sim::state::State;
mod setup;

/// The image's user when the spec names none: `postgres` (999) in the `postgres` image.
const POSTGRES_IMAGE_UID: u32 = 999;

/// Where a container writes its termination message when its spec names no path.
const DEFAULT_TERMINATION_PATH: &str = "/dev/termination-log";

/// The `PATH` of the images, after the mapped program's directory.
const BASE_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Secrets and ConfigMaps of one namespace, read from the store.
pub struct StoreSources<'a> {
    /// The state.
    pub state: &'a State,
    /// The pod's namespace.
    pub namespace: &'a str,
}

impl Sources for StoreSources<'_> {
    fn secret(&self, name: &str) -> Option<Value> {
        self.state.store.get("secrets", self.namespace, name).cloned()
    }
    fn config_map(&self, name: &str) -> Option<Value> {
        self.state.store.get("configmaps", self.namespace, name).cloned()
    }
}

/// What the kubelet and the log handler share about one pod.
#[derive(Debug)]
pub struct PodEntry {
    /// The pod's uid.
    pub uid: String,
    /// Its directories.
    pub dirs: PodDirs,
    /// Its status as the kubelet knows it.
    pub model: Mutex<PodModel>,
    /// Cancelled when the pod is being deleted (or the kubelet stops).
    pub stop: CancellationToken,
    /// The grace period of the deletion, in seconds.
    pub grace: AtomicU64,
    /// Cancelled when every container has stopped.
    pub done: CancellationToken,
    /// How to run a command in each container that is running now, by name (`kubectl exec`),
    /// with a token cancelled when that run ends.
    pub running: Mutex<HashMap<String, (ExecContext, CancellationToken)>>,
    /// The node the pod is bound to, once scheduled.
    pub node: std::sync::OnceLock<String>,
    /// Whether a status change waits to be written (its node was lost, rule 8).
    pub stale: std::sync::atomic::AtomicBool,
}

impl PodEntry {
    /// The sandbox inits of the containers running now (`freeze`).
    pub fn inits(&self) -> Vec<i32> {
        self.running.lock().values().map(|(ctx, _)| ctx.init_pid).collect()
    }

    /// Records that container `name` runs as `ctx` (until [`PodEntry::run_ended`]).
    fn run_started(&self, name: &str, ctx: &ExecContext) {
        self.running.lock().insert(name.to_owned(), (ctx.clone(), CancellationToken::new()));
    }

    /// Container `name`'s run has ended: commands exec'd in it are ended too.
    fn run_ended(&self, name: &str) {
        if let Some((_, ended)) = self.running.lock().remove(name) {
            ended.cancel();
        }
    }
}

/// Why a pod's volumes are not there yet (rule 2).
enum VolumesNotReady {
    /// A claim is missing or not bound: what the scheduler would say about the pod.
    Unschedulable { kubelet: String, scheduler: String },
    /// Anything else.
    Other(String),
}

impl From<String> for VolumesNotReady {
    fn from(message: String) -> Self {
        VolumesNotReady::Other(message)
    }
}

impl From<VolumesNotReady> for String {
    fn from(why: VolumesNotReady) -> Self {
        match why {
            VolumesNotReady::Unschedulable { kubelet, .. } | VolumesNotReady::Other(kubelet) => kubelet,
        }
    }
}

/// A pod being run.
pub struct PodWorker {
    /// The cluster (to read Secrets and write status).
    pub cluster: Arc<Cluster>,
    /// The node.
    pub node: Arc<Node>,
    /// The pod as first seen.
    pub pod: Value,
    /// The pod IP.
    pub ip: Ipv4Addr,
    /// Shared with the kubelet's pass and the log handler.
    pub entry: Arc<PodEntry>,
}

fn name_of(v: &Value) -> &str {
    v["metadata"]["name"].as_str().unwrap_or_default()
}

fn ns_of(v: &Value) -> &str {
    v["metadata"]["namespace"].as_str().unwrap_or_default()
}

fn security(pod: &Value, container: &Value, field: &str) -> Option<u64> {
    container["securityContext"][field].as_u64().or_else(|| pod["spec"]["securityContext"][field].as_u64())
}

/// How to run a command in a container while `run` runs (exec probes, hooks, `kubectl exec`).
fn exec_context(run: &container::Run, launch: &container::Launch) -> ExecContext {
    ExecContext { init_pid: run.init_pid, env: launch.env.clone(), identity: launch.sandbox.identity.clone() }
}

impl PodWorker {
    fn namespace(&self) -> &str {
        ns_of(&self.pod)
    }

    fn restart_policy(&self) -> &str {
        self.pod["spec"]["restartPolicy"].as_str().unwrap_or("Always")
    }

    /// Writes the model's status to the pod, if the pod is still this one (rule 8: later, while
    /// its node is lost).
    pub fn publish(&self) {
        if self.entry.node.get().is_some_and(|node| self.cluster.nodes.is_lost(node)) {
            self.entry.stale.store(true, Ordering::Relaxed);
            return;
        }
        let status = self.entry.model.lock().to_status(true);
        let (ns, name, uid) =
            (self.namespace().to_owned(), name_of(&self.pod).to_owned(), self.entry.uid.clone());
        self.cluster.write(|s| {
            let Some(current) = s.store.get("pods", &ns, &name).cloned() else { return };
            if current["metadata"]["uid"] == uid.as_str() {
                write_status(s, "", "pods", &current, status);
            }
        });
    }

    fn update(&self, f: impl FnOnce(&mut PodModel)) {
        {
            let mut model = self.entry.model.lock();
            let (initialized, ready) = (model.initialized, model.ready());
            f(&mut model);
            if model.initialized != initialized {
                model.initialized_time = meta::now();
            }
            if model.ready() != ready {
                model.ready_time = meta::now();
            }
        }
        self.publish();
    }

    /// Rule 7: waits for a node to take the pod and binds it; `false` if the pod is deleted first.
    async fn schedule(&self) -> bool {
        let mut changes = self.cluster.nodes.scheduling();
        loop {
            changes.borrow_and_update();
            match self.cluster.write(|s| self.bind(s)) {
                Some(Ok(node)) => {
                    if self.entry.model.lock().unschedulable.is_some() {
                        self.update(|m| m.set_unschedulable(None, &meta::now()));
                    }
                    let _ = self.entry.node.set(node);
                    return true;
                }
                Some(Err(why)) => {
                    if self.entry.model.lock().unschedulable.as_ref() != Some(&why) {
                        self.update(|m| m.set_unschedulable(Some(why), &meta::now()));
                    }
                }
                None => return false,
            }
            tokio::select! {
                _ = changes.changed() => {}
                _ = self.entry.stop.cancelled() => return false,
            }
        }
    }

    /// Binds the pod to the node the scheduler chooses (or the one it is bound to): that node, or
    /// why none fits; `None` when the pod is gone.
    fn bind(&self, state: &mut State) -> Option<Result<String, String>> {
        let current = state.store.get("pods", self.namespace(), name_of(&self.pod)).cloned()?;
        if current["metadata"]["uid"] != self.entry.uid.as_str() {
            return None;
        }
        if let Some(node) = current["spec"]["nodeName"].as_str() {
            return Some(Ok(node.to_owned()));
        }
        let nodes: Vec<Value> = state.store.list("nodes", None).cloned().collect();
        let placed: Vec<(&Value, &Value)> = state
            .store
            .list("pods", None)
            .filter(|p| !matches!(p["status"]["phase"].as_str(), Some("Succeeded" | "Failed")))
            .filter_map(|p| Some((p, nodes.iter().find(|n| n["metadata"]["name"] == p["spec"]["nodeName"])?)))
            .collect();
        let chosen = scheduler::choose(&current, &nodes, &placed).map(str::to_owned);
        if let Ok(node) = &chosen {
            bind(state, &current, node)?;
        }
        Some(chosen)
    }

    /// Rule 8: waits while the pod's node is lost; `false` if the pod stops first.
    async fn node_reachable(&self) -> bool {
        let reachable = self.cluster.nodes.reachable(self.entry.node.get().cloned());
        tokio::select! {
            () = reachable.wait() => true,
            () = self.entry.stop.cancelled() => false,
        }
    }

    /// Runs the pod until it is deleted and its containers have stopped.
    pub async fn run(&self) {
        if !self.schedule().await || !self.node_reachable().await {
            self.entry.done.cancel();
            self.finish();
            return;
        }
        self.publish();
        let all: Vec<Value> = ["initContainers", "containers"]
            .iter()
            .flat_map(|f| self.pod["spec"][*f].as_array().cloned().unwrap_or_default())
            .collect();
        let mut images = HashMap::new();
        let mut unpullable = false;
        for c in &all {
            let image = c["image"].as_str().unwrap_or_default();
            match images::resolve(image) {
                Some(found) => {
                    images.insert(c["name"].as_str().unwrap_or_default().to_owned(), found);
                }
                None => {
                    unpullable = true;
                    let name = c["name"].clone();
                    let waiting =
                        ContainerState::waiting("ErrImagePull", Some(images::pull_error_message(image)));
                    self.update(|m| {
                        for model in m.init.iter_mut().chain(m.containers.iter_mut()) {
                            if model.name == name.as_str().unwrap_or_default() {
                                model.state = waiting.clone();
                            }
                        }
                    });
                }
            }
        }
        if !unpullable && self.prepare_volumes().await && self.run_init_containers(&images).await {
            let containers = self.pod["spec"]["containers"].as_array().cloned().unwrap_or_default();
            let supervisors = containers.iter().enumerate().map(|(i, c)| self.supervise(i, c, &images));
            futures::future::join_all(supervisors).await;
        }
        self.entry.done.cancel();
        self.entry.stop.cancelled().await;
        self.finish();
    }

    /// Without root: every container waits with `RunContainerError` saying why, until deletion.
    pub async fn refuse_without_root(&self) {
        self.update(|m| m.refuse(status::WITHOUT_ROOT));
        self.entry.done.cancel();
        self.entry.stop.cancelled().await;
        self.finish();
    }

    /// Removes the pod object (when it is still this pod, marked for deletion) and its files.
    fn finish(&self) {
        let (ns, name, uid) =
            (self.namespace().to_owned(), name_of(&self.pod).to_owned(), self.entry.uid.clone());
        self.cluster.write(|s| {
            let Some(current) = s.store.get("pods", &ns, &name) else { return };
            if current["metadata"]["uid"] == uid.as_str()
                && current["metadata"]["deletionTimestamp"].is_string()
                && let Some(kind) = s.registry.get("", "v1", "pods")
            {
                crate::sim::ops::remove(s, &kind, &ns, &name);
            }
        });
        let _ = std::fs::remove_dir_all(&self.entry.dirs.root);
    }

    /// The pod as the kubelet names it in messages: `<name>_<namespace>(<uid>)`.
    fn pod_ref(&self) -> String {
        format!("{}_{}({})", name_of(&self.pod), self.namespace(), self.entry.uid)
    }

    fn hostname(&self) -> String {
        self.pod["spec"]["hostname"].as_str().unwrap_or(name_of(&self.pod)).to_owned()
    }

    fn grace(&self) -> Duration {
        Duration::from_secs(self.entry.grace.load(Ordering::Relaxed))
    }

    /// Waits `delay` unless the pod stops first; `false` when it stopped.
    async fn pause(&self, delay: Duration) -> bool {
        tokio::select! {
            _ = tokio::time::sleep(delay) => true,
            _ = self.entry.stop.cancelled() => false,
        }
    }

    /// Rule 3.
    async fn run_init_containers(&self, images: &HashMap<String, Image>) -> bool {
        let inits = self.pod["spec"]["initContainers"].as_array().cloned().unwrap_or_default();
        for (i, c) in inits.iter().enumerate() {
            let name = c["name"].as_str().unwrap_or_default().to_owned();
            let Some(image) = images.get(&name) else { return false };
            let mut restarts = 0u32;
            loop {
                if self.entry.stop.is_cancelled() || !self.node_reachable().await {
                    return false;
                }
                let (launch, mut run) = match self.start_run(c, image, restarts) {
                    Ok(started) => started,
                    Err(waiting) => {
                        self.update(|m| m.init[i].state = waiting);
                        if !self.pause(container::back_off(restarts + 1)).await {
                            return false;
                        }
                        continue;
                    }
                };
                let started_at = meta::now();
                self.update(|m| m.init[i].state = ContainerState::Running { started_at: started_at.clone() });
                let ctx = exec_context(&run, &launch);
                self.entry.run_started(&name, &ctx);
                let code = tokio::select! {
                    code = run.wait() => code,
                    _ = self.entry.stop.cancelled() => run.stop(self.grace(), None, &ctx).await,
                };
                self.entry.run_ended(&name);
                let ended = run.terminated(&launch, code, &started_at);
                if code == 0 {
                    self.update(|m| {
                        m.init[i].state = ended;
                        m.init[i].ready = true;
                        m.init[i].finished = true;
                        m.initialized = i + 1 == m.init.len();
                    });
                    break;
                }
                if self.entry.stop.is_cancelled() || self.restart_policy() == "Never" {
                    self.update(|m| {
                        m.init[i].state = ended;
                        m.init[i].finished = true;
                    });
                    return false;
                }
                restarts += 1;
                let delay = container::back_off(restarts);
                self.update(|m| {
                    m.init[i].last_state = Some(ended);
                    m.init[i].restart_count = restarts;
                    m.init[i].state = ContainerState::waiting(
                        "CrashLoopBackOff",
                        Some(format!(
                            "back-off {}s restarting failed container={name} pod={}",
                            delay.as_secs(),
                            self.pod_ref()
                        )),
                    );
                });
                if !self.pause(delay).await {
                    return false;
                }
            }
        }
        true
    }

    /// Supervises container `i` (rules of `container`) until it is finished for good.
    async fn supervise(&self, i: usize, c: &Value, images: &HashMap<String, Image>) {
        let name = c["name"].as_str().unwrap_or_default().to_owned();
        let Some(image) = images.get(&name) else { return };
        let policy = self.restart_policy().to_owned();
        let mut restarts = 0u32;
        let mut step = 0u32;
        loop {
            if self.entry.stop.is_cancelled() {
                self.update(|m| m.containers[i].finished = true);
                return;
            }
            if !self.node_reachable().await {
                continue;
            }
            let (launch, mut run) = match self.start_run(c, image, restarts) {
                Ok(started) => started,
                Err(waiting) => {
                    self.update(|m| m.containers[i].state = waiting);
                    step += 1;
                    self.pause(container::back_off(step)).await;
                    continue;
                }
            };
            let started_at = meta::now();
            let began = tokio::time::Instant::now();
            self.update(|m| {
                let model = &mut m.containers[i];
                model.state = ContainerState::Running { started_at: started_at.clone() };
                model.started = false;
                model.ready = false;
            });
            let ctx = exec_context(&run, &launch);
            let on_change = |started: bool, ready: bool| {
                self.update(|m| {
                    m.containers[i].started = started;
                    m.containers[i].ready = ready;
                });
            };
            self.entry.run_started(&name, &ctx);
            let reachable = self.cluster.nodes.reachable(self.entry.node.get().cloned());
            let ending = container::watch_run(
                &mut run,
                &launch,
                &ctx,
                || self.grace(),
                &self.entry.stop,
                &on_change,
                &reachable,
            )
            .await;
            self.entry.run_ended(&name);
            let (code, deleting) = match &ending {
                Ending::Exited(code) => (*code, false),
                Ending::Unhealthy(code, reason) => {
                    tracing::info!(pod = name_of(&self.pod), container = %name, %reason, "container unhealthy; restarting");
                    (*code, false)
                }
                Ending::Terminated(code) => (*code, true),
            };
            let ended = run.terminated(&launch, code, &started_at);
            let restart = !deleting && (policy == "Always" || (policy == "OnFailure" && code != 0));
            if !restart {
                self.update(|m| {
                    let model = &mut m.containers[i];
                    model.state = ended;
                    model.ready = false;
                    model.started = false;
                    model.finished = true;
                });
                return;
            }
            if began.elapsed() >= Duration::from_secs(600) {
                step = 0;
            }
            restarts += 1;
            let delay = container::back_off(step);
            step += 1;
            let pod_ref = self.pod_ref();
            self.update(|m| {
                let model = &mut m.containers[i];
                model.last_state = Some(ended.clone());
                model.restart_count = restarts;
                model.ready = false;
                model.started = false;
                model.state = if delay.is_zero() {
                    ended
                } else {
                    ContainerState::waiting(
                        "CrashLoopBackOff",
                        Some(format!(
                            "back-off {}s restarting failed container={name} pod={pod_ref}",
                            delay.as_secs()
                        )),
                    )
                };
            });
            self.pause(delay).await;
        }
    }
}
