//! The instance's certificates: the mounted Secrets' files copied into the private run directory
//! (`$DBC_RUN/tls/`), and the server options and connection keywords that name the copies.
//!
//! Mounted (read-only Secret volumes, `$DBC_SECRETS/<dir>/`): `server-tls/` (`tls.crt`, `tls.key`:
//! the server's certificate, the operator's or the user's), `server-ca/` (`ca.crt`: the CA that
//! verifies it) and `replication-tls/` (the replication user's client certificate, and in its
//! `ca.crt` the operator's CA, which signs the client certificates), and with the user's client
//! CA `client-ca/` (`ca.crt` only: the CA client certificates are verified against, instead of
//! `replication-tls/ca.crt`). The copies exist because PostgreSQL and libpq
//! refuse a private key a group can read unless root owns it, and a kubelet's Secret volume under
//! `fsGroup` makes its files group-readable: each copy is the pod user's own, keys mode 0600
//! (written whole, then renamed into place). [`install`] copies what changed and says whether the
//! server's files did, so the watcher reloads the server (`SIGHUP` re-reads them: no restart).
//!
//! The server: `ssl = on`, TLS 1.2 at least, its certificate and key, and the CA that signs
//! client certificates (`ssl_ca_file`, for `cert` authentication: the operator's). Every TCP session the manager
//! and its programs open is `sslmode=verify-full` against the CA.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;

use super::settings::Settings;

/// The server's Secret's directory under `$DBC_SECRETS`.
pub const SERVER_DIR: &str = "server-tls";
/// The directory of the Secret whose `ca.crt` verifies the servers, under `$DBC_SECRETS`.
pub const SERVER_CA_DIR: &str = "server-ca";
/// The replication client certificate's directory under `$DBC_SECRETS`.
pub const REPLICATION_DIR: &str = "replication-tls";
/// The directory of the user's client CA (`spec.certificates.clientCASecret`), when it is
/// mounted, under `$DBC_SECRETS`.
pub const CLIENT_CA_DIR: &str = "client-ca";

/// One private copy: where from, where to, and whether it is a key.
struct Copy {
    from: PathBuf,
    to: PathBuf,
    private: bool,
    server: bool,
}

/// The private copies' directory.
pub fn dir(settings: &Settings) -> PathBuf {
    settings.run_dir.join("tls")
}

/// The copy of the server's certificate.
pub fn server_cert(settings: &Settings) -> PathBuf {
    dir(settings).join("server.crt")
}

/// The copy of the server's key.
pub fn server_key(settings: &Settings) -> PathBuf {
    dir(settings).join("server.key")
}

/// The copy of the CA certificate the servers are verified with.
pub fn ca_cert(settings: &Settings) -> PathBuf {
    dir(settings).join("ca.crt")
}

/// The copy of the CA certificate that signs the client certificates (`ssl_ca_file`).
pub fn client_ca_cert(settings: &Settings) -> PathBuf {
    dir(settings).join("client-ca.crt")
}

/// The copy of the replication client certificate.
pub fn replication_cert(settings: &Settings) -> PathBuf {
    dir(settings).join("replication.crt")
}

/// The copy of the replication client key.
pub fn replication_key(settings: &Settings) -> PathBuf {
    dir(settings).join("replication.key")
}

fn copies(settings: &Settings) -> [Copy; 6] {
    let mounted = |d: &str, key: &str| settings.secret_path(d, key);
    let copy = |from, to, private, server| Copy { from, to, private, server };
    // The user's client CA when it is mounted (the pod template mounts it only then).
    let user_client_ca = mounted(CLIENT_CA_DIR, "ca.crt");
    let client_ca = if user_client_ca.exists() { user_client_ca } else { mounted(REPLICATION_DIR, "ca.crt") };
    [
        copy(mounted(SERVER_DIR, "tls.crt"), server_cert(settings), false, true),
        copy(mounted(SERVER_DIR, "tls.key"), server_key(settings), true, true),
        copy(mounted(SERVER_CA_DIR, "ca.crt"), ca_cert(settings), false, false),
        copy(client_ca, client_ca_cert(settings), false, true),
        copy(mounted(REPLICATION_DIR, "tls.crt"), replication_cert(settings), false, false),
        copy(mounted(REPLICATION_DIR, "tls.key"), replication_key(settings), true, false),
    ]
}

/// Copying a certificate failed.
#[derive(Debug, thiserror::Error)]
#[error("{what} {path}: {source}")]
pub struct TlsFileError {
    /// What was being done.
    what: &'static str,
    /// The file.
    path: PathBuf,
    /// Why.
    source: std::io::Error,
}

/// Copies the mounted certificates whose copy differs (keys 0600); whether a server file changed.
/// The server's key and certificate change together in a Secret: a tick that reads them while
/// the kubelet swaps the volume may copy a mismatched pair, which the next tick corrects (the
/// server keeps its old certificates when a reload finds a mismatch).
pub fn install(settings: &Settings) -> Result<bool, TlsFileError> {
    let error = |what, path: &PathBuf| {
        let path = path.clone();
        move |source| TlsFileError { what, path, source }
    };
    let dir = dir(settings);
    std::fs::create_dir_all(&dir).map_err(error("creating", &dir))?;
    let mut server_changed = false;
    for copy in copies(settings) {
        let content = std::fs::read(&copy.from).map_err(error("reading", &copy.from))?;
        if std::fs::read(&copy.to).ok().as_deref() == Some(content.as_slice()) {
            continue;
        }
        let tmp = copy.to.with_extension("tmp");
        let _ = std::fs::remove_file(&tmp);
        let mode = if copy.private { 0o600 } else { 0o644 };
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&tmp)
            .map_err(error("writing", &tmp))?;
        file.write_all(&content).and_then(|()| file.sync_all()).map_err(error("writing", &tmp))?;
        std::fs::rename(&tmp, &copy.to).map_err(error("renaming", &tmp))?;
        server_changed |= copy.server;
    }
    Ok(server_changed)
}

/// The server's TLS settings, as `-c name=value` pairs.
pub fn server_options(settings: &Settings) -> Vec<(&'static str, String)> {
    let path = |p: PathBuf| p.display().to_string();
    vec![
        ("ssl", "on".to_owned()),
        ("ssl_min_protocol_version", "TLSv1.2".to_owned()),
        ("ssl_cert_file", path(server_cert(settings))),
        ("ssl_key_file", path(server_key(settings))),
        ("ssl_ca_file", path(client_ca_cert(settings))),
    ]
}

/// libpq keywords verifying the server (`verify-full` against the CA).
pub fn verify_keywords(settings: &Settings) -> Vec<(&'static str, String)> {
    vec![("sslmode", "verify-full".to_owned()), ("sslrootcert", ca_cert(settings).display().to_string())]
}

/// libpq keywords verifying the server and presenting the replication client certificate.
pub fn replication_keywords(settings: &Settings) -> Vec<(&'static str, String)> {
    let mut keywords = verify_keywords(settings);
    keywords.push(("sslcert", replication_cert(settings).display().to_string()));
    keywords.push(("sslkey", replication_key(settings).display().to_string()));
    keywords
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn mounted_files_are_copied_keys_private_and_a_change_is_reported_once() {
        let root = tempfile::tempdir().unwrap();
        let mut settings = Settings::sample();
        settings.secrets_dir = root.path().join("secrets");
        settings.run_dir = root.path().join("run");
        let dirs = [
            (SERVER_DIR, &["tls.crt", "tls.key"][..]),
            (SERVER_CA_DIR, &["ca.crt"]),
            (REPLICATION_DIR, &["tls.crt", "tls.key", "ca.crt"]),
        ];
        for (dir, names) in dirs {
            std::fs::create_dir_all(settings.secrets_dir.join(dir)).unwrap();
            for name in names {
                std::fs::write(settings.secret_path(dir, name), format!("{dir}/{name}")).unwrap();
            }
        }
        assert!(install(&settings).unwrap(), "the first copy");
        let mode = |p: PathBuf| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!((mode(server_key(&settings)), mode(replication_key(&settings))), (0o600, 0o600));
        assert_eq!(std::fs::read_to_string(server_cert(&settings)).unwrap(), "server-tls/tls.crt");
        assert!(!install(&settings).unwrap(), "nothing changed");
        std::fs::write(settings.secret_path(REPLICATION_DIR, "tls.key"), "new").unwrap();
        assert!(!install(&settings).unwrap(), "a client file is no server change");
        assert_eq!(std::fs::read_to_string(replication_key(&settings)).unwrap(), "new");
        std::fs::write(settings.secret_path(SERVER_DIR, "tls.crt"), "renewed").unwrap();
        assert!(install(&settings).unwrap());
        std::fs::write(settings.secret_path(SERVER_CA_DIR, "ca.crt"), "another CA").unwrap();
        assert!(!install(&settings).unwrap(), "the servers' CA is for clients only");
        assert_eq!(std::fs::read_to_string(ca_cert(&settings)).unwrap(), "another CA");
        std::fs::write(settings.secret_path(REPLICATION_DIR, "ca.crt"), "client CA").unwrap();
        assert!(install(&settings).unwrap(), "the client CA is the server's ssl_ca_file");
        std::fs::create_dir_all(settings.secrets_dir.join(CLIENT_CA_DIR)).unwrap();
        std::fs::write(settings.secret_path(CLIENT_CA_DIR, "ca.crt"), "the user's client CA").unwrap();
        assert!(install(&settings).unwrap(), "the user's client CA, mounted, replaces the replication one's");
        assert_eq!(std::fs::read_to_string(client_ca_cert(&settings)).unwrap(), "the user's client CA");
        std::fs::remove_file(settings.secret_path(SERVER_CA_DIR, "ca.crt")).unwrap();
        assert!(install(&settings).is_err(), "a missing file is an error");
    }

    #[test]
    fn the_server_requires_tls_and_sessions_verify_the_server() {
        let settings = Settings::sample();
        let options = server_options(&settings);
        assert!(options.contains(&("ssl", "on".to_owned())));
        assert!(options.contains(&("ssl_min_protocol_version", "TLSv1.2".to_owned())));
        assert!(options.contains(&("ssl_key_file", "/run/dbcluster/tls/server.key".to_owned())));
        assert!(options.contains(&("ssl_ca_file", "/run/dbcluster/tls/client-ca.crt".to_owned())));
        let keywords = replication_keywords(&settings);
        assert_eq!(keywords[0], ("sslmode", "verify-full".to_owned()));
        assert!(keywords.contains(&("sslkey", "/run/dbcluster/tls/replication.key".to_owned())));
    }
}
