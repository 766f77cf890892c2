//! Restore (`spec.bootstrap.fromBackup`): builders for the restore Job and instance 0's data
//! volume, and the gate that keeps the StatefulSet from being created before the restore is done.
//!
//! Why a Job before the StatefulSet rather than an init container in it: the source's backup
//! volume is `ReadWriteOnce`, and a StatefulSet's pod template is the same for every instance, so
//! an init container would make every instance (on any node) mount it for the cluster's whole
//! life. The restore Job mounts it once, read-only, together with instance 0's data volume
//! (`data-<sts>-0`, created here with the StatefulSet's own claim template, which the StatefulSet
//! then adopts), and runs `scripts/restore.sh`. Once the Job has succeeded the StatefulSet is
//! created; instance 0 finds its data and starts as the primary, and the standbys clone it.
//! `latest` is resolved from the source cluster's `status.backups.last` when that cluster still
//! exists, so the status names the exact backup; otherwise the script picks the newest complete
//! backup and the status says `latest`.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::RESTORE_SCRIPT;
use crate::databasecluster::api::backup::{FromBackup, LATEST};
use crate::databasecluster::api::types::DatabaseCluster;
use crate::databasecluster::api::validation::ValidSpec;
use crate::databasecluster::backup::jobs::{
    backup_labels, backup_pvc_name, bounded_name, env, mount, one_shot_job, pvc_volume, script_pod,
};
use crate::databasecluster::specs::resources::{
    DATA_MOUNT_PATH, DATA_VOLUME, Owner, PGDATA, selector_labels,
};

/// Where the restore pod mounts the source's backup volume.
const RESTORE_PATH: &str = "/restore";

/// The restore Job's name.
pub fn restore_job_name(cluster_name: &str) -> String {
    bounded_name(cluster_name, "restore", 63)
}

/// The backup to restore: the name given, or for `latest` the source's last recorded backup when
/// the source cluster is known (else `latest`, resolved by the restore program).
pub fn resolve_backup(from: &FromBackup, source: Option<&DatabaseCluster>) -> String {
    if from.backup != LATEST {
        return from.backup.clone();
    }
    source
        .and_then(|c| c.status.as_ref())
        .and_then(|s| s.backups.as_ref())
        .and_then(|b| b.last.as_ref())
        .map(|last| last.name.clone())
        .unwrap_or_else(|| LATEST.to_owned())
}

/// Instance 0's data volume as the StatefulSet would create it from its claim template.
pub fn first_data_claim(owner: &Owner, sts: &StatefulSet) -> Option<PersistentVolumeClaim> {
    let template = sts
        .spec
        .as_ref()?
        .volume_claim_templates
        .as_ref()?
        .iter()
        .find(|t| t.metadata.name.as_deref() == Some(DATA_VOLUME))?;
    let sts_name = sts.metadata.name.as_deref()?;
    let mut labels = template.metadata.labels.clone().unwrap_or_default();
    labels.extend(selector_labels(owner));
    Some(PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some(format!("{DATA_VOLUME}-{sts_name}-0")),
            namespace: Some(owner.namespace().to_owned()),
            labels: Some(labels),
            ..ObjectMeta::default()
        },
        spec: template.spec.clone(),
        ..PersistentVolumeClaim::default()
    })
}

/// The restore Job: `restore.sh` with the source's backup volume (read-only) and `claim`.
pub fn build_restore_job(
    owner: &Owner,
    spec: &ValidSpec,
    from: &FromBackup,
    backup: &str,
    claim: &str,
) -> Job {
    let labels: BTreeMap<String, String> = backup_labels(owner);
    let pod = script_pod(
        "restore",
        spec,
        RESTORE_SCRIPT,
        vec![env("PGDATA", PGDATA), env("DBC_RESTORE_DIR", RESTORE_PATH), env("DBC_RESTORE_BACKUP", backup)],
        vec![mount("source", RESTORE_PATH, true), mount(DATA_VOLUME, DATA_MOUNT_PATH, false)],
        vec![
            pvc_volume("source", backup_pvc_name(&from.cluster), true),
            pvc_volume(DATA_VOLUME, claim.to_owned(), false),
        ],
    );
    one_shot_job(owner, restore_job_name(owner.name()), labels, 2, pod)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::databasecluster::api::backup::{BackupRecord, BackupsStatus};
    use crate::databasecluster::api::types::DatabaseClusterStatus;
    use crate::databasecluster::api::validation::validate_spec;
    use crate::databasecluster::backup::fixtures::{cluster, owner, spec};
    use crate::databasecluster::specs::resources::build_statefulset;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn from(backup: &str) -> FromBackup {
        FromBackup { cluster: "source".into(), backup: backup.into() }
    }

    #[test]
    fn latest_is_resolved_from_the_sources_status_when_it_is_known() {
        assert_eq!(resolve_backup(&from("20261201T000000Z"), None), "20261201T000000Z");
        assert_eq!(resolve_backup(&from(LATEST), None), LATEST);
        let mut source = cluster("source", spec());
        let t = Time(jiff::Timestamp::UNIX_EPOCH);
        source.status = Some(DatabaseClusterStatus {
            backups: Some(BackupsStatus {
                last: Some(BackupRecord {
                    name: "20261201T101010Z".into(),
                    start_time: t.clone(),
                    end_time: t,
                    size_bytes: 1,
                }),
                ..BackupsStatus::default()
            }),
            ..DatabaseClusterStatus::default()
        });
        assert_eq!(resolve_backup(&from(LATEST), Some(&source)), "20261201T101010Z");
    }

    #[test]
    fn the_restore_job_fills_the_volume_the_statefulset_adopts_for_instance_zero() {
        let owner = owner("copy");
        let valid = validate_spec(&spec()).unwrap();
        let sts = build_statefulset(&owner, &valid);
        let claim = first_data_claim(&owner, &sts).unwrap();
        assert_eq!(claim.metadata.name.as_deref(), Some("data-copy-0"));
        let template = &sts.spec.as_ref().unwrap().volume_claim_templates.as_ref().unwrap()[0];
        assert_eq!(claim.spec, template.spec);
        let job = build_restore_job(&owner, &valid, &from(LATEST), LATEST, "data-copy-0");
        let pod = job.spec.unwrap().template.spec.unwrap();
        let claims: Vec<(String, Option<bool>)> = pod
            .volumes
            .unwrap()
            .into_iter()
            .filter_map(|v| v.persistent_volume_claim.map(|c| (c.claim_name, c.read_only)))
            .collect();
        assert_eq!(claims, [("source-backups".to_owned(), Some(true)), ("data-copy-0".to_owned(), None)]);
        let container = &pod.containers[0];
        let pgdata = container.env.as_ref().unwrap().iter().find(|e| e.name == "PGDATA").unwrap();
        assert_eq!(pgdata.value.as_deref(), Some(PGDATA));
        assert!(pod.security_context.unwrap().run_as_non_root == Some(true));
    }
}
