//! One-shot pods that run the instance manager's object store programs, pure: the base backup
//! (`instance base-backup`, the backup Job's pod when `spec.backup.objectStore` is set) and the
//! point-in-time recovery (`instance recover`, `spec.bootstrap.recovery`'s restore Job).
//!
//! Each is the cluster's `postgres` image with the operator's binary copied in by the same init
//! container as the instances' ([`install_container`]), restricted, without a service account
//! token; the store's settings as plain environment and its credentials Secret mounted read-only
//! under `$DBC_SECRETS/objectstore/` ([`super::pod`]). No credential is in the pod spec.

use k8s_openapi::api::core::v1::{EnvVar, PodSpec, Volume, VolumeMount};

use super::pod;
use crate::databasecluster::api::object_store::ValidObjectStore;
use crate::databasecluster::api::validation::ValidSpec;
use crate::databasecluster::backup::jobs::script_pod;
use crate::databasecluster::specs::instance_pod::{
    CONTROLLER_MOUNT_PATH, CONTROLLER_VOLUME, controller_volume, install_container, manager_command,
};
use crate::databasecluster::specs::resources::restricted_security_context;

/// Where these pods mount their Secrets.
pub const SECRETS_PATH: &str = "/secrets";

/// A pod running `instance <verb>` with `store`'s environment, credentials and `env`, `mounts`,
/// `volumes` besides.
pub fn manager_pod(
    container: &str,
    spec: &ValidSpec,
    verb: &str,
    store: &ValidObjectStore,
    mut env: Vec<EnvVar>,
    mut mounts: Vec<VolumeMount>,
    mut volumes: Vec<Volume>,
) -> PodSpec {
    env.extend(pod::env(store));
    mounts.extend(pod::mounts(store, SECRETS_PATH));
    mounts.push(VolumeMount {
        name: CONTROLLER_VOLUME.to_owned(),
        mount_path: CONTROLLER_MOUNT_PATH.to_owned(),
        read_only: Some(true),
        ..VolumeMount::default()
    });
    volumes.extend(pod::volumes(store));
    volumes.push(controller_volume());
    let mut pod = script_pod(container, spec, "", env, mounts, volumes);
    if let Some(main) = pod.containers.first_mut() {
        main.command = Some(manager_command(verb));
    }
    pod.init_containers = Some(vec![install_container(restricted_security_context())]);
    pod
}
