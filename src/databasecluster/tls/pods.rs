//! The certificates' Secrets as the instance pods mount them (read-only, readable by the pod's
//! group only): the server's at `<secrets>/server-tls` and the replication client's at
//! `<secrets>/replication-tls` (what `crate::instance::tls` copies from). The CA's Secret is
//! never mounted.

use k8s_openapi::api::core::v1::{SecretVolumeSource, Volume, VolumeMount};

use super::{Client, server_secret_name};
use crate::instance::tls::{REPLICATION_DIR, SERVER_DIR};

fn volume_name(dir: &str) -> String {
    format!("secret-{dir}")
}

/// A Secret as a volume readable by the pod's group (fsGroup) only.
pub fn secret_volume(volume: String, secret: String) -> Volume {
    Volume {
        name: volume,
        secret: Some(SecretVolumeSource {
            secret_name: Some(secret),
            default_mode: Some(0o440),
            ..SecretVolumeSource::default()
        }),
        ..Volume::default()
    }
}

/// The instance pods' certificate volumes.
pub fn instance_volumes(cluster_name: &str) -> [Volume; 2] {
    [
        secret_volume(volume_name(SERVER_DIR), server_secret_name(cluster_name)),
        secret_volume(volume_name(REPLICATION_DIR), Client::Replication.secret_name(cluster_name)),
    ]
}

/// Their mounts under `secrets_mount_path`.
pub fn instance_mounts(secrets_mount_path: &str) -> [VolumeMount; 2] {
    [SERVER_DIR, REPLICATION_DIR].map(|dir| VolumeMount {
        name: volume_name(dir),
        mount_path: format!("{secrets_mount_path}/{dir}"),
        read_only: Some(true),
        ..VolumeMount::default()
    })
}
