//! `spec.certificates`: the servers' certificate the user brings instead of the operator's (for
//! example a cert-manager `Certificate`'s `kubernetes.io/tls` Secret), and its check.

use serde::{Deserialize, Serialize};

use super::validation::is_storage_class_name;

/// Certificates the user brings. The operator then issues no server certificate; it still issues
/// its CA and the client certificates (replication, backups), which the servers trust for `cert`
/// authentication.
#[derive(Deserialize, Serialize, schemars::JsonSchema, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct CertificatesSpec {
    /// A `kubernetes.io/tls` Secret (`tls.crt`, `tls.key`) the servers present instead of
    /// `<name>-server`. It must name the `-rw`, `-ro` and `-r` Services and the pods under the
    /// headless Service as the operator's would (docs/tls.md). A replaced Secret is reloaded
    /// without a restart.
    #[serde(rename = "serverTLSSecret")]
    #[schemars(length(min = 1, max = 253))]
    pub server_tls_secret: String,

    /// A Secret whose `ca.crt` verifies the servers' certificate; by default the `ca.crt` of
    /// `serverTLSSecret` (as cert-manager writes it). Applications, standbys and backups verify
    /// the servers with it, and the app Secret carries it.
    #[serde(rename = "serverCASecret", default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub server_ca_secret: Option<String>,
}

/// The servers' certificate the user brings, checked: the Secrets to mount.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerCertificate {
    /// The `kubernetes.io/tls` Secret.
    pub tls_secret: String,
    /// The Secret whose `ca.crt` verifies it.
    pub ca_secret: String,
}

/// `spec.certificates` checked: `Err` names a Secret name that is not a DNS subdomain.
pub fn server_certificate(spec: Option<&CertificatesSpec>) -> Result<Option<ServerCertificate>, String> {
    let Some(spec) = spec else { return Ok(None) };
    let ca_secret = spec.server_ca_secret.clone().unwrap_or_else(|| spec.server_tls_secret.clone());
    for name in [&spec.server_tls_secret, &ca_secret] {
        if !is_storage_class_name(name) {
            return Err(name.clone());
        }
    }
    Ok(Some(ServerCertificate { tls_secret: spec.server_tls_secret.clone(), ca_secret }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ca_defaults_to_the_tls_secrets_own_and_names_are_checked() {
        let spec = |tls: &str, ca: Option<&str>| CertificatesSpec {
            server_tls_secret: tls.into(),
            server_ca_secret: ca.map(Into::into),
        };
        let certificate =
            |tls: &str, ca: &str| ServerCertificate { tls_secret: tls.into(), ca_secret: ca.into() };
        assert_eq!(server_certificate(None), Ok(None));
        assert_eq!(
            server_certificate(Some(&spec("db-tls", None))),
            Ok(Some(certificate("db-tls", "db-tls")))
        );
        assert_eq!(
            server_certificate(Some(&spec("db-tls", Some("ca")))),
            Ok(Some(certificate("db-tls", "ca")))
        );
        assert_eq!(server_certificate(Some(&spec("Bad_Name", None))), Err("Bad_Name".into()));
    }
}
