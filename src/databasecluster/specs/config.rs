//! The ConfigMap `<name>-scripts`: what every instance reads, built purely from the spec. (The
//! pods run the instance manager, `crate::instance`, the operator's own binary; the name is kept
//! from when the ConfigMap also shipped a script.)
//!
//! Keys (mounted at [`CONFIG_MOUNT_PATH`] in every pod):
//! - `primary`: the pod name of the instance that must be primary. The operator's record, not an
//!   ordinal rule: instance 0 when the cluster is created, and kept as the live ConfigMap says ever
//!   after; a failover or a switchover changes it ([`crate::databasecluster::failover::promotion`]).
//! - `demoting`: during a switchover only, the old primary being demoted ([`crate::databasecluster::switchover`]).
//! - `postgresql.conf`: the server's whole configuration file (`config_file`): the operator's
//!   replication settings (with `synchronous_standby_names` for `spec.synchronousReplicas`,
//!   [`synchronous_standby_names`]), then `spec.postgresConfig`, then [`CONFIG_HASH_PARAMETER`], a hash of
//!   the rest. PostgreSQL reports the hash of the file on disk in `pg_file_settings` and the hash in
//!   force with `current_setting`, so the operator can see when a changed ConfigMap has reached an
//!   instance and whether a reload applied it (see [`crate::databasecluster::instances`]).
//! - `pg_hba.conf`: local socket connections trusted (the socket is mode 0700 in a directory only
//!   the pod's uid reaches); over TCP only TLS (`hostssl`: a plaintext connection matches no line
//!   and is refused): replication connections by client certificate only (`cert`: the replication
//!   user's, which the standbys and the backup Jobs present, see
//!   [`crate::databasecluster::tls`]), every other login with a SCRAM password. `pg_ident.conf`:
//!   empty.
//!
//! # Reload or restart
//! A parameter whose PostgreSQL 15 context is `postmaster` ([`RESTART_PARAMETERS`]), or an
//! extension parameter (a dotted name, whose context the operator cannot know), needs a restart;
//! [`restart_hash`] covers just those, and the pod template carries it as an annotation, so
//! changing one rolls the instances. Every other change reaches the pods through the mounted
//! ConfigMap and is applied by `pg_reload_conf()` with no restart.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use serde::Deserialize;
use sha2::{Digest, Sha256};

use crate::databasecluster::api::validation::ValidSpec;
use crate::databasecluster::instances::InstanceFacts;
use crate::databasecluster::specs::names::{Owner, child_metadata, statefulset_name};

/// Where the ConfigMap is mounted in the pods.
pub const CONFIG_MOUNT_PATH: &str = "/etc/dbcluster";
/// ConfigMap key naming the primary's pod.
pub const PRIMARY_KEY: &str = "primary";
/// ConfigMap key naming the primary a switchover is demoting (absent otherwise).
pub const DEMOTING_KEY: &str = "demoting";
/// ConfigMap key of the server configuration file.
pub const POSTGRESQL_CONF_KEY: &str = "postgresql.conf";
/// The custom parameter holding the hash of the rest of `postgresql.conf`.
pub const CONFIG_HASH_PARAMETER: &str = "dbcluster.config_hash";

/// Settings the operator needs for streaming replication, before the user's.
const OPERATOR_SETTINGS: &[(&str, &str)] = &[
    ("hot_standby", "on"),
    ("wal_level", "replica"),
    ("password_encryption", "scram-sha-256"),
    ("wal_log_hints", "on"),
    ("recovery_target_timeline", "latest"),
];

/// PostgreSQL 15's parameters of context `postmaster`: set only at server start.
pub const RESTART_PARAMETERS: &[&str] = &[
    "archive_mode",
    "autovacuum_freeze_max_age",
    "autovacuum_max_workers",
    "autovacuum_multixact_freeze_max_age",
    "bonjour",
    "bonjour_name",
    "cluster_name",
    "config_file",
    "data_directory",
    "data_sync_retry",
    "dynamic_shared_memory_type",
    "event_source",
    "external_pid_file",
    "hba_file",
    "hot_standby",
    "huge_page_size",
    "huge_pages",
    "ident_file",
    "ignore_invalid_pages",
    "jit_provider",
    "listen_addresses",
    "logging_collector",
    "max_connections",
    "max_files_per_process",
    "max_locks_per_transaction",
    "max_logical_replication_workers",
    "max_pred_locks_per_transaction",
    "max_prepared_transactions",
    "max_replication_slots",
    "max_wal_senders",
    "max_worker_processes",
    "min_dynamic_shared_memory",
    "old_snapshot_threshold",
    "port",
    "recovery_target",
    "recovery_target_action",
    "recovery_target_inclusive",
    "recovery_target_lsn",
    "recovery_target_name",
    "recovery_target_time",
    "recovery_target_timeline",
    "recovery_target_xid",
    "shared_buffers",
    "shared_memory_type",
    "shared_preload_libraries",
    "superuser_reserved_connections",
    "track_activity_query_size",
    "track_commit_timestamp",
    "unix_socket_directories",
    "unix_socket_group",
    "unix_socket_permissions",
    "wal_buffers",
    "wal_decode_buffer_size",
    "wal_level",
    "wal_log_hints",
];

/// The ConfigMap's name.
pub fn config_map_name(cluster_name: &str) -> String {
    format!("{cluster_name}-scripts")
}

/// The pod name of the instance that starts as primary in a new cluster.
pub fn initial_primary(cluster_name: &str) -> String {
    format!("{}-0", statefulset_name(cluster_name))
}

/// The records a pass reads from the live ConfigMap: decoded from its JSON, `data`'s `primary` and
/// `demoting` only (serde passes over the scripts without building them).
#[derive(Debug, Default, Deserialize)]
pub struct Records {
    #[serde(default)]
    data: RecordValues,
}

/// [`PRIMARY_KEY`] and [`DEMOTING_KEY`] (a test holds the names to them).
#[derive(Debug, Default, Deserialize)]
struct RecordValues {
    primary: Option<String>,
    demoting: Option<String>,
}

impl Records {
    /// The primary the live ConfigMap records, if any.
    pub fn primary(&self) -> Option<String> {
        recorded(&self.data.primary)
    }

    /// The primary a switchover is demoting, as the live ConfigMap records it.
    pub fn demoting(&self) -> Option<String> {
        recorded(&self.data.demoting)
    }
}

fn recorded(value: &Option<String>) -> Option<String> {
    let name = value.as_deref()?.trim();
    (!name.is_empty()).then(|| name.to_owned())
}

/// The ConfigMap for `spec`, with `primary` naming the primary's pod and `demoting` the old
/// primary of a switchover under way.
pub fn build_config_map(owner: &Owner, spec: &ValidSpec, primary: &str, demoting: Option<&str>) -> ConfigMap {
    let mut data = BTreeMap::from([
        (PRIMARY_KEY.to_owned(), primary.to_owned()),
        (POSTGRESQL_CONF_KEY.to_owned(), server_conf(owner.name(), spec)),
        ("pg_hba.conf".to_owned(), PG_HBA_CONF.to_owned()),
        ("pg_ident.conf".to_owned(), String::new()),
    ]);
    if let Some(demoting) = demoting {
        data.insert(DEMOTING_KEY.to_owned(), demoting.to_owned());
    }
    ConfigMap {
        metadata: child_metadata(owner, config_map_name(owner.name())),
        data: Some(data),
        ..ConfigMap::default()
    }
}

/// The most a ConfigMap's values may hold in all (the API server's `MaxSecretSize`).
const CONFIG_MAP_MAX_BYTES: usize = 1024 * 1024;

/// Room kept in the ConfigMap for its small records (the primary's and a demoting instance's
/// names) and for `synchronous_standby_names` (ten quoted pod names).
const RECORDS_RESERVE_BYTES: usize = 4096;

/// The largest server configuration file (the user's `postgresConfig` as written, with the
/// operator's settings) that fits in the ConfigMap beside its other keys.
pub const MAX_SERVER_CONF_BYTES: usize = CONFIG_MAP_MAX_BYTES - PG_HBA_CONF.len() - RECORDS_RESERVE_BYTES;

/// Client authentication: see the module docs.
pub const PG_HBA_CONF: &str = "\
# Written by dbcluster-operator.
# TYPE  DATABASE     USER        ADDRESS  METHOD
local   all          all                  trust
hostssl replication  replicator  all      cert
hostssl all          all         all      scram-sha-256
";

/// `synchronous_standby_names` for `spec.synchronousReplicas` N > 0: `ANY N (...)` over every
/// instance's pod name (each standby's `application_name`). The primary's own name is in the list
/// but never matches a standby, so one file serves every instance whichever is primary, and a
/// failover or switchover needs no change. `None` (asynchronous) when N is 0.
pub fn synchronous_standby_names(cluster_name: &str, spec: &ValidSpec) -> Option<String> {
    if spec.synchronous_replicas <= 0 {
        return None;
    }
    let sts = statefulset_name(cluster_name);
    let names: Vec<String> = (0..spec.replicas).map(|ordinal| format!("\"{sts}-{ordinal}\"")).collect();
    Some(format!("ANY {} ({})", spec.synchronous_replicas, names.join(", ")))
}

/// The server configuration file of `cluster_name`'s instances for `spec`.
pub fn server_conf(cluster_name: &str, spec: &ValidSpec) -> String {
    postgresql_conf(&spec.postgres_config, synchronous_standby_names(cluster_name, spec).as_deref())
}

/// The server configuration file: the operator's settings (with `synchronous_standby_names` when
/// given), the user's, and the hash of all of them.
pub fn postgresql_conf(user: &BTreeMap<String, String>, synchronous: Option<&str>) -> String {
    let mut body = String::from("# Written by dbcluster-operator from spec.postgresConfig.\n");
    for (name, value) in OPERATOR_SETTINGS
        .iter()
        .map(|(n, v)| (*n, *v))
        .chain(synchronous.map(|names| ("synchronous_standby_names", names)))
        .chain(user.iter().map(|(n, v)| (n.as_str(), v.as_str())))
    {
        body.push_str(&format!("{name} = {}\n", quote(value)));
    }
    let hash = config_hash(&body);
    body.push_str(&format!("{CONFIG_HASH_PARAMETER} = '{hash}'\n"));
    body
}

/// The hash [`server_conf`] writes for `cluster_name`'s `spec`.
pub fn desired_config_hash(cluster_name: &str, spec: &ValidSpec) -> String {
    let conf = server_conf(cluster_name, spec);
    conf.lines()
        .find_map(|line| line.strip_prefix(&format!("{CONFIG_HASH_PARAMETER} = '")))
        .map(|rest| rest.trim_end_matches('\'').to_owned())
        .unwrap_or_default()
}

/// Whether changing `name` needs a server restart.
pub fn needs_restart(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    name.contains('.') || RESTART_PARAMETERS.contains(&name.as_str())
}

/// A hash of the parameters that need a restart (name and value), for the pod template.
pub fn restart_hash(user: &BTreeMap<String, String>) -> String {
    let restart: String = user
        .iter()
        .filter(|(name, _)| needs_restart(name))
        .map(|(name, value)| format!("{name}={value}\n"))
        .collect();
    config_hash(&restart)
}

fn config_hash(text: &str) -> String {
    let digest = Sha256::digest(text.as_bytes());
    digest.iter().take(8).map(|b| format!("{b:02x}")).collect()
}

/// A value as a quoted configuration-file string: `'` doubled, `\` escaped.
fn quote(value: &str) -> String {
    format!("'{}'", value.replace('\\', "\\\\").replace('\'', "''"))
}

/// What PostgreSQL refuses of the configuration files on the instances (`facts`), once each, in
/// file order: `name = 'value' (reason)` for a line of `spec.postgresConfig` (`postgres_config`),
/// only the name and the reason for a line the operator wrote (its values are not the user's to
/// see in a status: a connection string may be among them). Empty when every line applies.
pub fn refused_configuration<'a>(
    facts: impl IntoIterator<Item = &'a InstanceFacts>,
    postgres_config: Option<&BTreeMap<String, String>>,
) -> Vec<String> {
    let mut refused: Vec<String> = Vec::new();
    for setting in facts.into_iter().flat_map(|f| &f.refused_settings) {
        let users = postgres_config.is_some_and(|config| config.contains_key(&setting.name));
        let line = match (setting.name.as_str(), users) {
            ("", _) => format!("a line PostgreSQL cannot read ({})", setting.error),
            (name, true) => format!("{name} = '{}' ({})", setting.setting, setting.error),
            (name, false) => format!("{name} ({})", setting.error),
        };
        if !refused.contains(&line) {
            refused.push(line);
        }
    }
    refused
}

/// Where the instances stand with the current configuration file, as a roll needs to know: a
/// pod restarted before the file reached every instance, or with a file PostgreSQL refuses, would
/// not start with what the spec says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigurationState {
    /// Every observed instance has the file (`desired_hash` on disk), and PostgreSQL accepts it.
    InPlace,
    /// Some observed instance still has an older file.
    Arriving,
    /// PostgreSQL refuses a line of it ([`refused_configuration`]).
    Refused,
}

/// The [`ConfigurationState`] of the observed instances (`facts`) for the file whose hash is
/// `desired_hash`.
pub fn configuration_state<'a>(
    facts: impl IntoIterator<Item = &'a InstanceFacts>,
    desired_hash: &str,
) -> ConfigurationState {
    let mut state = ConfigurationState::InPlace;
    for found in facts {
        if !found.refused_settings.is_empty() {
            return ConfigurationState::Refused;
        }
        if found.config_hash_on_disk.as_deref() != Some(desired_hash) {
            state = ConfigurationState::Arriving;
        }
    }
    state
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::databasecluster::api::validation::validate_spec;
    use crate::databasecluster::fixtures::{owner, seed};
    use crate::databasecluster::instances::Refused as RefusedSetting;

    /// The records as a pass reads them from the ConfigMap `build_config_map` writes.
    fn records_of(primary: &str, demoting: Option<&str>) -> Records {
        let spec = validate_spec(&seed().spec).unwrap();
        let written = serde_json::to_value(build_config_map(&owner(), &spec, primary, demoting)).unwrap();
        serde_json::from_value(written).unwrap()
    }

    #[test]
    fn the_records_read_back_what_the_config_map_records() {
        let records = records_of("production-postgres-1", Some("production-postgres-0"));
        assert_eq!(records.primary().as_deref(), Some("production-postgres-1"), "{PRIMARY_KEY}");
        assert_eq!(records.demoting().as_deref(), Some("production-postgres-0"), "{DEMOTING_KEY}");
        let records = records_of(" production-postgres-2\n", None);
        assert_eq!(records.primary().as_deref(), Some("production-postgres-2"), "trimmed");
        assert_eq!(records.demoting(), None);
        assert_eq!(records_of("  ", None).primary(), None, "a blank record is none");
        let empty: Records = serde_json::from_value(serde_json::json!({"metadata": {"name": "x"}})).unwrap();
        assert_eq!((empty.primary(), empty.demoting()), (None, None));
    }

    fn config(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(n, v)| ((*n).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn the_file_holds_the_operator_settings_then_the_users_then_the_hash() {
        let conf = postgresql_conf(&config(&[("work_mem", "8MB"), ("search_path", "a, 'b'")]), None);
        let lines: Vec<&str> = conf.lines().collect();
        assert_eq!(lines[1], "hot_standby = 'on'");
        assert!(lines.contains(&"work_mem = '8MB'"));
        assert!(lines.contains(&"search_path = 'a, ''b'''"));
        assert!(lines.last().unwrap().starts_with("dbcluster.config_hash = '"));
    }

    #[test]
    fn the_hash_changes_with_any_parameter() {
        let a = postgresql_conf(&config(&[("work_mem", "8MB")]), None);
        let b = postgresql_conf(&config(&[("work_mem", "16MB")]), None);
        assert_ne!(a.lines().last(), b.lines().last());
        assert_eq!(a, postgresql_conf(&config(&[("work_mem", "8MB")]), None));
        let synchronous = postgresql_conf(&config(&[("work_mem", "8MB")]), Some("ANY 1 (\"a\")"));
        assert_ne!(a.lines().last(), synchronous.lines().last());
    }

    #[test]
    fn synchronous_replicas_name_every_instance_in_a_quorum() {
        let mut spec = crate::databasecluster::api::validation::validate_spec(
            &crate::databasecluster::fixtures::spec(3, "15.4", "1Gi"),
        )
        .unwrap();
        assert_eq!(synchronous_standby_names("db", &spec), None);
        assert!(!server_conf("db", &spec).contains("synchronous_standby_names"));
        spec.synchronous_replicas = 1;
        assert_eq!(
            synchronous_standby_names("db", &spec).as_deref(),
            Some(r#"ANY 1 ("db-0", "db-1", "db-2")"#)
        );
        assert!(
            server_conf("db", &spec)
                .contains(r#"synchronous_standby_names = 'ANY 1 ("db-0", "db-1", "db-2")'"#),
            "{}",
            server_conf("db", &spec)
        );
    }

    #[test]
    fn only_restart_parameters_change_the_restart_hash() {
        let base = restart_hash(&config(&[("work_mem", "8MB"), ("max_connections", "100")]));
        assert_eq!(base, restart_hash(&config(&[("work_mem", "64MB"), ("max_connections", "100")])));
        assert_ne!(base, restart_hash(&config(&[("work_mem", "8MB"), ("max_connections", "200")])));
        assert!(needs_restart("shared_buffers") && needs_restart("Max_Connections"));
        assert!(needs_restart("pg_stat_statements.max"), "an extension's context is unknown");
        assert!(!needs_restart("work_mem") && !needs_restart("log_min_duration_statement"));
    }

    #[test]
    fn tcp_is_tls_only_and_replication_is_by_certificate_only() {
        let fields = |l: &str| l.split_whitespace().map(str::to_owned).collect::<Vec<_>>();
        let tcp: Vec<Vec<String>> =
            PG_HBA_CONF.lines().filter(|l| l.starts_with("host")).map(fields).collect();
        assert!(tcp.iter().all(|l| l[0] == "hostssl"), "no plaintext TCP line: {tcp:?}");
        let replication: Vec<(&str, &str)> =
            tcp.iter().filter(|l| l[1] == "replication").map(|l| (l[2].as_str(), l[4].as_str())).collect();
        assert_eq!(replication, [("replicator", "cert")], "the replication user only, by certificate");
        let others: Vec<&str> = tcp.iter().filter(|l| l[1] != "replication").map(|l| l[4].as_str()).collect();
        assert_eq!(others, ["scram-sha-256"]);
    }

    #[test]
    fn refused_lines_are_named_once_with_the_users_values_only() {
        let refused = |name: &str, setting: &str, error: &str| RefusedSetting {
            name: name.into(),
            setting: setting.into(),
            error: error.into(),
        };
        let bad_value = refused("work_mem", "lots", "setting could not be applied");
        let unknown = refused("work_memm", "1MB", "unrecognized configuration parameter");
        let operators = refused("primary_conninfo", "password=secret", "setting could not be applied");
        let primary =
            InstanceFacts { refused_settings: vec![bad_value.clone(), unknown], ..Default::default() };
        let standby = InstanceFacts { refused_settings: vec![bad_value, operators], ..Default::default() };
        let config: BTreeMap<String, String> =
            [("work_mem", "lots"), ("work_memm", "1MB")].map(|(k, v)| (k.to_owned(), v.to_owned())).into();
        assert_eq!(
            refused_configuration([&primary, &standby], Some(&config)),
            [
                "work_mem = 'lots' (setting could not be applied)",
                "work_memm = '1MB' (unrecognized configuration parameter)",
                "primary_conninfo (setting could not be applied)",
            ]
        );
        assert!(refused_configuration([&InstanceFacts::default()], Some(&config)).is_empty());
    }

    #[test]
    fn a_roll_waits_for_the_file_on_every_instance_and_for_postgres_to_accept_it() {
        let with =
            |hash: &str| InstanceFacts { config_hash_on_disk: Some(hash.into()), ..Default::default() };
        let refusing = InstanceFacts {
            refused_settings: vec![RefusedSetting {
                name: "work_mem".into(),
                setting: "lots".into(),
                error: "setting could not be applied".into(),
            }],
            ..with("new")
        };
        assert_eq!(configuration_state([&with("new"), &with("new")], "new"), ConfigurationState::InPlace);
        assert_eq!(configuration_state([&with("new"), &with("old")], "new"), ConfigurationState::Arriving);
        assert_eq!(configuration_state([&with("old"), &refusing], "new"), ConfigurationState::Refused);
        assert_eq!(configuration_state([], "new"), ConfigurationState::InPlace, "nothing observed");
    }
}
