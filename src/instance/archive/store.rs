//! The object store client: S3 through the `object_store` crate (rustls on ring, TLS verification
//! always on, a private CA added from the mounted Secret), with short bounds so that a store that
//! hangs fails an attempt in well under a minute instead of holding the archiver.
//!
//! [`Store::put_new`] never overwrites (see the module docs of [`super`]); [`Store::get`] checks
//! what it reads against the checksum stored with it. Every error message passes through
//! [`scrub`] before it leaves this module.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::path::Path as ObjectPath;
use object_store::{
    Attribute, AttributeValue, Attributes, Certificate, ClientOptions, GetOptions, ObjectStore,
    ObjectStoreExt, PutMode, PutOptions, PutPayload, RetryConfig,
};
use sha2::{Digest, Sha256};
use thiserror::Error;

use super::config::StoreConfig;
use crate::databasecluster::api::object_store::Compression;

/// The metadata key of an object's checksum: the SHA-256 (hex) of the uncompressed bytes.
pub const CHECKSUM_METADATA: &str = "sha256";
/// How long one request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// How long connecting may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Retries of a failed request, and the time they may take in all.
const RETRIES: usize = 2;
const RETRY_TIMEOUT: Duration = Duration::from_secs(15);

/// What a store operation ran into, its message scrubbed of the credentials.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum StoreError {
    /// An object with the same name and different content is there: never overwritten.
    #[error(
        "{key} already exists in the object store with different content (sha256 {existing}, this file's {ours}): not overwritten"
    )]
    Conflict {
        /// The object's key.
        key: String,
        /// Its checksum.
        existing: String,
        /// The file's.
        ours: String,
    },
    /// What was read does not match the checksum stored with it.
    #[error(
        "{key} in the object store is damaged: its content's sha256 is {actual}, its metadata says {expected}"
    )]
    Damaged {
        /// The object's key.
        key: String,
        /// The recorded checksum.
        expected: String,
        /// The content's.
        actual: String,
    },
    /// The store could not be reached or refused the request.
    #[error("object store: {0}")]
    Store(String),
    /// The client could not be built.
    #[error("object store client: {0}")]
    Client(String),
}

/// How an upload went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Put {
    /// The object was written.
    Stored,
    /// It was there already with the same content.
    AlreadyThere,
}

/// A bucket and path in an object store.
#[derive(Debug, Clone)]
pub struct Store {
    inner: Arc<AmazonS3>,
    prefix: String,
    compression: Compression,
    secrets: Vec<String>,
}

/// `message` with every secret replaced by `***`.
pub fn scrub(message: &str, secrets: &[String]) -> String {
    secrets
        .iter()
        .filter(|s| s.len() >= 4)
        .fold(message.to_owned(), |text, secret| text.replace(secret.as_str(), "***"))
}

/// The SHA-256 of `bytes`, in hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

/// `plain` compressed as `compression` says.
pub fn compress(plain: &[u8], compression: Compression) -> std::io::Result<Vec<u8>> {
    use std::io::Write;
    match compression {
        Compression::None => Ok(plain.to_vec()),
        Compression::Gzip => {
            let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            encoder.write_all(plain)?;
            encoder.finish()
        }
    }
}

/// `stored` uncompressed.
pub fn decompress(stored: &[u8], compression: Compression) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    match compression {
        Compression::None => Ok(stored.to_vec()),
        Compression::Gzip => {
            let mut plain = Vec::new();
            flate2::read::GzDecoder::new(stored).read_to_end(&mut plain)?;
            Ok(plain)
        }
    }
}

/// The object name suffix of `compression`.
pub fn suffix(compression: Compression) -> &'static str {
    match compression {
        Compression::Gzip => ".gz",
        Compression::None => "",
    }
}

impl Store {
    /// A client for `config`. Needs a rustls crypto provider installed for the process
    /// ([`install_crypto_provider`]).
    pub fn new(config: &StoreConfig) -> Result<Store, StoreError> {
        Store::with_request_timeout(config, REQUEST_TIMEOUT)
    }

    /// A client whose requests may take up to `timeout` each (a base backup's parts and its
    /// download take longer than one WAL segment).
    pub fn with_request_timeout(config: &StoreConfig, timeout: Duration) -> Result<Store, StoreError> {
        let secrets: Vec<String> = config.secrets().into_iter().map(str::to_owned).collect();
        let mut options = ClientOptions::new().with_timeout(timeout).with_connect_timeout(CONNECT_TIMEOUT);
        if let Some(pem) = &config.ca_pem {
            for certificate in
                Certificate::from_pem_bundle(pem).map_err(|e| StoreError::Client(e.to_string()))?
            {
                options = options.with_root_certificate(certificate);
            }
        }
        let mut builder = AmazonS3Builder::new()
            .with_bucket_name(&config.bucket)
            .with_region(&config.region)
            .with_access_key_id(&config.access_key_id)
            .with_secret_access_key(&config.secret_access_key)
            .with_retry(RetryConfig {
                max_retries: RETRIES,
                retry_timeout: RETRY_TIMEOUT,
                ..RetryConfig::default()
            })
            .with_client_options(options);
        if let Some(token) = &config.session_token {
            builder = builder.with_token(token);
        }
        if let Some(endpoint) = &config.endpoint {
            // An S3-compatible store: path-style requests, plain HTTP only if the endpoint says so.
            builder = builder
                .with_endpoint(endpoint)
                .with_virtual_hosted_style_request(false)
                .with_allow_http(endpoint.starts_with("http://"));
        }
        let inner = builder.build().map_err(|e| StoreError::Client(scrub(&e.to_string(), &secrets)))?;
        Ok(Store {
            inner: Arc::new(inner),
            prefix: config.prefix.clone(),
            compression: config.compression,
            secrets,
        })
    }

    /// How this store compresses.
    pub fn compression(&self) -> Compression {
        self.compression
    }

    /// The full key of `name` under the destination's path.
    pub fn key(&self, name: &str) -> String {
        if self.prefix.is_empty() { name.to_owned() } else { format!("{}/{name}", self.prefix) }
    }

    /// The client, for the streaming transfers of base backups (`super::stream`).
    pub(crate) fn client(&self) -> &AmazonS3 {
        &self.inner
    }

    /// `error` as a [`StoreError`], scrubbed of the credentials.
    pub(crate) fn failed(&self, error: &object_store::Error) -> StoreError {
        StoreError::Store(scrub(&error.to_string(), &self.secrets))
    }

    /// Uploads `plain` as `name` (compressed, with its checksum) unless an object is there: the same
    /// content there is [`Put::AlreadyThere`], other content [`StoreError::Conflict`].
    pub async fn put_new(&self, name: &str, plain: &[u8]) -> Result<Put, StoreError> {
        let checksum = sha256_hex(plain);
        let key = self.key(&format!("{name}{}", suffix(self.compression)));
        let path = ObjectPath::from(key.as_str());
        let body = compress(plain, self.compression).map_err(|e| StoreError::Client(e.to_string()))?;
        let mut attributes = Attributes::new();
        attributes
            .insert(Attribute::Metadata(CHECKSUM_METADATA.into()), AttributeValue::from(checksum.clone()));
        let options = PutOptions { mode: PutMode::Create, attributes, ..PutOptions::default() };
        match self.inner.put_opts(&path, PutPayload::from(body), options).await {
            Ok(_) => Ok(Put::Stored),
            Err(object_store::Error::AlreadyExists { .. } | object_store::Error::Precondition { .. }) => {
                let existing = self.checksum_of(&path).await?;
                if existing == checksum {
                    Ok(Put::AlreadyThere)
                } else {
                    Err(StoreError::Conflict { key, existing, ours: checksum })
                }
            }
            Err(error) => Err(self.failed(&error)),
        }
    }

    /// The checksum recorded with the object at `path` (computed from its content when it has none).
    async fn checksum_of(&self, path: &ObjectPath) -> Result<String, StoreError> {
        let head = GetOptions { head: true, ..GetOptions::default() };
        let result = self.inner.get_opts(path, head).await.map_err(|e| self.failed(&e))?;
        if let Some(value) = result.attributes.get(&Attribute::Metadata(CHECKSUM_METADATA.into())) {
            return Ok(value.as_ref().to_owned());
        }
        let stored = self.inner.get(path).await.map_err(|e| self.failed(&e))?.bytes().await;
        let stored = stored.map_err(|e| self.failed(&e))?;
        let compression = if path.as_ref().ends_with(".gz") { Compression::Gzip } else { Compression::None };
        let plain = decompress(&stored, compression).map_err(|e| StoreError::Store(e.to_string()))?;
        Ok(sha256_hex(&plain))
    }

    /// The content of `name` (stored compressed or not), checked against its checksum; `None`
    /// when there is no such object.
    pub async fn get(&self, name: &str) -> Result<Option<Bytes>, StoreError> {
        for compression in [Compression::Gzip, Compression::None] {
            let key = self.key(&format!("{name}{}", suffix(compression)));
            let path = ObjectPath::from(key.as_str());
            let result = match self.inner.get(&path).await {
                Ok(result) => result,
                Err(object_store::Error::NotFound { .. }) => continue,
                Err(error) => return Err(self.failed(&error)),
            };
            let expected = result
                .attributes
                .get(&Attribute::Metadata(CHECKSUM_METADATA.into()))
                .map(|v| v.as_ref().to_owned());
            let stored = result.bytes().await.map_err(|e| self.failed(&e))?;
            let plain =
                decompress(&stored, compression).map_err(|e| StoreError::Store(format!("{key}: {e}")))?;
            let actual = sha256_hex(&plain);
            if let Some(expected) = expected.filter(|expected| *expected != actual) {
                return Err(StoreError::Damaged { key, expected, actual });
            }
            return Ok(Some(Bytes::from(plain)));
        }
        Ok(None)
    }
}

impl Store {
    /// The names (without the destination's path) of the objects under `dir`, sorted.
    pub async fn list(&self, dir: &str) -> Result<Vec<String>, StoreError> {
        use futures::TryStreamExt;
        let prefix = ObjectPath::from(self.key(dir).as_str());
        let found: Vec<_> =
            self.inner.list(Some(&prefix)).try_collect().await.map_err(|e| self.failed(&e))?;
        let skip = if self.prefix.is_empty() { 0 } else { self.prefix.len() + 1 };
        let mut names: Vec<String> =
            found.into_iter().map(|meta| meta.location.as_ref()[skip..].to_owned()).collect();
        names.sort();
        Ok(names)
    }

    /// Deletes the object `name` (its full name, suffix included); deleting a missing one is no error.
    pub async fn delete(&self, name: &str) -> Result<(), StoreError> {
        let path = ObjectPath::from(self.key(name).as_str());
        match self.inner.delete(&path).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(error) => Err(self.failed(&error)),
        }
    }
}

/// Installs ring as the process's rustls crypto provider (the S3 client's TLS), once.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_scrubbed_from_messages() {
        let secrets = vec!["AKIDEXAMPLE".to_owned(), "wJalrXUtnFEMI".to_owned()];
        let message = "403 for AKIDEXAMPLE with wJalrXUtnFEMI/x";
        assert_eq!(scrub(message, &secrets), "403 for *** with ***/x");
    }

    #[test]
    fn compression_round_trips_and_the_checksum_is_of_the_plain_bytes() {
        let plain = vec![7_u8; 64 * 1024];
        for compression in [Compression::Gzip, Compression::None] {
            let stored = compress(&plain, compression).unwrap();
            assert_eq!(decompress(&stored, compression).unwrap(), plain);
        }
        assert!(compress(&plain, Compression::Gzip).unwrap().len() < plain.len() / 10);
        assert_eq!(sha256_hex(b"abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    }
}
