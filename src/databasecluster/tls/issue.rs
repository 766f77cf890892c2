//! Issuing certificates with `rcgen`: the cluster's CA, and leaf certificates it signs (the
//! servers', and clients' for `cert` authentication). Every key is ECDSA P-256 with SHA-256,
//! fresh for each certificate. Pure but for the CSPRNG: the time comes in.
//!
//! The CA's key is only ever read here, to sign; [`KeyPem`]'s `Debug` never shows a key.

use std::time::Duration;

use jiff::Timestamp;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
    KeyPair, KeyUsagePurpose, PKCS_ECDSA_P256_SHA256,
};
use thiserror::Error;

/// How long before `now` a certificate's validity starts: room for clocks a little behind.
pub const BACKDATE: Duration = Duration::from_secs(300);

/// A certificate and its private key, in PEM.
#[derive(Clone, PartialEq, Eq)]
pub struct KeyPem {
    /// The certificate.
    pub cert: String,
    /// Its private key (PKCS#8).
    pub key: String,
}

impl std::fmt::Debug for KeyPem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyPem").field("key", &"<redacted>").finish_non_exhaustive()
    }
}

/// What a leaf certificate is for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Leaf {
    /// A server, under these DNS names (the first is its common name too).
    Server(Vec<String>),
    /// A client logging in as this database user (its common name).
    Client(String),
}

/// A certificate could not be made or read.
#[derive(Debug, Error)]
pub enum IssueError {
    /// rcgen refused the parameters or the key (the CA's key or certificate unreadable included).
    #[error("{what}: {source}")]
    Rcgen {
        /// What was being done.
        what: &'static str,
        /// Why.
        source: rcgen::Error,
    },
    /// A time outside what a certificate can carry.
    #[error("a certificate's validity is out of range")]
    Time,
    /// A PEM text holds no readable certificate.
    #[error("not a PEM certificate: {0}")]
    Parse(String),
}

fn rcgen_error(what: &'static str) -> impl FnOnce(rcgen::Error) -> IssueError {
    move |source| IssueError::Rcgen { what, source }
}

fn offset(at: Timestamp) -> Result<time::OffsetDateTime, IssueError> {
    time::OffsetDateTime::from_unix_timestamp(at.as_second()).map_err(|_| IssueError::Time)
}

fn validity(params: &mut CertificateParams, now: Timestamp, valid_for: Duration) -> Result<(), IssueError> {
    let span = |d: Duration| jiff::SignedDuration::try_from(d).map_err(|_| IssueError::Time);
    let start = now.checked_sub(span(BACKDATE)?).map_err(|_| IssueError::Time)?;
    let end = now.checked_add(span(valid_for)?).map_err(|_| IssueError::Time)?;
    params.not_before = offset(start)?;
    params.not_after = offset(end)?;
    Ok(())
}

fn fresh_key() -> Result<KeyPair, IssueError> {
    KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).map_err(rcgen_error("generating a key"))
}

/// A new self-signed CA for the cluster `cluster` (`<namespace>/<name>`), valid `valid_for` from
/// `now`; it signs certificates only (path length 0).
pub fn issue_ca(cluster: &str, now: Timestamp, valid_for: Duration) -> Result<KeyPem, IssueError> {
    let mut params = CertificateParams::default();
    let mut name = DistinguishedName::new();
    name.push(DnType::OrganizationName, "dbcluster-operator");
    name.push(DnType::CommonName, format!("{cluster} CA"));
    params.distinguished_name = name;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    validity(&mut params, now, valid_for)?;
    let key = fresh_key()?;
    let cert = params.self_signed(&key).map_err(rcgen_error("self-signing the CA"))?;
    Ok(KeyPem { cert: cert.pem(), key: key.serialize_pem() })
}

/// A new certificate for `leaf`, signed by `ca`, valid `valid_for` from `now` but never past the
/// CA's own expiry (a certificate outliving its issuer would fail verification once the CA has
/// expired, whatever its own dates say).
pub fn issue_leaf(
    ca: &KeyPem,
    leaf: &Leaf,
    now: Timestamp,
    valid_for: Duration,
) -> Result<KeyPem, IssueError> {
    let ca_key = KeyPair::from_pem(&ca.key).map_err(rcgen_error("reading the CA's key"))?;
    let issuer = Issuer::from_ca_cert_pem(&ca.cert, ca_key).map_err(rcgen_error("reading the CA"))?;
    let (mut params, common_name, usage) = match leaf {
        Leaf::Server(names) => (
            CertificateParams::new(names.clone()).map_err(rcgen_error("naming the server"))?,
            names.first().cloned().unwrap_or_default(),
            ExtendedKeyUsagePurpose::ServerAuth,
        ),
        Leaf::Client(user) => {
            (CertificateParams::default(), user.clone(), ExtendedKeyUsagePurpose::ClientAuth)
        }
    };
    let mut name = DistinguishedName::new();
    name.push(DnType::CommonName, common_name);
    params.distinguished_name = name;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![usage];
    params.use_authority_key_identifier_extension = true;
    validity(&mut params, now, valid_for)?;
    params.not_after = params.not_after.min(offset(not_after(&ca.cert)?)?);
    let key = fresh_key()?;
    let cert = params.signed_by(&key, &issuer).map_err(rcgen_error("signing a certificate"))?;
    Ok(KeyPem { cert: cert.pem(), key: key.serialize_pem() })
}

fn first_pem(cert_pem: &str) -> Result<x509_parser::pem::Pem, IssueError> {
    let (_, pem) = x509_parser::pem::parse_x509_pem(cert_pem.as_bytes())
        .map_err(|error| IssueError::Parse(error.to_string()))?;
    Ok(pem)
}

fn timestamp(time: x509_parser::time::ASN1Time) -> Result<Timestamp, IssueError> {
    Timestamp::from_second(time.timestamp()).map_err(|error| IssueError::Parse(error.to_string()))
}

/// When the first certificate of a PEM text expires.
pub fn not_after(cert_pem: &str) -> Result<Timestamp, IssueError> {
    let pem = first_pem(cert_pem)?;
    let cert = pem.parse_x509().map_err(|error| IssueError::Parse(error.to_string()))?;
    timestamp(cert.validity().not_after)
}

/// When the first certificate of a PEM text became valid.
pub fn not_before(cert_pem: &str) -> Result<Timestamp, IssueError> {
    let pem = first_pem(cert_pem)?;
    let cert = pem.parse_x509().map_err(|error| IssueError::Parse(error.to_string()))?;
    timestamp(cert.validity().not_before)
}

/// Whether the certificate `cert_pem` was signed by the key of the CA `ca_pem` (both first
/// certificates of their PEM texts); `false` when either is unreadable.
pub fn signed_by(cert_pem: &str, ca_pem: &str) -> bool {
    let (Ok(cert), Ok(ca)) = (first_pem(cert_pem), first_pem(ca_pem)) else { return false };
    let (Ok(cert), Ok(ca)) = (cert.parse_x509(), ca.parse_x509()) else { return false };
    cert.issuer() == ca.subject() && cert.verify_signature(Some(ca.public_key())).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: Duration = Duration::from_secs(86_400);

    fn now() -> Timestamp {
        "2026-12-07T12:00:00Z".parse().unwrap()
    }

    fn parsed(pem: &str) -> x509_parser::pem::Pem {
        x509_parser::pem::parse_x509_pem(pem.as_bytes()).unwrap().1
    }

    #[test]
    fn the_ca_signs_a_server_certificate_for_its_names_valid_as_asked() {
        let ca = issue_ca("prod/db", now(), 3650 * DAY).unwrap();
        let names = vec!["db-rw.prod.svc".to_owned(), "*.db.prod.svc".to_owned()];
        let server = issue_leaf(&ca, &Leaf::Server(names), now(), 90 * DAY).unwrap();
        assert_eq!(not_after(&server.cert).unwrap(), now() + jiff::SignedDuration::from_hours(90 * 24));
        let ca_pem = parsed(&ca.cert);
        let ca_cert = ca_pem.parse_x509().unwrap();
        let server_pem = parsed(&server.cert);
        let cert = server_pem.parse_x509().unwrap();
        assert_eq!(cert.issuer(), ca_cert.subject());
        assert!(cert.verify_signature(Some(ca_cert.public_key())).is_ok(), "signed by the CA's key");
        assert!(ca_cert.is_ca() && !cert.is_ca());
        let sans = cert.subject_alternative_name().unwrap().unwrap().value;
        let dns: Vec<String> = sans.general_names.iter().map(|n| n.to_string()).collect();
        assert_eq!(dns, ["DNSName(db-rw.prod.svc)", "DNSName(*.db.prod.svc)"]);
        assert!(cert.extended_key_usage().unwrap().unwrap().value.server_auth);
        assert_eq!(
            cert.public_key().algorithm.algorithm,
            x509_parser::oid_registry::OID_KEY_TYPE_EC_PUBLIC_KEY
        );
        assert!(cert.validity().not_before.timestamp() < now().as_second(), "backdated for skewed clocks");
        assert!(signed_by(&server.cert, &ca.cert) && !signed_by(&ca.cert, &server.cert));
        let other = issue_ca("prod/db", now(), 3650 * DAY).unwrap();
        assert!(!signed_by(&server.cert, &other.cert), "the same name, another key");
        assert!(!signed_by("garbage", &ca.cert));
    }

    #[test]
    fn a_leaf_never_outlives_its_ca() {
        let ca = issue_ca("prod/db", now(), DAY).unwrap();
        let leaf = issue_leaf(&ca, &Leaf::Client("replicator".into()), now(), 90 * DAY).unwrap();
        assert_eq!(not_after(&leaf.cert).unwrap(), not_after(&ca.cert).unwrap());
        assert_eq!(not_before(&ca.cert).unwrap(), now() - jiff::SignedDuration::from_secs(300));
    }

    #[test]
    fn a_client_certificate_names_its_user_and_is_for_clients_only() {
        let ca = issue_ca("prod/db", now(), 3650 * DAY).unwrap();
        let client = issue_leaf(&ca, &Leaf::Client("replicator".into()), now(), DAY).unwrap();
        let pem = parsed(&client.cert);
        let cert = pem.parse_x509().unwrap();
        let cn: Vec<_> =
            cert.subject().iter_common_name().map(|cn| cn.as_str().unwrap().to_owned()).collect();
        assert_eq!(cn, ["replicator"]);
        let usage = cert.extended_key_usage().unwrap().unwrap().value;
        assert!(usage.client_auth && !usage.server_auth);
    }

    #[test]
    fn keys_are_fresh_and_never_shown() {
        let ca = issue_ca("prod/db", now(), DAY).unwrap();
        let a = issue_leaf(&ca, &Leaf::Client("x".into()), now(), DAY).unwrap();
        let b = issue_leaf(&ca, &Leaf::Client("x".into()), now(), DAY).unwrap();
        assert_ne!(a.key, b.key);
        assert!(!format!("{a:?}").contains("PRIVATE"), "{a:?}");
        assert!(matches!(not_after("not a certificate"), Err(IssueError::Parse(_))));
        let other = issue_ca("prod/other", now(), DAY).unwrap();
        let mixed = KeyPem { cert: ca.cert.clone(), key: "garbage".into() };
        assert!(issue_leaf(&mixed, &Leaf::Client("x".into()), now(), DAY).is_err());
        assert_ne!(other.cert, ca.cert);
    }
}
