//! The certificate the reviewed listeners serve TLS with (`run --metrics-secure`), as
//! controller-runtime's secure metrics serving does: from a directory holding `tls.crt` (PEM, the
//! certificate then its chain) and `tls.key` (PEM, PKCS#8, PKCS#1 or SEC1) — a Secret volume, as
//! cert-manager provides one — or, without a directory, a self-signed certificate generated in
//! memory at start (see [`self_signed_names`] for its names), logged by its SHA-256 fingerprint,
//! never its key.
//!
//! A directory is read again every [`RELOAD_PERIOD`] (two small files); when its contents changed,
//! the new pair is served to the handshakes that follow, and connections already open keep theirs.
//! At start a missing or bad file is an error naming the path; later one keeps the certificate
//! served and logs a WARN once per bad content (a Secret volume's files are swapped at once, so a
//! half-written pair is rare and the next read after it is whole). rustls's defaults: TLS 1.2 and
//! 1.3 only, on the ring provider kube already uses. Parsing is pure ([`certified_key`]); only
//! [`ServedCertificate::load`] and [`ServedCertificate::watch`] touch files. [`client_connector`]
//! is the other side (for `status --operator-url https://…`): verification always on.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Mutex, RwLock};
use rustls::ServerConfig;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use sha2::{Digest, Sha256};
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

/// The certificate file of a certificate directory (a `kubernetes.io/tls` Secret's key).
pub const CERT_FILE: &str = "tls.crt";
/// The private key file of a certificate directory.
pub const KEY_FILE: &str = "tls.key";
/// How often a certificate directory is read again for a changed pair.
pub const RELOAD_PERIOD: Duration = Duration::from_secs(2);

/// Why no certificate could be served.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read.
    #[error("cannot read {path}: {reason}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// A file's contents are not what it should hold.
    #[error("{path}: {reason}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong, e.g. no PEM certificate, or a key that does not match it.
        reason: String,
    },
    /// The self-signed certificate could not be made.
    #[error("cannot generate a self-signed certificate: {0}")]
    Generate(String),
}

/// The certificate and key read from `cert_pem` and `key_pem` (named `cert_path`, `key_path` in
/// errors), checked to belong together.
pub fn certified_key(
    cert_pem: &[u8],
    cert_path: &Path,
    key_pem: &[u8],
    key_path: &Path,
) -> Result<CertifiedKey, TlsError> {
    let invalid = |path: &Path, reason: String| TlsError::Invalid { path: path.to_owned(), reason };
    let chain = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| invalid(cert_path, format!("not PEM certificates: {e}")))?;
    if chain.is_empty() {
        return Err(invalid(cert_path, "holds no PEM certificate".into()));
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem)
        .map_err(|e| invalid(key_path, format!("holds no PEM private key: {e}")))?;
    let provider = rustls::crypto::ring::default_provider();
    CertifiedKey::from_der(chain, key, &provider)
        .map_err(|e| invalid(key_path, format!("not a usable key for {}: {e}", cert_path.display())))
}

/// The names the self-signed certificate is valid for: the host's name (the pod's name in a
/// cluster), `localhost`, `127.0.0.1` and `::1`.
pub fn self_signed_names(hostname: Option<&str>) -> Vec<String> {
    let host = hostname.map(str::trim).filter(|h| !h.is_empty() && *h != "localhost");
    host.into_iter().map(str::to_owned).chain(["localhost", "127.0.0.1", "::1"].map(String::from)).collect()
}

/// A new self-signed certificate for `names`, with its key (in memory only).
pub fn self_signed(names: Vec<String>) -> Result<CertifiedKey, TlsError> {
    let generated =
        rcgen::generate_simple_self_signed(names).map_err(|e| TlsError::Generate(e.to_string()))?;
    let key = PrivateKeyDer::try_from(generated.signing_key.serialize_der())
        .map_err(|e| TlsError::Generate(e.to_owned()))?;
    let provider = rustls::crypto::ring::default_provider();
    CertifiedKey::from_der(vec![generated.cert.der().clone()], key, &provider)
        .map_err(|e| TlsError::Generate(e.to_string()))
}

/// `certificate`'s SHA-256 fingerprint as `openssl x509 -fingerprint -sha256` prints it
/// (`AB:01:…`), to compare the certificate a client sees with the one the log names.
pub fn fingerprint(certificate: &CertificateDer<'_>) -> String {
    let digest = Sha256::digest(certificate.as_ref());
    digest.iter().map(|byte| format!("{byte:02X}")).collect::<Vec<_>>().join(":")
}

/// A TLS client that verifies servers against exactly `trusted` (CA or self-signed certificates),
/// TLS 1.2+ on ring; there is no way to turn verification off. `None` if `trusted` holds no
/// usable certificate.
pub fn client_connector(trusted: &[CertificateDer<'static>]) -> Option<tokio_rustls::TlsConnector> {
    let mut roots = rustls::RootCertStore::empty();
    let (added, _ignored) = roots.add_parsable_certificates(trusted.iter().cloned());
    if added == 0 {
        return None;
    }
    let config =
        rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .ok()?
            .with_root_certificates(roots)
            .with_no_client_auth();
    Some(tokio_rustls::TlsConnector::from(Arc::new(config)))
}

/// The pair a handshake is answered with, swapped whole when the directory changes.
#[derive(Debug)]
struct Current(RwLock<Arc<CertifiedKey>>);

impl ResolvesServerCert for Current {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(Arc::clone(&self.0.read()))
    }
}

/// What a directory held at the last read: the contents served, and the last contents refused
/// (so a bad pair is warned about once, not every period).
#[derive(Debug, Default)]
struct Seen {
    served: (Vec<u8>, Vec<u8>),
    refused: Option<(Vec<u8>, Vec<u8>)>,
    unreadable: Option<String>,
}

/// The certificate the reviewed listeners serve, and where it came from.
pub struct ServedCertificate {
    current: Arc<Current>,
    acceptor: TlsAcceptor,
    directory: Option<PathBuf>,
    seen: Mutex<Seen>,
}

impl std::fmt::Debug for ServedCertificate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServedCertificate").field("directory", &self.directory).finish_non_exhaustive()
    }
}

impl ServedCertificate {
    /// The pair in `directory` (an error names the file that is missing or bad), or without one a
    /// self-signed certificate for [`self_signed_names`] of this host; logged by fingerprint.
    pub fn load(directory: Option<&Path>) -> Result<Self, TlsError> {
        let names = self_signed_names(hostname().as_deref());
        let (key, seen) = match directory {
            Some(directory) => {
                let files = read_pair(directory)?;
                let key =
                    certified_key(&files.0, &directory.join(CERT_FILE), &files.1, &directory.join(KEY_FILE))?;
                (key, Seen { served: files, ..Seen::default() })
            }
            None => (self_signed(names.clone())?, Seen::default()),
        };
        let current = Arc::new(Current(RwLock::new(Arc::new(key))));
        let resolver: Arc<dyn ResolvesServerCert> = current.clone();
        let config = ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Generate(e.to_string()))?
            .with_no_client_auth()
            .with_cert_resolver(resolver);
        let served = Self {
            current,
            acceptor: TlsAcceptor::from(Arc::new(config)),
            directory: directory.map(Path::to_owned),
            seen: Mutex::new(seen),
        };
        let sha256 = fingerprint(&served.certificate());
        match &served.directory {
            Some(directory) => tracing::info!(directory = %directory.display(), %sha256,
                "serving TLS with the certificate in the directory (read again when it changes)"),
            None => tracing::info!(%sha256, ?names,
                "serving TLS with a self-signed certificate generated at start (scrapers must trust it; \
                 --metrics-cert-dir gives one from a Secret)"),
        }
        Ok(served)
    }

    /// Accepts TLS connections with the certificate served at each handshake.
    pub fn acceptor(&self) -> TlsAcceptor {
        self.acceptor.clone()
    }

    /// The leaf certificate handshakes are answered with now.
    pub fn certificate(&self) -> CertificateDer<'static> {
        self.current.0.read().cert.first().cloned().unwrap_or_else(|| CertificateDer::from(Vec::new()))
    }

    /// Reads the directory (if any) every [`RELOAD_PERIOD`] until `stop`, serving a changed pair.
    pub async fn watch(self: Arc<Self>, stop: CancellationToken) {
        let Some(directory) = self.directory.clone() else { return };
        let mut ticks = tokio::time::interval(RELOAD_PERIOD);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = ticks.tick() => {}
            }
            let read = tokio::task::spawn_blocking({
                let directory = directory.clone();
                move || read_pair(&directory)
            })
            .await;
            match read {
                Ok(read) => self.reload(&directory, read),
                Err(error) => tracing::warn!(%error, "reading the certificate directory panicked"),
            }
        }
    }

    /// Serves `read` if it is a new, good pair; keeps the served one otherwise.
    fn reload(&self, directory: &Path, read: Result<(Vec<u8>, Vec<u8>), TlsError>) {
        let mut seen = self.seen.lock();
        let files = match read {
            Ok(files) => files,
            Err(error) => {
                let reason = error.to_string();
                if seen.unreadable.as_ref() != Some(&reason) {
                    tracing::warn!(%error, "keeping the certificate served: the directory cannot be read");
                    seen.unreadable = Some(reason);
                }
                return;
            }
        };
        seen.unreadable = None;
        if files == seen.served || seen.refused.as_ref() == Some(&files) {
            return;
        }
        match certified_key(&files.0, &directory.join(CERT_FILE), &files.1, &directory.join(KEY_FILE)) {
            Ok(key) => {
                let sha256 = fingerprint(key.cert.first().unwrap_or(&CertificateDer::from(Vec::new())));
                *self.current.0.write() = Arc::new(key);
                seen.served = files;
                seen.refused = None;
                tracing::info!(directory = %directory.display(), %sha256, "serving the changed certificate");
            }
            Err(error) => {
                tracing::warn!(%error, "keeping the certificate served: the changed one is not usable");
                seen.refused = Some(files);
            }
        }
    }
}

/// The two files of `directory`, as bytes.
fn read_pair(directory: &Path) -> Result<(Vec<u8>, Vec<u8>), TlsError> {
    let read = |name: &str| {
        let path = directory.join(name);
        std::fs::read(&path).map_err(|e| TlsError::Read { path, reason: e.to_string() })
    };
    Ok((read(CERT_FILE)?, read(KEY_FILE)?))
}

/// This host's name (a pod's is its name): `$HOSTNAME`, else the kernel's.
fn hostname() -> Option<String> {
    std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .map(|name| name.trim().to_owned())
        .filter(|name| !name.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(names: &[&str]) -> (String, String) {
        let generated =
            rcgen::generate_simple_self_signed(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
                .unwrap();
        (generated.cert.pem(), generated.signing_key.serialize_pem())
    }

    #[test]
    fn a_pair_is_read_and_a_bad_one_is_named() {
        let (cert, key) = pair(&["localhost"]);
        let (c, k) = (Path::new("/d/tls.crt"), Path::new("/d/tls.key"));
        assert!(certified_key(cert.as_bytes(), c, key.as_bytes(), k).is_ok());
        let no_cert = certified_key(b"", c, key.as_bytes(), k).unwrap_err();
        assert_eq!(no_cert.to_string(), "/d/tls.crt: holds no PEM certificate");
        let no_key = certified_key(cert.as_bytes(), c, b"junk", k).unwrap_err();
        assert!(no_key.to_string().starts_with("/d/tls.key: holds no PEM private key"), "{no_key}");
        let (_, other_key) = pair(&["localhost"]);
        let mismatched = certified_key(cert.as_bytes(), c, other_key.as_bytes(), k).unwrap_err();
        assert!(
            mismatched.to_string().starts_with("/d/tls.key: not a usable key for /d/tls.crt"),
            "{mismatched}"
        );
    }

    #[test]
    fn the_self_signed_names_are_the_host_and_loopback() {
        assert_eq!(
            self_signed_names(Some("op-7d9f-x2x4q\n")),
            ["op-7d9f-x2x4q", "localhost", "127.0.0.1", "::1"]
        );
        assert_eq!(self_signed_names(None), ["localhost", "127.0.0.1", "::1"]);
        assert_eq!(self_signed_names(Some("localhost")), ["localhost", "127.0.0.1", "::1"]);
        let key = self_signed(self_signed_names(None)).unwrap();
        assert_eq!(key.cert.len(), 1);
    }

    #[test]
    fn the_fingerprint_is_openssls_format() {
        let certificate = CertificateDer::from(b"abc".to_vec());
        assert_eq!(
            fingerprint(&certificate),
            "BA:78:16:BF:8F:01:CF:EA:41:41:40:DE:5D:AE:22:23:B0:03:61:A3:96:17:7A:9C:B4:10:FF:61:F2:00:15:AD"
        );
    }

    /// Log lines written on this thread while `body` runs.
    fn logged(body: impl FnOnce()) -> String {
        #[derive(Clone, Default)]
        struct Lines(Arc<Mutex<Vec<u8>>>);
        impl std::io::Write for Lines {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                self.0.lock().extend_from_slice(buf);
                Ok(buf.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let lines = Lines::default();
        let writer = lines.clone();
        let subscriber =
            tracing_subscriber::fmt().with_writer(move || writer.clone()).with_ansi(false).finish();
        tracing::subscriber::with_default(subscriber, body);
        String::from_utf8_lossy(&lines.0.lock()).into_owned()
    }

    #[test]
    fn the_self_signed_certificate_is_logged_by_fingerprint_never_its_key() {
        let mut served = None;
        let log = logged(|| served = Some(ServedCertificate::load(None).unwrap()));
        let sha256 = fingerprint(&served.unwrap().certificate());
        assert!(log.contains(&format!("sha256={sha256}")) && log.contains("self-signed"), "{log}");
        assert!(!log.contains("PRIVATE KEY") && !log.contains("BEGIN"), "{log}");
    }

    #[test]
    fn a_changed_pair_is_served_and_a_bad_one_keeps_the_old() {
        let dir = tempfile::tempdir().unwrap();
        let write = |(cert, key): &(String, String)| {
            std::fs::write(dir.path().join(CERT_FILE), cert).unwrap();
            std::fs::write(dir.path().join(KEY_FILE), key).unwrap();
        };
        let first = pair(&["localhost"]);
        write(&first);
        let served = ServedCertificate::load(Some(dir.path())).unwrap();
        let before = served.certificate();
        served.reload(dir.path(), read_pair(dir.path()));
        assert_eq!(served.certificate(), before, "unchanged");
        std::fs::write(dir.path().join(KEY_FILE), "junk").unwrap();
        let log = logged(|| {
            served.reload(dir.path(), read_pair(dir.path()));
            served.reload(dir.path(), read_pair(dir.path()));
        });
        assert_eq!(served.certificate(), before, "a bad key keeps the old pair");
        assert_eq!(log.matches(" WARN ").count(), 1, "warned once for the same bad contents: {log}");
        assert!(log.contains("keeping the certificate served: the changed one is not usable"), "{log}");
        served.reload(dir.path(), Err(TlsError::Read { path: dir.path().into(), reason: "gone".into() }));
        assert_eq!(served.certificate(), before, "an unreadable directory keeps the old pair");
        let second = pair(&["localhost"]);
        write(&second);
        served.reload(dir.path(), read_pair(dir.path()));
        assert_ne!(served.certificate(), before, "the new pair is served");

        let missing = ServedCertificate::load(Some(&dir.path().join("nope"))).unwrap_err();
        assert!(
            missing
                .to_string()
                .starts_with(&format!("cannot read {}", dir.path().join("nope/tls.crt").display()))
        );
    }
}
