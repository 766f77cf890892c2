//! Getting one pod ready to run on the process kubelet: its volumes' directories (rule 2 of
//! `pod`), the user it runs as (rule 5), its bind mounts, and each container's launch.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use super::{
    BASE_PATH, DEFAULT_TERMINATION_PATH, POSTGRES_IMAGE_UID, PodWorker, StoreSources, VolumesNotReady,
    name_of, security,
};
use crate::sim::controllers::volumes as volumes_controller;
use crate::sim::kubelet::container::{self, Launch};
use crate::sim::kubelet::entrypoint;
use crate::sim::kubelet::env::{self};
use crate::sim::kubelet::images::Image;
use crate::sim::kubelet::probes::{self};
use crate::sim::kubelet::sandbox::{Identity, Sandbox, c_path};
use crate::sim::kubelet::sized;
use crate::sim::kubelet::status::ContainerState;
use crate::sim::kubelet::volumes::{self, PlannedBind};
use crate::sim::meta;
use crate::sim::state::State;
/// The scheduler's message for a pod no node can take, for `reason`.
fn no_node_for(state: &State, reason: &str) -> String {
    crate::sim::nodes::scheduler::fit_error(state.store.list("nodes", None).count().max(1), reason)
}

/// Rule 2: the directory of the volume bound to claim `claim` (its PersistentVolume's
/// `hostPath`); what is missing while the claim is absent or unbound.
pub(super) fn claim_volume_dir(
    state: &State,
    namespace: &str,
    claim: &str,
) -> Result<PathBuf, VolumesNotReady> {
    let missing = format!("persistentvolumeclaim \"{claim}\" not found");
    let pvc = state.store.get("persistentvolumeclaims", namespace, claim).ok_or_else(|| {
        VolumesNotReady::Unschedulable { scheduler: no_node_for(state, &missing), kubelet: missing.clone() }
    })?;
    let unbound = || VolumesNotReady::Unschedulable {
        kubelet: format!("persistentvolumeclaim \"{claim}\" is not bound"),
        scheduler: no_node_for(state, "pod has unbound immediate PersistentVolumeClaims"),
    };
    let volume = pvc["spec"]["volumeName"].as_str().filter(|v| !v.is_empty()).ok_or_else(unbound)?;
    let pv = state.store.get("persistentvolumes", "", volume).ok_or_else(unbound)?;
    let path = pv["spec"]["hostPath"]["path"].as_str().map(PathBuf::from);
    Ok(path.ok_or_else(|| format!("persistentvolume \"{volume}\" has no hostPath"))?)
}

/// The capacity in bytes of the volume bound to claim `claim`.
fn claim_capacity(state: &State, namespace: &str, claim: &str) -> Option<u64> {
    let pvc = state.store.get("persistentvolumeclaims", namespace, claim)?;
    let pv = state.store.get("persistentvolumes", "", pvc["spec"]["volumeName"].as_str()?)?;
    volumes_controller::quantity_bytes(&pv["spec"]["capacity"]["storage"])
}

impl PodWorker {
    /// Rule 2: every volume's directory, `None` until they all exist.
    pub(super) fn volume_dirs(&self) -> Result<HashMap<String, (PathBuf, bool)>, VolumesNotReady> {
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
                    if self.cluster.config.sized_volumes {
                        let bytes = self.cluster.read(|s| claim_capacity(s, &ns, claim));
                        sized::mount(
                            &dir,
                            bytes.ok_or_else(|| "a bound volume without a capacity".to_owned())?,
                        )?;
                    }
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

    pub(super) async fn prepare_volumes(&self) -> bool {
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
    pub(super) fn identity(&self, container: &Value, image: &Image) -> Identity {
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
    pub(super) fn plan_binds(
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
    pub(super) fn launch(&self, container: &Value, image: &Image) -> Result<Launch, String> {
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
            defaults.push(("PGDATA".to_owned(), entrypoint::default_pgdata(*major)));
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
    pub(super) fn start_run(
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
}
