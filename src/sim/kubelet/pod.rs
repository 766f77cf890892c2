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
//! 7. A pod created while the node is cordoned ([`crate::sim::Faults::cordon`]) is not
//!    scheduled: `PodScheduled=False`, reason `Unschedulable`, with the scheduler's message, no
//!    IP and no other condition, until the node is uncordoned; nothing of it runs meanwhile.

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::sim::cluster::Cluster;
use crate::sim::controllers::write_status;
use crate::sim::kubelet::container::{self, Ending, Launch};
use crate::sim::kubelet::env::{self, Sources};
use crate::sim::kubelet::images::{self, Image};
use crate::sim::kubelet::probes::{self, ExecContext};
use crate::sim::kubelet::sandbox::{Identity, Sandbox, c_path};
use crate::sim::kubelet::status::{self, ContainerState, PodModel};
use crate::sim::kubelet::volumes::{self, PlannedBind, PodDirs};
use crate::sim::kubelet::{Node, entrypoint};
use crate::sim::meta;
use crate::sim::state::State;

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

/// The scheduler's message for a pod no node can take, for `reason`.
fn no_node_for(reason: &str) -> String {
    format!(
        "0/1 nodes are available: {reason}. preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling."
    )
}

/// Rule 2: the directory of the volume bound to claim `claim` (its PersistentVolume's
/// `hostPath`); what is missing while the claim is absent or unbound.
fn claim_volume_dir(state: &State, namespace: &str, claim: &str) -> Result<PathBuf, VolumesNotReady> {
    let missing = format!("persistentvolumeclaim \"{claim}\" not found");
    let pvc = state.store.get("persistentvolumeclaims", namespace, claim).ok_or_else(|| {
        VolumesNotReady::Unschedulable { scheduler: no_node_for(&missing), kubelet: missing.clone() }
    })?;
    let unbound = || VolumesNotReady::Unschedulable {
        kubelet: format!("persistentvolumeclaim \"{claim}\" is not bound"),
        scheduler: no_node_for("pod has unbound immediate PersistentVolumeClaims"),
    };
    let volume = pvc["spec"]["volumeName"].as_str().filter(|v| !v.is_empty()).ok_or_else(unbound)?;
    let pv = state.store.get("persistentvolumes", "", volume).ok_or_else(unbound)?;
    let path = pv["spec"]["hostPath"]["path"].as_str().map(PathBuf::from);
    Ok(path.ok_or_else(|| format!("persistentvolume \"{volume}\" has no hostPath"))?)
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

impl PodWorker {
    fn namespace(&self) -> &str {
        ns_of(&self.pod)
    }

    fn restart_policy(&self) -> &str {
        self.pod["spec"]["restartPolicy"].as_str().unwrap_or("Always")
    }

    /// Writes the model's status to the pod, if the pod is still this one.
    pub fn publish(&self) {
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

    /// Rule 7: waits for the node to take the pod; `false` if the pod is deleted first.
    async fn schedule(&self) -> bool {
        let mut cordoned = self.cluster.faults.cordoned();
        if !*cordoned.borrow_and_update() {
            return true;
        }
        self.update(|m| m.set_unschedulable(Some(no_node_for("1 node(s) were unschedulable")), &meta::now()));
        tokio::select! {
            _ = cordoned.wait_for(|cordoned| !cordoned) => {}
            _ = self.entry.stop.cancelled() => return false,
        }
        self.update(|m| m.set_unschedulable(None, &meta::now()));
        true
    }

    /// Runs the pod until it is deleted and its containers have stopped.
    pub async fn run(&self) {
        if !self.schedule().await {
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

    /// Rule 2: every volume's directory, `None` until they all exist.
    fn volume_dirs(&self) -> Result<HashMap<String, (PathBuf, bool)>, VolumesNotReady> {
        let fs_group = self.pod["spec"]["securityContext"]["fsGroup"].as_u64().map(|g| g as u32);
        let ns = self.namespace().to_owned();
        // Claims first: the scheduler looks at them before anything is mounted.
        let volumes = self.pod["spec"]["volumes"].as_array().into_iter().flatten();
        let mut claim_dirs = HashMap::new();
        for claim in volumes.filter_map(|v| v["persistentVolumeClaim"]["claimName"].as_str()) {
            claim_dirs.insert(claim, self.cluster.read(|s| claim_volume_dir(s, &ns, claim))?);
        }
        let mut dirs = HashMap::new();
        for volume in self.pod["spec"]["volumes"].as_array().into_iter().flatten() {
            let name = volume["name"].as_str().unwrap_or_default().to_owned();
            let (dir, read_only) = if let Some(claim) = volume["persistentVolumeClaim"]["claimName"].as_str()
            {
                // Invariant: every claim's directory was read above (or the function returned).
                let dir = claim_dirs.get(claim).cloned().expect("every claim's directory was read above");
                if !dir.exists() {
                    // A fresh volume is world-writable, as the hostPath provisioners make them.
                    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
                    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o777))
                        .map_err(|e| e.to_string())?;
                    volumes::apply_fs_group(&dir, fs_group).map_err(|e| e.to_string())?;
                }
                (dir, volume["persistentVolumeClaim"]["readOnly"] == true)
            } else if volume["emptyDir"].is_object() {
                let dir = self.entry.dirs.volume(&name);
                std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
                std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o777))
                    .map_err(|e| e.to_string())?;
                volumes::apply_fs_group(&dir, fs_group).map_err(|e| e.to_string())?;
                (dir, false)
            } else if let Some(path) = volume["hostPath"]["path"].as_str() {
                (PathBuf::from(path), false)
            } else {
                let dir = self.entry.dirs.volume(&name);
                let ip = self.ip.to_string();
                let projected = self.cluster.read(|s| {
                    let sources = StoreSources { state: s, namespace: &ns };
                    volumes::refresh_projection(&dir, volume, &self.pod, &ip, &sources, fs_group)
                })?;
                if !projected {
                    return Err(VolumesNotReady::Other(format!(
                        "volume \"{name}\": the process kubelet supports persistentVolumeClaim, emptyDir, hostPath, configMap, secret and downwardAPI"
                    )));
                }
                (dir, true)
            };
            dirs.insert(name, (dir, read_only));
        }
        Ok(dirs)
    }

    async fn prepare_volumes(&self) -> bool {
        let mut looks = 0u32;
        loop {
            let (message, scheduler) = match self.volume_dirs() {
                Ok(_) => {
                    if self.entry.model.lock().unschedulable.is_some() {
                        self.update(|m| m.set_unschedulable(None, &meta::now()));
                    }
                    return true;
                }
                Err(VolumesNotReady::Unschedulable { kubelet, scheduler }) => (kubelet, Some(scheduler)),
                Err(VolumesNotReady::Other(message)) => (message, None),
            };
            tracing::debug!(pod = name_of(&self.pod), %message, "volumes not ready");
            self.update(|m| {
                for c in m.init.iter_mut().chain(m.containers.iter_mut()) {
                    c.state = ContainerState::waiting("ContainerCreating", Some(message.clone()));
                }
                // A claim binds within a look in the normal course; one that does not leaves
                // the pod where the scheduler would: unscheduled.
                m.set_unschedulable(scheduler.filter(|_| looks > 0), &meta::now());
            });
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                _ = self.entry.stop.cancelled() => return false,
            }
            looks += 1;
        }
    }

    /// The container's user and working directory (rule 5).
    fn identity(&self, container: &Value, image: &Image) -> Identity {
        let pod = &self.pod;
        let postgres = matches!(image, Image::Postgres { .. });
        let mut uid = security(pod, container, "runAsUser").map_or(0, |u| u as u32);
        if postgres && uid == 0 {
            uid = POSTGRES_IMAGE_UID;
        }
        let default_gid = if postgres && uid == POSTGRES_IMAGE_UID { POSTGRES_IMAGE_UID } else { 0 };
        let gid = security(pod, container, "runAsGroup").map_or(default_gid, |g| g as u32);
        let mut groups = vec![gid];
        if let Some(fs) = pod["spec"]["securityContext"]["fsGroup"].as_u64() {
            groups.push(fs as u32);
        }
        for g in pod["spec"]["securityContext"]["supplementalGroups"].as_array().into_iter().flatten() {
            if let Some(g) = g.as_u64() {
                groups.push(g as u32);
            }
        }
        groups.dedup();
        let working_dir = container["workingDir"].as_str().and_then(|d| c_path(Path::new(d)));
        Identity { uid, gid, groups, working_dir }
    }

    /// The binds of one container (the image's files, then the volume mounts).
    fn plan_binds(
        &self,
        container: &Value,
        image: &Image,
        identity: &Identity,
    ) -> Result<Vec<PlannedBind>, String> {
        let io = |e: std::io::Error| e.to_string();
        let read_only_root = container["securityContext"]["readOnlyRootFilesystem"] == true;
        let own = self.entry.dirs.container(container["name"].as_str().unwrap_or_default());
        std::fs::create_dir_all(&own).map_err(io)?;
        let postgres = matches!(image, Image::Postgres { .. });
        let image_users: &[(&str, u32, u32, &str)] = if postgres {
            &[("postgres", POSTGRES_IMAGE_UID, POSTGRES_IMAGE_UID, "/var/lib/postgresql")]
        } else {
            &[]
        };
        let host_passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
        let host_group = std::fs::read_to_string("/etc/group").unwrap_or_default();
        let (passwd, group) =
            volumes::identity_files(&host_passwd, &host_group, image_users, identity.uid, identity.gid);
        std::fs::write(own.join("passwd"), passwd).map_err(io)?;
        std::fs::write(own.join("group"), group).map_err(io)?;
        let owned_dir = |name: &str, mode: u32| -> Result<PathBuf, String> {
            let dir = own.join(name);
            std::fs::create_dir_all(&dir).map_err(io)?;
            std::os::unix::fs::chown(&dir, Some(identity.uid), Some(identity.gid)).map_err(io)?;
            std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(mode)).map_err(io)?;
            Ok(dir)
        };
        let bind = |source: PathBuf, target: &str, read_only: bool, file: bool| PlannedBind {
            source,
            target: PathBuf::from(target),
            read_only,
            file,
        };
        let mut plan = vec![
            bind(self.entry.dirs.hosts(), "/etc/hosts", false, true),
            bind(own.join("passwd"), "/etc/passwd", read_only_root, true),
            bind(own.join("group"), "/etc/group", read_only_root, true),
            bind(owned_dir("tmp", 0o1777)?, "/tmp", read_only_root, false),
        ];
        if postgres {
            plan.push(bind(
                owned_dir("var-lib-postgresql", 0o755)?,
                "/var/lib/postgresql",
                read_only_root,
                false,
            ));
            plan.push(bind(
                owned_dir("var-run-postgresql", 0o2775)?,
                "/var/run/postgresql",
                read_only_root,
                false,
            ));
        }
        let dirs = self.volume_dirs()?;
        for mount in container["volumeMounts"].as_array().into_iter().flatten() {
            let name = mount["name"].as_str().unwrap_or_default();
            let (source, volume_ro) =
                dirs.get(name).cloned().ok_or_else(|| format!("no volume named \"{name}\""))?;
            let target = mount["mountPath"].as_str().unwrap_or_default();
            let source = match mount["subPath"].as_str() {
                Some(sub) if !sub.is_empty() => source.join(sub),
                _ => source,
            };
            plan.push(bind(source, target, volume_ro || mount["readOnly"] == true, false));
        }
        let termination = own.join("termination-log");
        std::fs::write(&termination, b"").map_err(io)?;
        std::os::unix::fs::chown(&termination, Some(identity.uid), Some(identity.gid)).map_err(io)?;
        let path = container["terminationMessagePath"].as_str().unwrap_or(DEFAULT_TERMINATION_PATH);
        plan.push(bind(termination, path, false, true));
        Ok(plan)
    }

    /// Everything to start the next run of `container` (rule 6 for `127.0.0.1`).
    fn launch(&self, container: &Value, image: &Image) -> Result<Launch, String> {
        let ip = self.ip.to_string();
        let ns = self.namespace().to_owned();
        let mut env = self
            .cluster
            .read(|s| env::build(&self.pod, container, &ip, &StoreSources { state: s, namespace: &ns }))
            .map_err(|e| e.0)?;
        let mut defaults = vec![
            (
                "PATH".to_owned(),
                match image.bin_dir() {
                    Some(dir) => format!("{}:{BASE_PATH}", dir.display()),
                    None => BASE_PATH.to_owned(),
                },
            ),
            ("HOSTNAME".to_owned(), self.hostname()),
        ];
        if let Image::Postgres { major, .. } = image {
            defaults.push(("PG_MAJOR".to_owned(), major.to_string()));
            defaults.push(("PGDATA".to_owned(), "/var/lib/postgresql/data".to_owned()));
            defaults.push(("LANG".to_owned(), "C.UTF-8".to_owned()));
        }
        for (k, v) in defaults.into_iter().rev() {
            if !env.iter().any(|(n, _)| *n == k) {
                env.insert(0, (k, v));
            }
        }
        let loopback = |args: Vec<String>| -> Vec<String> {
            args.into_iter().map(|a| if a == "127.0.0.1" { ip.clone() } else { a }).collect()
        };
        let command = loopback(env::expand_all(&container["command"], &env));
        let args = loopback(env::expand_all(&container["args"], &env));
        let (program, args) = match (command.split_first(), image) {
            (Some((program, rest)), _) => (program.clone(), rest.iter().cloned().chain(args).collect()),
            (None, Image::Postgres { .. }) => entrypoint::command(&ip, &args),
            (None, Image::Operator { program }) => (program.display().to_string(), args),
        };
        let identity = self.identity(container, image);
        let plan = self.plan_binds(container, image, &identity)?;
        let binds = volumes::realise(&plan).map_err(|e| e.to_string())?;
        let hostname = std::ffi::CString::new(self.hostname()).map_err(|e| e.to_string())?;
        let sandbox = Arc::new(Sandbox {
            hostname,
            binds,
            read_only_root: container["securityContext"]["readOnlyRootFilesystem"] == true,
            identity,
        });
        let pod_ip = std::net::IpAddr::V4(self.ip);
        let probe = |field: &str| {
            probes::parse(&container[field], container, pod_ip).map(|mut p| {
                if let probes::Action::Exec(cmd) = &mut p.action {
                    *cmd = loopback(cmd.clone());
                }
                p
            })
        };
        let pre_stop = container["lifecycle"]["preStop"]["exec"]["command"]
            .as_array()
            .map(|c| loopback(c.iter().filter_map(Value::as_str).map(str::to_owned).collect()));
        Ok(Launch {
            program,
            args,
            env,
            sandbox,
            startup: probe("startupProbe"),
            readiness: probe("readinessProbe"),
            liveness: probe("livenessProbe"),
            pre_stop,
            termination_file: self
                .entry
                .dirs
                .container(container["name"].as_str().unwrap_or_default())
                .join("termination-log"),
            fallback_to_logs: container["terminationMessagePolicy"] == "FallbackToLogsOnError",
        })
    }

    /// Builds and starts the next run of `c`, its output in `<restarts>.log`; on failure, the
    /// waiting state to report (`CreateContainerConfigError`, `RunContainerError`).
    fn start_run(
        &self,
        c: &Value,
        image: &Image,
        restarts: u32,
    ) -> Result<(Launch, container::Run), ContainerState> {
        let launch = self
            .launch(c, image)
            .map_err(|m| ContainerState::waiting("CreateContainerConfigError", Some(m)))?;
        let log =
            self.entry.dirs.logs(c["name"].as_str().unwrap_or_default()).join(format!("{restarts}.log"));
        let run = container::start(&self.node, &launch, &log)
            .map_err(|e| ContainerState::waiting("RunContainerError", Some(e.to_string())))?;
        Ok((launch, run))
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
                if self.entry.stop.is_cancelled() {
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
                let ctx = ExecContext {
                    init_pid: run.init_pid,
                    env: launch.env.clone(),
                    identity: launch.sandbox.identity.clone(),
                };
                let code = tokio::select! {
                    code = run.wait() => code,
                    _ = self.entry.stop.cancelled() => run.stop(self.grace(), None, &ctx).await,
                };
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
            let ctx = ExecContext {
                init_pid: run.init_pid,
                env: launch.env.clone(),
                identity: launch.sandbox.identity.clone(),
            };
            let on_change = |started: bool, ready: bool| {
                self.update(|m| {
                    m.containers[i].started = started;
                    m.containers[i].ready = ready;
                });
            };
            let ending =
                container::watch_run(&mut run, &launch, &ctx, || self.grace(), &self.entry.stop, &on_change)
                    .await;
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
