//! The instance manager's environment, read once at start (the pod spec sets it; the same
//! variables `instance.sh` read):
//!
//! | variable | meaning | default |
//! |---|---|---|
//! | `PGDATA` | the data directory | required |
//! | `POD_NAME` | this pod's name (`<statefulset>-<ordinal>`) | required |
//! | `POD_IP` | the address the server and the status listener bind | required |
//! | `DBC_CONFIG` | the ConfigMap's mount: `postgresql.conf`, `pg_hba.conf`, `pg_ident.conf`, `primary` | required |
//! | `DBC_SECRETS` | the Secrets' mount: `superuser/`, `app/`, `replication/` (`username`, `password`), `status/token` | required |
//! | `DBC_RUN` | a private emptyDir: the socket, `pgpass` | required |
//! | `DBC_PEER_DOMAIN` | the headless Service's domain, `<svc>.<ns>.svc` | none (bare pod names) |
//! | `DBC_PORT` | the PostgreSQL port | 5432 |
//! | `DBC_APP_DATABASE` | the application database | `app` |
//! | `DBC_STATUS_PORT` | the manager's HTTP port (`/healthz`, `/readyz`, `/status`) | 8000 |
//! | `DBC_METRICS_PORT` | the metrics port (`/metrics`) | 9187 |
//! | `DBC_CUSTOM_QUERIES` | the custom metrics queries file (`spec.monitoring`) | none |
//!
//! Also the paths derived from them, and the record: the file `$DBC_CONFIG/primary` names the
//! pod that must be primary (the operator's record, never the ordinal).

use std::path::PathBuf;

use thiserror::Error;

/// The manager's HTTP port when `DBC_STATUS_PORT` is unset.
pub const DEFAULT_STATUS_PORT: u16 = 8000;
/// The metrics port when `DBC_METRICS_PORT` is unset.
pub const DEFAULT_METRICS_PORT: u16 = 9187;

/// The environment, parsed.
#[derive(Clone, Debug)]
pub struct Settings {
    /// `PGDATA`.
    pub pgdata: PathBuf,
    /// `POD_NAME`.
    pub pod_name: String,
    /// `POD_IP`.
    pub pod_ip: String,
    /// `DBC_CONFIG`.
    pub config_dir: PathBuf,
    /// `DBC_SECRETS`.
    pub secrets_dir: PathBuf,
    /// `DBC_RUN`.
    pub run_dir: PathBuf,
    /// `DBC_PEER_DOMAIN`, when set and not empty.
    pub peer_domain: Option<String>,
    /// `DBC_PORT`.
    pub port: u16,
    /// `DBC_APP_DATABASE`.
    pub app_database: String,
    /// `DBC_STATUS_PORT`.
    pub status_port: u16,
    /// `DBC_METRICS_PORT`.
    pub metrics_port: u16,
    /// `DBC_CUSTOM_QUERIES`, when set and not empty.
    pub custom_queries: Option<PathBuf>,
}

/// Why the environment is unusable.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum SettingsError {
    /// A required variable is unset or empty.
    #[error("the environment variable {0} is required")]
    Missing(&'static str),
    /// A port is not a number in 1..=65535.
    #[error("the environment variable {name} is not a port: {value:?}")]
    Port {
        /// The variable.
        name: &'static str,
        /// Its value.
        value: String,
    },
}

impl Settings {
    /// From the process environment.
    pub fn from_env() -> Result<Settings, SettingsError> {
        Settings::from_lookup(|name| std::env::var(name).ok())
    }

    /// From `lookup` (the environment, or a table in tests).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Settings, SettingsError> {
        let get = |name: &str| lookup(name).filter(|v| !v.is_empty());
        let required = |name: &'static str| get(name).ok_or(SettingsError::Missing(name));
        let port = |name: &'static str, default: u16| match get(name) {
            None => Ok(default),
            Some(value) => value.parse().ok().filter(|p| *p > 0).ok_or(SettingsError::Port { name, value }),
        };
        Ok(Settings {
            pgdata: required("PGDATA")?.into(),
            pod_name: required("POD_NAME")?,
            pod_ip: required("POD_IP")?,
            config_dir: required("DBC_CONFIG")?.into(),
            secrets_dir: required("DBC_SECRETS")?.into(),
            run_dir: required("DBC_RUN")?.into(),
            peer_domain: get("DBC_PEER_DOMAIN"),
            port: port("DBC_PORT", 5432)?,
            app_database: get("DBC_APP_DATABASE").unwrap_or_else(|| "app".to_owned()),
            status_port: port("DBC_STATUS_PORT", DEFAULT_STATUS_PORT)?,
            metrics_port: port("DBC_METRICS_PORT", DEFAULT_METRICS_PORT)?,
            custom_queries: get("DBC_CUSTOM_QUERIES").map(PathBuf::from),
        })
    }

    /// The record file naming the primary.
    pub fn record_path(&self) -> PathBuf {
        self.config_dir.join("primary")
    }

    /// The pod the record names primary now (see [`super::decide::recorded_primary`]).
    pub fn recorded_primary(&self) -> String {
        let content = std::fs::read_to_string(self.record_path()).ok();
        super::decide::recorded_primary(content.as_deref(), &self.pod_name)
    }

    /// The DNS name of pod `name` (`<pod>.<peer domain>`, or the bare name).
    pub fn host_of(&self, name: &str) -> String {
        match &self.peer_domain {
            Some(domain) => format!("{name}.{domain}"),
            None => name.to_owned(),
        }
    }

    /// This instance's replication slot on the primary: `instance_<ordinal>` (short enough for
    /// PostgreSQL's name limit whatever the cluster's name).
    pub fn slot_name(&self) -> String {
        let ordinal = self.pod_name.rsplit('-').next().unwrap_or(&self.pod_name);
        format!("instance_{ordinal}")
    }

    /// libpq's password file (mode 0600) in the run directory.
    pub fn pgpass_path(&self) -> PathBuf {
        self.run_dir.join("pgpass")
    }

    /// A file of a mounted Secret: `$DBC_SECRETS/<dir>/<key>`.
    pub fn secret_path(&self, dir: &str, key: &str) -> PathBuf {
        self.secrets_dir.join(dir).join(key)
    }

    /// The bearer token `/status` requires.
    pub fn status_token_path(&self) -> PathBuf {
        self.secret_path("status", "token")
    }

    /// Settings for unit tests: pod `db-postgres-2` at 10.0.0.3, data in `/data/pgdata`.
    #[cfg(test)]
    pub fn sample() -> Settings {
        Settings::from_lookup(|name| {
            tests::REQUIRED.iter().find(|(k, _)| *k == name).map(|(_, v)| (*v).to_owned())
        })
        .expect("the sample environment is complete")
    }

    /// The server's configuration files, as `-c` options of `postgres`.
    pub fn config_file(&self, name: &str) -> PathBuf {
        self.config_dir.join(name)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn lookup(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: BTreeMap<String, String> = pairs.iter().map(|(k, v)| ((*k).into(), (*v).into())).collect();
        move |name| map.get(name).cloned()
    }

    pub(super) const REQUIRED: [(&str, &str); 6] = [
        ("PGDATA", "/data/pgdata"),
        ("POD_NAME", "db-postgres-2"),
        ("POD_IP", "10.0.0.3"),
        ("DBC_CONFIG", "/etc/dbcluster"),
        ("DBC_SECRETS", "/etc/dbcluster-secrets"),
        ("DBC_RUN", "/run/dbcluster"),
    ];

    #[test]
    fn defaults_fill_the_optional_variables() {
        let settings = Settings::from_lookup(lookup(&REQUIRED)).unwrap();
        assert_eq!((settings.port, settings.status_port), (5432, DEFAULT_STATUS_PORT));
        assert_eq!(settings.app_database, "app");
        assert_eq!(settings.peer_domain, None);
        assert_eq!(settings.custom_queries, None);
        assert_eq!(settings.host_of("db-postgres-0"), "db-postgres-0");
        assert_eq!(settings.slot_name(), "instance_2");
        assert_eq!(settings.status_token_path(), PathBuf::from("/etc/dbcluster-secrets/status/token"));
    }

    #[test]
    fn each_required_variable_is_named_when_missing_or_empty() {
        for (missing, _) in REQUIRED {
            let mut pairs: Vec<_> = REQUIRED.iter().filter(|(k, _)| *k != missing).copied().collect();
            assert_eq!(Settings::from_lookup(lookup(&pairs)).unwrap_err(), SettingsError::Missing(missing));
            pairs.push((missing, ""));
            assert_eq!(Settings::from_lookup(lookup(&pairs)).unwrap_err(), SettingsError::Missing(missing));
        }
    }

    #[test]
    fn ports_and_the_peer_domain_are_read() {
        let mut pairs = REQUIRED.to_vec();
        pairs.extend([("DBC_PORT", "6543"), ("DBC_PEER_DOMAIN", "db.ns.svc"), ("DBC_STATUS_PORT", "9000")]);
        pairs.push(("DBC_CUSTOM_QUERIES", "/etc/dbcluster-monitoring/queries.yaml"));
        let settings = Settings::from_lookup(lookup(&pairs)).unwrap();
        assert_eq!(settings.custom_queries, Some(PathBuf::from("/etc/dbcluster-monitoring/queries.yaml")));
        assert_eq!((settings.port, settings.status_port), (6543, 9000));
        assert_eq!(settings.host_of("db-postgres-0"), "db-postgres-0.db.ns.svc");
        let mut zero = REQUIRED.to_vec();
        zero.push(("DBC_PORT", "0"));
        let bad = Settings::from_lookup(lookup(&zero));
        assert!(matches!(bad, Err(SettingsError::Port { name: "DBC_PORT", .. })), "{bad:?}");
    }
}
