//! Pure builders of the backup children: the backup volume `<name>-backups`, the CronJob
//! `<name>-backup`, the on-demand Jobs made from the same Job template, and their names and labels.
//!
//! The backup pod runs `scripts/backup.sh` with `bash -c` (no extra ConfigMap), as uid 999 with a
//! read-only root filesystem and the restricted Pod Security profile. It mounts the backup volume,
//! a private `emptyDir`, the replication user's client certificate (`<name>-replication-client`
//! or the user's, [`crate::databasecluster::tls`]: `pg_hba.conf` lets it open replication
//! connections and nothing else) and the `ca.crt` that verifies the servers; no password. Its
//! labels (`databases.madmmas.dev/cluster`, component `backup`) deliberately leave out the
//! cluster's pod selector, so no Service or StatefulSet ever selects a backup pod. Jobs run once
//! (`backoffLimit: 0`): a failure is reported, and the next schedule is the retry; a Job running
//! longer than [`BACKUP_DEADLINE_SECONDS`] is stopped so that `Forbid` cannot block backups forever.

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::{CronJob, CronJobSpec, Job, JobSpec, JobTemplateSpec};
use k8s_openapi::api::core::v1::{
    Container, EmptyDirVolumeSource, EnvVar, PersistentVolumeClaim, PersistentVolumeClaimSpec,
    PersistentVolumeClaimVolumeSource, PodSpec, PodTemplateSpec, ResourceRequirements, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use sha2::{Digest, Sha256};

use super::BACKUP_SCRIPT;
use crate::databasecluster::api::backup::ValidBackup;
use crate::databasecluster::api::validation::{StorageSize, ValidSpec};
use crate::databasecluster::specs::resources::{
    FIELD_MANAGER, Owner, claim_spec, label, restricted_pod_security, restricted_security_context,
};

/// Label naming the DatabaseCluster a backup object belongs to (the Job informer's mapper reads
/// it; CronJob-made Jobs are controlled by the CronJob, not by the cluster).
pub const CLUSTER_LABEL: &str = "databases.madmmas.dev/cluster";
/// The `app.kubernetes.io/component` of backup and restore objects.
pub const BACKUP_COMPONENT: &str = "backup";
/// The annotation that asks for one backup now; its value is any token, used once.
pub const BACKUP_NOW_ANNOTATION: &str = "databases.madmmas.dev/backup-now";
/// How long a backup Job may run before Kubernetes stops it (6 hours).
pub const BACKUP_DEADLINE_SECONDS: i64 = 6 * 3600;
/// Where the backup pod mounts its volumes.
const BACKUPS_PATH: &str = "/backups";
const SECRETS_PATH: &str = "/secrets";
const RUN_PATH: &str = "/run/dbc";
/// The PostgreSQL port of the cluster's Services.
const POSTGRES_PORT: u16 = 5432;
/// Finished Jobs the CronJob keeps, of each outcome (the status keeps the history that matters).
const JOB_HISTORY: i32 = 3;

/// The backup volume's name.
pub fn backup_pvc_name(cluster_name: &str) -> String {
    format!("{cluster_name}-backups")
}

/// The CronJob's name, within the 52 characters a CronJob name may have.
pub fn cronjob_name(cluster_name: &str) -> String {
    bounded_name(cluster_name, "backup", 52)
}

/// The on-demand Job for `token`: the same token always gives the same name, so a retried pass
/// cannot start a second backup for one token.
pub fn on_demand_job_name(cluster_name: &str, token: &str) -> String {
    let digest = hex_digest(token.as_bytes());
    bounded_name(cluster_name, &format!("backup-{}", &digest[..10]), 63)
}

/// `<cluster>-<suffix>`, or when that exceeds `max` characters a shortened cluster name and a
/// hash of the full one, so that distinct clusters keep distinct names.
pub fn bounded_name(cluster_name: &str, suffix: &str, max: usize) -> String {
    let plain = format!("{cluster_name}-{suffix}");
    if plain.len() <= max {
        return plain;
    }
    let hash = &hex_digest(cluster_name.as_bytes())[..6];
    let room = max.saturating_sub(suffix.len() + hash.len() + 2);
    let stem = cluster_name[..room.min(cluster_name.len())].trim_end_matches('-');
    format!("{stem}-{hash}-{suffix}")
}

fn hex_digest(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

/// The labels of every backup object and pod: the cluster, the component, the operator.
pub fn backup_labels(owner: &Owner) -> BTreeMap<String, String> {
    BTreeMap::from([
        (CLUSTER_LABEL.to_owned(), owner.name().to_owned()),
        (label::COMPONENT.to_owned(), BACKUP_COMPONENT.to_owned()),
        (label::MANAGED_BY.to_owned(), FIELD_MANAGER.to_owned()),
    ])
}

fn metadata(owner: &Owner, name: String, owned: bool) -> ObjectMeta {
    ObjectMeta {
        name: Some(name),
        namespace: Some(owner.namespace().to_owned()),
        labels: Some(backup_labels(owner)),
        // An owned object is garbage collected with the cluster; `[]` (rather than nothing) lets
        // a later apply drop an ownerReference the operator set before.
        owner_references: Some(if owned { vec![owner.reference().clone()] } else { Vec::new() }),
        ..ObjectMeta::default()
    }
}

/// The backup volume. `owned` (pvcRetention `Delete`) makes it go with the cluster; otherwise it
/// outlives the cluster, so its backups can still be restored.
pub fn build_backup_pvc(owner: &Owner, backup: &ValidBackup, owned: bool) -> PersistentVolumeClaim {
    PersistentVolumeClaim {
        metadata: metadata(owner, backup_pvc_name(owner.name()), owned),
        spec: Some(claim_spec(&backup.storage, backup.storage_class_name.clone())),
        ..PersistentVolumeClaim::default()
    }
}

/// Copies from the live volume what the API server will not change (class, access modes; the
/// storage request of a claim not bound yet, and one above the spec's, which may not shrink), so
/// an apply never fails on them. A growth of an unbound volume is applied once it is bound.
pub fn keep_immutable_pvc_fields(desired: &mut PersistentVolumeClaim, live: &PersistentVolumeClaim) {
    let bound = live.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound");
    if let (Some(desired), Some(live_spec)) = (desired.spec.as_mut(), live.spec.as_ref()) {
        desired.storage_class_name.clone_from(&live_spec.storage_class_name);
        desired.access_modes.clone_from(&live_spec.access_modes);
        let request = |spec: &PersistentVolumeClaimSpec| {
            let storage = spec.resources.as_ref()?.requests.as_ref()?.get("storage")?;
            StorageSize::parse(&storage.0)
        };
        let smaller =
            matches!((request(desired), request(live_spec)), (Some(d), Some(l)) if d.bytes() < l.bytes());
        if !bound || smaller {
            desired.resources.clone_from(&live_spec.resources);
        }
    }
}

/// The CronJob for a scheduled backup configuration (`None` without a schedule).
pub fn build_cronjob(owner: &Owner, spec: &ValidSpec) -> Option<CronJob> {
    let backup = spec.backup.as_ref()?;
    let schedule = backup.schedule.as_ref()?;
    Some(CronJob {
        metadata: metadata(owner, cronjob_name(owner.name()), true),
        spec: Some(CronJobSpec {
            schedule: schedule.as_str().to_owned(),
            time_zone: Some("Etc/UTC".to_owned()),
            concurrency_policy: Some("Forbid".to_owned()),
            suspend: Some(backup.suspend),
            successful_jobs_history_limit: Some(JOB_HISTORY),
            failed_jobs_history_limit: Some(JOB_HISTORY),
            job_template: JobTemplateSpec {
                metadata: Some(ObjectMeta { labels: Some(backup_labels(owner)), ..ObjectMeta::default() }),
                spec: Some(backup_job_spec(owner, spec, backup)),
            },
            ..CronJobSpec::default()
        }),
        ..CronJob::default()
    })
}

/// The on-demand Job for `token`, made from the CronJob's Job template and owned by the cluster.
pub fn build_on_demand_job(owner: &Owner, spec: &ValidSpec, backup: &ValidBackup, token: &str) -> Job {
    let mut meta = metadata(owner, on_demand_job_name(owner.name(), token), true);
    meta.annotations = Some(BTreeMap::from([(BACKUP_NOW_ANNOTATION.to_owned(), token.to_owned())]));
    Job { metadata: meta, spec: Some(backup_job_spec(owner, spec, backup)), ..Job::default() }
}

/// The Job spec every backup runs: one pod, no retry, a deadline.
fn backup_job_spec(owner: &Owner, spec: &ValidSpec, backup: &ValidBackup) -> JobSpec {
    JobSpec {
        backoff_limit: Some(0),
        active_deadline_seconds: Some(BACKUP_DEADLINE_SECONDS),
        template: PodTemplateSpec {
            metadata: Some(ObjectMeta { labels: Some(backup_labels(owner)), ..ObjectMeta::default() }),
            spec: Some(backup_pod_spec(owner, spec, backup)),
        },
        ..JobSpec::default()
    }
}

/// A Job owned by the cluster that runs `pod` once, retried at most `backoff_limit` times, with
/// `labels` on the Job and its pod (the restore, recovery and upgrade Jobs).
pub fn one_shot_job(
    owner: &Owner,
    name: String,
    labels: BTreeMap<String, String>,
    backoff_limit: i32,
    pod: PodSpec,
) -> Job {
    Job {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: Some(owner.namespace().to_owned()),
            labels: Some(labels.clone()),
            owner_references: Some(vec![owner.reference().clone()]),
            ..ObjectMeta::default()
        },
        spec: Some(JobSpec {
            backoff_limit: Some(backoff_limit),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta { labels: Some(labels), ..ObjectMeta::default() }),
                spec: Some(pod),
            },
            ..JobSpec::default()
        }),
        ..Job::default()
    }
}

/// An environment variable with a literal value.
pub fn env(name: &str, value: impl Into<String>) -> EnvVar {
    EnvVar { name: name.to_owned(), value: Some(value.into()), ..EnvVar::default() }
}

/// Small requests and limits for a one-shot tool container.
pub fn tool_resources() -> ResourceRequirements {
    let amounts = |cpu: &str, memory: &str| {
        BTreeMap::from([
            ("cpu".to_owned(), Quantity(cpu.to_owned())),
            ("memory".to_owned(), Quantity(memory.to_owned())),
        ])
    };
    ResourceRequirements {
        requests: Some(amounts("100m", "128Mi")),
        limits: Some(amounts("1", "512Mi")),
        ..ResourceRequirements::default()
    }
}

/// A volume mounting a PVC.
pub fn pvc_volume(name: &str, claim: String, read_only: bool) -> Volume {
    Volume {
        name: name.to_owned(),
        persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
            claim_name: claim,
            read_only: read_only.then_some(true),
        }),
        ..Volume::default()
    }
}

/// A private scratch directory.
pub fn scratch_volume(name: &str) -> Volume {
    Volume { name: name.to_owned(), empty_dir: Some(EmptyDirVolumeSource::default()), ..Volume::default() }
}

/// A mount of volume `name` at `path`.
pub fn mount(name: &str, path: &str, read_only: bool) -> VolumeMount {
    VolumeMount {
        name: name.to_owned(),
        mount_path: path.to_owned(),
        read_only: read_only.then_some(true),
        ..VolumeMount::default()
    }
}

fn backup_pod_spec(owner: &Owner, spec: &ValidSpec, backup: &ValidBackup) -> PodSpec {
    let domain = |service: &str| format!("{}-{service}.{}.svc", owner.name(), owner.namespace());
    let mut env = vec![
        env("DBC_BACKUP_HOSTS", format!("{} {}", domain("ro"), domain("rw"))),
        env("DBC_PORT", POSTGRES_PORT.to_string()),
        env("DBC_SECRETS", SECRETS_PATH),
        env("DBC_RUN", RUN_PATH),
    ];
    use crate::databasecluster::tls::pods::{replication_secret, secret_volume, server_secrets};
    let replication = replication_secret(owner.name(), spec.client_certificates.as_ref());
    let certificate = secret_volume("replication-tls".to_owned(), replication);
    let (_, server_ca) = server_secrets(owner.name(), spec.server_certificate.as_ref());
    let server_ca = secret_volume("server-ca".to_owned(), server_ca);
    let mut mounts = vec![
        mount("replication-tls", &format!("{SECRETS_PATH}/replication-tls"), true),
        mount("server-ca", &format!("{SECRETS_PATH}/server-ca"), true),
        mount("run", RUN_PATH, false),
    ];
    let mut volumes = vec![certificate, server_ca, scratch_volume("run")];
    if let Some(store) = &backup.object_store {
        // With a store, every base backup goes to it (the manager's `instance base-backup`).
        use crate::databasecluster::objectstore::manager_pod::manager_pod;
        use crate::instance::archive::retention::ENV_RECOVERY_WINDOW;
        env.extend(backup.recovery_window_seconds.map(|s| self::env(ENV_RECOVERY_WINDOW, s.to_string())));
        return manager_pod("backup", spec, "base-backup", store, env, mounts, volumes);
    }
    env.push(self::env("DBC_BACKUPS", BACKUPS_PATH));
    if let Some(n) = backup.keep_last {
        env.push(self::env("DBC_KEEP_LAST", n.to_string()));
    }
    if let Some(seconds) = backup.keep_newer_than_seconds {
        env.push(self::env("DBC_KEEP_NEWER_THAN_SECONDS", seconds.to_string()));
    }
    mounts.push(mount("backups", BACKUPS_PATH, false));
    volumes.push(pvc_volume("backups", backup_pvc_name(owner.name()), false));
    script_pod("backup", spec, BACKUP_SCRIPT, env, mounts, volumes)
}

/// A one-shot pod running `script` with `bash -c` in the cluster's `postgres` image, restricted,
/// without a service account token; its termination message is read back from the file.
pub fn script_pod(
    container: &str,
    spec: &ValidSpec,
    script: &str,
    env: Vec<EnvVar>,
    volume_mounts: Vec<VolumeMount>,
    volumes: Vec<Volume>,
) -> PodSpec {
    PodSpec {
        restart_policy: Some("Never".to_owned()),
        automount_service_account_token: Some(false),
        security_context: Some(restricted_pod_security()),
        containers: vec![Container {
            name: container.to_owned(),
            image: Some(format!("postgres:{}", spec.version.as_str())),
            command: Some(vec!["bash".to_owned(), "-c".to_owned(), script.to_owned()]),
            env: Some(env),
            volume_mounts: Some(volume_mounts),
            security_context: Some(restricted_security_context()),
            resources: Some(tool_resources()),
            termination_message_policy: Some("File".to_owned()),
            ..Container::default()
        }],
        volumes: Some(volumes),
        ..PodSpec::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::databasecluster::api::backup::{BackupSpec, RetentionSpec};
    use crate::databasecluster::api::types::DatabaseClusterSpec;
    use crate::databasecluster::api::validation::validate_spec;
    use crate::databasecluster::backup::fixtures::owner;

    fn valid(schedule: Option<&str>) -> ValidSpec {
        let spec = DatabaseClusterSpec {
            backup: Some(BackupSpec {
                schedule: schedule.map(String::from),
                retention: Some(RetentionSpec {
                    keep_last: Some(3),
                    keep_newer_than: None,
                    recovery_window: None,
                }),
                storage_size: Some("5Gi".into()),
                ..BackupSpec::default()
            }),
            ..crate::databasecluster::fixtures::spec(2, "15.4", "1Gi")
        };
        validate_spec(&spec).unwrap()
    }

    fn pod_of(job: &JobSpec) -> &PodSpec {
        job.template.spec.as_ref().unwrap()
    }

    #[test]
    fn names_fit_their_limits_and_stay_distinct() {
        assert_eq!(cronjob_name("pg"), "pg-backup");
        assert_eq!(backup_pvc_name("pg"), "pg-backups");
        let long = "a".repeat(63);
        let other = format!("{}b", "a".repeat(62));
        assert!(cronjob_name(&long).len() <= 52);
        assert_ne!(cronjob_name(&long), cronjob_name(&other));
        let job = on_demand_job_name(&long, "t1");
        assert!(job.len() <= 63, "{job}");
        assert_eq!(on_demand_job_name("pg", "t1"), on_demand_job_name("pg", "t1"));
        assert_ne!(on_demand_job_name("pg", "t1"), on_demand_job_name("pg", "t2"));
    }

    #[test]
    fn the_cronjob_forbids_overlap_and_runs_the_script_with_the_operators_client_certificate_only() {
        let owner = owner("pg");
        assert!(build_cronjob(&owner, &valid(None)).is_none(), "no schedule, no CronJob");
        let cj = build_cronjob(&owner, &valid(Some("*/5 * * * *"))).unwrap();
        let spec = cj.spec.as_ref().unwrap();
        assert_eq!(spec.schedule, "*/5 * * * *");
        assert_eq!(spec.concurrency_policy.as_deref(), Some("Forbid"));
        assert_eq!(cj.metadata.owner_references.as_ref().unwrap()[0].uid, owner.reference().uid);
        let job = spec.job_template.spec.as_ref().unwrap();
        assert_eq!(job.backoff_limit, Some(0));
        let pod = pod_of(job);
        let secrets: Vec<_> =
            pod.volumes.iter().flatten().filter_map(|v| v.secret.as_ref()?.secret_name.clone()).collect();
        assert_eq!(
            secrets,
            ["pg-replication-client", "pg-server"],
            "the client certificate and the servers' CA"
        );
        assert_eq!(pod.automount_service_account_token, Some(false));
        let container = &pod.containers[0];
        assert_eq!(container.image.as_deref(), Some("postgres:15.4"));
        assert_eq!(container.command.as_ref().unwrap()[2], BACKUP_SCRIPT);
        let env: BTreeMap<_, _> =
            container.env.iter().flatten().map(|e| (e.name.as_str(), e.value.clone().unwrap())).collect();
        assert_eq!(env["DBC_BACKUP_HOSTS"], "pg-ro.default.svc pg-rw.default.svc", "standbys first");
        assert_eq!(env["DBC_KEEP_LAST"], "3");
        assert!(!env.contains_key("DBC_KEEP_NEWER_THAN_SECONDS"));
        assert_eq!(container.security_context.as_ref().unwrap().read_only_root_filesystem, Some(true));
        assert_eq!(pod.security_context.as_ref().unwrap().run_as_non_root, Some(true));
    }

    #[test]
    fn backup_pods_are_never_selected_by_the_clusters_services() {
        let owner = owner("pg");
        let cj = build_cronjob(&owner, &valid(Some("@daily"))).unwrap();
        let labels = cj.spec.unwrap().job_template.spec.unwrap().template.metadata.unwrap().labels.unwrap();
        assert!(!labels.contains_key(label::INSTANCE), "{labels:?}");
        assert_eq!(labels[CLUSTER_LABEL], "pg");
        assert_eq!(labels[label::MANAGED_BY], FIELD_MANAGER);
    }

    #[test]
    fn an_on_demand_job_uses_the_cronjobs_template() {
        let owner = owner("pg");
        let spec = valid(Some("@daily"));
        let job = build_on_demand_job(&owner, &spec, spec.backup.as_ref().unwrap(), "now-1");
        let cj = build_cronjob(&owner, &spec).unwrap();
        assert_eq!(job.spec, cj.spec.unwrap().job_template.spec);
        assert_eq!(job.metadata.annotations.unwrap()[BACKUP_NOW_ANNOTATION], "now-1");
        assert_eq!(job.metadata.owner_references.unwrap()[0].uid, owner.reference().uid);
    }

    #[test]
    fn the_backup_volume_is_owned_only_when_pvc_retention_deletes() {
        let owner = owner("pg");
        let spec = valid(None);
        let backup = spec.backup.as_ref().unwrap();
        let kept = build_backup_pvc(&owner, backup, false);
        assert_eq!(kept.metadata.owner_references, Some(vec![]));
        let requests = kept.spec.unwrap().resources.unwrap().requests.unwrap();
        assert_eq!(requests["storage"].0, "5Gi");
        let owned = build_backup_pvc(&owner, backup, true);
        assert_eq!(owned.metadata.owner_references.unwrap().len(), 1);
    }

    #[test]
    fn a_backup_volume_grows_only_once_bound_and_never_shrinks() {
        let owner = owner("pg");
        let spec = valid(None);
        let desired = || build_backup_pvc(&owner, spec.backup.as_ref().unwrap(), false);
        let live = |size: &str, phase: &str| {
            let mut claim = desired();
            claim.spec.as_mut().unwrap().resources.as_mut().unwrap().requests =
                Some(BTreeMap::from([("storage".to_owned(), Quantity(size.into()))]));
            claim.status = Some(k8s_openapi::api::core::v1::PersistentVolumeClaimStatus {
                phase: Some(phase.into()),
                ..Default::default()
            });
            claim
        };
        let request = |claim: &PersistentVolumeClaim| {
            claim.spec.as_ref().unwrap().resources.as_ref().unwrap().requests.as_ref().unwrap()["storage"]
                .0
                .clone()
        };
        for (size, phase, applied) in
            [("1Gi", "Bound", "5Gi"), ("1Gi", "Pending", "1Gi"), ("8Gi", "Bound", "8Gi")]
        {
            let mut claim = desired();
            keep_immutable_pvc_fields(&mut claim, &live(size, phase));
            assert_eq!(request(&claim), applied, "a {phase} claim of {size}");
        }
    }
}
