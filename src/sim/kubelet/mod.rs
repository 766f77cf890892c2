//! The process kubelet: runs each pod's containers as local processes, so the simulated cluster
//! runs real PostgreSQL. Chosen per simulator with [`KubeletKind::Process`](crate::sim::KubeletKind);
//! the timer kubelet (`controllers::kubelet`) stays for scale.
//!
//! One idea per file: the image table (`images`), loopback addresses (`addresses`), cluster names
//! as hosts files (`hosts`), the kube-proxy stand-in (`proxy`), environment and `$(VAR)`
//! expansion (`env`), volumes and the image's files (`volumes`), the namespaces and user of a
//! container's processes (`sandbox`), the `postgres` image's entrypoint (`entrypoint`), probes
//! (`probes`), one container's runs (`container`), one pod's life (`pod`), the reported status
//! (`status`), `kubectl logs` (`logs`) and `kubectl exec` (`exec`, on a terminal from `pty`).
//!
//! How it fits the simulator: [`ProcessKubelet::pass`] runs with the controllers after every
//! change. It starts a worker task for each new pod, tells a worker when its pod is being deleted
//! (deletion is graceful with this kubelet: the pod keeps a deletionTimestamp until its processes
//! stopped, then the worker removes it), and keeps the hosts files, the Service forwarders and the
//! configMap/secret/downwardAPI volumes in step with the store. Workers write pod status.
//!
//! Needs root (mount and PID namespaces, bind mounts, switching to `runAsUser`; PostgreSQL also
//! refuses to run as root, so without root there is no user to drop to). Without root nothing of
//! a pod runs: the API server, the timer kubelet and every controller work as usual, but each pod
//! given to this kubelet stays `Pending` with every container waiting `RunContainerError`, the
//! message saying that root is needed ([`status::WITHOUT_ROOT`]), until it is deleted (at once:
//! nothing to stop). Names, per-pod `/etc/hosts`, volume mount paths and the no-stray-process
//! guarantee all rest on the namespaces, so there is no partial mode. `demo` falls back to the
//! timer kubelet without root and says so, and refuses `--kubelet process` ([`choice`]).
//!
//! Processes never outlive the simulator: each container's processes live in their own PID
//! namespace whose init dies with the simulator (`sandbox`); dropping the [`Node`] (with the
//! server) SIGKILLs every init, which takes the whole namespace with it.

#![allow(unsafe_code, reason = "libc: geteuid, kill of the processes this node started")]

pub mod addresses;
pub mod choice;
mod container;
mod entrypoint;
mod env;
pub mod exec;
pub mod freeze;
mod hosts;
pub mod images;
pub mod logs;
mod pod;
mod probe_tls;
mod probes;
mod proxy;
mod pty;
mod sandbox;
pub mod sized;
pub mod status;
mod volumes;

use std::collections::{HashMap, HashSet};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::sim::cluster::Cluster;
use crate::sim::controllers::is_deleting;
use crate::sim::controllers::statefulset::is_ready;
use crate::sim::kubelet::hosts::{PodNames, ServiceNames};
use crate::sim::kubelet::pod::{PodEntry, PodWorker, StoreSources};
use crate::sim::kubelet::status::PodModel;
use crate::sim::kubelet::volumes::PodDirs;
use crate::sim::meta;
use crate::sim::state::State;

/// Whether this process may run the process kubelet (it needs root).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// The host side the process kubelet shares with the API handlers: its directory, the running
/// processes, and the pods it runs (for `kubectl logs`).
#[derive(Debug, Default)]
pub struct Node {
    root: OnceLock<PathBuf>,
    processes: Mutex<HashSet<i32>>,
    pods: Mutex<HashMap<String, Arc<PodEntry>>>,
    services: Mutex<Vec<ServiceNames>>,
}

impl Node {
    /// The node's directory (`<tmp>/dbcluster-sim-<pid>-<n>`), without creating it.
    fn path(&self) -> &Path {
        self.root.get_or_init(|| {
            static COUNT: AtomicU64 = AtomicU64::new(0);
            let n = COUNT.fetch_add(1, Ordering::Relaxed);
            std::env::temp_dir().join(format!("dbcluster-sim-{}-{n}", std::process::id()))
        })
    }

    /// The node's directory, created if missing, removed with the node. Creating it first
    /// removes the directories of simulators that died without dropping their node (SIGKILL).
    pub fn root(&self) -> &Path {
        let dir = self.path();
        if !dir.exists() {
            remove_dead_nodes(dir.parent().unwrap_or(Path::new("/tmp")));
            let _ = std::fs::create_dir_all(dir);
            let _ = std::fs::set_permissions(dir, std::os::unix::fs::PermissionsExt::from_mode(0o755));
        }
        dir
    }

    /// Where the provisioner puts bound volumes' directories (`<node>/volumes`; the kubelet
    /// creates one when a pod first mounts it).
    pub fn volumes_dir(&self) -> PathBuf {
        self.path().join("volumes")
    }

    fn remember_process(&self, pid: i32) {
        self.processes.lock().insert(pid);
    }

    fn forget_process(&self, pid: i32) {
        self.processes.lock().remove(&pid);
    }

    /// SIGKILLs every container's init (each takes its PID namespace with it).
    pub fn kill_all(&self) {
        // Only real pids: kill(0, _) and kill(-1, _) would reach far more than this node's children.
        for pid in self.processes.lock().drain().filter(|pid| *pid > 1) {
            // SAFETY: signalling a child this node started and has not reaped.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }

    /// The address `name` resolves to for a pod in `namespace` (cluster DNS names, as in the
    /// pods' hosts files); `None` when no Service or member has that name.
    pub fn resolve(&self, namespace: &str, name: &str) -> Option<Ipv4Addr> {
        let asker = PodNames {
            hostname: String::new(),
            subdomain: None,
            namespace: namespace.to_owned(),
            ip: Ipv4Addr::UNSPECIFIED,
        };
        let file = hosts::render(&asker, &self.services.lock());
        file.lines().skip(2).find_map(|line| {
            let mut fields = line.split_whitespace();
            let ip = fields.next()?.parse().ok()?;
            fields.any(|n| n == name).then_some(ip)
        })
    }

    /// The pod with this uid, if this node runs it.
    pub fn pod(&self, uid: &str) -> Option<Arc<PodEntry>> {
        self.pods.lock().get(uid).cloned()
    }

    /// Stops (`freeze`) or resumes the processes of every pod `which` selects; how many pods.
    pub fn freeze_pods(&self, which: impl Fn(&PodEntry) -> bool, stop: bool) -> usize {
        let entries: Vec<Arc<PodEntry>> = self.pods.lock().values().filter(|e| which(e)).cloned().collect();
        for entry in &entries {
            let inits = entry.inits();
            if stop { freeze::freeze(&inits) } else { freeze::thaw(&inits) }
        }
        entries.len()
    }
}

/// The pid of the simulator that made the node directory called `name` (`dbcluster-sim-<pid>-<n>`).
fn node_owner(name: &str) -> Option<i32> {
    let (pid, n) = name.strip_prefix("dbcluster-sim-")?.split_once('-')?;
    n.parse::<u64>().ok()?;
    pid.parse().ok()
}

/// Removes the node directories in `tmp` whose simulator process is gone.
fn remove_dead_nodes(tmp: &Path) {
    for entry in std::fs::read_dir(tmp).into_iter().flatten().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(node_owner) else { continue };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            sized::unmount_below(&entry.path());
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill_all();
        if let Some(root) = self.root.get() {
            sized::unmount_below(root);
            let _ = std::fs::remove_dir_all(root);
        }
    }
}

/// A pod this kubelet runs, as the pass needs it.
struct Tracked {
    entry: Arc<PodEntry>,
    pod: Value,
    names: PodNames,
}

/// The process kubelet's pass over the store (see the module doc).
pub struct ProcessKubelet {
    cluster: Arc<Cluster>,
    pods: HashMap<String, Tracked>,
    proxies: proxy::Proxies,
}

impl std::fmt::Debug for ProcessKubelet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcessKubelet").field("pods", &self.pods.len()).finish()
    }
}

fn grace_of(pod: &Value) -> u64 {
    pod["metadata"]["deletionGracePeriodSeconds"]
        .as_u64()
        .or_else(|| pod["spec"]["terminationGracePeriodSeconds"].as_u64())
        .unwrap_or(30)
}

impl ProcessKubelet {
    /// A kubelet for `cluster`.
    pub fn new(cluster: Arc<Cluster>) -> Self {
        let shutdown = cluster.shutdown.clone();
        Self { cluster, pods: HashMap::new(), proxies: proxy::Proxies::new(shutdown) }
    }

    /// Starts new pods, stops deleted ones, refreshes names, forwarders and projected volumes.
    pub fn pass(&mut self, state: &mut State) {
        let pods: Vec<Value> = state.store.list("pods", None).cloned().collect();
        let mut seen = HashSet::new();
        for pod in &pods {
            let uid = pod["metadata"]["uid"].as_str().unwrap_or_default().to_owned();
            seen.insert(uid.clone());
            if let Some(tracked) = self.pods.get_mut(&uid) {
                tracked.pod = pod.clone();
                if tracked.entry.node.get().is_some_and(|node| self.cluster.nodes.is_lost(node)) {
                    // A lost node's kubelet learns of nothing (rule 8 of `pod`).
                    continue;
                }
                if tracked.entry.stale.swap(false, Ordering::Relaxed) {
                    let status = tracked.entry.model.lock().to_status(true);
                    crate::sim::controllers::write_status(state, "", "pods", pod, status);
                }
                if is_deleting(pod) && !tracked.entry.stop.is_cancelled() {
                    tracked.entry.grace.store(grace_of(pod), Ordering::Relaxed);
                    tracked.entry.stop.cancel();
                }
                continue;
            }
            if is_deleting(pod) {
                let (ns, name) = (
                    pod["metadata"]["namespace"].as_str().unwrap_or_default(),
                    pod["metadata"]["name"].as_str().unwrap_or_default(),
                );
                if let Some(kind) = state.registry.get("", "v1", "pods") {
                    crate::sim::ops::remove(state, &kind, ns, name);
                }
                continue;
            }
            if matches!(pod["status"]["phase"].as_str(), Some("Succeeded" | "Failed")) {
                continue;
            }
            self.start(pod, uid);
        }
        let lost = |t: &Tracked| t.entry.node.get().is_some_and(|node| self.cluster.nodes.is_lost(node));
        let gone: Vec<String> = self
            .pods
            .iter()
            .filter(|(uid, t)| !seen.contains(*uid) && !lost(t))
            .map(|(uid, _)| uid.clone())
            .collect();
        for uid in gone {
            if let Some(tracked) = self.pods.remove(&uid) {
                tracked.entry.stop.cancel();
            }
        }
        let cluster_ips = self.proxies.sync(state, &pods);
        let services = service_names(state, &pods, &cluster_ips);
        self.cluster.node.services.lock().clone_from(&services);
        self.cluster.nodes.poke();
        for tracked in self.pods.values() {
            if tracked.entry.done.is_cancelled() || lost(tracked) {
                continue;
            }
            let content = hosts::render(&tracked.names, &services);
            if let Err(e) = hosts::write_in_place(&tracked.entry.dirs.hosts(), &content) {
                tracing::debug!(error = %e, "could not rewrite a pod's hosts file");
            }
            refresh_projections(state, &tracked.pod, &tracked.entry, &tracked.names.ip.to_string());
        }
    }

    fn start(&mut self, pod: &Value, uid: String) {
        let lease = match addresses::allocate(addresses::Range::Pods) {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(error = %e, "no pod address left");
                return;
            }
        };
        let node = self.cluster.node.clone();
        let dirs = PodDirs { root: node.root().join("pods").join(&uid) };
        let names = PodNames {
            hostname: pod["spec"]["hostname"]
                .as_str()
                .or(pod["metadata"]["name"].as_str())
                .unwrap_or_default()
                .to_owned(),
            subdomain: pod["spec"]["subdomain"].as_str().map(str::to_owned),
            namespace: pod["metadata"]["namespace"].as_str().unwrap_or_default().to_owned(),
            ip: lease.ip,
        };
        if let Err(e) = std::fs::create_dir_all(&dirs.root)
            .and_then(|()| hosts::write_in_place(&dirs.hosts(), &hosts::render(&names, &[])))
        {
            tracing::warn!(error = %e, "could not create a pod's directory");
            return;
        }
        let entry = Arc::new(PodEntry {
            uid: uid.clone(),
            dirs,
            model: Mutex::new(PodModel::new(pod, lease.ip.to_string(), &meta::now())),
            stop: self.cluster.shutdown.child_token(),
            grace: AtomicU64::new(grace_of(pod)),
            done: CancellationToken::new(),
            running: Mutex::new(HashMap::new()),
            node: OnceLock::new(),
            stale: Default::default(),
        });
        node.pods.lock().insert(uid.clone(), entry.clone());
        let worker = PodWorker {
            cluster: self.cluster.clone(),
            node: node.clone(),
            pod: pod.clone(),
            ip: lease.ip,
            entry: entry.clone(),
        };
        let key = uid.clone();
        tokio::spawn(async move {
            if is_root() {
                worker.run().await;
            } else {
                worker.refuse_without_root().await;
            }
            node.pods.lock().remove(&key);
            drop(lease);
        });
        self.pods.insert(uid, Tracked { entry, pod: pod.clone(), names });
    }
}

fn refresh_projections(state: &State, pod: &Value, entry: &PodEntry, ip: &str) {
    let ns = pod["metadata"]["namespace"].as_str().unwrap_or_default();
    let fs_group = pod["spec"]["securityContext"]["fsGroup"].as_u64().map(|g| g as u32);
    let sources = StoreSources { state, namespace: ns };
    for volume in pod["spec"]["volumes"].as_array().into_iter().flatten() {
        if volume["configMap"].is_object()
            || volume["secret"].is_object()
            || volume["downwardAPI"].is_object()
        {
            let dir = entry.dirs.volume(volume["name"].as_str().unwrap_or_default());
            if dir.exists() {
                let _ = volumes::refresh_projection(&dir, volume, pod, ip, &sources, fs_group);
            }
        }
    }
}

/// Whether `pod` is selected by `service` (same namespace, every selector label).
pub fn selects(service: &Value, pod: &Value) -> bool {
    let Some(selector) = service["spec"]["selector"].as_object() else { return false };
    !selector.is_empty()
        && service["metadata"]["namespace"] == pod["metadata"]["namespace"]
        && selector.iter().all(|(k, v)| pod["metadata"]["labels"][k] == *v)
}

/// The pod IPs behind a Service: ready pods (any running pod with `publishNotReadyAddresses`)
/// with an address from this kubelet.
pub fn endpoints<'a>(
    service: &'a Value,
    pods: &'a [Value],
) -> impl Iterator<Item = (&'a Value, Ipv4Addr)> + 'a {
    let unready_too = service["spec"]["publishNotReadyAddresses"] == true;
    pods.iter()
        .filter(move |p| selects(service, p) && !is_deleting(p) && (unready_too || is_ready(p)))
        .filter_map(|p| Some((p, p["status"]["podIP"].as_str()?.parse::<Ipv4Addr>().ok()?)))
}

fn service_names(
    state: &State,
    pods: &[Value],
    cluster_ips: &HashMap<String, Ipv4Addr>,
) -> Vec<ServiceNames> {
    state
        .store
        .list("services", None)
        .map(|svc| {
            let name = svc["metadata"]["name"].as_str().unwrap_or_default().to_owned();
            let uid = svc["metadata"]["uid"].as_str().unwrap_or_default();
            let headless = svc["spec"]["clusterIP"] == "None";
            let members = endpoints(svc, pods)
                .filter(|_| headless)
                .filter_map(|(p, ip)| {
                    let hostname = p["spec"]["hostname"].as_str().or(p["metadata"]["name"].as_str())?;
                    Some((hostname.to_owned(), ip))
                })
                .collect();
            ServiceNames {
                namespace: svc["metadata"]["namespace"].as_str().unwrap_or_default().to_owned(),
                cluster_ip: cluster_ips.get(uid).copied(),
                members,
                name,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_directories_name_their_simulator() {
        assert_eq!(node_owner("dbcluster-sim-4242-0"), Some(4242));
        assert_eq!(node_owner("dbcluster-sim-4242-x"), None);
        assert_eq!(node_owner("dbcluster-simple"), None);
        assert_eq!(node_owner("other-4242-0"), None);
    }
}
