//! Validation of a DatabaseCluster beyond what its CRD enforces.
//!
//! The CRD's schema and CEL rules keep bad specs out, but an object stored under an older CRD (or
//! written while validation was off) can still hold an unparsable quantity, a bad version or a
//! downgrade of the major version. [`validate`] turns such a spec into a [`SpecError`] that status
//! reports as `InvalidSpec`, instead of a panic or a child object the API server refuses; a valid
//! spec becomes a [`ValidSpec`] the builders can use without re-checking anything.

use std::collections::BTreeMap;

use thiserror::Error;

use crate::databasecluster::api::backup::{
    BackupSpecError, ValidBackup, validate_backup, validate_bootstrap,
};
use crate::databasecluster::api::monitoring::custom_queries;
use crate::databasecluster::api::types::{
    ConfigMapKeyRef, DatabaseCluster, DatabaseClusterSpec, PvcRetention, ResourceRequirements,
};
use crate::databasecluster::specs::config::{CONFIG_HASH_PARAMETER, MAX_SERVER_CONF_BYTES, postgresql_conf};
use crate::databasecluster::upgrade::admission::{VersionChangeError, check_version_change};

/// Fewest and most instances a cluster may have (the CRD's `minimum` and `maximum`).
pub const REPLICAS_RANGE: std::ops::RangeInclusive<i32> = 0..=10;

/// Server parameters the operator sets itself; overriding them would break probes, the Service,
/// the data volume or the JSON log (`logging_collector`, `log_destination`: the server logs to its
/// stderr, which the instance manager turns into JSON lines).
const RESERVED_PARAMETERS: &[&str] = &[
    "logging_collector",
    "log_destination",
    "port",
    "listen_addresses",
    "data_directory",
    "hba_file",
    "ident_file",
    "config_file",
    "unix_socket_directories",
    "unix_socket_permissions",
    "primary_conninfo",
    "primary_slot_name",
    "hot_standby",
    "wal_level",
    "password_encryption",
    "synchronous_standby_names",
    CONFIG_HASH_PARAMETER,
];

/// A spec the operator can act on, with every field parsed.
#[derive(Clone, Debug, PartialEq)]
pub struct ValidSpec {
    /// Number of instances, within [`REPLICAS_RANGE`].
    pub replicas: i32,
    /// The PostgreSQL version (the `postgres` image tag).
    pub version: PostgresVersion,
    /// Size of each data volume.
    pub storage: StorageSize,
    /// Server parameters, sorted by name so that rendering them is deterministic.
    pub postgres_config: BTreeMap<String, String>,
    /// The PostgreSQL container's requests and limits, every quantity checked.
    pub resources: ResourceRequirements,
    /// The data volumes' StorageClass, if named.
    pub storage_class_name: Option<String>,
    /// What happens to the data volumes when instances go.
    pub pvc_retention: PvcRetention,
    /// The Secret with the application user's credentials (`<name>-app` unless the user names one).
    pub app_secret_name: Option<String>,
    /// The backup configuration, if backups are asked for.
    pub backup: Option<ValidBackup>,
    /// The ConfigMap key of the custom metrics queries (`spec.monitoring`), if named.
    pub custom_queries: Option<ConfigMapKeyRef>,
    /// How many standbys confirm each commit (`spec.synchronousReplicas`), below `replicas`
    /// (or anything while hibernated).
    pub synchronous_replicas: i32,
    /// The servers' certificate the user brings (`spec.certificates`), if any.
    pub server_certificate: Option<crate::databasecluster::api::certificates::ServerCertificate>,
    /// The clients' CA (and replication certificate) the user brings (`spec.certificates`), if any.
    pub client_certificates: Option<crate::databasecluster::api::certificates::ClientCertificates>,
}

/// A PostgreSQL version as `major` or `major.minor`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PostgresVersion {
    /// The major version, e.g. 15.
    pub major: u32,
    /// The minor version, if given.
    pub minor: Option<u32>,
    text: String,
}

impl PostgresVersion {
    /// Parses `major` or `major.minor` (digits only, major not zero).
    pub fn parse(text: &str) -> Option<PostgresVersion> {
        let (major, minor) = match text.split_once('.') {
            Some((major, minor)) => (major, Some(minor)),
            None => (text, None),
        };
        let major = parse_digits(major).filter(|major| *major > 0)?;
        let minor = match minor {
            Some(minor) => Some(parse_digits(minor)?),
            None => None,
        };
        Some(PostgresVersion { major, minor, text: text.to_owned() })
    }

    /// The version as written in the spec, which is also the image tag.
    pub fn as_str(&self) -> &str {
        &self.text
    }
}

fn parse_digits(text: &str) -> Option<u32> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// A storage size in whole bytes, with the quantity text the API server would store for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StorageSize {
    bytes: u64,
    canonical: String,
}

impl StorageSize {
    /// Parses a quantity of the forms the CRD admits (`1Gi`, `1.5G`, `.5Ti`, `1073741824`),
    /// rounding fractions of a byte up. Zero, negative, exponent and milli forms are refused.
    pub fn parse(text: &str) -> Option<StorageSize> {
        let split = text.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(text.len());
        let (number, suffix) = text.split_at(split);
        let (multiplier, binary) = suffix_multiplier(suffix)?;
        let (whole, fraction) = match number.split_once('.') {
            Some((_, "")) => return None,
            Some(parts) => parts,
            None => (number, ""),
        };
        if whole.is_empty() && fraction.is_empty()
            || !whole.bytes().chain(fraction.bytes()).all(|b| b.is_ascii_digit())
            || whole.len() + fraction.len() > 20
        {
            return None;
        }
        let mut mantissa: u128 = 0;
        for digit in whole.bytes().chain(fraction.bytes()) {
            mantissa = mantissa * 10 + u128::from(digit - b'0');
        }
        let scale = 10u128.pow(u32::try_from(fraction.len()).ok()?);
        let bytes = mantissa.checked_mul(multiplier)?.div_ceil(scale);
        let bytes = u64::try_from(bytes).ok().filter(|b| *b > 0 && *b <= i64::MAX as u64)?;
        Some(StorageSize { bytes, canonical: canonical_bytes(bytes, binary) })
    }

    /// The size in bytes.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The quantity in the API server's canonical form (`1536Mi` for `1.5Gi`), so that a value
    /// written and read back compares equal.
    pub fn as_str(&self) -> &str {
        &self.canonical
    }
}

/// The multiplier of a quantity suffix and whether it is a binary (power of 1024) suffix.
fn suffix_multiplier(suffix: &str) -> Option<(u128, bool)> {
    const BINARY: [&str; 6] = ["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];
    const DECIMAL: [&str; 6] = ["k", "M", "G", "T", "P", "E"];
    if suffix.is_empty() {
        return Some((1, false));
    }
    if let Some(i) = BINARY.iter().position(|s| *s == suffix) {
        return Some((1u128 << (10 * (i + 1)), true));
    }
    let i = DECIMAL.iter().position(|s| *s == suffix)?;
    Some((1000u128.pow(u32::try_from(i + 1).ok()?), false))
}

/// Formats bytes the way Kubernetes canonicalises a quantity: a binary input keeps the largest
/// power-of-1024 suffix that divides it exactly (below 1024 it is written as a plain number); a
/// decimal input keeps the largest power-of-1000 suffix that divides it exactly.
fn canonical_bytes(bytes: u64, binary: bool) -> String {
    let (base, suffixes): (u64, [&str; 6]) = if binary && bytes >= 1024 {
        (1024, ["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"])
    } else {
        (1000, ["k", "M", "G", "T", "P", "E"])
    };
    let mut value = bytes;
    let mut suffix = "";
    for next in suffixes {
        if !value.is_multiple_of(base) {
            break;
        }
        value /= base;
        suffix = next;
    }
    format!("{value}{suffix}")
}

/// Why a spec cannot be acted on. The messages are shown to users in the `Ready` condition.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum SpecError {
    /// `replicas` is outside [`REPLICAS_RANGE`].
    #[error("spec.replicas {0} is out of range: it must be between 0 and 10")]
    ReplicasOutOfRange(i32),
    /// `version` is not `major` or `major.minor`.
    #[error("spec.version {0:?} is not a PostgreSQL version of the form major.minor or major")]
    InvalidVersion(String),
    /// `storageSize` is not a positive quantity of bytes.
    #[error("spec.storageSize {0:?} is not a positive Kubernetes quantity such as 10Gi")]
    InvalidStorageSize(String),
    /// A `postgresConfig` name is not a parameter name, or its value holds a NUL byte.
    #[error("spec.postgresConfig parameter {0:?} is not a valid PostgreSQL parameter name and value")]
    InvalidParameter(String),
    /// A `postgresConfig` parameter is one the operator must control.
    #[error("spec.postgresConfig parameter {0:?} is managed by the operator and cannot be set")]
    ReservedParameter(String),
    /// `postgresConfig` makes a configuration file too large for its ConfigMap.
    #[error(
        "spec.postgresConfig makes a configuration file of {bytes} bytes; at most {MAX_SERVER_CONF_BYTES} fit in \
         its ConfigMap (1 MiB in all)"
    )]
    ConfigurationTooLarge {
        /// The file's size as it would be written.
        bytes: usize,
    },
    /// `storageClassName` is not a StorageClass name.
    #[error("spec.storageClassName {0:?} {STORAGE_CLASS_PROBLEM}")]
    InvalidStorageClass(String),
    /// `spec.certificates` names a Secret that is not a DNS subdomain, or one without the Secret
    /// it goes with.
    #[error("spec.certificates: {0}")]
    InvalidCertificateSecret(String),
    /// A `resources` quantity does not parse.
    #[error("spec.resources {0} is not a Kubernetes quantity such as 500m or 1Gi")]
    InvalidResource(String),
    /// A `resources` name that a container cannot ask for.
    #[error(
        "spec.resources {0} is not a container resource: use cpu, memory, ephemeral-storage, \
         hugepages-<size> or a domain-qualified extended resource"
    )]
    UnknownResource(String),
    /// Amounts that Kubernetes refuses in a container (a request above its limit, a part of a
    /// huge page…).
    #[error("spec.resources {0}")]
    RefusedAmounts(String),
    /// A change of major version the cluster does not admit (a downgrade, or an upgrade from a
    /// version `pg_upgrade` is not run from).
    #[error(transparent)]
    VersionChange(#[from] VersionChangeError),
    /// `synchronousReplicas` is negative, or not below `replicas`.
    #[error(
        "spec.synchronousReplicas {requested} is out of range: it must be at least 0 and less than spec.replicas ({replicas})"
    )]
    SynchronousReplicasOutOfRange {
        /// `spec.synchronousReplicas`.
        requested: i32,
        /// `spec.replicas`.
        replicas: i32,
    },
    /// `spec.monitoring.customQueriesConfigMap` names no ConfigMap key.
    #[error("spec.monitoring.customQueriesConfigMap {0}")]
    InvalidCustomQueries(String),
    /// `spec.backup`, `spec.backupSchedule` or `spec.bootstrap` cannot be acted on.
    #[error(transparent)]
    Backup(#[from] BackupSpecError),
}

/// Checks a spec on its own: every field parses and lies in range.
pub fn validate_spec(spec: &DatabaseClusterSpec) -> Result<ValidSpec, SpecError> {
    if !REPLICAS_RANGE.contains(&spec.replicas) {
        return Err(SpecError::ReplicasOutOfRange(spec.replicas));
    }
    let version = PostgresVersion::parse(&spec.version)
        .ok_or_else(|| SpecError::InvalidVersion(spec.version.clone()))?;
    let storage = StorageSize::parse(&spec.storage_size)
        .ok_or_else(|| SpecError::InvalidStorageSize(spec.storage_size.clone()))?;
    let postgres_config = spec.postgres_config.clone().unwrap_or_default();
    for (name, value) in &postgres_config {
        if !is_parameter_name(name) || value.contains('\0') {
            return Err(SpecError::InvalidParameter(name.clone()));
        }
        if RESERVED_PARAMETERS.contains(&name.to_ascii_lowercase().as_str()) {
            return Err(SpecError::ReservedParameter(name.clone()));
        }
    }
    let bytes = postgresql_conf(&postgres_config, None).len();
    if bytes > MAX_SERVER_CONF_BYTES {
        return Err(SpecError::ConfigurationTooLarge { bytes });
    }
    let synchronous_replicas = spec.synchronous_replicas.unwrap_or(0);
    if synchronous_replicas < 0 || (spec.replicas > 0 && synchronous_replicas >= spec.replicas) {
        return Err(SpecError::SynchronousReplicasOutOfRange {
            requested: synchronous_replicas,
            replicas: spec.replicas,
        });
    }
    if let Some(class) = spec.storage_class_name.as_ref().filter(|class| !is_storage_class_name(class)) {
        return Err(SpecError::InvalidStorageClass(class.clone()));
    }
    let resources = spec.resources.clone().unwrap_or_else(default_resources);
    check_resources(&resources)?;
    let custom_queries = custom_queries(spec.monitoring.as_ref()).map_err(SpecError::InvalidCustomQueries)?;
    let certificates =
        crate::databasecluster::api::certificates::user_certificates(spec.certificates.as_ref())
            .map_err(SpecError::InvalidCertificateSecret)?;
    Ok(ValidSpec {
        replicas: spec.replicas,
        version,
        storage,
        postgres_config,
        resources,
        storage_class_name: spec.storage_class_name.clone(),
        pvc_retention: spec.pvc_retention.unwrap_or_default(),
        app_secret_name: spec.app_secret_name.clone(),
        backup: validate_backup(spec)?,
        synchronous_replicas,
        custom_queries,
        server_certificate: certificates.server,
        client_certificates: certificates.client,
    })
}

/// The container resources when the spec names none: the seed's fixed values.
pub fn default_resources() -> ResourceRequirements {
    let quantities = |cpu: &str, memory: &str| {
        Some(BTreeMap::from([("cpu".to_owned(), cpu.to_owned()), ("memory".to_owned(), memory.to_owned())]))
    };
    ResourceRequirements { requests: quantities("100m", "256Mi"), limits: quantities("500m", "512Mi") }
}

/// What a StorageClass name that is not one gets told (see [`is_storage_class_name`]).
pub const STORAGE_CLASS_PROBLEM: &str = "is not a StorageClass name: at most 253 lower-case letters, digits, '-' and '.', \
     each dot-separated part starting and ending with a letter or digit";

/// Whether `name` can name a StorageClass in a claim: a DNS-1123 subdomain, as the API server
/// checks a claim's `storageClassName` (the CRD's pattern,
/// [`STORAGE_CLASS_PATTERN`](crate::databasecluster::api::types::STORAGE_CLASS_PATTERN), says the
/// same for specs stored under it).
pub fn is_storage_class_name(name: &str) -> bool {
    let label = |part: &str| {
        !part.is_empty()
            && part.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !part.starts_with('-')
            && !part.ends_with('-')
    };
    name.len() <= 253 && name.split('.').all(label)
}

/// Checks the container's resources as the API server checks a pod template's (Kubernetes 1.28
/// `ValidateResourceRequirements`), so that a spec it would refuse in the StatefulSet is an
/// `InvalidSpec` before anything is written: every amount parses, every name is a container
/// resource, a request is at most its limit, and one that cannot be overcommitted (huge pages, an
/// extended resource) equals a limit that is set.
fn check_resources(resources: &ResourceRequirements) -> Result<(), SpecError> {
    type Amounts<'a> = BTreeMap<&'a str, (&'a str, u128)>;
    fn parsed<'a>(
        kind: &str,
        quantities: &'a Option<BTreeMap<String, String>>,
    ) -> Result<Amounts<'a>, SpecError> {
        let mut amounts = BTreeMap::new();
        for (name, value) in quantities.iter().flatten() {
            let amount = resource_amount(value)
                .ok_or_else(|| SpecError::InvalidResource(format!("{kind}.{name}={value:?}")))?;
            let standard = matches!(name.as_str(), "cpu" | "memory" | "ephemeral-storage")
                || name.starts_with("hugepages-");
            if !standard && !name.contains('/') {
                return Err(SpecError::UnknownResource(format!("{kind}.{name}")));
            }
            let whole = |unit: u128| unit > 0 && amount % unit == 0;
            if let Some(page) = name.strip_prefix("hugepages-") {
                let page_size = resource_amount(page).unwrap_or(0);
                if !whole(page_size) {
                    return Err(SpecError::RefusedAmounts(format!(
                        "{kind}.{name} {value} is not a whole number of {page} pages"
                    )));
                }
            } else if !is_native_resource(name) && !whole(resource_amount("1").unwrap_or(0)) {
                return Err(SpecError::RefusedAmounts(format!(
                    "{kind}.{name} {value} is not a whole number: an extended resource is counted in units"
                )));
            }
            amounts.insert(name.as_str(), (value.as_str(), amount));
        }
        Ok(amounts)
    }
    let requests = parsed("requests", &resources.requests)?;
    let limits = parsed("limits", &resources.limits)?;
    for (name, (request, amount)) in &requests {
        let overcommit = is_native_resource(name) && !name.starts_with("hugepages-");
        let refusal = match limits.get(name) {
            Some((limit, bound)) if overcommit && amount > bound => {
                format!("requests.{name} {request} is more than limits.{name} {limit}")
            }
            Some((limit, bound)) if !overcommit && amount != bound => {
                format!(
                    "requests.{name} {request} must equal limits.{name} {limit}: {name} cannot be overcommitted"
                )
            }
            None if !overcommit => {
                format!("requests.{name} needs limits.{name}: {name} cannot be overcommitted")
            }
            _ => continue,
        };
        return Err(SpecError::RefusedAmounts(refusal));
    }
    let names = || requests.keys().chain(limits.keys());
    if names().any(|n| n.starts_with("hugepages-")) && !names().any(|n| matches!(*n, "cpu" | "memory")) {
        return Err(SpecError::RefusedAmounts("hugepages need a cpu or memory amount beside them".into()));
    }
    Ok(())
}

/// A resource Kubernetes defines itself (no domain, or a `kubernetes.io/` one), as opposed to an
/// extended resource a device plugin offers.
fn is_native_resource(name: &str) -> bool {
    !name.contains('/') || name.contains("kubernetes.io/")
}

/// A CPU or memory quantity in nano-units, for comparing a request with its limit: a
/// non-negative decimal with an optional milli, SI or binary suffix; `None` for anything else.
fn resource_amount(text: &str) -> Option<u128> {
    const NANOS: u128 = 1_000_000_000;
    let split = text.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(text.len());
    let (number, suffix) = text.split_at(split);
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if (whole.is_empty() && fraction.is_empty()) || fraction.contains('.') {
        return None;
    }
    let per_unit = match suffix {
        "m" => NANOS / 1000,
        suffix => NANOS * suffix_multiplier(suffix)?.0,
    };
    let mantissa = format!("{whole}{fraction}").parse::<u128>().ok()?;
    let scale = 10u128.checked_pow(u32::try_from(fraction.len()).ok()?)?;
    Some(mantissa.checked_mul(per_unit)? / scale)
}

/// Checks a cluster: its spec, and that the version is one the instances' version
/// (`status.currentVersion`) may move to ([`check_version_change`]: the same major, or a later
/// one), which the CRD's CEL rule normally ensures.
pub fn validate(cluster: &DatabaseCluster) -> Result<ValidSpec, SpecError> {
    let valid = validate_spec(&cluster.spec)?;
    validate_bootstrap(cluster.metadata.name.as_deref().unwrap_or_default(), &cluster.spec)?;
    let running = cluster.status.as_ref().and_then(|status| status.current_version.as_deref());
    if let Some(running) = running {
        check_version_change(running, valid.version.as_str())?;
    }
    Ok(valid)
}

/// A PostgreSQL parameter name: a letter or underscore, then letters, digits, `_` or `.`
/// (the dot for extension parameters such as `pg_stat_statements.max`).
fn is_parameter_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    matches!(bytes.next(), Some(b) if b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.')
}

#[cfg(test)]
mod tests;
