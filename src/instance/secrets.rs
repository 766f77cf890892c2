//! The mounted Secrets (`$DBC_SECRETS/<login>/username` and `password`, `$DBC_SECRETS/status/token`)
//! and what is made of them: libpq's password file and the connection strings that name it.
//!
//! Passwords never reach a command line, an environment variable or a log line: [`Password`]'s
//! `Debug` is redacted, the child programs (`pg_basebackup`, `pg_rewind`, the walreceiver) read
//! them from `$DBC_RUN/pgpass` (mode 0600, written whole then renamed into place), and the server
//! only ever sees SCRAM verifiers (`super::credentials`).
//!
//! A file's trailing newlines are not part of its value (as a shell's `$(cat …)` reads it).

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;

use thiserror::Error;

use super::settings::Settings;

/// One of the cluster's logins, by the directory its Secret is mounted in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Login {
    /// `superuser/`: the local administration, and pg_rewind's source.
    Superuser,
    /// `replication/`: cloning and streaming.
    Replication,
    /// `app/`: the application's role and database owner.
    App,
}

impl Login {
    /// The directory under `$DBC_SECRETS`.
    pub fn dir(self) -> &'static str {
        match self {
            Login::Superuser => "superuser",
            Login::Replication => "replication",
            Login::App => "app",
        }
    }
}

/// A password; its `Debug` never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct Password(String);

impl Password {
    /// The plaintext, for a SCRAM verifier or the password file only.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Password {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Password(<redacted>)")
    }
}

/// A login's user name and password.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Credential {
    /// The role.
    pub username: String,
    /// Its password.
    pub password: Password,
}

/// A Secret's file could not be read or the password file written.
#[derive(Debug, Error)]
pub enum SecretError {
    /// A mounted file is unreadable.
    #[error("reading {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A mounted file is empty.
    #[error("{0} is empty")]
    Empty(PathBuf),
    /// The password file could not be written.
    #[error("writing {path}: {source}")]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

fn read_value(path: PathBuf) -> Result<String, SecretError> {
    let text =
        std::fs::read_to_string(&path).map_err(|source| SecretError::Read { path: path.clone(), source })?;
    let value = text.trim_end_matches(['\n', '\r']);
    if value.is_empty() { Err(SecretError::Empty(path)) } else { Ok(value.to_owned()) }
}

/// Reads `login`'s Secret.
pub fn read(settings: &Settings, login: Login) -> Result<Credential, SecretError> {
    let username = username(settings, login)?;
    let password = Password(read_value(settings.secret_path(login.dir(), "password"))?);
    Ok(Credential { username, password })
}

/// Reads `login`'s user name only: all the replication login's Secret holds (its user logs in by
/// client certificate; a `password` an older Secret still has is never read).
pub fn username(settings: &Settings, login: Login) -> Result<String, SecretError> {
    Ok(read_value(settings.secret_path(login.dir(), "username"))?.trim().to_owned())
}

/// The `/status` bearer token, if mounted.
pub fn status_token(settings: &Settings) -> Option<String> {
    read_value(settings.status_token_path()).ok().map(|t| t.trim().to_owned()).filter(|t| !t.is_empty())
}

/// A field of a `.pgpass` line: `\` and `:` escaped.
fn pgpass_field(value: &str) -> String {
    value.replace('\\', "\\\\").replace(':', "\\:")
}

/// The password file's text: any host, port and database, for each credential.
pub fn pgpass_text(credentials: &[&Credential]) -> String {
    credentials
        .iter()
        .map(|c| format!("*:*:*:{}:{}\n", pgpass_field(&c.username), pgpass_field(c.password.expose())))
        .collect()
}

/// Writes the superuser's password to `$DBC_RUN/pgpass` (0600, replaced whole): `pg_rewind`'s
/// and a standby's look at its primary; replication logs in by certificate.
pub fn write_pgpass(settings: &Settings) -> Result<(), SecretError> {
    let superuser = read(settings, Login::Superuser)?;
    write_pgpass_from(settings, &superuser)
}

/// Writes `superuser`'s password to `$DBC_RUN/pgpass` (0600, replaced whole).
pub fn write_pgpass_from(settings: &Settings, superuser: &Credential) -> Result<(), SecretError> {
    let path = settings.pgpass_path();
    let tmp = path.with_extension("tmp");
    let write = |source| SecretError::Write { path: path.clone(), source };
    let _ = std::fs::remove_file(&tmp);
    let mut file =
        std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&tmp).map_err(write)?;
    file.write_all(pgpass_text(&[superuser]).as_bytes()).map_err(write)?;
    file.sync_all().map_err(write)?;
    std::fs::rename(&tmp, &path).map_err(write)
}

/// A value in a libpq connection string: bare when it can be, else single-quoted with `\` and `'`
/// escaped.
pub fn conninfo_value(value: &str) -> String {
    if !value.is_empty() && !value.contains([' ', '\'', '\\', '\t', '\n']) {
        return value.to_owned();
    }
    format!("'{}'", value.replace('\\', "\\\\").replace('\'', "\\'"))
}

/// The connection string to the recorded primary `recorded` as `user`: the password comes from
/// the password file; `extra` adds keywords (already quoted).
pub fn conninfo(settings: &Settings, recorded: &str, user: &str, extra: &[(&str, &str)]) -> String {
    let mut parts = vec![
        ("host", settings.host_of(recorded)),
        ("port", settings.port.to_string()),
        ("user", user.to_owned()),
        ("passfile", settings.pgpass_path().display().to_string()),
        ("connect_timeout", "5".to_owned()),
    ];
    parts.extend(extra.iter().map(|(k, v)| (*k, (*v).to_owned())));
    parts.iter().map(|(k, v)| format!("{k}={}", conninfo_value(v))).collect::<Vec<_>>().join(" ")
}

/// The replication connection to the recorded primary (`primary_conninfo`, `pg_basebackup`): this
/// pod's name as `application_name` (what `synchronous_standby_names` and the operator match),
/// over TLS verifying the primary, authenticated by the replication client certificate.
pub fn replication_conninfo(settings: &Settings, recorded: &str, user: &str) -> String {
    let tls = super::tls::replication_keywords(settings);
    let mut extra = vec![("application_name", settings.pod_name.as_str())];
    extra.extend(tls.iter().map(|(k, v)| (*k, v.as_str())));
    conninfo(settings, recorded, user, &extra)
}

/// The recorded primary as the superuser (`pg_rewind`'s source), over TLS verifying it.
pub fn superuser_conninfo(settings: &Settings, recorded: &str, user: &str) -> String {
    let tls = super::tls::verify_keywords(settings);
    let mut extra = vec![("dbname", "postgres")];
    extra.extend(tls.iter().map(|(k, v)| (*k, v.as_str())));
    conninfo(settings, recorded, user, &extra)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn credential(username: &str, password: &str) -> Credential {
        Credential { username: username.into(), password: Password(password.into()) }
    }

    #[test]
    fn password_file_fields_are_escaped() {
        let cases = [
            ("replicator", "plain", "*:*:*:replicator:plain\n"),
            ("u", "a:b", "*:*:*:u:a\\:b\n"),
            ("u", "back\\slash", "*:*:*:u:back\\\\slash\n"),
            ("we:ird", "x", "*:*:*:we\\:ird:x\n"),
        ];
        for (user, password, want) in cases {
            assert_eq!(pgpass_text(&[&credential(user, password)]), want);
        }
    }

    #[test]
    fn connection_string_values_are_quoted() {
        let cases = [
            ("db-0.db.ns.svc", "db-0.db.ns.svc"),
            ("a b", "'a b'"),
            ("it's", "'it\\'s'"),
            ("a\\b", "'a\\\\b'"),
            ("", "''"),
        ];
        for (value, want) in cases {
            assert_eq!(conninfo_value(value), want);
        }
    }

    #[test]
    fn a_password_never_shows_in_debug_output() {
        let shown = format!("{:?}", credential("postgres", "s3cret-UNIQUE"));
        assert!(!shown.contains("s3cret-UNIQUE") && shown.contains("postgres"), "{shown}");
    }

    #[test]
    fn secrets_are_read_without_their_trailing_newline_and_pgpass_is_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for (login, pass) in [("superuser", "su:pw\n"), ("replication", "unused"), ("app", "")] {
            std::fs::create_dir_all(root.join(login)).unwrap();
            std::fs::write(root.join(login).join("username"), format!("{login}\n")).unwrap();
            std::fs::write(root.join(login).join("password"), pass).unwrap();
        }
        let mut settings = Settings::sample();
        settings.secrets_dir = root.to_owned();
        settings.run_dir = root.to_owned();
        assert_eq!(read(&settings, Login::Superuser).unwrap(), credential("superuser", "su:pw"));
        assert!(matches!(read(&settings, Login::App), Err(SecretError::Empty(_))));
        write_pgpass(&settings).unwrap();
        let text = std::fs::read_to_string(settings.pgpass_path()).unwrap();
        assert_eq!(text, "*:*:*:superuser:su\\:pw\n", "no replication password, even if a Secret has one");
        std::fs::remove_file(root.join("replication/password")).unwrap();
        assert_eq!(
            username(&settings, Login::Replication).unwrap(),
            "replication",
            "read without a password"
        );
        let mode = std::fs::metadata(settings.pgpass_path()).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(status_token(&settings), None);
    }
}
