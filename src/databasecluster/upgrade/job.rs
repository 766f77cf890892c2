//! The upgrade Job: one pod on the primary's data volume, in the new version's image, with the old
//! version's binaries copied in by an init container of the old image.
//!
//! - init container `old-binaries` (`postgres:<running version>`): copies
//!   `/usr/lib/postgresql/<old>` (its `bin` and `lib`) and `/usr/share/postgresql/<old>` into the
//!   `emptyDir` at [`OLD_ROOT`], keeping the image's layout so the old binaries find their files
//!   relative to themselves. The official images (Debian-based, 15 and 18 alike) install there.
//! - container `upgrade` (`postgres:<desired version>`): `pg_upgrade.sh` with `bash -c`: see the
//!   script's header for its steps. `pg_upgrade` and `initdb` come from the image's `PATH`.
//! - `backoffLimit: 0`: a failed upgrade is not retried (the old data is untouched and the old
//!   version starts again); its termination message is the reason the status shows.
//!
//! Restricted like every pod of the cluster (uid 999, read-only root filesystem); the Job's labels
//! carry the cluster label (its informer maps it to the cluster) with component `upgrade`.

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Container;

use crate::databasecluster::api::validation::ValidSpec;
use crate::databasecluster::backup::jobs::{
    backup_labels, bounded_name, env, mount, one_shot_job, pvc_volume, scratch_volume, script_pod,
    tool_resources,
};
use crate::databasecluster::specs::credentials::Login;
use crate::databasecluster::specs::resources::{
    DATA_MOUNT_PATH, DATA_VOLUME, Owner, PGDATA, label, restricted_security_context,
};

/// The script the upgrade container runs.
pub const UPGRADE_SCRIPT: &str = include_str!("pg_upgrade.sh");
/// The `app.kubernetes.io/component` of the upgrade Job and its pod.
pub const UPGRADE_COMPONENT: &str = "upgrade";
/// Where the old version's files are copied.
pub const OLD_ROOT: &str = "/old";
/// The upgrade's private working directory (pg_upgrade's logs and sockets).
const WORK: &str = "/run/upgrade";

/// The upgrade Job's name for the major `to` (one Job per target major: a failed one stays, with
/// its reason, until the spec names another major or the Job is deleted to try again).
pub fn upgrade_job_name(cluster_name: &str, to: u32) -> String {
    bounded_name(cluster_name, &format!("upgrade-{to}"), 63)
}

/// Whether `job` is an upgrade Job (its component label), which the backup step passes over.
pub fn is_upgrade_job(job: &Job) -> bool {
    let labels = job.metadata.labels.as_ref();
    labels.and_then(|l| l.get(label::COMPONENT)).is_some_and(|c| c == UPGRADE_COMPONENT)
}

/// What the Job is built from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UpgradeJob<'a> {
    /// The version the instances ran (the old image's tag).
    pub from: &'a str,
    /// Its major.
    pub from_major: u32,
    /// The desired major.
    pub to_major: u32,
    /// The data volume (claim) of the primary.
    pub claim: &'a str,
}

/// The upgrade Job for `job` (the new image is `spec.version`'s).
pub fn build_upgrade_job(owner: &Owner, spec: &ValidSpec, job: &UpgradeJob) -> Job {
    // The backup objects' labels (never the cluster's pod selector: no Service selects this pod).
    let mut labels: BTreeMap<String, String> = backup_labels(owner);
    labels.insert(label::COMPONENT.to_owned(), UPGRADE_COMPONENT.to_owned());
    let parameters: Vec<&str> = spec.postgres_config.keys().map(String::as_str).collect();
    let mut pod = script_pod(
        "upgrade",
        spec,
        UPGRADE_SCRIPT,
        vec![
            env("PGDATA", PGDATA),
            env("DBC_OLD_MAJOR", job.from_major.to_string()),
            env("DBC_NEW_MAJOR", job.to_major.to_string()),
            env("DBC_OLD_ROOT", OLD_ROOT),
            env("DBC_WORK", WORK),
            env("TMPDIR", WORK),
            env("DBC_SUPERUSER", Login::Superuser.username()),
            env("DBC_PARAMETERS", parameters.join(" ")),
        ],
        vec![
            mount(DATA_VOLUME, DATA_MOUNT_PATH, false),
            mount("old", OLD_ROOT, true),
            mount("work", WORK, false),
        ],
        vec![
            pvc_volume(DATA_VOLUME, job.claim.to_owned(), false),
            scratch_volume("old"),
            scratch_volume("work"),
        ],
    );
    pod.init_containers = Some(vec![old_binaries(job)]);
    one_shot_job(owner, upgrade_job_name(owner.name(), job.to_major), labels, 0, pod)
}

/// The init container copying the old version's files into [`OLD_ROOT`].
fn old_binaries(job: &UpgradeJob) -> Container {
    let copy = format!(
        "set -eu; major={major}; mkdir -p {OLD_ROOT}/usr/lib/postgresql {OLD_ROOT}/usr/share/postgresql; \
         cp -R /usr/lib/postgresql/$major {OLD_ROOT}/usr/lib/postgresql/; \
         cp -R /usr/share/postgresql/$major {OLD_ROOT}/usr/share/postgresql/",
        major = job.from_major
    );
    Container {
        name: "old-binaries".to_owned(),
        image: Some(format!("postgres:{}", job.from)),
        command: Some(vec!["bash".to_owned(), "-c".to_owned(), copy]),
        volume_mounts: Some(vec![mount("old", OLD_ROOT, false)]),
        security_context: Some(restricted_security_context()),
        resources: Some(tool_resources()),
        ..Container::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::databasecluster::api::validation::validate_spec;
    use crate::databasecluster::backup::fixtures::owner;
    use crate::databasecluster::fixtures::spec;

    fn job() -> Job {
        let spec = validate_spec(&spec(3, "18", "1Gi")).unwrap();
        let job = UpgradeJob { from: "15.4", from_major: 15, to_major: 18, claim: "data-db-0" };
        build_upgrade_job(&owner("db"), &spec, &job)
    }

    #[test]
    fn the_old_image_copies_its_files_for_the_new_image_to_run_pg_upgrade_on_the_primarys_volume() {
        let job = job();
        assert_eq!(job.metadata.name.as_deref(), Some("db-upgrade-18"));
        assert!(is_upgrade_job(&job));
        let labels = job.spec.as_ref().unwrap().template.metadata.as_ref().unwrap().labels.clone().unwrap();
        assert!(!labels.contains_key(label::INSTANCE), "no Service or StatefulSet selects the upgrade pod");
        let spec = job.spec.unwrap();
        assert_eq!(spec.backoff_limit, Some(0), "a failed upgrade is not retried");
        let pod = spec.template.spec.unwrap();
        let init = &pod.init_containers.unwrap()[0];
        assert_eq!(init.image.as_deref(), Some("postgres:15.4"));
        let copy = &init.command.as_ref().unwrap()[2];
        assert!(copy.contains("/usr/lib/postgresql/$major") && copy.contains("major=15"), "{copy}");
        let main = &pod.containers[0];
        assert_eq!(main.image.as_deref(), Some("postgres:18"));
        let claim = pod.volumes.unwrap().into_iter().find(|v| v.name == DATA_VOLUME).unwrap();
        assert_eq!(claim.persistent_volume_claim.unwrap().claim_name, "data-db-0");
        let env: BTreeMap<_, _> =
            main.env.clone().unwrap().into_iter().map(|e| (e.name, e.value.unwrap_or_default())).collect();
        assert_eq!(env["PGDATA"], PGDATA);
        assert_eq!((env["DBC_OLD_MAJOR"].as_str(), env["DBC_NEW_MAJOR"].as_str()), ("15", "18"));
        assert_eq!(main.security_context.as_ref().unwrap().read_only_root_filesystem, Some(true));
    }

    #[test]
    fn the_script_copies_never_links_and_checks_before_upgrading() {
        assert!(UPGRADE_SCRIPT.contains("--copy") && !UPGRADE_SCRIPT.contains("--link"));
        let check = UPGRADE_SCRIPT.find("pg_upgrade --check").unwrap();
        let upgrade = UPGRADE_SCRIPT.find("pg_upgrade \"${args[@]}\"").unwrap();
        assert!(check < upgrade);
    }
}
