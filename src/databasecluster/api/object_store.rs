//! What a user writes about object storage: `spec.backup.objectStore` (where base backups and WAL
//! go, S3 or an S3-compatible store) and `spec.backup.walArchive` (continuous archiving, on by
//! default with a store), and the checks the CRD cannot make ([`validate_object_store`]).
//!
//! The credentials are a Secret's name and keys, never values: the operator mounts them as files
//! into the pods that talk to the store (the instances), so they appear in no command line,
//! environment, log, Event or status. The CRD's CEL rules give each malformed field a message that
//! names the expected form; [`validate_object_store`] repeats them for objects stored under an older
//! CRD.

use kube::KubeSchema;
use serde::{Deserialize, Serialize};
use thiserror::Error;

/// `s3://<bucket>[/<path>]`: a bucket name as S3 allows it (3 to 63 characters, lowercase letters,
/// digits, dots and hyphens), then an optional path without whitespace.
pub const DESTINATION_PATTERN: &str = r"^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/[^\s]*)?$";
/// An endpoint: `http://` or `https://`, a host (and port), an optional path.
pub const ENDPOINT_PATTERN: &str = r"^https?://[^\s/?#]+(/[^\s?#]*)?$";
/// A duration of at least one second: a number and `s`, `m` or `h`.
pub const ARCHIVE_TIMEOUT_PATTERN: &str = r"^[1-9][0-9]{0,5}(s|m|h)$";
/// The CEL rule on `destination`.
const DESTINATION_RULE: &str = r"self.matches('^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/[^\\s]*)?$')";
/// Its message.
pub const DESTINATION_MESSAGE: &str = "destination must be s3://<bucket>[/<path>], the bucket 3 to 63 lowercase letters, digits, dots or hyphens";
/// The CEL rule on `endpoint`.
const ENDPOINT_RULE: &str = r"self.matches('^https?://[^\\s/?#]+(/[^\\s?#]*)?$')";
/// Its message.
pub const ENDPOINT_MESSAGE: &str =
    "endpoint must be an http:// or https:// URL such as https://s3.example.com";
/// The CEL rule on `archiveTimeout`.
const ARCHIVE_TIMEOUT_RULE: &str = "self.matches('^[1-9][0-9]{0,5}(s|m|h)$')";
/// Its message.
pub const ARCHIVE_TIMEOUT_MESSAGE: &str =
    "archiveTimeout must be a duration of at least 1s: a number and s, m or h, such as 60s or 5m";
/// `archiveTimeout` when unset, in seconds.
pub const DEFAULT_ARCHIVE_TIMEOUT_SECONDS: u64 = 60;
/// The Secret key of the access key id when `credentials.accessKeyIdKey` is unset.
pub const DEFAULT_ACCESS_KEY_ID_KEY: &str = "ACCESS_KEY_ID";
/// The Secret key of the secret access key when `credentials.secretAccessKeyKey` is unset.
pub const DEFAULT_SECRET_ACCESS_KEY_KEY: &str = "ACCESS_SECRET_KEY";
/// The Secret key of the CA bundle when `caSecret.key` is unset.
pub const DEFAULT_CA_KEY: &str = "ca.crt";

/// An object store for base backups and WAL.
#[derive(Deserialize, Serialize, KubeSchema, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ObjectStoreSpec {
    /// Where backups and WAL go: `s3://<bucket>[/<path>]`. Two clusters must never share one.
    #[schemars(length(max = 1024))]
    #[x_kube(validation = kube::core::Rule::new(DESTINATION_RULE).message(DESTINATION_MESSAGE))]
    pub destination: String,
    /// The endpoint of an S3-compatible store (default: AWS S3 of `region`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    #[x_kube(validation = kube::core::Rule::new(ENDPOINT_RULE).message(ENDPOINT_MESSAGE))]
    pub endpoint: Option<String>,
    /// The bucket's region (default `us-east-1`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64), regex(pattern = r"^[a-z0-9-]+$"))]
    pub region: Option<String>,
    /// The Secret holding the access key.
    pub credentials: StoreCredentials,
    /// A Secret holding the CA bundle (PEM) that signed a private endpoint's certificate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_secret: Option<SecretKey>,
    /// How objects are compressed: `gzip` (default) or `none`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compression: Option<Compression>,
}

/// A Secret in the cluster's namespace and the keys of the access key in it.
#[derive(Deserialize, Serialize, schemars::JsonSchema, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct StoreCredentials {
    /// The Secret's name.
    #[schemars(length(min = 1, max = 253), regex(pattern = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"))]
    pub name: String,
    /// The key of the access key id (default `ACCESS_KEY_ID`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253), regex(pattern = r"^[-._a-zA-Z0-9]+$"))]
    pub access_key_id_key: Option<String>,
    /// The key of the secret access key (default `ACCESS_SECRET_KEY`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253), regex(pattern = r"^[-._a-zA-Z0-9]+$"))]
    pub secret_access_key_key: Option<String>,
    /// The key of a session token, if the credentials have one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253), regex(pattern = r"^[-._a-zA-Z0-9]+$"))]
    pub session_token_key: Option<String>,
}

/// One key of a Secret in the cluster's namespace.
#[derive(Deserialize, Serialize, schemars::JsonSchema, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct SecretKey {
    /// The Secret's name.
    #[schemars(length(min = 1, max = 253), regex(pattern = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"))]
    pub name: String,
    /// The key (default `ca.crt`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253), regex(pattern = r"^[-._a-zA-Z0-9]+$"))]
    pub key: Option<String>,
}

/// How objects in the store are compressed.
#[derive(Deserialize, Serialize, schemars::JsonSchema, Clone, Copy, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Compression {
    /// gzip (the fast level): WAL segments shrink to a fraction.
    #[default]
    Gzip,
    /// Stored as they are.
    None,
}

impl Compression {
    /// Its name, as in the spec and in the instance manager's environment.
    pub fn as_str(self) -> &'static str {
        match self {
            Compression::Gzip => "gzip",
            Compression::None => "none",
        }
    }
}

/// Continuous WAL archiving to `objectStore`.
#[derive(Deserialize, Serialize, KubeSchema, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct WalArchiveSpec {
    /// Archive every WAL segment (default `true` when `objectStore` is set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// The longest a committed transaction waits before its WAL leaves the cluster: at least
    /// `1s` (default `60s`). PostgreSQL switches to a new segment after this long with writes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 16))]
    #[x_kube(validation = kube::core::Rule::new(ARCHIVE_TIMEOUT_RULE).message(ARCHIVE_TIMEOUT_MESSAGE))]
    pub archive_timeout: Option<String>,
}

/// An object store configuration the operator can act on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ValidObjectStore {
    /// The spec as written.
    pub spec: ObjectStoreSpec,
    /// The bucket of `destination`.
    pub bucket: String,
    /// The path in the bucket (no leading or trailing `/`; may be empty).
    pub prefix: String,
    /// The compression.
    pub compression: Compression,
    /// Seconds of `archiveTimeout` when WAL archiving is on.
    pub archive_timeout_seconds: Option<u64>,
}

impl ValidObjectStore {
    /// The key of the access key id in the credentials Secret.
    pub fn access_key_id_key(&self) -> &str {
        self.spec.credentials.access_key_id_key.as_deref().unwrap_or(DEFAULT_ACCESS_KEY_ID_KEY)
    }

    /// The key of the secret access key in the credentials Secret.
    pub fn secret_access_key_key(&self) -> &str {
        self.spec.credentials.secret_access_key_key.as_deref().unwrap_or(DEFAULT_SECRET_ACCESS_KEY_KEY)
    }
}

/// Why an object store setting cannot be acted on (shown in the `Ready` condition).
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum ObjectStoreError {
    /// `destination` is not `s3://bucket/path`.
    #[error("spec.backup.objectStore.destination {0:?}: {DESTINATION_MESSAGE}")]
    Destination(String),
    /// `endpoint` is not a URL.
    #[error("spec.backup.objectStore.endpoint {0:?}: {ENDPOINT_MESSAGE}")]
    Endpoint(String),
    /// `archiveTimeout` is not a duration of at least a second.
    #[error("spec.backup.walArchive.archiveTimeout {0:?}: {ARCHIVE_TIMEOUT_MESSAGE}")]
    ArchiveTimeout(String),
    /// `walArchive` is set without a store to archive to.
    #[error("spec.backup.walArchive needs spec.backup.objectStore: WAL is archived to the object store")]
    ArchiveWithoutStore,
}

/// `(bucket, prefix)` of an `s3://bucket/path` destination, if it is one.
pub fn parse_destination(destination: &str) -> Option<(String, String)> {
    let rest = destination.strip_prefix("s3://")?;
    let (bucket, path) = rest.split_once('/').unwrap_or((rest, ""));
    let bucket_ok = (3..=63).contains(&bucket.len())
        && bucket.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-')
        && bucket.bytes().next().is_some_and(|b| b.is_ascii_alphanumeric())
        && bucket.bytes().last().is_some_and(|b| b.is_ascii_alphanumeric());
    let path_ok = !path.contains(char::is_whitespace);
    (bucket_ok && path_ok).then(|| (bucket.to_owned(), path.trim_matches('/').to_owned()))
}

/// Seconds in `60s`, `5m` or `1h` (at least one).
pub fn parse_archive_timeout(text: &str) -> Option<u64> {
    let unit = match text.chars().last()? {
        's' => 1,
        'm' => 60,
        'h' => 3600,
        _ => return None,
    };
    let number = &text[..text.len() - 1];
    if number.is_empty() || number.len() > 6 || !number.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    number.parse::<u64>().ok()?.checked_mul(unit).filter(|s| *s >= 1)
}

/// The object store configuration of `store` and `wal_archive`: `None` without a store.
pub fn validate_object_store(
    store: Option<&ObjectStoreSpec>,
    wal_archive: Option<&WalArchiveSpec>,
) -> Result<Option<ValidObjectStore>, ObjectStoreError> {
    let Some(store) = store else {
        return match wal_archive {
            Some(archive) if archive.enabled != Some(false) => Err(ObjectStoreError::ArchiveWithoutStore),
            _ => Ok(None),
        };
    };
    let (bucket, prefix) = parse_destination(&store.destination)
        .ok_or_else(|| ObjectStoreError::Destination(store.destination.clone()))?;
    if let Some(endpoint) = &store.endpoint {
        let valid = ["http://", "https://"].iter().any(|scheme| {
            endpoint.strip_prefix(scheme).is_some_and(|rest| {
                let host = rest.split('/').next().unwrap_or_default();
                !host.is_empty() && !rest.contains(char::is_whitespace) && !rest.contains(['?', '#'])
            })
        });
        if !valid {
            return Err(ObjectStoreError::Endpoint(endpoint.clone()));
        }
    }
    let archive = wal_archive.cloned().unwrap_or_default();
    let archive_timeout_seconds = match (archive.enabled.unwrap_or(true), archive.archive_timeout) {
        (false, _) => None,
        (true, None) => Some(DEFAULT_ARCHIVE_TIMEOUT_SECONDS),
        (true, Some(text)) => {
            Some(parse_archive_timeout(&text).ok_or(ObjectStoreError::ArchiveTimeout(text))?)
        }
    };
    Ok(Some(ValidObjectStore {
        spec: store.clone(),
        bucket,
        prefix,
        compression: store.compression.unwrap_or_default(),
        archive_timeout_seconds,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store(destination: &str) -> ObjectStoreSpec {
        ObjectStoreSpec {
            destination: destination.into(),
            endpoint: None,
            region: None,
            credentials: StoreCredentials {
                name: "s3".into(),
                access_key_id_key: None,
                secret_access_key_key: None,
                session_token_key: None,
            },
            ca_secret: None,
            compression: None,
        }
    }

    #[test]
    fn destinations_are_a_bucket_and_a_path() {
        let regex = regex::Regex::new(DESTINATION_PATTERN).unwrap();
        assert_eq!(parse_destination("s3://backups/prod/db"), Some(("backups".into(), "prod/db".into())));
        assert_eq!(parse_destination("s3://backups/"), Some(("backups".into(), String::new())));
        assert_eq!(parse_destination("s3://my.bucket-1"), Some(("my.bucket-1".into(), String::new())));
        for bad in
            ["gs://backups/x", "s3://", "s3://ab", "s3://Upper/x", "s3://-bad/x", "s3://b/a b", "backups"]
        {
            assert_eq!(parse_destination(bad), None, "{bad}");
            assert!(!regex.is_match(bad), "{bad} passes the CRD's pattern");
        }
    }

    #[test]
    fn archiving_is_on_by_default_with_a_store_and_its_timeout_at_least_a_second() {
        let valid = validate_object_store(Some(&store("s3://bkt/p")), None).unwrap().unwrap();
        assert_eq!(valid.archive_timeout_seconds, Some(60));
        assert_eq!(valid.compression, Compression::Gzip);
        assert_eq!(
            (valid.access_key_id_key(), valid.secret_access_key_key()),
            ("ACCESS_KEY_ID", "ACCESS_SECRET_KEY")
        );
        let archive =
            |enabled, timeout: &str| WalArchiveSpec { enabled, archive_timeout: Some(timeout.into()) };
        let five =
            validate_object_store(Some(&store("s3://bkt")), Some(&archive(None, "5m"))).unwrap().unwrap();
        assert_eq!(five.archive_timeout_seconds, Some(300));
        let off = validate_object_store(Some(&store("s3://bkt")), Some(&archive(Some(false), "1s"))).unwrap();
        assert_eq!(off.unwrap().archive_timeout_seconds, None);
        for bad in ["0s", "1", "1d", "-1s", "1.5s", "s"] {
            let error =
                validate_object_store(Some(&store("s3://bkt")), Some(&archive(None, bad))).unwrap_err();
            assert_eq!(error, ObjectStoreError::ArchiveTimeout(bad.into()));
            assert!(error.to_string().contains("at least 1s"), "{error}");
        }
        assert_eq!(parse_archive_timeout("1s"), Some(1));
    }

    #[test]
    fn a_bad_store_or_an_archive_without_one_is_refused_with_the_field_named() {
        let error = validate_object_store(Some(&store("s3://x")), None).unwrap_err();
        assert!(error.to_string().starts_with("spec.backup.objectStore.destination"), "{error}");
        let mut bad_endpoint = store("s3://bkt");
        bad_endpoint.endpoint = Some("minio:9000".into());
        let error = validate_object_store(Some(&bad_endpoint), None).unwrap_err();
        assert_eq!(error, ObjectStoreError::Endpoint("minio:9000".into()));
        bad_endpoint.endpoint = Some("http://127.0.0.1:9000".into());
        assert!(validate_object_store(Some(&bad_endpoint), None).is_ok());
        let archive = WalArchiveSpec::default();
        assert_eq!(validate_object_store(None, Some(&archive)), Err(ObjectStoreError::ArchiveWithoutStore));
        let off = WalArchiveSpec { enabled: Some(false), archive_timeout: None };
        assert_eq!(validate_object_store(None, Some(&off)), Ok(None));
    }
}
