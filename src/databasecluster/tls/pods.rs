//! The certificates' Secrets as the instance pods mount them (read-only, readable by the pod's
//! group only): the server's at `<secrets>/server-tls`, the one whose `ca.crt` verifies it at
//! `<secrets>/server-ca`, and the replication client's at `<secrets>/replication-tls` (its
//! `ca.crt` is the operator's CA, which signs every client certificate): what
//! `crate::instance::tls` copies from. The CA's own Secret is never mounted.

use k8s_openapi::api::core::v1::{SecretVolumeSource, Volume, VolumeMount};

use super::{Client, server_secret_name};
use crate::databasecluster::api::certificates::ServerCertificate;
use crate::instance::tls::{REPLICATION_DIR, SERVER_CA_DIR, SERVER_DIR};

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

/// The Secrets of the servers' certificate and of the CA that verifies it: the operator's
/// `<name>-server` (its `ca.crt`), or what `spec.certificates` names.
pub fn server_secrets(cluster_name: &str, user: Option<&ServerCertificate>) -> (String, String) {
    match user {
        Some(user) => (user.tls_secret.clone(), user.ca_secret.clone()),
        None => (server_secret_name(cluster_name), server_secret_name(cluster_name)),
    }
}

/// The instance pods' certificate volumes.
pub fn instance_volumes(cluster_name: &str, user: Option<&ServerCertificate>) -> [Volume; 3] {
    let (server, ca) = server_secrets(cluster_name, user);
    [
        secret_volume(volume_name(SERVER_DIR), server),
        secret_volume(volume_name(SERVER_CA_DIR), ca),
        secret_volume(volume_name(REPLICATION_DIR), Client::Replication.secret_name(cluster_name)),
    ]
}

/// Their mounts under `secrets_mount_path`.
pub fn instance_mounts(secrets_mount_path: &str) -> [VolumeMount; 3] {
    [SERVER_DIR, SERVER_CA_DIR, REPLICATION_DIR].map(|dir| VolumeMount {
        name: volume_name(dir),
        mount_path: format!("{secrets_mount_path}/{dir}"),
        read_only: Some(true),
        ..VolumeMount::default()
    })
}
