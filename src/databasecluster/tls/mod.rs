//! TLS for every connection to PostgreSQL: the certificates the operator issues for each cluster,
//! built and decided purely here (the step `controller::steps::certificates` writes them).
//!
//! Per cluster, unless the user brings their own (`spec.certificates`: then the operator issues
//! none of what it was given; the CA only while it signs something):
//!
//! | Secret | type | holds | who reads it |
//! |---|---|---|---|
//! | `<name>-ca` | `Opaque` | `ca.crt`, `ca.key`: the cluster's CA | the operator only (to sign); never mounted |
//! | `<name>-server` | `kubernetes.io/tls` | the servers' certificate ([`server_dns_names`]) and `ca.crt` | the instances |
//! | `<name>-replication-client` | `kubernetes.io/tls` | `CN=replicator`: streaming, cloning, backups | the instances, the backup Jobs |
//!
//! Keys are ECDSA P-256 ([`issue`]). A leaf certificate is issued again ([`renew::leaf_action`])
//! when it is missing or unreadable, was signed by another CA than the live one, or comes within
//! the renewal margin of its expiry ([`renew::Lifetimes`]). The CA is renewed before it expires
//! with an overlap in which every `ca.crt` carries both CAs, so that no client's copy is ever
//! stale ([`rotation`]). A cluster re-created over kept
//! volumes gets a new CA and new certificates, as it gets new passwords: nothing of them lives in
//! the data directory, and the instances read what is mounted.

pub mod app;
pub mod issue;
pub mod pods;
pub mod renew;
pub mod rotation;
pub mod secrets;

use crate::databasecluster::specs::names::headless_service_name;
use crate::databasecluster::specs::services::ClientService;

/// The cluster DNS domain the fully qualified names end with.
pub const CLUSTER_DOMAIN: &str = "cluster.local";

/// The CA's Secret.
pub fn ca_secret_name(cluster_name: &str) -> String {
    format!("{cluster_name}-ca")
}

/// The servers' certificate's Secret.
pub fn server_secret_name(cluster_name: &str) -> String {
    format!("{cluster_name}-server")
}

/// The Secret of the replication user's client certificate (`CN=replicator`), when the operator
/// issues it: the standbys clone and stream with it, the backup Jobs take their base backups with
/// it.
pub fn replication_client_secret_name(cluster_name: &str) -> String {
    format!("{cluster_name}-replication-client")
}

/// Every name a client may reach a server by: each client Service (`-rw`, `-ro`, `-r`) as `svc`,
/// `svc.ns`, `svc.ns.svc` and `svc.ns.svc.cluster.local`, and every pod under the headless
/// Service in the same four forms (a wildcard for the pod's name, so scaling needs no new
/// certificate; libpq and rustls both match a wildcard in the first label).
pub fn server_dns_names(cluster_name: &str, namespace: &str) -> Vec<String> {
    let forms = |host: &str| {
        [
            host.to_owned(),
            format!("{host}.{namespace}"),
            format!("{host}.{namespace}.svc"),
            format!("{host}.{namespace}.svc.{CLUSTER_DOMAIN}"),
        ]
    };
    let mut names: Vec<String> =
        ClientService::ALL.iter().flat_map(|service| forms(&service.name(cluster_name))).collect();
    names.extend(forms(&headless_service_name(cluster_name)).map(|host| format!("*.{host}")));
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_server_names_cover_every_service_and_pod_in_every_form() {
        let names = server_dns_names("db", "prod");
        for want in [
            "db-rw",
            "db-rw.prod",
            "db-rw.prod.svc",
            "db-rw.prod.svc.cluster.local",
            "db-ro.prod.svc",
            "db-r.prod.svc.cluster.local",
            "*.db",
            "*.db.prod",
            "*.db.prod.svc",
            "*.db.prod.svc.cluster.local",
        ] {
            assert!(names.iter().any(|n| n == want), "{want} in {names:?}");
        }
        assert_eq!(names.len(), 16);
    }

    #[test]
    fn secret_names_and_users() {
        assert_eq!(ca_secret_name("db"), "db-ca");
        assert_eq!(server_secret_name("db"), "db-server");
        assert_eq!(replication_client_secret_name("db"), "db-replication-client");
    }
}
