//! Makes the primary accept exactly the passwords of the mounted Secrets, at every start and
//! whenever the mounted files change (the record watcher compares their versions every tick):
//! creates the replication and application roles and the application database when missing, and
//! sets the superuser's and the application's passwords; the replication user has none (it logs
//! in by client certificate only, `crate::databasecluster::tls`). The server only sees SCRAM-SHA-256 verifiers computed here (never a
//! plaintext, so nothing secret can reach its log), and the session turns statement logging off
//! besides. Commits are local: with synchronous replication no standby can stream before the
//! replication role exists.
//!
//! What was applied is named by [`Versions`] (`super::status::credential_version` of each login,
//! keyed with the status token), which `/status` reports: the operator compares them with its
//! Secrets instead of logging in to check.

use std::collections::BTreeMap;
use std::time::Duration;

use super::local::{ClientError, Local};
use super::secrets::{Credential, Login, SecretError};
use super::settings::Settings;
use super::status::credential_version;

/// Per login directory with a password (`superuser`, `app`): the version of its Secret.
pub type Versions = BTreeMap<String, String>;

/// The three mounted logins, read together; its `Debug` shows neither passwords nor the token.
#[derive(Clone)]
pub struct Mounted {
    /// `superuser/`.
    pub superuser: Credential,
    /// `replication/`: its user only (it has no password).
    pub replication: String,
    /// `app/`.
    pub app: Credential,
    /// The status token (the versions' key), empty when none is mounted.
    token: String,
}

impl std::fmt::Debug for Mounted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mounted")
            .field("superuser", &self.superuser)
            .field("replication", &self.replication)
            .field("app", &self.app)
            .finish_non_exhaustive()
    }
}

impl Mounted {
    /// Reads the mounted Secrets and the status token.
    pub fn read(settings: &Settings) -> Result<Mounted, SecretError> {
        Ok(Mounted {
            superuser: super::secrets::read(settings, Login::Superuser)?,
            replication: super::secrets::username(settings, Login::Replication)?,
            app: super::secrets::read(settings, Login::App)?,
            token: super::secrets::status_token(settings).unwrap_or_default(),
        })
    }

    /// Each login's version.
    pub fn versions(&self) -> Versions {
        [(Login::Superuser, &self.superuser), (Login::App, &self.app)]
            .into_iter()
            .map(|(login, c)| {
                let version = credential_version(&self.token, &c.username, c.password.expose());
                (login.dir().to_owned(), version)
            })
            .collect()
    }
}

/// How long applying the credentials may take (creating the database included).
const APPLY_LIMIT: Duration = Duration::from_secs(60);

/// The credentials could not be applied.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// A Secret is unreadable.
    #[error(transparent)]
    Secret(#[from] SecretError),
    /// The server refused or did not answer.
    #[error("applying the credentials: {0}")]
    Client(#[from] ClientError),
}

/// An SQL identifier, double-quoted.
pub fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// An SQL string literal, single-quoted.
pub fn quote_literal(value: &str) -> String {
    format!("'{}'", value.replace('\'', "''"))
}

/// `ALTER ROLE … PASSWORD '<SCRAM verifier>'` and the role's attributes.
fn alter_role(credential: &Credential, attributes: &str) -> String {
    let verifier = postgres_protocol::password::scram_sha_256(credential.password.expose().as_bytes());
    format!(
        "ALTER ROLE {} WITH {attributes} PASSWORD {}",
        quote_ident(&credential.username),
        quote_literal(&verifier)
    )
}

/// The session settings that keep the statements out of the server log.
const QUIET_SESSION: &str = "SET synchronous_commit = 'local'; SET log_statement = 'none'; \
    SET log_min_error_statement = 'panic'; SET log_min_duration_statement = -1";

/// Applies the mounted Secrets' credentials on the local primary; the versions applied.
pub async fn apply(settings: &Settings, local: &Local) -> Result<Versions, ApplyError> {
    let mounted = Mounted::read(settings)?;
    let versions = mounted.versions();
    let Mounted { superuser, replication, app, .. } = mounted;
    let database = settings.app_database.clone();
    let work = |client: tokio_postgres::Client| async move {
        client.batch_execute(QUIET_SESSION).await?;
        let exists = "SELECT EXISTS (SELECT FROM pg_roles WHERE rolname = $1)";
        for (role, attributes) in [(&replication, "LOGIN REPLICATION"), (&app.username, "LOGIN")] {
            if !client.query_one(exists, &[role]).await?.get::<_, bool>(0) {
                client.batch_execute(&format!("CREATE ROLE {} {attributes}", quote_ident(role))).await?;
            }
        }
        client.batch_execute(&alter_role(&superuser, "LOGIN")).await?;
        // The replication user logs in by client certificate only (`pg_hba.conf`'s `cert`): no
        // password that could be used instead.
        let replication_role = quote_ident(&replication);
        client
            .batch_execute(&format!(
                "ALTER ROLE {replication_role} WITH LOGIN REPLICATION NOSUPERUSER PASSWORD NULL"
            ))
            .await?;
        client.batch_execute(&alter_role(&app, "LOGIN NOSUPERUSER NOREPLICATION")).await?;
        let has_db = "SELECT EXISTS (SELECT FROM pg_database WHERE datname = $1)";
        if !client.query_one(has_db, &[&database]).await?.get::<_, bool>(0) {
            let create =
                format!("CREATE DATABASE {} OWNER {}", quote_ident(&database), quote_ident(&app.username));
            client.batch_execute(&create).await?;
        }
        Ok(())
    };
    local.with(APPLY_LIMIT, work).await?;
    Ok(versions)
}

/// Rewrites a standby's password file from the mounted Secrets; the versions written.
pub fn write_password_file(settings: &Settings) -> Result<Versions, SecretError> {
    let mounted = Mounted::read(settings)?;
    super::secrets::write_pgpass_from(settings, &mounted.superuser)?;
    Ok(mounted.versions())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_and_literals_are_quoted() {
        let cases =
            [("app", "\"app\"", "'app'"), ("a\"b", "\"a\"\"b\"", "'a\"b'"), ("it's", "\"it's\"", "'it''s'")];
        for (value, ident, literal) in cases {
            assert_eq!((quote_ident(value).as_str(), quote_literal(value).as_str()), (ident, literal));
        }
    }

    #[test]
    fn the_mounted_logins_show_no_secret_and_each_has_its_version() {
        let dir = tempfile::tempdir().unwrap();
        let mut settings = Settings::sample();
        settings.secrets_dir = dir.path().to_owned();
        for (login, user) in [("superuser", "postgres"), ("replication", "replicator"), ("app", "app")] {
            std::fs::create_dir_all(dir.path().join(login)).unwrap();
            std::fs::write(dir.path().join(login).join("username"), user).unwrap();
            if login != "replication" {
                std::fs::write(dir.path().join(login).join("password"), format!("{login}-s3cret")).unwrap();
            }
        }
        std::fs::create_dir_all(dir.path().join("status")).unwrap();
        std::fs::write(dir.path().join("status/token"), "t0ken-UNIQUE\n").unwrap();
        let mounted = Mounted::read(&settings).unwrap();
        let shown = format!("{mounted:?}");
        assert!(!shown.contains("s3cret") && !shown.contains("t0ken-UNIQUE"), "{shown}");
        let versions = mounted.versions();
        assert_eq!(
            versions.keys().collect::<Vec<_>>(),
            ["app", "superuser"],
            "the replication login has no password"
        );
        assert_eq!(mounted.replication, "replicator");
        assert_eq!(versions["app"], credential_version("t0ken-UNIQUE", "app", "app-s3cret"));
    }

    #[test]
    fn the_statement_carries_a_verifier_never_the_password() {
        let dir = tempfile::tempdir().unwrap();
        let mut settings = Settings::sample();
        settings.secrets_dir = dir.path().to_owned();
        std::fs::create_dir_all(dir.path().join("app")).unwrap();
        std::fs::write(dir.path().join("app/username"), "app").unwrap();
        std::fs::write(dir.path().join("app/password"), "s3cret-UNIQUE").unwrap();
        let app = super::super::secrets::read(&settings, Login::App).unwrap();
        let statement = alter_role(&app, "LOGIN");
        assert!(
            statement.starts_with("ALTER ROLE \"app\" WITH LOGIN PASSWORD 'SCRAM-SHA-256$4096:"),
            "{statement}"
        );
        assert!(!statement.contains("s3cret-UNIQUE"));
    }
}
