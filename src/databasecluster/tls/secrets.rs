//! The certificates' Secrets, built and read purely: the CA's (`Opaque`, `ca.crt` and `ca.key`)
//! and each leaf's (`kubernetes.io/tls`: `tls.crt`, `tls.key`, and `ca.crt`, the CA that signed
//! it, as cert-manager writes them).

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;

use super::issue::{KeyPem, not_after};
use super::renew::LiveLeaf;
use crate::databasecluster::specs::credentials::secret_value;
use crate::databasecluster::specs::names::{Owner, child_metadata};

/// A leaf Secret's certificate.
pub const TLS_CERT_KEY: &str = "tls.crt";
/// A leaf Secret's private key.
pub const TLS_KEY_KEY: &str = "tls.key";
/// The CA certificate, in every certificate Secret.
pub const CA_CERT_KEY: &str = "ca.crt";
/// The CA's private key, in the CA's Secret only.
pub const CA_KEY_KEY: &str = "ca.key";
/// The type of a leaf's Secret.
pub const TLS_SECRET_TYPE: &str = "kubernetes.io/tls";

fn data(entries: &[(&str, &str)]) -> Option<BTreeMap<String, ByteString>> {
    Some(entries.iter().map(|(k, v)| ((*k).to_owned(), ByteString(v.as_bytes().to_vec()))).collect())
}

/// The CA's Secret `name`.
pub fn build_ca_secret(owner: &Owner, name: String, ca: &KeyPem) -> Secret {
    Secret {
        metadata: child_metadata(owner, name),
        type_: Some("Opaque".to_owned()),
        data: data(&[(CA_CERT_KEY, &ca.cert), (CA_KEY_KEY, &ca.key)]),
        ..Secret::default()
    }
}

/// A leaf's Secret `name`: `leaf` and the certificate of the CA that signed it.
pub fn build_leaf_secret(owner: &Owner, name: String, leaf: &KeyPem, ca_cert: &str) -> Secret {
    Secret {
        metadata: child_metadata(owner, name),
        type_: Some(TLS_SECRET_TYPE.to_owned()),
        data: data(&[(TLS_CERT_KEY, &leaf.cert), (TLS_KEY_KEY, &leaf.key), (CA_CERT_KEY, ca_cert)]),
        ..Secret::default()
    }
}

/// The CA a live CA Secret holds, when it holds both halves.
pub fn read_ca(secret: &Secret) -> Option<KeyPem> {
    Some(KeyPem { cert: secret_value(secret, CA_CERT_KEY)?, key: secret_value(secret, CA_KEY_KEY)? })
}

/// The leaf a live leaf Secret holds, when it holds both halves.
pub fn read_leaf(secret: &Secret) -> Option<KeyPem> {
    Some(KeyPem { cert: secret_value(secret, TLS_CERT_KEY)?, key: secret_value(secret, TLS_KEY_KEY)? })
}

/// What [`super::renew::leaf_action`] needs of a live leaf Secret.
pub fn live_leaf(secret: &Secret) -> LiveLeaf {
    LiveLeaf {
        ca_cert: secret_value(secret, CA_CERT_KEY),
        not_after: read_leaf(secret).and_then(|leaf| not_after(&leaf.cert).ok()),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::databasecluster::fixtures;
    use crate::databasecluster::tls::issue::{Leaf, issue_ca, issue_leaf};

    #[test]
    fn secrets_hold_what_is_read_back() {
        let owner = fixtures::owner();
        let now: jiff::Timestamp = "2026-12-07T12:00:00Z".parse().unwrap();
        let ca = issue_ca("default/db", now, Duration::from_secs(3600)).unwrap();
        let ca_secret = build_ca_secret(&owner, "db-ca".into(), &ca);
        assert_eq!(ca_secret.type_.as_deref(), Some("Opaque"));
        assert_eq!(read_ca(&ca_secret), Some(ca.clone()));
        assert_eq!(ca_secret.data.as_ref().unwrap().len(), 2);
        let leaf =
            issue_leaf(&ca, &Leaf::Client("replicator".into()), now, Duration::from_secs(600)).unwrap();
        let secret = build_leaf_secret(&owner, "db-replication-client".into(), &leaf, &ca.cert);
        assert_eq!(secret.type_.as_deref(), Some(TLS_SECRET_TYPE));
        assert_eq!(read_leaf(&secret), Some(leaf));
        let live = live_leaf(&secret);
        assert_eq!(live.ca_cert.as_deref(), Some(ca.cert.as_str()));
        assert_eq!(live.not_after, Some(now + jiff::SignedDuration::from_secs(600)));
        assert_eq!(live_leaf(&Secret::default()), LiveLeaf { ca_cert: None, not_after: None });
    }
}
