//! The certificates' Secrets as the instance pods mount them (read-only, readable by the pod's
//! group only): the server's at `<secrets>/server-tls`, the one whose `ca.crt` verifies it at
//! `<secrets>/server-ca`, and the replication client's at `<secrets>/replication-tls` (its
//! `ca.crt` is the operator's CA, which signs the client certificates): what
//! `crate::instance::tls` copies from. With the user's client CA (`spec.certificates.clientCASecret`)
//! its `ca.crt` alone is mounted at `<secrets>/client-ca` (the servers verify client certificates
//! against it). The operator's CA's Secret is never mounted, nor any CA's key.

use k8s_openapi::api::core::v1::{KeyToPath, SecretVolumeSource, Volume, VolumeMount};

use super::secrets::CA_CERT_KEY;
use super::{replication_client_secret_name, server_secret_name};
use crate::databasecluster::api::certificates::{ClientCertificates, ServerCertificate};
use crate::instance::tls::{CLIENT_CA_DIR, REPLICATION_DIR, SERVER_CA_DIR, SERVER_DIR};

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

/// The Secret of the replication user's client certificate: the user's
/// (`spec.certificates.replicationTLSSecret`) or the operator's `<name>-replication-client`.
pub fn replication_secret(cluster_name: &str, user: Option<&ClientCertificates>) -> String {
    user.and_then(|user| user.replication_secret.clone())
        .unwrap_or_else(|| replication_client_secret_name(cluster_name))
}

/// The instance pods' certificate volumes.
pub fn instance_volumes(
    cluster_name: &str,
    server: Option<&ServerCertificate>,
    clients: Option<&ClientCertificates>,
) -> Vec<Volume> {
    let (server, ca) = server_secrets(cluster_name, server);
    let mut volumes = vec![
        secret_volume(volume_name(SERVER_DIR), server),
        secret_volume(volume_name(SERVER_CA_DIR), ca),
        secret_volume(volume_name(REPLICATION_DIR), replication_secret(cluster_name, clients)),
    ];
    if let Some(clients) = clients {
        let mut volume = secret_volume(volume_name(CLIENT_CA_DIR), clients.ca_secret.clone());
        // Its `ca.crt` only: the CA's key (`ca.key`), when the Secret holds it, stays in the Secret.
        if let Some(source) = volume.secret.as_mut() {
            let item = KeyToPath { key: CA_CERT_KEY.to_owned(), path: CA_CERT_KEY.to_owned(), mode: None };
            source.items = Some(vec![item]);
        }
        volumes.push(volume);
    }
    volumes
}

/// Their mounts under `secrets_mount_path`.
pub fn instance_mounts(secrets_mount_path: &str, clients: Option<&ClientCertificates>) -> Vec<VolumeMount> {
    let client_ca = clients.map(|_| CLIENT_CA_DIR);
    [SERVER_DIR, SERVER_CA_DIR, REPLICATION_DIR]
        .into_iter()
        .chain(client_ca)
        .map(|dir| VolumeMount {
            name: volume_name(dir),
            mount_path: format!("{secrets_mount_path}/{dir}"),
            read_only: Some(true),
            ..VolumeMount::default()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_users_client_ca_is_mounted_without_its_key_and_its_replication_certificate_replaces_ours() {
        let secrets = |volumes: &[Volume]| -> Vec<(String, Option<Vec<String>>)> {
            volumes
                .iter()
                .map(|v| {
                    let source = v.secret.as_ref().unwrap();
                    let items = source.items.as_ref().map(|i| i.iter().map(|i| i.key.clone()).collect());
                    (source.secret_name.clone().unwrap(), items)
                })
                .collect()
        };
        let ours = instance_volumes("db", None, None);
        let names: Vec<_> = secrets(&ours).into_iter().map(|(name, _)| name).collect();
        assert_eq!(names, ["db-server", "db-server", "db-replication-client"]);
        assert_eq!(instance_mounts("/s", None).len(), 3);

        let user = ClientCertificates {
            ca_secret: "their-ca".into(),
            replication_secret: Some("their-repl".into()),
        };
        let theirs = instance_volumes("db", None, Some(&user));
        assert_eq!(
            secrets(&theirs)[2..],
            [("their-repl".to_owned(), None), ("their-ca".to_owned(), Some(vec!["ca.crt".to_owned()]))]
        );
        let mounts = instance_mounts("/s", Some(&user));
        assert_eq!(mounts.last().map(|m| m.mount_path.as_str()), Some("/s/client-ca"));
        let signed_by_their_ca = ClientCertificates { replication_secret: None, ..user };
        assert_eq!(replication_secret("db", Some(&signed_by_their_ca)), "db-replication-client");
    }
}
