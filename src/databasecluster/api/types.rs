//! The `DatabaseCluster` custom resource (`databases.madmmas.dev/v1alpha1`) and its CRD.
//!
//! Every rule the OpenAPI schema can express lives in the generated CRD (required fields, ranges,
//! patterns, the `10Gi` default, the phase enum, `listType=map` conditions); the rules it cannot
//! express are CEL rules (`x-kubernetes-validations`): the major version may only move up,
//! `storageSize` may not shrink, and the cluster's name must fit its children's names and labels.
//! Every rule compiles on Kubernetes 1.28, whose apiserver compiles new expressions without the
//! quantity library (so the no-shrink rule converts quantities to bytes itself). What can still slip
//! past an older CRD is caught by [`validate_spec`](crate::databasecluster::api::validation::validate_spec).

use std::collections::BTreeMap;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, CustomResourceExt, KubeSchema};
use serde::{Deserialize, Serialize};

use crate::databasecluster::api::backup::{BOOTSTRAP_IMMUTABLE_MESSAGE, SCHEDULE_PATTERN};
pub use crate::databasecluster::api::backup::{BackupSpec, BackupsStatus, BootstrapSpec, RestoredFrom};
pub use crate::databasecluster::api::monitoring::{ConfigMapKeyRef, MonitoringSpec};
pub use crate::databasecluster::upgrade::admission::VERSION_CHANGE_MESSAGE;
use crate::databasecluster::upgrade::admission::version_change_rule;

/// The storage size used when the spec leaves `storageSize` out.
pub const DEFAULT_STORAGE_SIZE: &str = "10Gi";

/// Message of the CEL rule that rejects a smaller `storageSize`.
pub const STORAGE_SHRINK_MESSAGE: &str = "storageSize may not shrink";

/// Message of the CEL rule that refuses a cluster name its children could not carry.
pub const CLUSTER_NAME_MESSAGE: &str = "metadata.name must be at most 52 characters of lower-case letters, \
     digits and '-', starting with a letter and ending with a letter or digit: it names the cluster's \
     Service (a DNS-1035 label) and StatefulSet, whose pods carry it in a 63-character \
     controller-revision-hash label together with an 11-character hash";

/// The cluster-name rule (see [`CLUSTER_NAME_MESSAGE`]); `generateName` is checked by the
/// apiserver on the generated name, which the rule sees.
pub const CLUSTER_NAME_RULE: &str =
    "size(self.metadata.name) <= 52 && self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')";

/// The quantities `storageSize` admits: a positive decimal number and a binary or decimal suffix.
pub const STORAGE_SIZE_PATTERN: &str =
    r"^(0*[1-9][0-9]*(\.[0-9]+)?|0*\.[0-9]*[1-9][0-9]*)(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$";

/// The suffixes of [`STORAGE_SIZE_PATTERN`] with their multipliers.
const STORAGE_SUFFIXES: &[(&str, &str)] = &[
    ("", "1.0"),
    ("k", "1e3"),
    ("M", "1e6"),
    ("G", "1e9"),
    ("T", "1e12"),
    ("P", "1e15"),
    ("E", "1e18"),
    ("Ki", "1024.0"),
    ("Mi", "1048576.0"),
    ("Gi", "1073741824.0"),
    ("Ti", "1099511627776.0"),
    ("Pi", "1125899906842624.0"),
    ("Ei", "1152921504606846976.0"),
];

/// The CEL expression for the size in bytes (a double) of the quantity `var`, using only what a
/// Kubernetes 1.28 apiserver compiles new expressions with (no quantity library before 1.29): the
/// number before the suffix times the suffix's multiplier, looked up in a map (shallow, so that
/// parsers need little stack).
fn storage_bytes_expression(var: &str) -> String {
    let suffix_length = format!("({var}.endsWith('i') ? 2 : ({var}.matches('[kMGTPE]$') ? 1 : 0))");
    let multipliers: Vec<String> =
        STORAGE_SUFFIXES.iter().map(|(suffix, factor)| format!("'{suffix}': {factor}")).collect();
    format!(
        "double({var}.substring(0, size({var}) - {suffix_length})) * {{{}}}[{var}.substring(size({var}) - {suffix_length})]",
        multipliers.join(", ")
    )
}

/// The transition rule that refuses a smaller `storageSize`: both sizes are converted to bytes as
/// doubles and compared with half a byte of slack, so that one size written two ways (`1.1G`,
/// `1100M`) is never mistaken for a shrink through rounding; the doubles are exact to well under
/// half a byte below 2^52 bytes (4 PiB). A stored value the pattern does not admit (written under an
/// older CRD) is not judged: the operator reports it as an invalid spec.
pub fn storage_no_shrink_rule() -> String {
    let pattern = STORAGE_SIZE_PATTERN.replace('\\', "\\\\");
    format!(
        "!oldSelf.matches('{pattern}') || !self.matches('{pattern}') || {} + 0.5 >= {}",
        storage_bytes_expression("self"),
        storage_bytes_expression("oldSelf"),
    )
}

/// Desired state of a PostgreSQL cluster: how many instances, which version, how much storage.
// Clippy reads the repeated `type_ = "string"` of two printer columns as a duplicated attribute.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, KubeSchema, Deserialize, Serialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "databases.madmmas.dev",
    version = "v1alpha1",
    kind = "DatabaseCluster",
    namespaced,
    shortname = "dbc",
    status = "DatabaseClusterStatus",
    derive = "PartialEq",
    doc = "A PostgreSQL cluster managed by dbcluster-operator.",
    printcolumn(
        name = "Phase",
        type_ = "string",
        json_path = ".status.phase",
        description = "Lifecycle phase"
    ),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.readyInstances",
        description = "Ready instances / desired instances"
    ),
    printcolumn(
        name = "Status",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].reason",
        description = "Why the cluster is or is not ready (the Ready condition's reason)"
    ),
    printcolumn(
        name = "Primary",
        type_ = "string",
        json_path = ".status.currentPrimary",
        description = "The instance that accepts writes"
    ),
    printcolumn(
        name = "Version",
        type_ = "string",
        json_path = ".status.currentVersion",
        description = "PostgreSQL version every instance runs"
    ),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    printcolumn(
        name = "Message",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].message",
        description = "What the Ready condition says",
        priority = 1
    ),
    validation = Rule::new(CLUSTER_NAME_RULE).message(CLUSTER_NAME_MESSAGE),
    validation = Rule::new(version_change_rule()).message(VERSION_CHANGE_MESSAGE),
    scale(spec_replicas_path = ".spec.replicas", status_replicas_path = ".status.replicas")
)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("has(self.bootstrap) == has(oldSelf.bootstrap)").message(BOOTSTRAP_IMMUTABLE_MESSAGE))]
#[x_kube(validation = Rule::new(SYNCHRONOUS_REPLICAS_RULE).message(SYNCHRONOUS_REPLICAS_MESSAGE))]
#[x_kube(validation = Rule::new(crate::databasecluster::api::recovery::OWN_ARCHIVE_RULE)
    .message(crate::databasecluster::api::recovery::OWN_ARCHIVE_MESSAGE))]
pub struct DatabaseClusterSpec {
    /// Number of PostgreSQL instances (0 to 10): one primary and `replicas - 1` streaming standbys;
    /// `0` hibernates the cluster (no pods, volumes kept).
    #[schemars(range(min = 0, max = 10))]
    pub replicas: i32,

    /// PostgreSQL version as `major.minor` or `major` (the `postgres` image tag), e.g. `15.4`.
    /// The major version may only move up (an in-place upgrade with `pg_upgrade`), or back to
    /// the major the instances run.
    #[schemars(regex(pattern = r"^[1-9][0-9]*(\.[0-9]+)?$"), length(max = 16))]
    pub version: String,

    /// Size of each instance's data volume, a Kubernetes quantity such as `1Gi` or `500M`.
    /// It may grow but never shrink.
    #[serde(default = "default_storage_size")]
    #[schemars(
        regex(pattern = STORAGE_SIZE_PATTERN),
        length(max = 32)
    )]
    #[x_kube(validation = Rule::new(storage_no_shrink_rule()).message(STORAGE_SHRINK_MESSAGE))]
    pub storage_size: String,

    /// Deprecated alias of `backup.schedule` (the seed's field), still honoured: a cron schedule
    /// for backups (five fields, or a macro such as `@daily`). It may not differ from
    /// `backup.schedule` when both are set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = SCHEDULE_PATTERN), length(max = 128))]
    pub backup_schedule: Option<String>,

    /// Scheduled and on-demand physical backups into the volume `<name>-backups`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup: Option<BackupSpec>,

    /// How the cluster gets its first data (default: an empty database). Set at creation only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self == oldSelf").message(BOOTSTRAP_IMMUTABLE_MESSAGE))]
    pub bootstrap: Option<BootstrapSpec>,

    /// PostgreSQL server parameters, written to the instances' configuration file: a parameter
    /// PostgreSQL reloads is applied without a restart; one that needs a restart rolls the instances.
    /// A value or a name PostgreSQL refuses is not applied at all (Ready=False, reason
    /// InvalidConfiguration, names it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub postgres_config: Option<BTreeMap<String, String>>,

    /// CPU and memory requests and limits of the PostgreSQL container (default: requests 100m/256Mi,
    /// limits 500m/512Mi). A change rolls the instances. What Kubernetes refuses in a container (a
    /// request above its limit, a name that is not a container resource) is `InvalidSpec`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,

    /// StorageClass of the data volumes (the cluster's default class when unset). Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253), regex(pattern = STORAGE_CLASS_PATTERN))]
    #[x_kube(validation = Rule::new("self == oldSelf").message(STORAGE_CLASS_CHANGE_MESSAGE))]
    pub storage_class_name: Option<String>,

    /// What happens to the data volumes when the cluster is deleted or scaled down: `Retain`
    /// (default) keeps them, `Delete` deletes them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pvc_retention: Option<PvcRetention>,

    /// An existing Secret (keys `username`, `password`) holding the application user's credentials,
    /// instead of the generated `<name>-app`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub app_secret_name: Option<String>,

    /// Seconds the primary may be not ready before a standby is promoted in its place (default
    /// 5; at least 30 with `primaryUpdateMethod: Restart`, whose rolls restart the primary in
    /// place); `0` promotes as soon as the primary is seen not ready. Its readiness probe already
    /// needs 3 s of failed answers, so a merely slow primary is not failed over.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 86400))]
    pub failover_delay: Option<i32>,

    /// How many standbys must have flushed a transaction's WAL before its commit is acknowledged
    /// (`synchronous_standby_names = 'ANY N (...)'` over the instances; default 0: asynchronous).
    /// With N > 0 a failover promotes only a standby recorded as synchronous, so no acknowledged
    /// write is lost; writes wait while fewer than N standbys stream. At most `replicas - 1`
    /// (any value while hibernated, `replicas: 0`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 9))]
    pub synchronous_replicas: Option<i32>,

    /// A planned switchover: the pod name of the instance that should become the primary, e.g.
    /// `<name>-1`. Acted on when it changes (`status.switchover` records the value handled), so a
    /// later failover is not undone by the value left here. The old primary is stopped cleanly and
    /// the target promoted once it has replayed all of the old primary's WAL: nothing is lost.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub primary: Option<String>,

    /// How a rolling update (a restart parameter, resources, a version) reaches the primary:
    /// `Switchover` (the default with 2+ instances) promotes an updated standby first, so the old
    /// primary is updated as a standby; `Restart` restarts the primary in place.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub primary_update_method: Option<PrimaryUpdateMethod>,

    /// Monitoring: custom metrics queries served beside the built-in ones on each instance's
    /// `metrics` port (9187).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub monitoring: Option<MonitoringSpec>,

    /// Certificates the user brings instead of the operator's (docs/tls.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub certificates: Option<crate::databasecluster::api::certificates::CertificatesSpec>,
}

/// How a rolling update reaches the primary (`spec.primaryUpdateMethod`).
#[derive(Deserialize, Serialize, schemars::JsonSchema, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PrimaryUpdateMethod {
    /// Switch over to an updated standby, then update the old primary as a standby.
    #[default]
    Switchover,
    /// Restart the primary in place (writes stop while it restarts).
    Restart,
}

/// The CEL rule keeping `synchronousReplicas` below the number of instances (see
/// [`SYNCHRONOUS_REPLICAS_MESSAGE`]); a hibernated cluster (`replicas: 0`) keeps its value.
pub const SYNCHRONOUS_REPLICAS_RULE: &str =
    "!has(self.synchronousReplicas) || self.replicas == 0 || self.synchronousReplicas < self.replicas";

/// Message of [`SYNCHRONOUS_REPLICAS_RULE`].
pub const SYNCHRONOUS_REPLICAS_MESSAGE: &str = "synchronousReplicas must be less than replicas: one instance is the primary, and a commit waits for that many of the others";

/// The failover delay when `spec.failoverDelay` is unset, in seconds.
pub const DEFAULT_FAILOVER_DELAY_SECONDS: i32 = 5;

/// Message of the CEL rule that rejects a change of `storageClassName`.
pub const STORAGE_CLASS_CHANGE_MESSAGE: &str = "storageClassName is immutable";

/// A StorageClass name, as a claim's `storageClassName` must be (a DNS-1123 subdomain: the API
/// server refuses a claim naming anything else).
pub const STORAGE_CLASS_PATTERN: &str = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";

/// CPU and memory of a container, in Kubernetes quantities.
#[derive(Deserialize, Serialize, schemars::JsonSchema, Clone, Debug, Default, PartialEq, Eq)]
pub struct ResourceRequirements {
    /// Guaranteed amounts, e.g. `{"cpu": "500m", "memory": "1Gi"}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests: Option<BTreeMap<String, String>>,
    /// Upper bounds, e.g. `{"memory": "2Gi"}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<BTreeMap<String, String>>,
}

/// What happens to the data volumes when their instances go.
#[derive(Deserialize, Serialize, schemars::JsonSchema, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PvcRetention {
    /// Keep the volumes (the data survives deletion and scale down).
    #[default]
    Retain,
    /// Delete the volumes with their instances.
    Delete,
}

impl PvcRetention {
    /// The value as written in the API (and in a StatefulSet's retention policy).
    pub fn as_str(self) -> &'static str {
        match self {
            PvcRetention::Retain => "Retain",
            PvcRetention::Delete => "Delete",
        }
    }
}

fn default_storage_size() -> String {
    DEFAULT_STORAGE_SIZE.to_owned()
}

/// Observed state of a DatabaseCluster, written only by the operator on the `/status` subresource.
#[derive(Deserialize, Serialize, schemars::JsonSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DatabaseClusterStatus {
    /// Summary of the cluster's lifecycle for `kubectl get`; the conditions carry the detail.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,

    /// Number of instances passing their readiness probe.
    #[serde(default)]
    pub ready_replicas: i32,

    /// Number of instances that exist (the scale subresource's status replicas).
    #[serde(default)]
    pub replicas: i32,

    /// `ready/desired`, e.g. `2/3`, for the READY column.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_instances: Option<String>,

    /// The instance observed accepting writes (out of recovery).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_primary: Option<String>,

    /// The instance the operator's record names primary (the one that must accept writes): it
    /// differs from `currentPrimary` while a failover is under way.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_primary: Option<String>,

    /// When the operator last promoted a standby (a failover).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_primary_timestamp: Option<Time>,

    /// The last failover: which instance replaced which, when, and whether writes may be lost.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_failover: Option<FailoverRecord>,

    /// The last `spec.primary` request handled, and how its switchover went.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub switchover: Option<SwitchoverStatus>,

    /// Each instance as observed, by ordinal.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub instances: Vec<InstanceStatus>,

    /// When the operator last observed the instances (asked each one, read its pod) and wrote
    /// what it saw in `instances` and `currentPrimary`: how old those figures are. Refreshed with
    /// every status write, and at least every 30 s while the cluster converges; a cluster at rest
    /// is not observed until something changes, so its figures age.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instances_observed_at: Option<Time>,

    /// The PostgreSQL version every instance actually runs (set once a rollout completes).
    // Bounded so that the CRD's version rule, which reads it, has a small CEL cost on 1.28.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub current_version: Option<String>,

    /// The `metadata.generation` this status was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// Ready, Degraded, Upgrading, Resizing (and ReconcileSucceeded after failed passes), in the `metav1.Condition` shape, keyed by `type`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "condition_list_schema")]
    pub conditions: Vec<Condition>,

    /// When the last successful backup finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_backup_time: Option<Time>,

    /// The last backup, the newest backup Job and the last on-demand token handled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backups: Option<BackupsStatus>,

    /// The backup this cluster was restored from (`spec.bootstrap.fromBackup`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restored_from: Option<RestoredFrom>,

    /// Per login: the version (a keyed hash, never the password) of its Secret the primary applied.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub applied_secret_versions: BTreeMap<String, String>,

    /// Per certificate Secret (the CA's, the server's, the clients'): when its certificate
    /// expires (RFC 3339). Never a key or a certificate.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub certificate_expiry: BTreeMap<String, String>,
}

/// One instance (pod) of the cluster as the operator last observed it.
#[derive(Deserialize, Serialize, schemars::JsonSchema, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct InstanceStatus {
    /// The pod's name.
    pub name: String,
    /// `primary`, `replica`, or `unknown` when the instance could not be asked.
    pub role: String,
    /// Whether the pod passes its readiness probe.
    pub ready: bool,
    /// The server's version (`server_version`), once observed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// For a standby: its state in the primary's `pg_stat_replication` (e.g. `streaming`), or
    /// absent when it is not connected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replication_state: Option<String>,
    /// For a standby: how many bytes of WAL it has yet to replay, as the primary sees it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lag_bytes: Option<i64>,
    /// For a standby: its `sync_state` in the primary's `pg_stat_replication` (`sync`, `quorum`,
    /// `potential` or `async`) when the primary was last observed; kept while it cannot be. With
    /// `synchronousReplicas` only a `sync` or `quorum` standby may be promoted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sync_state: Option<String>,
    /// Why the instance is not running: no node takes its pod (`not scheduled: …`), its containers'
    /// state (`container postgres: CrashLoopBackOff (…); exit code 1: <the log's tail>`), or why the
    /// last pass could not read its `/status` (role `unknown`); absent while it runs and answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// A failover as the status records it.
#[derive(Deserialize, Serialize, schemars::JsonSchema, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct FailoverRecord {
    /// The primary that was replaced.
    pub from: String,
    /// The standby promoted in its place.
    pub to: String,
    /// When the promotion finished.
    pub time: Time,
    /// Whether transactions `from` acknowledged may be missing on `to` (asynchronous replication).
    pub possible_loss: bool,
    /// What was guaranteed, e.g. `asynchronous: writes acknowledged after LSN 0/3000148 may be lost`.
    pub message: String,
}

/// A switchover (`spec.primary`) as the status records it.
#[derive(Deserialize, Serialize, schemars::JsonSchema, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct SwitchoverStatus {
    /// The `spec.primary` value this is about.
    pub requested: String,
    /// `Refused` (the target cannot take over yet; retried when it changes), `SwitchingOver`,
    /// `Completed` or `Aborted` (the old primary is primary again).
    pub phase: String,
    /// The primary switched away from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// The instance switched to (also for a rolling update's switchover, whose `requested` keeps
    /// the value handled before).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
    /// When the old primary was fenced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started: Option<Time>,
    /// What happened, or why the target was refused.
    pub message: String,
}

/// The schema of `metav1.Condition` lists with the apiserver's own validation (k8s-openapi's schema
/// for `Condition` carries none of it), as a list-map keyed by `type` so that server-side apply can
/// merge conditions owned by different managers.
fn condition_list_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "description": "Ready, Degraded, Upgrading, Resizing (and ReconcileSucceeded after failed passes), in the `metav1.Condition` shape, keyed by `type`.",
        "type": "array",
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["type"],
        "items": {
            "description": "One aspect of the cluster's current state.",
            "type": "object",
            "required": ["lastTransitionTime", "message", "reason", "status", "type"],
            "properties": {
                "type": {
                    "description": "Type of condition in CamelCase or in foo.example.com/CamelCase.",
                    "type": "string",
                    "maxLength": 316,
                    "pattern": r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
                },
                "status": {
                    "description": "Status of the condition.",
                    "type": "string",
                    "enum": ["True", "False", "Unknown"]
                },
                "observedGeneration": {
                    "description": "The .metadata.generation the condition was set from.",
                    "type": "integer",
                    "format": "int64",
                    "minimum": 0
                },
                "lastTransitionTime": {
                    "description": "When the status last changed.",
                    "type": "string",
                    "format": "date-time"
                },
                "reason": {
                    "description": "Why the condition last changed, in CamelCase.",
                    "type": "string",
                    "minLength": 1,
                    "maxLength": 1024,
                    "pattern": "^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"
                },
                "message": {
                    "description": "Human-readable details of the transition; may be empty.",
                    "type": "string",
                    "maxLength": 32768
                }
            }
        }
    })
}

/// Lifecycle phase shown in the PHASE column: Provisioning (a new cluster's instances are
/// starting), Running (all ready, the desired version), Scaling (the instances a scale-up added
/// are starting), Degraded (an instance that was ready is not, until all are), Upgrading (a
/// version change rolls out), Failed (the spec cannot be acted on), Hibernated (`replicas: 0`).
#[derive(Deserialize, Serialize, schemars::JsonSchema, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// A new cluster whose instances are not all ready yet (none has failed after being ready).
    Provisioning,
    /// Every instance is ready and runs the desired version.
    Running,
    /// A requested scale-up (or a wake from hibernation): the added instances are not all ready
    /// yet, and every instance that was ready still is.
    Scaling,
    /// An instance that was ready is not; it stays Degraded until every instance is ready.
    Degraded,
    /// A version change is rolling out.
    Upgrading,
    /// The spec cannot be acted on; a condition says why.
    Failed,
    /// `replicas: 0`: no instance runs; the data volumes are kept.
    Hibernated,
}

impl Phase {
    /// The phase as written in the API.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Provisioning => "Provisioning",
            Phase::Running => "Running",
            Phase::Scaling => "Scaling",
            Phase::Degraded => "Degraded",
            Phase::Upgrading => "Upgrading",
            Phase::Failed => "Failed",
            Phase::Hibernated => "Hibernated",
        }
    }
}

/// The DatabaseCluster CustomResourceDefinition, as generated from the types above, with each
/// description's lines joined into paragraphs
/// ([`super::descriptions::unwrap_lines`]).
pub fn crd() -> CustomResourceDefinition {
    let mut crd = serde_json::to_value(DatabaseCluster::crd())
        .expect("a CustomResourceDefinition always serialises to JSON");
    super::descriptions::unwrap_descriptions(&mut crd);
    serde_json::from_value(crd).expect("joining description lines keeps a valid CustomResourceDefinition")
}

/// The CRD as YAML: what `dbcluster-operator crd` prints and `manifests/crd.yaml` holds.
pub fn crd_yaml() -> String {
    // Invariant: a CustomResourceDefinition is plain data (strings, maps, lists, numbers); its
    // serialisation cannot fail.
    serde_saphyr::to_string(&crd()).expect("a CustomResourceDefinition always serialises to YAML")
}
