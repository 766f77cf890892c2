//! Volumes as host directories, and the binds that show them (and the image's own files) inside
//! a container's mount namespace.
//!
//! - `persistentVolumeClaim`: the `hostPath` of the PersistentVolume bound to the claim
//!   (`<node>/volumes/pvc-<claim uid>`, made by the simulator's provisioner,
//!   `controllers::volumes`), which outlives the pod (a replacement pod finds its data) and goes
//!   with the volume as its reclaim policy says.
//! - `emptyDir`: `<pod>/volumes/<name>`, removed with the pod.
//! - `configMap`, `secret`, `downwardAPI`: `<pod>/volumes/<name>` holding one file per key (or per
//!   `items` entry) with `defaultMode`/`mode`, rewritten when the source changes; mounted read-only.
//! - `fsGroup`: a volume's root directory belongs to the group, group-writable and setgid, as a
//!   freshly provisioned volume is after the kubelet applied `fsGroup` (files already inside keep
//!   their owner: PostgreSQL insists on owning `PGDATA` with mode 0700/0750).
//!
//! The image's filesystem: every container gets its own `/tmp`, `/etc/hosts` (cluster names),
//! `/etc/passwd` and `/etc/group` (the image's users: `postgres` is uid 999 in the `postgres`
//! image, and an unknown `runAsUser` gets an entry as container runtimes give it), and for a
//! `postgres` image its own `/var/lib/postgresql` and `/var/run/postgresql` (the socket directory).
//! Mount points a volume needs are created in whichever of these directories holds them, or on the
//! host when none does (an empty directory, as a container runtime creates mount points).
//!
//! `readOnlyRootFilesystem`: the container's `/` mount and the image directories above are
//! read-only (writes fail with `EROFS`), volumes keep their own mode. Without it, a write outside
//! the volumes and image directories reaches the host's filesystem (as the container's user).

use std::os::unix::fs::{PermissionsExt, chown};
use std::path::{Component, Path, PathBuf};

use serde_json::Value;

use crate::sim::kubelet::env::{self, Sources};
use crate::sim::kubelet::sandbox::Bind;

/// Where one pod's files live on the host.
#[derive(Debug, Clone)]
pub struct PodDirs {
    /// `<node>/pods/<uid>`.
    pub root: PathBuf,
}

impl PodDirs {
    /// A volume's directory (emptyDir and projections).
    pub fn volume(&self, name: &str) -> PathBuf {
        self.root.join("volumes").join(name)
    }

    /// A container's own image directories.
    pub fn container(&self, name: &str) -> PathBuf {
        self.root.join("containers").join(name)
    }

    /// The pod's hosts file.
    pub fn hosts(&self) -> PathBuf {
        self.root.join("hosts")
    }

    /// A container's log directory (one file per run).
    pub fn logs(&self, container: &str) -> PathBuf {
        self.root.join("logs").join(container)
    }
}

/// `fsGroup` on a volume's root: group-owned, group-writable, setgid.
pub fn apply_fs_group(dir: &Path, fs_group: Option<u32>) -> std::io::Result<()> {
    if let Some(gid) = fs_group {
        chown(dir, None, Some(gid))?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o2775))?;
    }
    Ok(())
}

fn write_if_changed(path: &Path, bytes: &[u8], mode: u32, fs_group: Option<u32>) -> std::io::Result<()> {
    if std::fs::read(path).is_ok_and(|old| old == bytes) {
        return Ok(());
    }
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let staged = path.with_extension("kubelet-new");
    std::fs::write(&staged, bytes)?;
    std::fs::set_permissions(&staged, std::fs::Permissions::from_mode(mode))?;
    if let Some(gid) = fs_group {
        chown(&staged, None, Some(gid))?;
    }
    std::fs::rename(&staged, path)
}

/// A relative path from the API (`items[].path`) that stays inside its volume.
fn inside(dir: &Path, relative: &str) -> Option<PathBuf> {
    let path = Path::new(relative);
    path.components().all(|c| matches!(c, Component::Normal(_))).then(|| dir.join(path))
}

/// Writes the files of a `configMap`, `secret` or `downwardAPI` volume; `false` when the
/// volume is of another type. A missing (non-optional) source is an error, as for a real kubelet.
pub fn refresh_projection(
    dir: &Path,
    volume: &Value,
    pod: &Value,
    pod_ip: &str,
    sources: &dyn Sources,
    fs_group: Option<u32>,
) -> Result<bool, String> {
    let (source, object, is_secret) = if volume["configMap"].is_object() {
        let name = volume["configMap"]["name"].as_str().unwrap_or_default();
        (
            &volume["configMap"],
            sources.config_map(name).ok_or(format!("configmap \"{name}\" not found")),
            false,
        )
    } else if volume["secret"].is_object() {
        let name = volume["secret"]["secretName"].as_str().unwrap_or_default();
        (&volume["secret"], sources.secret(name).ok_or(format!("secret \"{name}\" not found")), true)
    } else if volume["downwardAPI"].is_object() {
        let source = &volume["downwardAPI"];
        let mode = source["defaultMode"].as_u64().unwrap_or(0o644) as u32;
        std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
        for item in source["items"].as_array().into_iter().flatten() {
            let Some(path) = item["path"].as_str().and_then(|p| inside(dir, p)) else { continue };
            let field = item["fieldRef"]["fieldPath"].as_str().unwrap_or_default();
            let value = env::field_value(pod, field, pod_ip).unwrap_or_default();
            let mode = item["mode"].as_u64().map_or(mode, |m| m as u32);
            write_if_changed(&path, value.as_bytes(), mode, fs_group).map_err(|e| e.to_string())?;
        }
        return Ok(true);
    } else {
        return Ok(false);
    };
    std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    let object = match object {
        Ok(o) => o,
        Err(_) if source["optional"] == true => return Ok(true),
        Err(e) => return Err(e),
    };
    let mode = source["defaultMode"].as_u64().unwrap_or(0o644) as u32;
    let entries = env::object_entries(&object, is_secret);
    let items = source["items"].as_array();
    for (key, bytes) in &entries {
        let targets: Vec<(String, u32)> = match items {
            None => vec![(key.clone(), mode)],
            Some(items) => items
                .iter()
                .filter(|i| i["key"] == key.as_str())
                .map(|i| {
                    (
                        i["path"].as_str().unwrap_or(key).to_owned(),
                        i["mode"].as_u64().map_or(mode, |m| m as u32),
                    )
                })
                .collect(),
        };
        for (relative, mode) in targets {
            let Some(path) = inside(dir, &relative) else { continue };
            write_if_changed(&path, bytes, mode, fs_group).map_err(|e| e.to_string())?;
        }
    }
    Ok(true)
}

/// Where `target` (a path in the container) is on the host, through the binds made so far.
pub fn host_path(target: &Path, binds: &[(PathBuf, PathBuf)]) -> PathBuf {
    for (source, bound) in binds.iter().rev() {
        if let Ok(rest) = target.strip_prefix(bound) {
            return source.join(rest);
        }
    }
    target.to_path_buf()
}

/// One bind to make, before it is turned into C strings.
#[derive(Debug, Clone)]
pub struct PlannedBind {
    /// The host path.
    pub source: PathBuf,
    /// The container path.
    pub target: PathBuf,
    /// Read-only.
    pub read_only: bool,
    /// Whether the source is a file (its mount point is created as a file).
    pub file: bool,
}

/// Creates the mount points of `plan` (inside earlier binds' sources when they hold them) and
/// returns the binds.
pub fn realise(plan: &[PlannedBind]) -> std::io::Result<Vec<Bind>> {
    let mut made: Vec<(PathBuf, PathBuf)> = Vec::new();
    let mut binds = Vec::new();
    for step in plan {
        let point = host_path(&step.target, &made);
        if step.file {
            if !point.exists() {
                if let Some(parent) = point.parent() {
                    std::fs::create_dir_all(parent)?;
                }
                std::fs::write(&point, b"")?;
            }
        } else {
            std::fs::create_dir_all(&point)?;
        }
        made.push((step.source.clone(), step.target.clone()));
        let bind = Bind::new(&step.source, &step.target, step.read_only)
            .ok_or_else(|| std::io::Error::other(format!("a NUL byte in {}", step.target.display())))?;
        binds.push(bind);
    }
    Ok(binds)
}

/// The `/etc/passwd` and `/etc/group` a container of `image_users` sees: the host's, with the
/// image's users (name, uid, gid, home) replacing same-named host entries, and an entry for
/// `uid`/`gid` when neither has one.
pub fn identity_files(
    host_passwd: &str,
    host_group: &str,
    image_users: &[(&str, u32, u32, &str)],
    uid: u32,
    gid: u32,
) -> (String, String) {
    let field = |line: &str, i: usize| line.split(':').nth(i).map(str::to_owned).unwrap_or_default();
    let replaced = |line: &str| image_users.iter().any(|(name, ..)| field(line, 0) == *name);
    let mut passwd: Vec<String> = host_passwd.lines().filter(|l| !replaced(l)).map(str::to_owned).collect();
    let mut group: Vec<String> = host_group.lines().filter(|l| !replaced(l)).map(str::to_owned).collect();
    for (name, u, g, home) in image_users {
        passwd.push(format!("{name}:x:{u}:{g}:{name}:{home}:/bin/bash"));
        group.push(format!("{name}:x:{g}:"));
    }
    if !passwd.iter().any(|l| field(l, 2) == uid.to_string()) {
        passwd.push(format!("uid{uid}:x:{uid}:{gid}::/tmp:/bin/sh"));
    }
    if !group.iter().any(|l| field(l, 2) == gid.to_string()) {
        group.push(format!("gid{gid}:x:{gid}:"));
    }
    (passwd.join("\n") + "\n", group.join("\n") + "\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    struct Cfg(Value);
    impl Sources for Cfg {
        fn secret(&self, _: &str) -> Option<Value> {
            None
        }
        fn config_map(&self, name: &str) -> Option<Value> {
            (name == "cfg").then(|| self.0.clone())
        }
    }

    #[test]
    fn config_map_volumes_follow_their_source() {
        use std::os::unix::fs::PermissionsExt;
        // Inside a directory of its own, so that the escape check below looks where nothing else
        // can have put an `x`.
        let outer = tempfile::tempdir().unwrap();
        let dir = tempfile::tempdir_in(outer.path()).unwrap();
        let volume = json!({"name": "c", "configMap": {"name": "cfg", "defaultMode": 0o640, "items": [{"key": "a", "path": "sub/a.conf"}]}});
        let pod = json!({});
        let first = Cfg(json!({"data": {"a": "one", "b": "ignored"}}));
        assert!(refresh_projection(dir.path(), &volume, &pod, "", &first, None).unwrap());
        let file = dir.path().join("sub/a.conf");
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "one");
        assert_eq!(std::fs::metadata(&file).unwrap().permissions().mode() & 0o777, 0o640);
        assert!(!dir.path().join("b").exists());
        let second = Cfg(json!({"data": {"a": "two"}}));
        refresh_projection(dir.path(), &volume, &pod, "", &second, None).unwrap();
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "two");
        let missing = json!({"name": "m", "configMap": {"name": "nope"}});
        assert_eq!(
            refresh_projection(dir.path(), &missing, &pod, "", &first, None).unwrap_err(),
            "configmap \"nope\" not found"
        );
        let escaping =
            json!({"name": "e", "configMap": {"name": "cfg", "items": [{"key": "a", "path": "../x"}]}});
        refresh_projection(dir.path(), &escaping, &pod, "", &first, None).unwrap();
        assert!(!dir.path().parent().unwrap().join("x").exists());
    }

    #[test]
    fn downward_api_volumes_hold_the_pods_fields() {
        let dir = tempfile::tempdir().unwrap();
        let volume = json!({"name": "d", "downwardAPI": {"items": [{"path": "name", "fieldRef": {"fieldPath": "metadata.name"}}]}});
        let pod = json!({"metadata": {"name": "db-0"}});
        refresh_projection(dir.path(), &volume, &pod, "", &Cfg(json!({})), None).unwrap();
        assert_eq!(std::fs::read_to_string(dir.path().join("name")).unwrap(), "db-0");
    }

    #[test]
    fn mount_points_inside_earlier_binds_map_to_their_source() {
        let binds = vec![(PathBuf::from("/pod/c/pg"), PathBuf::from("/var/lib/postgresql"))];
        assert_eq!(host_path(Path::new("/var/lib/postgresql/data"), &binds), PathBuf::from("/pod/c/pg/data"));
        assert_eq!(host_path(Path::new("/etc/config"), &binds), PathBuf::from("/etc/config"));
    }

    #[test]
    fn the_images_users_replace_the_hosts() {
        let (passwd, group) = identity_files(
            "root:x:0:0:root:/root:/bin/bash\npostgres:x:101:104::/var/lib/postgresql:/bin/bash\n",
            "root:x:0:\npostgres:x:104:\n",
            &[("postgres", 999, 999, "/var/lib/postgresql")],
            1234,
            999,
        );
        assert!(passwd.contains("postgres:x:999:999:"));
        assert!(!passwd.contains(":101:"));
        assert!(passwd.contains("uid1234:x:1234:999:"));
        assert!(group.contains("postgres:x:999:"));
    }
}
