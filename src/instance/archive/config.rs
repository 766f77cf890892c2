//! The object store's settings as the instance manager reads them: environment variables the
//! operator sets from `spec.backup.objectStore` (none of them secret) and the credentials as files
//! of the mounted Secret (`$DBC_SECRETS/objectstore/`, mode 0440), read when a command needs them
//! and never logged: [`StoreConfig`]'s `Debug` leaves them out.
//!
//! | variable | meaning |
//! |---|---|
//! | `DBC_OBJECT_STORE_DESTINATION` | `s3://bucket/path` (no store without it) |
//! | `DBC_OBJECT_STORE_ENDPOINT` | an S3-compatible endpoint (default: AWS) |
//! | `DBC_OBJECT_STORE_REGION` | the region (default `us-east-1`) |
//! | `DBC_OBJECT_STORE_COMPRESSION` | `gzip` (default) or `none` |
//! | `DBC_WAL_ARCHIVE_TIMEOUT` | seconds; WAL archiving is on only when set |

use std::path::{Path, PathBuf};

use thiserror::Error;

use crate::databasecluster::api::object_store::{Compression, parse_destination};

/// The variable naming the destination.
pub const ENV_DESTINATION: &str = "DBC_OBJECT_STORE_DESTINATION";
/// The variable naming the endpoint.
pub const ENV_ENDPOINT: &str = "DBC_OBJECT_STORE_ENDPOINT";
/// The variable naming the region.
pub const ENV_REGION: &str = "DBC_OBJECT_STORE_REGION";
/// The variable naming the compression.
pub const ENV_COMPRESSION: &str = "DBC_OBJECT_STORE_COMPRESSION";
/// The variable holding `archiveTimeout` in seconds.
pub const ENV_ARCHIVE_TIMEOUT: &str = "DBC_WAL_ARCHIVE_TIMEOUT";
/// The credentials' directory under `$DBC_SECRETS`.
pub const CREDENTIALS_DIR: &str = "objectstore";
/// The CA bundle's directory under `$DBC_SECRETS`.
pub const CA_DIR: &str = "objectstore-ca";
/// The file of the access key id.
pub const ACCESS_KEY_ID_FILE: &str = "access-key-id";
/// The file of the secret access key.
pub const SECRET_ACCESS_KEY_FILE: &str = "secret-access-key";
/// The file of the session token (optional).
pub const SESSION_TOKEN_FILE: &str = "session-token";
/// The file of the CA bundle (optional).
pub const CA_FILE: &str = "ca.crt";
/// The region when none is set.
pub const DEFAULT_REGION: &str = "us-east-1";

/// What the store needs: where, how, and the credentials.
#[derive(Clone)]
pub struct StoreConfig {
    /// The bucket.
    pub bucket: String,
    /// The path in the bucket, without leading or trailing `/`.
    pub prefix: String,
    /// The endpoint of an S3-compatible store.
    pub endpoint: Option<String>,
    /// The region.
    pub region: String,
    /// How objects are compressed.
    pub compression: Compression,
    /// The access key id.
    pub access_key_id: String,
    /// The secret access key.
    pub secret_access_key: String,
    /// The session token, if any.
    pub session_token: Option<String>,
    /// A CA bundle (PEM) for a private endpoint.
    pub ca_pem: Option<Vec<u8>>,
}

impl std::fmt::Debug for StoreConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreConfig")
            .field("bucket", &self.bucket)
            .field("prefix", &self.prefix)
            .field("endpoint", &self.endpoint)
            .field("region", &self.region)
            .field("compression", &self.compression)
            .finish_non_exhaustive()
    }
}

impl StoreConfig {
    /// The secret values, for scrubbing them out of any message.
    pub fn secrets(&self) -> Vec<&str> {
        let mut secrets = vec![self.access_key_id.as_str(), self.secret_access_key.as_str()];
        secrets.extend(self.session_token.as_deref());
        secrets.retain(|s| !s.is_empty());
        secrets
    }
}

/// Why the store's settings are unusable.
#[derive(Debug, Error)]
pub enum ConfigError {
    /// The destination is not `s3://bucket/path`.
    #[error("{ENV_DESTINATION} {0:?} is not s3://<bucket>[/<path>]")]
    Destination(String),
    /// The compression is unknown.
    #[error("{ENV_COMPRESSION} {0:?} is neither gzip nor none")]
    Compression(String),
    /// A credentials file cannot be read.
    #[error("reading the object store's {what} from {path}: {source}")]
    Credentials {
        /// Which file.
        what: &'static str,
        /// Its path.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// The store's settings from `lookup` (the environment) and the Secrets mounted under
/// `secrets_dir`: `None` when no destination is set.
pub fn from_lookup(
    lookup: impl Fn(&str) -> Option<String>,
    secrets_dir: &Path,
) -> Result<Option<StoreConfig>, ConfigError> {
    let get = |name: &str| lookup(name).filter(|v| !v.is_empty());
    let Some(destination) = get(ENV_DESTINATION) else { return Ok(None) };
    let (bucket, prefix) =
        parse_destination(&destination).ok_or_else(|| ConfigError::Destination(destination.clone()))?;
    let compression = match get(ENV_COMPRESSION).as_deref() {
        None | Some("gzip") => Compression::Gzip,
        Some("none") => Compression::None,
        Some(other) => return Err(ConfigError::Compression(other.to_owned())),
    };
    let read = |dir: &str, file: &str, what: &'static str| {
        let path = secrets_dir.join(dir).join(file);
        match std::fs::read(&path) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(ConfigError::Credentials { what, path, source }),
        }
    };
    let text = |bytes: Option<Vec<u8>>| bytes.map(|b| String::from_utf8_lossy(&b).trim().to_owned());
    let required = |file: &str, what: &'static str| {
        text(read(CREDENTIALS_DIR, file, what)?).ok_or_else(|| ConfigError::Credentials {
            what,
            path: secrets_dir.join(CREDENTIALS_DIR).join(file),
            source: std::io::ErrorKind::NotFound.into(),
        })
    };
    Ok(Some(StoreConfig {
        bucket,
        prefix,
        endpoint: get(ENV_ENDPOINT),
        region: get(ENV_REGION).unwrap_or_else(|| DEFAULT_REGION.to_owned()),
        compression,
        access_key_id: required(ACCESS_KEY_ID_FILE, "access key id")?,
        secret_access_key: required(SECRET_ACCESS_KEY_FILE, "secret access key")?,
        session_token: text(read(CREDENTIALS_DIR, SESSION_TOKEN_FILE, "session token")?),
        ca_pem: read(CA_DIR, CA_FILE, "CA bundle")?,
    }))
}

/// `archiveTimeout` in seconds from `lookup`, when WAL archiving is on.
pub fn archive_timeout(lookup: impl Fn(&str) -> Option<String>) -> Option<u64> {
    lookup(ENV_ARCHIVE_TIMEOUT)?.parse().ok().filter(|s| *s >= 1)
}

/// The server options that turn archiving on, running `manager` (this binary's path) as the
/// archive command: empty when archiving is off. They come before `instance run -- …`'s own.
pub fn server_options(manager: &Path, archive_timeout: Option<u64>) -> Vec<String> {
    let Some(timeout) = archive_timeout else { return Vec::new() };
    let option = |name: &str, value: String| ["-c".to_owned(), format!("{name}={value}")];
    [
        option("archive_mode", "on".to_owned()),
        option("archive_timeout", format!("{timeout}s")),
        option("archive_command", format!("{} instance wal-archive %p", manager.display())),
    ]
    .concat()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: BTreeMap<String, String> = pairs.iter().map(|(k, v)| ((*k).into(), (*v).into())).collect();
        move |name| map.get(name).cloned()
    }

    #[test]
    fn the_store_is_read_from_the_environment_and_the_mounted_secret() {
        let dir = tempfile::tempdir().unwrap();
        assert!(from_lookup(env(&[]), dir.path()).unwrap().is_none());
        let lookup = env(&[(ENV_DESTINATION, "s3://bkt/a/b/"), (ENV_ENDPOINT, "http://127.0.0.1:9")]);
        let missing = from_lookup(&lookup, dir.path()).unwrap_err();
        assert!(missing.to_string().contains("access key id"), "{missing}");
        std::fs::create_dir_all(dir.path().join(CREDENTIALS_DIR)).unwrap();
        std::fs::write(dir.path().join(CREDENTIALS_DIR).join(ACCESS_KEY_ID_FILE), "AKID\n").unwrap();
        std::fs::write(dir.path().join(CREDENTIALS_DIR).join(SECRET_ACCESS_KEY_FILE), "s3cr3t").unwrap();
        let config = from_lookup(&lookup, dir.path()).unwrap().unwrap();
        assert_eq!((config.bucket.as_str(), config.prefix.as_str()), ("bkt", "a/b"));
        assert_eq!((config.region.as_str(), config.compression), ("us-east-1", Compression::Gzip));
        assert_eq!(config.secrets(), ["AKID", "s3cr3t"]);
        let shown = format!("{config:?}");
        assert!(!shown.contains("AKID") && !shown.contains("s3cr3t"), "{shown}");
        let bad = from_lookup(env(&[(ENV_DESTINATION, "s3://bkt"), (ENV_COMPRESSION, "lz4")]), dir.path());
        assert!(matches!(bad, Err(ConfigError::Compression(_))));
    }

    #[test]
    fn archiving_runs_this_binary_with_the_timeout() {
        assert!(server_options(Path::new("/controller/dbcluster-operator"), None).is_empty());
        let options = server_options(Path::new("/controller/dbcluster-operator"), Some(5)).join(" ");
        assert_eq!(
            options,
            "-c archive_mode=on -c archive_timeout=5s \
             -c archive_command=/controller/dbcluster-operator instance wal-archive %p"
        );
        assert_eq!(archive_timeout(env(&[(ENV_ARCHIVE_TIMEOUT, "60")])), Some(60));
        assert_eq!(archive_timeout(env(&[(ENV_ARCHIVE_TIMEOUT, "0")])), None);
        assert_eq!(archive_timeout(env(&[])), None);
    }
}
