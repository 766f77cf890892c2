//! The restore Job of `spec.bootstrap.recovery`, pure: the same Job name, labels and gate as a
//! restore from a backup volume ([`crate::databasecluster::backup::restore`]), but its pod runs
//! `instance recover` ([`crate::instance::archive::recover`]) with the source's store (settings
//! as environment, credentials mounted from the named Secret), the target as environment, and
//! instance 0's data volume. PostgreSQL replays inside this pod, so the source's credentials are
//! mounted here only, never into the new cluster's instances.

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::Job;

use super::manager_pod::{SECRETS_PATH, manager_pod};
use crate::databasecluster::api::recovery::ValidRecovery;
use crate::databasecluster::api::validation::ValidSpec;
use crate::databasecluster::backup::jobs::{
    backup_labels, env, mount, one_shot_job, pvc_volume, scratch_volume,
};
use crate::databasecluster::backup::restore::restore_job_name;
use crate::databasecluster::specs::resources::{DATA_MOUNT_PATH, DATA_VOLUME, Owner, PGDATA};
use crate::instance::archive::target::{
    ENV_BACKUP, ENV_TARGET_IMMEDIATE, ENV_TARGET_LSN, ENV_TARGET_NAME, ENV_TARGET_TIME, ENV_TARGET_XID,
};

/// The recovery pod's private directory (sockets, the run directory the WAL fetches use).
const RUN_PATH: &str = "/run/dbc";

/// The recovery Job filling `claim` (instance 0's data volume) from `recovery`.
pub fn build_recovery_job(owner: &Owner, spec: &ValidSpec, recovery: &ValidRecovery, claim: &str) -> Job {
    let target = &recovery.target;
    let mut variables = vec![
        env("PGDATA", PGDATA),
        env("DBC_RUN", RUN_PATH),
        env("DBC_CONFIG", RUN_PATH),
        env("DBC_SECRETS", SECRETS_PATH),
        // `instance wal-restore` reads the manager's settings; the pod has no address of its own.
        env("POD_NAME", restore_job_name(owner.name())),
        env("POD_IP", "127.0.0.1"),
        env(ENV_BACKUP, recovery.backup.clone()),
    ];
    for (name, value) in [
        (ENV_TARGET_TIME, target.time.clone()),
        (ENV_TARGET_LSN, target.lsn.clone()),
        (ENV_TARGET_XID, target.xid.clone()),
        (ENV_TARGET_NAME, target.name.clone()),
        (ENV_TARGET_IMMEDIATE, target.immediate.filter(|i| *i).map(|_| "true".to_owned())),
    ] {
        variables.extend(value.map(|value| env(name, value)));
    }
    let pod = manager_pod(
        "restore",
        spec,
        "recover",
        &recovery.store,
        variables,
        vec![mount(DATA_VOLUME, DATA_MOUNT_PATH, false), mount("run", RUN_PATH, false)],
        vec![pvc_volume(DATA_VOLUME, claim.to_owned(), false), scratch_volume("run")],
    );
    let labels: BTreeMap<String, String> = backup_labels(owner);
    // A target no backup reaches fails the same way each time: one attempt and a retry.
    one_shot_job(owner, restore_job_name(owner.name()), labels, 1, pod)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::databasecluster::api::object_store::{ObjectStoreSpec, StoreCredentials};
    use crate::databasecluster::api::recovery::{RecoverySpec, RecoveryTarget, validate_recovery};
    use crate::databasecluster::api::validation::validate_spec;
    use crate::databasecluster::backup::fixtures::{owner, spec};

    #[test]
    fn the_recovery_pod_runs_the_manager_with_the_sources_store_and_the_target() {
        let recovery = RecoverySpec {
            object_store: ObjectStoreSpec {
                destination: "s3://bkt/orders".into(),
                endpoint: None,
                region: None,
                credentials: StoreCredentials {
                    name: "source-s3".into(),
                    access_key_id_key: None,
                    secret_access_key_key: None,
                    session_token_key: None,
                },
                ca_secret: None,
                compression: None,
            },
            backup: None,
            target: Some(RecoveryTarget { lsn: Some("0/3000100".into()), ..RecoveryTarget::default() }),
        };
        let valid = validate_recovery(&recovery, None).unwrap();
        let job = build_recovery_job(&owner("copy"), &validate_spec(&spec()).unwrap(), &valid, "data-copy-0");
        assert_eq!(job.metadata.name.as_deref(), Some("copy-restore"));
        let pod = job.spec.unwrap().template.spec.unwrap();
        let container = &pod.containers[0];
        assert_eq!(container.command.as_ref().unwrap()[1..], ["instance".to_owned(), "recover".to_owned()]);
        let env: BTreeMap<String, String> =
            container.env.iter().flatten().map(|e| (e.name.clone(), e.value.clone().unwrap())).collect();
        assert_eq!(env[ENV_TARGET_LSN], "0/3000100");
        assert_eq!(env[ENV_BACKUP], "latest");
        assert_eq!(env["DBC_OBJECT_STORE_DESTINATION"], "s3://bkt/orders");
        assert!(!env.contains_key(ENV_TARGET_TIME));
        let secrets: Vec<String> =
            pod.volumes.iter().flatten().filter_map(|v| v.secret.as_ref()?.secret_name.clone()).collect();
        assert_eq!(secrets, ["source-s3"], "the source's credentials, by name");
        assert_eq!(pod.init_containers.unwrap().len(), 1, "the manager is copied in");
    }
}
