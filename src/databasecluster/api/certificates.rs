//! `spec.certificates`: the certificates the user brings instead of the operator's (for example
//! cert-manager `Certificate`s' `kubernetes.io/tls` Secrets), and their check.
//!
//! Two independent halves, as in CloudNativePG:
//! - the servers': `serverTLSSecret` (and optionally `serverCASecret`, the CA that verifies it);
//! - the clients': `clientCASecret` (the CA the servers verify client certificates against) and
//!   optionally `replicationTLSSecret` (the replication user's client certificate, signed by it).
//!   Without `replicationTLSSecret` the operator signs the replication certificate with the client
//!   CA, whose Secret must then hold its key (`ca.key`).

use serde::{Deserialize, Serialize};

use super::validation::is_storage_class_name;

/// Certificates the user brings. The operator then issues none of what it was given: with
/// `serverTLSSecret` no server certificate, with `clientCASecret` no CA for the clients, with
/// `replicationTLSSecret` no client certificate at all.
#[derive(Deserialize, Serialize, schemars::JsonSchema, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct CertificatesSpec {
    /// A `kubernetes.io/tls` Secret (`tls.crt`, `tls.key`) the servers present instead of
    /// `<name>-server`. It must name the `-rw`, `-ro` and `-r` Services and the pods under the
    /// headless Service as the operator's would (docs/tls.md). A replaced Secret is reloaded
    /// without a restart.
    #[serde(rename = "serverTLSSecret", default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub server_tls_secret: Option<String>,

    /// A Secret whose `ca.crt` verifies the servers' certificate; by default the `ca.crt` of
    /// `serverTLSSecret` (as cert-manager writes it). Applications, standbys and backups verify
    /// the servers with it, and the app Secret carries it. Only with `serverTLSSecret`.
    #[serde(rename = "serverCASecret", default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub server_ca_secret: Option<String>,

    /// A Secret whose `ca.crt` is the CA the servers verify client certificates against
    /// (replication and backups authenticate by certificate), instead of the operator's CA. It
    /// must also hold `ca.key` unless `replicationTLSSecret` is given: the operator then signs the
    /// replication certificate with it.
    #[serde(rename = "clientCASecret", default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub client_ca_secret: Option<String>,

    /// A `kubernetes.io/tls` Secret with the replication user's client certificate (common name
    /// `replicator`, signed by `clientCASecret`'s CA): standbys and backups present it. Only with
    /// `clientCASecret`. A replaced Secret is picked up without a restart.
    #[serde(rename = "replicationTLSSecret", default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub replication_tls_secret: Option<String>,
}

/// The servers' certificate the user brings, checked: the Secrets to mount.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerCertificate {
    /// The `kubernetes.io/tls` Secret.
    pub tls_secret: String,
    /// The Secret whose `ca.crt` verifies it.
    pub ca_secret: String,
}

/// The clients' CA the user brings, checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientCertificates {
    /// The Secret whose `ca.crt` the servers verify client certificates against.
    pub ca_secret: String,
    /// The replication user's `kubernetes.io/tls` Secret, when the user brings it too.
    pub replication_secret: Option<String>,
}

/// `spec.certificates` checked.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UserCertificates {
    /// The servers' certificate, if the user brings it.
    pub server: Option<ServerCertificate>,
    /// The clients' CA, if the user brings it.
    pub client: Option<ClientCertificates>,
}

/// `spec.certificates` checked: `Err` says what is wrong (a name that is not a DNS subdomain, or a
/// Secret named without the one it goes with).
pub fn user_certificates(spec: Option<&CertificatesSpec>) -> Result<UserCertificates, String> {
    let Some(spec) = spec else { return Ok(UserCertificates::default()) };
    let names = [
        &spec.server_tls_secret,
        &spec.server_ca_secret,
        &spec.client_ca_secret,
        &spec.replication_tls_secret,
    ];
    if let Some(bad) = names.into_iter().flatten().find(|name| !is_storage_class_name(name)) {
        return Err(format!("{bad:?} is not a Secret name"));
    }
    if spec.server_ca_secret.is_some() && spec.server_tls_secret.is_none() {
        return Err("serverCASecret needs serverTLSSecret".to_owned());
    }
    if spec.replication_tls_secret.is_some() && spec.client_ca_secret.is_none() {
        return Err("replicationTLSSecret needs clientCASecret".to_owned());
    }
    let server = spec.server_tls_secret.as_ref().map(|tls| ServerCertificate {
        tls_secret: tls.clone(),
        ca_secret: spec.server_ca_secret.clone().unwrap_or_else(|| tls.clone()),
    });
    let client = spec.client_ca_secret.as_ref().map(|ca| ClientCertificates {
        ca_secret: ca.clone(),
        replication_secret: spec.replication_tls_secret.clone(),
    });
    Ok(UserCertificates { server, client })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(names: [Option<&str>; 4]) -> CertificatesSpec {
        let [server_tls, server_ca, client_ca, replication] = names.map(|n| n.map(str::to_owned));
        CertificatesSpec {
            server_tls_secret: server_tls,
            server_ca_secret: server_ca,
            client_ca_secret: client_ca,
            replication_tls_secret: replication,
        }
    }

    #[test]
    fn the_server_ca_defaults_to_the_tls_secrets_own_and_names_are_checked() {
        let certificate =
            |tls: &str, ca: &str| Some(ServerCertificate { tls_secret: tls.into(), ca_secret: ca.into() });
        let server = |names| user_certificates(Some(&spec(names))).map(|c| c.server);
        assert_eq!(user_certificates(None), Ok(UserCertificates::default()));
        assert_eq!(server([Some("db-tls"), None, None, None]), Ok(certificate("db-tls", "db-tls")));
        assert_eq!(server([Some("db-tls"), Some("ca"), None, None]), Ok(certificate("db-tls", "ca")));
        assert_eq!(
            server([Some("Bad_Name"), None, None, None]),
            Err("\"Bad_Name\" is not a Secret name".into())
        );
        assert_eq!(
            server([None, Some("ca"), None, None]),
            Err("serverCASecret needs serverTLSSecret".into())
        );
    }

    #[test]
    fn the_client_ca_stands_alone_and_the_replication_certificate_needs_it() {
        let client = |names| user_certificates(Some(&spec(names))).map(|c| (c.server, c.client));
        let ca = |replication: Option<&str>| ClientCertificates {
            ca_secret: "client-ca".into(),
            replication_secret: replication.map(Into::into),
        };
        assert_eq!(client([None, None, Some("client-ca"), None]), Ok((None, Some(ca(None)))));
        assert_eq!(client([None, None, Some("client-ca"), Some("repl")]), Ok((None, Some(ca(Some("repl"))))));
        assert_eq!(
            client([None, None, None, Some("repl")]),
            Err("replicationTLSSecret needs clientCASecret".into())
        );
        assert_eq!(
            client([None, None, Some("client_ca"), None]),
            Err("\"client_ca\" is not a Secret name".into())
        );
    }
}
