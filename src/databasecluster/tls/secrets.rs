//! The certificates' Secrets, built and read purely: the CA's (`Opaque`, `ca.crt` and `ca.key`,
//! and during a rotation `next.crt`, `next.key` or `previous.crt`: [`super::rotation`]) and each
//! leaf's (`kubernetes.io/tls`: `tls.crt`, `tls.key`, and `ca.crt`, the CAs to trust, as
//! cert-manager writes them).

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;

use super::issue::{KeyPem, not_after, signed_by};
use super::renew::LiveLeaf;
use super::rotation::CaSet;
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
/// The next CA's certificate, during a rotation, in the CA's Secret only.
pub const NEXT_CERT_KEY: &str = "next.crt";
/// The next CA's private key, during a rotation, in the CA's Secret only.
pub const NEXT_KEY_KEY: &str = "next.key";
/// The CA replaced, until it expires, in the CA's Secret only.
pub const PREVIOUS_CERT_KEY: &str = "previous.crt";
/// The type of a leaf's Secret.
pub const TLS_SECRET_TYPE: &str = "kubernetes.io/tls";

fn data(entries: &[(&str, &str)]) -> Option<BTreeMap<String, ByteString>> {
    Some(entries.iter().map(|(k, v)| ((*k).to_owned(), ByteString(v.as_bytes().to_vec()))).collect())
}

/// The CA's Secret `name`.
pub fn build_ca_secret(owner: &Owner, name: String, cas: &CaSet) -> Secret {
    let mut entries = vec![(CA_CERT_KEY, cas.current.cert.as_str()), (CA_KEY_KEY, cas.current.key.as_str())];
    if let Some(next) = &cas.next {
        entries.extend([(NEXT_CERT_KEY, next.cert.as_str()), (NEXT_KEY_KEY, next.key.as_str())]);
    }
    entries.extend(cas.previous.as_deref().map(|previous| (PREVIOUS_CERT_KEY, previous)));
    Secret {
        metadata: child_metadata(owner, name),
        type_: Some("Opaque".to_owned()),
        data: data(&entries),
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

/// The CAs a live CA Secret holds, when it holds both halves of the signing one (a next CA
/// without both halves is ignored).
pub fn read_ca(secret: &Secret) -> Option<CaSet> {
    let pair =
        |cert, key| Some(KeyPem { cert: secret_value(secret, cert)?, key: secret_value(secret, key)? });
    Some(CaSet {
        current: pair(CA_CERT_KEY, CA_KEY_KEY)?,
        next: pair(NEXT_CERT_KEY, NEXT_KEY_KEY),
        previous: secret_value(secret, PREVIOUS_CERT_KEY),
    })
}

/// The leaf a live leaf Secret holds, when it holds both halves.
pub fn read_leaf(secret: &Secret) -> Option<KeyPem> {
    Some(KeyPem { cert: secret_value(secret, TLS_CERT_KEY)?, key: secret_value(secret, TLS_KEY_KEY)? })
}

/// What [`super::renew::leaf_action`] needs of a live leaf Secret, whose signer should be the CA
/// `ca_cert`.
pub fn live_leaf(secret: &Secret, ca_cert: &str) -> LiveLeaf {
    let leaf = read_leaf(secret);
    LiveLeaf {
        signed_by_ca: leaf.as_ref().is_some_and(|leaf| signed_by(&leaf.cert, ca_cert)),
        not_after: leaf.and_then(|leaf| not_after(&leaf.cert).ok()),
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
        let cas = CaSet::new(ca.clone());
        let ca_secret = build_ca_secret(&owner, "db-ca".into(), &cas);
        assert_eq!(ca_secret.type_.as_deref(), Some("Opaque"));
        assert_eq!(read_ca(&ca_secret), Some(cas));
        assert_eq!(ca_secret.data.as_ref().unwrap().len(), 2);
        let next = issue_ca("default/db", now, Duration::from_secs(7200)).unwrap();
        let rotating = CaSet { current: ca.clone(), next: Some(next), previous: Some("OLD".into()) };
        assert_eq!(read_ca(&build_ca_secret(&owner, "db-ca".into(), &rotating)), Some(rotating));
        let leaf =
            issue_leaf(&ca, &Leaf::Client("replicator".into()), now, Duration::from_secs(600)).unwrap();
        let secret = build_leaf_secret(&owner, "db-replication-client".into(), &leaf, &ca.cert);
        assert_eq!(secret.type_.as_deref(), Some(TLS_SECRET_TYPE));
        assert_eq!(read_leaf(&secret), Some(leaf));
        let live = live_leaf(&secret, &ca.cert);
        assert!(live.signed_by_ca);
        assert_eq!(live.not_after, Some(now + jiff::SignedDuration::from_secs(600)));
        let other = issue_ca("default/db", now, Duration::from_secs(3600)).unwrap();
        assert!(!live_leaf(&secret, &other.cert).signed_by_ca, "the same name, another key");
        assert_eq!(
            live_leaf(&Secret::default(), &ca.cert),
            LiveLeaf { signed_by_ca: false, not_after: None }
        );
    }
}
