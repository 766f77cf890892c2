//! The DatabaseCluster's status as a pure function of the cluster, its observed StatefulSet and the
//! time. The Events a change of status implies are in `events`.
//!
//! Conditions follow `metav1.Condition`: `Ready` (the summary), `Degraded`, `Upgrading` and (once
//! storage grows) `Resizing`, each
//! with the cluster's generation as `observedGeneration`; `lastTransitionTime` moves only when a
//! condition's status flips, so a status computed twice from the same facts is identical and
//! reconcile can skip the write. Conditions of other types (another controller's) are kept.
//!
//! An upgrade is judged from the StatefulSet and its pods, not from the spec alone:
//! `currentVersion` is the version of the pod template once the roll is finished (the controller
//! has observed the set's generation, and there are exactly `replicas` pods, each at the
//! `updateRevision`, ready and not terminating), and `Upgrading` is True from the moment the spec
//! or the template names another version until then. The set's `currentRevision` is never read:
//! with the `OnDelete` strategy the operator uses, Kubernetes never advances it
//! (`completeRollingUpdate` in pkg/controller/statefulset/stateful_set_utils.go).

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use crate::databasecluster::api::types::{DatabaseCluster, DatabaseClusterStatus, InstanceStatus, Phase};
use crate::databasecluster::api::validation::{SpecError, ValidSpec};
use crate::databasecluster::instances::client;
use crate::databasecluster::instances::storage::Growth;
use crate::databasecluster::instances::topology::PodView;
use crate::databasecluster::specs::resources::POSTGRES_CONTAINER;

/// Condition types the operator owns.
pub mod condition {
    /// All desired replicas are ready (the summary condition).
    pub const READY: &str = "Ready";
    /// An instance that was ready is not (phase Degraded); False while a creation or a scale-up
    /// converges.
    pub const DEGRADED: &str = "Degraded";
    /// A version change is rolling out.
    pub const UPGRADING: &str = "Upgrading";
    /// A larger `storageSize` is reaching the instances' volumes (set once storage grows).
    pub const RESIZING: &str = "Resizing";
    /// A certificate is close to its expiry and the operator could not renew it (set once so).
    pub const CERTIFICATES_EXPIRING: &str = "CertificatesExpiring";
}

/// Condition reasons (CamelCase, one word).
pub mod reason {
    /// Ready=True.
    pub const ALL_REPLICAS_READY: &str = "AllReplicasReady";
    /// Ready=False: replicas are missing or not ready.
    pub const REPLICAS_NOT_READY: &str = "ReplicasNotReady";
    /// Ready=False: the spec cannot be acted on.
    pub const INVALID_SPEC: &str = "InvalidSpec";
    /// Ready=False: PostgreSQL refuses part of `spec.postgresConfig`.
    pub const INVALID_CONFIGURATION: &str = "InvalidConfiguration";
    /// Degraded=False.
    pub const REPLICAS_READY: &str = "ReplicasReady";
    /// Degraded=True: an instance that was ready is not.
    pub const INSUFFICIENT_REPLICAS: &str = "InsufficientReplicas";
    /// Degraded=False in phase Provisioning: the new cluster's instances are still starting.
    pub const PROVISIONING: &str = "Provisioning";
    /// Degraded=False in phase Scaling: the instances a scale-up added are still starting.
    pub const SCALING_UP: &str = "ScalingUp";
    /// Upgrading=True.
    pub const VERSION_UPGRADE_IN_PROGRESS: &str = "VersionUpgradeInProgress";
    /// Upgrading=False once a version is rolled out.
    pub const UPGRADE_COMPLETE: &str = "UpgradeComplete";
    /// Upgrading=False while the first version rolls out: nothing to upgrade from yet.
    pub const INITIAL_ROLLOUT: &str = "InitialRollout";
    /// Every condition on the first pass, before anything is observed.
    pub const RECONCILING: &str = "Reconciling";
    /// Ready=False: an instance cannot start (its container's state says why).
    pub const INSTANCE_FAILING: &str = "InstanceFailing";
    /// Ready=False: an instance's data volume is full (its manager keeps PostgreSQL stopped).
    pub const DISK_FULL: &str = "DiskFull";
    /// Resizing=True: some volume's capacity is below `storageSize`.
    pub const RESIZE_IN_PROGRESS: &str = "ResizeInProgress";
    /// Resizing=False: every volume has `storageSize`.
    pub const RESIZE_COMPLETE: &str = "ResizeComplete";
    /// Resizing=False: the volumes' StorageClass does not allow expansion.
    pub const EXPANSION_NOT_SUPPORTED: &str = "ExpansionNotSupported";
    /// CertificatesExpiring=True: a certificate is within its renewal margin, not renewed.
    pub const CERTIFICATE_EXPIRING: &str = "CertificateExpiring";
    /// CertificatesExpiring=False: every certificate is renewed before its margin.
    pub const CERTIFICATES_RENEWED: &str = "CertificatesRenewed";
    /// CertificatesExpiring=True: the API refused a certificate's renewal.
    pub const CERTIFICATE_RENEWAL_FAILED: &str = "CertificateRenewalFailed";
    /// Ready=False: a Secret `spec.certificates` names is missing or lacks what it must hold.
    pub const INVALID_CERTIFICATES: &str = "InvalidCertificates";
}

/// Whether this is the cluster's first pass: no phase has been written yet. Reconcile then writes
/// [`initial_status`] and returns; the status write brings the next pass.
pub fn is_first_pass(cluster: &DatabaseCluster) -> bool {
    cluster.status.as_ref().and_then(|status| status.phase).is_none()
}

/// The first status: phase Provisioning and every condition Unknown, so that `kubectl get` and
/// monitoring see a meaningful state from the first second.
pub fn initial_status(cluster: &DatabaseCluster, now: Timestamp) -> DatabaseClusterStatus {
    let previous = cluster.status.clone().unwrap_or_default();
    let mut conditions = ConditionSetter::new(previous.conditions, cluster.metadata.generation, now);
    let message = "The operator has not observed the cluster's instances yet";
    for type_ in [condition::READY, condition::DEGRADED, condition::UPGRADING] {
        conditions.set(type_, "Unknown", reason::RECONCILING, message.to_owned());
    }
    DatabaseClusterStatus {
        phase: Some(Phase::Provisioning),
        ready_replicas: 0,
        ready_instances: Some(format!("0/{}", cluster.spec.replicas)),
        current_version: previous.current_version,
        observed_generation: cluster.metadata.generation,
        conditions: conditions.into_inner(),
        last_backup_time: previous.last_backup_time,
        backups: previous.backups,
        restored_from: previous.restored_from,
        ..DatabaseClusterStatus::default()
    }
}

/// The status of `cluster` given the pass's validation of its spec (`valid`: reconcile validates
/// once and passes the result on) and its StatefulSet as observed (`None` if there is none yet).
///
/// Phase: Failed if the spec is invalid, Upgrading while a version change rolls out, Running when
/// every replica is ready, and otherwise [`converging_phase`]: Provisioning or Scaling while a
/// creation or a scale-up converges, Degraded once an instance that was ready is not. The
/// `Degraded` condition is True exactly in phase Degraded.
pub fn compute_status(
    cluster: &DatabaseCluster,
    valid: Result<&ValidSpec, &SpecError>,
    observed: Option<&StatefulSet>,
    pods: &[PodView],
    now: Timestamp,
) -> DatabaseClusterStatus {
    let previous = cluster.status.clone().unwrap_or_default();
    let desired = cluster.spec.replicas;
    let sts_status = observed.and_then(|sts| sts.status.as_ref());
    let ready = sts_status.and_then(|s| s.ready_replicas).unwrap_or(0);
    let existing = sts_status.map(|s| s.replicas).unwrap_or(0);
    let rollout = observed.map(|sts| observe_rollout(sts, pods));
    let current_version = match &rollout {
        Some(Rollout { version: Some(version), complete: true }) => Some(version.clone()),
        _ => previous.current_version.clone(),
    };
    let spec_version = valid.ok().map(|spec| spec.version.as_str().to_owned());
    let template_version = rollout.and_then(|rollout| rollout.version);
    let upgrade_target = upgrade_target(current_version.as_ref(), [spec_version, template_version]);
    let phase = if valid.is_err() {
        Phase::Failed
    } else if desired == 0 && existing == 0 {
        Phase::Hibernated
    } else if upgrade_target.is_some() {
        Phase::Upgrading
    } else if ready >= desired {
        Phase::Running
    } else {
        converging_phase(previous.phase, previous.ready_replicas, ready)
    };

    let mut conditions = ConditionSetter::new(previous.conditions, cluster.metadata.generation, now);
    set_ready(&mut conditions, valid.err(), ready, desired);
    set_degraded(&mut conditions, phase, ready, desired);
    set_upgrading(
        &mut conditions,
        current_version.as_deref(),
        upgrade_target.as_deref(),
        &cluster.spec.version,
    );
    DatabaseClusterStatus {
        phase: Some(phase),
        ready_replicas: ready,
        replicas: existing,
        // Never more ready than desired: the instances a scale-down removes do not count.
        ready_instances: Some(format!("{}/{desired}", ready.min(desired))),
        current_version,
        observed_generation: cluster.metadata.generation,
        conditions: conditions.into_inner(),
        last_backup_time: previous.last_backup_time,
        backups: previous.backups,
        restored_from: previous.restored_from,
        current_primary: previous.current_primary,
        target_primary: previous.target_primary,
        current_primary_timestamp: previous.current_primary_timestamp,
        last_failover: previous.last_failover,
        switchover: previous.switchover,
        instances: previous.instances,
        instances_observed_at: previous.instances_observed_at,
        applied_secret_versions: previous.applied_secret_versions,
        certificate_expiry: previous.certificate_expiry,
    }
}

/// The version an upgrade goes to: the first of the spec's and the pod template's versions that
/// differs from the one every instance runs (`None` while no version is known to run).
fn upgrade_target(running: Option<&String>, wanted: [Option<String>; 2]) -> Option<String> {
    let running = running?;
    wanted.into_iter().flatten().find(|version| version != running)
}

/// `Ready`: the spec is valid and every desired replica is ready.
fn set_ready(conditions: &mut ConditionSetter, invalid: Option<&SpecError>, ready: i32, desired: i32) {
    match invalid {
        Some(error) => conditions.set(condition::READY, "False", reason::INVALID_SPEC, error.to_string()),
        None if ready >= desired => conditions.set(
            condition::READY,
            "True",
            reason::ALL_REPLICAS_READY,
            format!("All {desired} replicas are ready"),
        ),
        None => conditions.set(
            condition::READY,
            "False",
            reason::REPLICAS_NOT_READY,
            format!("{ready}/{desired} replicas ready"),
        ),
    }
}

/// `Degraded`: True exactly in phase Degraded (fewer ready than desired, and neither a creation
/// nor a scale-up converging).
fn set_degraded(conditions: &mut ConditionSetter, phase: Phase, ready: i32, desired: i32) {
    match phase {
        _ if ready >= desired => conditions.set(
            condition::DEGRADED,
            "False",
            reason::REPLICAS_READY,
            "All replicas are healthy".into(),
        ),
        Phase::Provisioning => conditions.set(
            condition::DEGRADED,
            "False",
            reason::PROVISIONING,
            format!("{ready} of {desired} replicas are ready; the cluster is being created"),
        ),
        Phase::Scaling => conditions.set(
            condition::DEGRADED,
            "False",
            reason::SCALING_UP,
            format!("{ready} of {desired} replicas are ready; new instances are starting"),
        ),
        _ => conditions.set(
            condition::DEGRADED,
            "True",
            reason::INSUFFICIENT_REPLICAS,
            format!("Only {ready} of {desired} replicas are ready"),
        ),
    }
}

/// `Upgrading`: True while the instances run `running` and an upgrade goes to `target`.
fn set_upgrading(
    conditions: &mut ConditionSetter,
    running: Option<&str>,
    target: Option<&str>,
    spec_version: &impl std::fmt::Display,
) {
    match (running, target) {
        (Some(running), Some(target)) => conditions.set(
            condition::UPGRADING,
            "True",
            reason::VERSION_UPGRADE_IN_PROGRESS,
            format!("Upgrading from {running} to {target}"),
        ),
        (Some(running), None) => conditions.set(
            condition::UPGRADING,
            "False",
            reason::UPGRADE_COMPLETE,
            format!("Every instance runs version {running}"),
        ),
        (None, _) => conditions.set(
            condition::UPGRADING,
            "False",
            reason::INITIAL_ROLLOUT,
            format!("Rolling out version {spec_version} for the first time"),
        ),
    }
}

/// The phase of a valid cluster, not upgrading, with fewer replicas ready (`ready`) than desired,
/// from the phase and ready count its status recorded last. An instance that was ready and is not
/// (fewer ready than recorded) makes it Degraded, and it stays Degraded until every replica is
/// ready (so is a cluster short of replicas right after an upgrade). Otherwise it is converging:
/// Provisioning while it has never been Running (a creation, or a spec made valid again), Scaling
/// after it was Running or Hibernated (a requested scale-up, a wake-up), however long the new
/// instances take, since none of them was ready.
pub fn converging_phase(previous: Option<Phase>, previously_ready: i32, ready: i32) -> Phase {
    match previous {
        _ if ready < previously_ready => Phase::Degraded,
        Some(Phase::Degraded | Phase::Upgrading) => Phase::Degraded,
        Some(Phase::Running | Phase::Scaling | Phase::Hibernated) => Phase::Scaling,
        None | Some(Phase::Provisioning | Phase::Failed) => Phase::Provisioning,
    }
}

/// `status` with the instances as observed: `status.instances[]` and `currentPrimary`. A primary
/// that could not be observed this pass keeps the last one observed while its pod exists. When
/// replicas are not ready and an instance says why (no node has taken its pod for a while, or
/// its containers: a crash loop, an exit code, the log's tail), `Ready=False` gets reason
/// `InstanceFailing` (`DiskFull` when an instance's data volume is full) and names each failing
/// instance.
pub fn with_instances(
    mut status: DatabaseClusterStatus,
    instances: Vec<InstanceStatus>,
    current_primary: Option<String>,
) -> DatabaseClusterStatus {
    let still_there = |name: &String| instances.iter().any(|i| &i.name == name);
    status.current_primary = current_primary.or(status.current_primary.filter(still_there));
    let failing: Vec<String> =
        instances.iter().filter_map(|i| Some(format!("{}: {}", i.name, i.message.as_deref()?))).collect();
    let not_ready = status.conditions.iter_mut().find(|c| {
        c.type_ == condition::READY && c.status == "False" && c.reason == reason::REPLICAS_NOT_READY
    });
    let full = instances.iter().any(|i| i.message.as_deref().is_some_and(|m| m.contains(client::DISK_FULL)));
    if let (Some(ready), false) = (not_ready, failing.is_empty()) {
        ready.reason = if full { reason::DISK_FULL } else { reason::INSTANCE_FAILING }.to_owned();
        ready.message = format!("{}; {}", ready.message, failing.join("; "));
    }
    status.instances = instances;
    status
}

/// `status` with `Ready=False`, reason `InvalidConfiguration`, when PostgreSQL refuses lines of
/// the instances' configuration (`refused`, from [`crate::databasecluster::specs::config::refused_configuration`]): they
/// are not reloaded, the instances keep their previous values, and an instance restarted with them
/// would not start. The message of a `Ready=False` for another reason follows this one.
pub fn with_refused_configuration(
    status: DatabaseClusterStatus,
    refused: &[String],
    now: Timestamp,
) -> DatabaseClusterStatus {
    if refused.is_empty() {
        return status;
    }
    let mut message = format!(
        "PostgreSQL refuses spec.postgresConfig: {}; nothing of it is applied, and an instance restarted with it would not start",
        refused.join(", ")
    );
    let ready = status.conditions.iter().find(|c| c.type_ == condition::READY);
    if let Some(other) = ready.filter(|c| c.status == "False") {
        message = format!("{message}; {}", other.message);
    }
    let mut conditions = ConditionSetter::new(status.conditions, status.observed_generation, now);
    conditions.set(condition::READY, "False", reason::INVALID_CONFIGURATION, message);
    DatabaseClusterStatus { conditions: conditions.into_inner(), ..status }
}

/// `status` with the `Resizing` condition for `growth` ([`crate::databasecluster::instances::storage`]); `None` (the claims
/// were not looked at) leaves it as it is.
pub fn with_resizing(
    mut status: DatabaseClusterStatus,
    growth: Option<&Growth>,
    size: &str,
    now: Timestamp,
) -> DatabaseClusterStatus {
    let Some(growth) = growth else { return status };
    let mut conditions = ConditionSetter::new(status.conditions, status.observed_generation, now);
    match growth {
        Growth::InProgress { pending } => conditions.set(
            condition::RESIZING,
            "True",
            reason::RESIZE_IN_PROGRESS,
            format!("waiting for {} to reach {size}", pending.join(", ")),
        ),
        Growth::Complete => conditions.set(
            condition::RESIZING,
            "False",
            reason::RESIZE_COMPLETE,
            format!("every volume has {size}"),
        ),
        Growth::NotSupported { message } => conditions.set(
            condition::RESIZING,
            "False",
            reason::EXPANSION_NOT_SUPPORTED,
            format!("storageSize {size} cannot be applied: {message}"),
        ),
    }
    status.conditions = conditions.into_inner();
    status
}

/// Whether reconcile should look again after a delay (the seed's 10 s safety net): while the
/// cluster converges. Running needs no timer, and Failed waits for a spec change.
pub fn needs_requeue(status: &DatabaseClusterStatus) -> bool {
    matches!(status.phase, Some(Phase::Provisioning | Phase::Scaling | Phase::Degraded | Phase::Upgrading))
}

/// What the StatefulSet and its pods say about its rollout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rollout {
    /// The PostgreSQL version in the pod template (the `postgres` container's image tag).
    pub version: Option<String>,
    /// Whether every pod runs the current template: the controller has observed the latest
    /// generation, and there are exactly `replicas` pods, each at the `updateRevision`, ready
    /// and not terminating.
    pub complete: bool,
}

/// The image of container `name` in the pod template of `sts`.
fn template_image<'a>(sts: &'a StatefulSet, name: &str) -> Option<&'a str> {
    let pod = sts.spec.as_ref()?.template.spec.as_ref()?;
    pod.containers.iter().find(|c| c.name == name)?.image.as_deref()
}

/// Reads the rollout state of a StatefulSet from its template, its status's `updateRevision`
/// and its `pods` (the cluster's pods as the cache holds them).
pub fn observe_rollout(sts: &StatefulSet, pods: &[PodView]) -> Rollout {
    let image = template_image(sts, POSTGRES_CONTAINER);
    let version = image.and_then(image_tag).map(str::to_owned);
    let replicas = sts.spec.as_ref().and_then(|spec| spec.replicas).unwrap_or(1);
    let complete = sts.status.as_ref().is_some_and(|status| {
        let generation_observed = match (sts.metadata.generation, status.observed_generation) {
            (Some(generation), Some(observed)) => observed >= generation,
            (Some(_), None) => false,
            (None, _) => true,
        };
        let update_revision = status.update_revision.as_deref();
        let on_update_revision = |pod: &PodView| {
            pod.ready
                && !pod.deleting
                && update_revision.is_some()
                && pod.revision.as_deref() == update_revision
        };
        generation_observed
            && usize::try_from(replicas).is_ok_and(|n| n == pods.len())
            && pods.iter().all(on_update_revision)
    });
    Rollout { version, complete }
}

/// The tag of an image reference (`postgres:15.4` → `15.4`), ignoring a registry port and a digest.
fn image_tag(image: &str) -> Option<&str> {
    let name = image.split('@').next().unwrap_or(image);
    let last_segment = name.rsplit('/').next().unwrap_or(name);
    last_segment.split_once(':').map(|(_, tag)| tag).filter(|tag| !tag.is_empty())
}

/// Upserts conditions by type, stamping `lastTransitionTime` only when the status flips.
pub(crate) struct ConditionSetter {
    conditions: Vec<Condition>,
    generation: Option<i64>,
    now: Time,
}

impl ConditionSetter {
    pub(crate) fn new(conditions: Vec<Condition>, generation: Option<i64>, now: Timestamp) -> Self {
        // The API stores whole seconds; stamping whole seconds keeps a written status equal to
        // the one read back.
        let now = Timestamp::from_second(now.as_second()).unwrap_or(now);
        ConditionSetter { conditions, generation, now: Time(now) }
    }

    pub(crate) fn set(&mut self, type_: &str, status: &str, reason: &str, message: String) {
        match self.conditions.iter_mut().find(|c| c.type_ == type_) {
            Some(existing) => {
                if existing.status != status {
                    existing.last_transition_time = self.now.clone();
                    existing.status = status.to_owned();
                }
                existing.reason = reason.to_owned();
                existing.message = message;
                existing.observed_generation = self.generation;
            }
            None => self.conditions.push(Condition {
                type_: type_.to_owned(),
                status: status.to_owned(),
                reason: reason.to_owned(),
                message,
                observed_generation: self.generation,
                last_transition_time: self.now.clone(),
            }),
        }
    }

    pub(crate) fn into_inner(self) -> Vec<Condition> {
        self.conditions
    }
}

/// The condition of a type in a status, if set.
pub fn find_condition<'a>(status: &'a DatabaseClusterStatus, type_: &str) -> Option<&'a Condition> {
    status.conditions.iter().find(|c| c.type_ == type_)
}

#[cfg(test)]
mod tests;
