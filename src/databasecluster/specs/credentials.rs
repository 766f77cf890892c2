//! The cluster's three logins and their Secrets, built purely; passwords drawn from a CSPRNG.
//!
//! | Secret | user | database | used by |
//! |---|---|---|---|
//! | `<name>-superuser` | `postgres` (superuser) | `postgres` | the instance manager, over the pod's own socket; `pg_rewind` |
//! | `<name>-app` (or `spec.appSecretName`) | `app` (owns database `app`, not a superuser) | `app` | applications |
//! | `<name>-replication` | `replicator` (REPLICATION, the only user `pg_hba` lets replicate) | — | standbys |
//!
//! Each generated Secret has the keys `username`, `password`, `host` (`<name>-rw.<ns>.svc`),
//! `port`, `dbname`, `uri`, `jdbc-uri` and `pgpass`. A password is drawn once, when its Secret is
//! created, and read back from the live Secret ever after. The replication user logs in by client
//! certificate only and has no password: its Secret ([`build_replication_secret`]) has `username`,
//! `host`, `port` and `dbname`. A `password` an older version left in it is neither read nor
//! removed (it is not a field the operator writes any more).
//!
//! # The Secret and the database never disagree
//! - At every start of the primary, and whenever the mounted Secret files change while it runs,
//!   the instance manager sets every login's password from them (so a cluster re-created over
//!   kept volumes takes the new Secrets' passwords, and a Secret deleted and regenerated, or
//!   rotated by its user, reaches the database). It sends SCRAM-SHA-256 verifiers over its local
//!   socket, trusted as the superuser whatever the password: a regenerated superuser Secret needs
//!   no restart.
//! - The operator never logs in: the primary's `/status` reports which version of each Secret it
//!   applied (`crate::instance::status::credential_version`), and the operator compares them with
//!   its Secrets ([`crate::databasecluster::instances::passwords`]): Event `PasswordApplied`.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use rand::distr::{Alphanumeric, SampleString};

use crate::databasecluster::specs::names::{Owner, POSTGRES_PORT, child_metadata};
use crate::databasecluster::specs::services::rw_service_name;

/// Length of a generated password (alphanumeric: about 190 bits).
pub const PASSWORD_LENGTH: usize = 32;
/// The database superuser.
pub const SUPERUSER: &str = "postgres";
/// The application user of a generated app Secret.
pub const APP_USER: &str = "app";
/// The application database, owned by the app user.
pub const APP_DATABASE: &str = "app";
/// The replication user (named in `pg_hba.conf`).
pub const REPLICATION_USER: &str = "replicator";

/// One of the cluster's logins.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Login {
    /// `postgres`: the operator's login.
    Superuser,
    /// `app`: the applications' login.
    App,
    /// `replicator`: the standbys' login.
    Replication,
}

impl Login {
    /// Every login, in the order reconcile ensures their Secrets.
    pub const ALL: [Login; 3] = [Login::Superuser, Login::Replication, Login::App];

    /// The default user name.
    pub fn username(self) -> &'static str {
        match self {
            Login::Superuser => SUPERUSER,
            Login::App => APP_USER,
            Login::Replication => REPLICATION_USER,
        }
    }

    /// The database named in the Secret.
    pub fn database(self) -> &'static str {
        match self {
            Login::App => APP_DATABASE,
            Login::Superuser | Login::Replication => "postgres",
        }
    }

    /// The directory under the Secrets' mount where the pods find this login's Secret.
    pub fn mount_dir(self) -> &'static str {
        match self {
            Login::Superuser => "superuser",
            Login::App => "app",
            Login::Replication => "replication",
        }
    }

    /// The name of the Secret the operator generates for this login.
    pub fn secret_name(self, cluster_name: &str) -> String {
        format!("{cluster_name}-{}", self.mount_dir())
    }
}

/// The Secret the pods mount for `login`: the user's own app Secret when the spec names one.
pub fn mounted_secret_name(login: Login, cluster_name: &str, app_secret: Option<&str>) -> String {
    match (login, app_secret) {
        (Login::App, Some(name)) => name.to_owned(),
        _ => login.secret_name(cluster_name),
    }
}

/// A fresh password from the thread-local CSPRNG (ChaCha, seeded from the OS).
pub fn generate_password() -> String {
    Alphanumeric.sample_string(&mut rand::rng(), PASSWORD_LENGTH)
}

/// The Secret for `login` with `password` and the connection details.
pub fn build_login_secret(owner: &Owner, login: Login, password: &str) -> Secret {
    let host = format!("{}.{}.svc", rw_service_name(owner.name()), owner.namespace());
    let (user, database) = (login.username(), login.database());
    let port = POSTGRES_PORT;
    let uri = format!(
        "postgresql://{}:{}@{host}:{port}/{database}",
        percent_encode(user),
        percent_encode(password)
    );
    let jdbc = format!(
        "jdbc:postgresql://{host}:{port}/{database}?user={}&password={}",
        percent_encode(user),
        percent_encode(password)
    );
    let pgpass = format!("{host}:{port}:{database}:{}:{}\n", pgpass_escape(user), pgpass_escape(password));
    let entries = BTreeMap::from([
        ("username", user.to_owned()),
        ("password", password.to_owned()),
        ("host", host),
        ("port", port.to_string()),
        ("dbname", database.to_owned()),
        ("uri", uri),
        ("jdbc-uri", jdbc),
        ("pgpass", pgpass),
    ]);
    Secret {
        metadata: child_metadata(owner, login.secret_name(owner.name())),
        type_: Some("kubernetes.io/basic-auth".to_owned()),
        // `data`, not `stringData`: the server turns stringData into data, so a desired object with
        // stringData would never compare equal to the live one.
        data: Some(
            entries
                .into_iter()
                .map(|(key, value)| (key.to_owned(), ByteString(value.into_bytes())))
                .collect(),
        ),
        ..Secret::default()
    }
}

/// The replication login's Secret: its user and where it connects, no password (the user has
/// none: it logs in by client certificate).
pub fn build_replication_secret(owner: &Owner) -> Secret {
    let mut secret = build_login_secret(owner, Login::Replication, "");
    if let Some(data) = secret.data.as_mut() {
        data.retain(|key, _| matches!(key.as_str(), "username" | "host" | "port" | "dbname"));
    }
    secret
}

/// A key of a Secret as text, if present and not empty.
pub fn secret_value(secret: &Secret, key: &str) -> Option<String> {
    let bytes = secret.data.as_ref()?.get(key)?;
    String::from_utf8(bytes.0.clone()).ok().filter(|value| !value.is_empty())
}

/// The password stored in a live Secret, so that it is reused instead of regenerated.
pub fn secret_password(secret: &Secret) -> Option<String> {
    secret_value(secret, "password")
}

/// Percent-encodes everything but RFC 3986 unreserved characters, for a URI's userinfo or query.
fn percent_encode(text: &str) -> String {
    let mut encoded = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            encoded.push(char::from(byte));
        } else {
            encoded.push_str(&format!("%{byte:02X}"));
        }
    }
    encoded
}

/// Escapes `\` and `:` as a `.pgpass` field requires.
fn pgpass_escape(text: &str) -> String {
    text.replace('\\', "\\\\").replace(':', "\\:")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::databasecluster::api::types::{DatabaseCluster, DatabaseClusterSpec};

    const PASSWORD: &str = "Xq7:p@ss/w0rd%UNIQUE";

    fn owner() -> Owner {
        let mut cluster = DatabaseCluster::new("production-postgres", DatabaseClusterSpec::default());
        cluster.metadata.namespace = Some("default".into());
        cluster.metadata.uid = Some("uid".into());
        Owner::of(&cluster).unwrap()
    }

    fn data(secret: Secret) -> BTreeMap<String, String> {
        secret.data.unwrap().into_iter().map(|(k, v)| (k, String::from_utf8(v.0).unwrap())).collect()
    }

    #[test]
    fn the_app_secret_holds_the_connection_details_of_the_rw_service() {
        let secret = build_login_secret(&owner(), Login::App, PASSWORD);
        assert_eq!(secret.metadata.name.as_deref(), Some("production-postgres-app"));
        assert_eq!(secret.type_.as_deref(), Some("kubernetes.io/basic-auth"));
        let host = "production-postgres-rw.default.svc";
        let encoded = "Xq7%3Ap%40ss%2Fw0rd%25UNIQUE";
        assert_eq!(
            data(secret),
            BTreeMap::from([
                ("username".to_owned(), "app".to_owned()),
                ("password".to_owned(), PASSWORD.to_owned()),
                ("host".to_owned(), host.to_owned()),
                ("port".to_owned(), "5432".to_owned()),
                ("dbname".to_owned(), "app".to_owned()),
                ("uri".to_owned(), format!("postgresql://app:{encoded}@{host}:5432/app")),
                (
                    "jdbc-uri".to_owned(),
                    format!("jdbc:postgresql://{host}:5432/app?user=app&password={encoded}")
                ),
                ("pgpass".to_owned(), format!("{host}:5432:app:app:Xq7\\:p@ss/w0rd%UNIQUE\n")),
            ])
        );
    }

    #[test]
    fn the_replication_secret_carries_no_password() {
        let secret = build_replication_secret(&owner());
        assert_eq!(secret.metadata.name.as_deref(), Some("production-postgres-replication"));
        assert_eq!(secret.type_.as_deref(), Some("kubernetes.io/basic-auth"));
        let keys: Vec<String> = data(secret).into_keys().collect();
        assert_eq!(keys, ["dbname", "host", "port", "username"]);
    }

    #[test]
    fn each_login_has_its_own_secret_and_user() {
        let names: Vec<_> = Login::ALL.iter().map(|l| l.secret_name("db")).collect();
        assert_eq!(names, ["db-superuser", "db-replication", "db-app"]);
        let users: Vec<_> = Login::ALL.iter().map(|l| l.username()).collect();
        assert_eq!(users, ["postgres", "replicator", "app"]);
        assert_eq!(mounted_secret_name(Login::App, "db", Some("mine")), "mine");
        assert_eq!(mounted_secret_name(Login::Superuser, "db", Some("mine")), "db-superuser");
    }

    #[test]
    fn the_password_is_read_back_from_a_live_secret() {
        let secret = build_login_secret(&owner(), Login::Superuser, PASSWORD);
        assert_eq!(secret_password(&secret).as_deref(), Some(PASSWORD));
        assert_eq!(secret_password(&Secret::default()), None);
        let mut empty = secret.clone();
        empty.data.as_mut().unwrap().insert("password".into(), ByteString(Vec::new()));
        assert_eq!(secret_password(&empty), None, "an empty password is no password");
    }

    #[test]
    fn passwords_are_long_alphanumeric_and_fresh_each_time() {
        let a = generate_password();
        let b = generate_password();
        assert_eq!(a.len(), PASSWORD_LENGTH);
        assert!(a.bytes().all(|c| c.is_ascii_alphanumeric()));
        assert_ne!(a, b);
    }
}
