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
    /// Resizing=True: some volume's capacity is below `storageSize`.
    pub const RESIZE_IN_PROGRESS: &str = "ResizeInProgress";
    /// Resizing=False: every volume has `storageSize`.
    pub const RESIZE_COMPLETE: &str = "ResizeComplete";
    /// Resizing=False: the volumes' StorageClass does not allow expansion.
    pub const EXPANSION_NOT_SUPPORTED: &str = "ExpansionNotSupported";
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
    let ready = observed.and_then(|sts| sts.status.as_ref()).and_then(|s| s.ready_replicas).unwrap_or(0);
    let rollout = observed.map(|sts| observe_rollout(sts, pods));
    let current_version = match &rollout {
        Some(Rollout { version: Some(version), complete: true }) => Some(version.clone()),
        _ => previous.current_version.clone(),
    };
    let spec_version = valid.ok().map(|spec| spec.version.as_str().to_owned());
    let template_version = rollout.and_then(|rollout| rollout.version);
    let upgrade_target = current_version.as_ref().and_then(|running| {
        [spec_version.as_ref(), template_version.as_ref()]
            .into_iter()
            .flatten()
            .find(|v| *v != running)
            .cloned()
    });

    let existing = observed.and_then(|sts| sts.status.as_ref()).map(|s| s.replicas).unwrap_or(0);
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
    match valid {
        Err(error) => conditions.set(condition::READY, "False", reason::INVALID_SPEC, error.to_string()),
        Ok(_) if ready >= desired => conditions.set(
            condition::READY,
            "True",
            reason::ALL_REPLICAS_READY,
            format!("All {desired} replicas are ready"),
        ),
        Ok(_) => conditions.set(
            condition::READY,
            "False",
            reason::REPLICAS_NOT_READY,
            format!("{ready}/{desired} replicas ready"),
        ),
    }
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
    match (&current_version, &upgrade_target) {
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
            format!("Rolling out version {} for the first time", cluster.spec.version),
        ),
    }

    DatabaseClusterStatus {
        phase: Some(phase),
        ready_replicas: ready,
        replicas: existing,
        ready_instances: Some(format!("{ready}/{desired}")),
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
/// `InstanceFailing` and names each failing instance.
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
    if let (Some(ready), false) = (not_ready, failing.is_empty()) {
        ready.reason = reason::INSTANCE_FAILING.to_owned();
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
mod tests {
    use k8s_openapi::api::apps::v1::StatefulSetStatus;

    use super::*;
    use crate::databasecluster::api::validation::validate;
    use crate::databasecluster::controller::events::{EventType, scaling_event, status_events};
    use crate::databasecluster::fixtures::cluster;

    /// [`super::compute_status`] with the validation reconcile does first, and pods that agree
    /// with the StatefulSet's status: the first `updatedReplicas` at the `updateRevision` (the
    /// rest at an older one), the first `readyReplicas` ready.
    fn compute_status(
        cluster: &DatabaseCluster,
        observed: Option<&StatefulSet>,
        now: Timestamp,
    ) -> DatabaseClusterStatus {
        let pods = observed.map(pods_agreeing_with).unwrap_or_default();
        super::compute_status(cluster, validate(cluster).as_ref(), observed, &pods, now)
    }

    fn pods_agreeing_with(sts: &StatefulSet) -> Vec<PodView> {
        let status = sts.status.clone().unwrap_or_default();
        let update_revision = status.update_revision.unwrap_or_default();
        (0..status.replicas)
            .map(|ordinal| PodView {
                name: format!("db-{ordinal}"),
                ordinal,
                ready: ordinal < status.ready_replicas.unwrap_or(0),
                revision: Some(if ordinal < status.updated_replicas.unwrap_or(0) {
                    update_revision.clone()
                } else {
                    "rev-old".to_owned()
                }),
                ..PodView::default()
            })
            .collect()
    }
    use crate::databasecluster::api::validation::validate_spec;
    use crate::databasecluster::specs::resources::{Owner, build_statefulset};

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + second).unwrap()
    }

    /// The cluster as the next pass reads it, after this pass wrote `status`.
    fn next(cluster: &DatabaseCluster, status: &DatabaseClusterStatus) -> DatabaseCluster {
        let mut next = cluster.clone();
        next.status = Some(status.clone());
        next
    }

    /// A StatefulSet as the StatefulSet controller would report it.
    #[derive(Clone, Copy)]
    struct Observed<'a> {
        version: &'a str,
        generation: i64,
        observed_generation: i64,
        replicas: i32,
        ready: i32,
        updated: i32,
        current_revision: &'a str,
        update_revision: &'a str,
    }

    impl Observed<'_> {
        fn settled(version: &str, replicas: i32, ready: i32) -> Observed<'_> {
            Observed {
                version,
                generation: 1,
                observed_generation: 1,
                replicas,
                ready,
                updated: replicas,
                current_revision: "rev-a",
                update_revision: "rev-a",
            }
        }

        fn build(self) -> StatefulSet {
            let spec_cluster = cluster(self.replicas.max(1), self.version, 1);
            let owner = Owner::of(&spec_cluster).unwrap();
            let mut sts = build_statefulset(&owner, &validate_spec(&spec_cluster.spec).unwrap());
            sts.metadata.generation = Some(self.generation);
            sts.status = Some(StatefulSetStatus {
                observed_generation: Some(self.observed_generation),
                replicas: self.replicas,
                ready_replicas: Some(self.ready),
                updated_replicas: Some(self.updated),
                current_revision: Some(self.current_revision.into()),
                update_revision: Some(self.update_revision.into()),
                ..StatefulSetStatus::default()
            });
            sts
        }
    }

    fn condition<'a>(status: &'a DatabaseClusterStatus, type_: &str) -> &'a Condition {
        find_condition(status, type_).unwrap_or_else(|| panic!("no {type_} condition"))
    }

    fn summary(status: &DatabaseClusterStatus, type_: &str) -> (String, String, String) {
        let c = condition(status, type_);
        (c.status.clone(), c.reason.clone(), c.message.clone())
    }

    fn s(status: &str, reason: &str, message: &str) -> (String, String, String) {
        (status.into(), reason.into(), message.into())
    }

    /// A cluster that has been Running `version` with `replicas` ready.
    fn running(replicas: i32, version: &str) -> DatabaseCluster {
        let cluster = cluster(replicas, version, 1);
        let sts = Observed::settled(version, replicas, replicas).build();
        let status = compute_status(&cluster, Some(&sts), at(0));
        assert_eq!(status.phase, Some(Phase::Running));
        next(&cluster, &status)
    }

    #[test]
    fn the_first_pass_sets_provisioning_and_every_condition_unknown() {
        let cluster = cluster(3, "15.4", 1);
        assert!(is_first_pass(&cluster));
        let status = initial_status(&cluster, at(0));
        assert_eq!(status.phase, Some(Phase::Provisioning));
        assert_eq!(status.ready_replicas, 0);
        assert_eq!(status.observed_generation, Some(1));
        let types: Vec<_> = status.conditions.iter().map(|c| c.type_.as_str()).collect();
        assert_eq!(types, ["Ready", "Degraded", "Upgrading"]);
        for c in &status.conditions {
            assert_eq!((c.status.as_str(), c.reason.as_str()), ("Unknown", "Reconciling"));
            assert_eq!(c.observed_generation, Some(1));
            assert_eq!(c.last_transition_time, Time(at(0)));
        }
        assert!(!is_first_pass(&next(&cluster, &status)));
    }

    #[test]
    fn without_a_statefulset_the_cluster_is_provisioning() {
        let cluster = next(&cluster(3, "15.4", 1), &initial_status(&cluster(3, "15.4", 1), at(0)));
        let status = compute_status(&cluster, None, at(1));
        assert_eq!(status.phase, Some(Phase::Provisioning));
        assert_eq!(status.ready_replicas, 0);
        assert_eq!(status.current_version, None);
        assert_eq!(summary(&status, "Ready"), s("False", "ReplicasNotReady", "0/3 replicas ready"));
        assert_eq!(
            summary(&status, "Degraded"),
            s("False", "Provisioning", "0 of 3 replicas are ready; the cluster is being created")
        );
        assert_eq!(
            summary(&status, "Upgrading"),
            s("False", "InitialRollout", "Rolling out version 15.4 for the first time")
        );
        assert!(needs_requeue(&status));
    }

    #[test]
    fn a_new_cluster_is_provisioning_until_every_replica_is_ready() {
        let mut cluster = cluster(3, "15.4", 1);
        for (ready, phase) in [(0, Phase::Provisioning), (1, Phase::Provisioning), (2, Phase::Provisioning)] {
            let status = compute_status(&cluster, Some(&Observed::settled("15.4", 3, ready).build()), at(1));
            assert_eq!(status.phase, Some(phase), "{ready} ready");
            assert_eq!(condition(&status, "Degraded").status, "False", "converging is not degraded");
            cluster = next(&cluster, &status);
        }
        let all = compute_status(&cluster, Some(&Observed::settled("15.4", 3, 3).build()), at(2));
        assert_eq!(all.phase, Some(Phase::Running));
    }

    #[test]
    fn an_instance_that_was_ready_and_is_not_is_degraded_until_all_are_ready() {
        let provisioning = next(
            &cluster(3, "15.4", 1),
            &compute_status(&cluster(3, "15.4", 1), Some(&Observed::settled("15.4", 3, 2).build()), at(1)),
        );
        let lost_during_creation =
            compute_status(&provisioning, Some(&Observed::settled("15.4", 3, 1).build()), at(2));
        assert_eq!(lost_during_creation.phase, Some(Phase::Degraded));

        let running = running(3, "15.4");
        let lost = compute_status(&running, Some(&Observed::settled("15.4", 3, 2).build()), at(3));
        assert_eq!(lost.phase, Some(Phase::Degraded));
        assert_eq!(
            summary(&lost, "Degraded"),
            s("True", "InsufficientReplicas", "Only 2 of 3 replicas are ready")
        );
        let all_lost = compute_status(&running, Some(&Observed::settled("15.4", 3, 0).build()), at(3));
        assert_eq!(all_lost.phase, Some(Phase::Degraded), "a cluster that ran is not provisioning again");
        // Recovering one of two missing instances is still degraded.
        let recovering =
            compute_status(&next(&running, &lost), Some(&Observed::settled("15.4", 3, 2).build()), at(4));
        assert_eq!(recovering.phase, Some(Phase::Degraded));
    }

    #[test]
    fn converging_phases_follow_the_previous_phase() {
        use Phase::*;
        assert_eq!(converging_phase(None, 0, 0), Provisioning);
        assert_eq!(converging_phase(Some(Provisioning), 1, 2), Provisioning);
        assert_eq!(converging_phase(Some(Failed), 0, 0), Provisioning);
        assert_eq!(converging_phase(Some(Running), 3, 3), Scaling);
        assert_eq!(converging_phase(Some(Hibernated), 0, 0), Scaling);
        assert_eq!(converging_phase(Some(Scaling), 3, 4), Scaling);
        assert_eq!(converging_phase(Some(Scaling), 4, 3), Degraded);
        assert_eq!(converging_phase(Some(Running), 3, 2), Degraded);
        assert_eq!(converging_phase(Some(Degraded), 2, 3), Degraded);
        assert_eq!(converging_phase(Some(Upgrading), 3, 3), Degraded);
    }

    #[test]
    fn an_instance_that_cannot_start_gives_ready_its_reason() {
        let cluster = cluster(2, "15.4", 1);
        let status = compute_status(&cluster, Some(&Observed::settled("15.4", 2, 1).build()), at(1));
        let instance = |name: &str, message: Option<&str>| InstanceStatus {
            name: name.into(),
            role: "unknown".into(),
            message: message.map(str::to_owned),
            ..InstanceStatus::default()
        };
        let starting = with_instances(status.clone(), vec![instance("db-0", None)], None);
        assert_eq!(summary(&starting, "Ready"), s("False", "ReplicasNotReady", "1/2 replicas ready"));
        let failing = with_instances(
            status,
            vec![instance("db-0", None), instance("db-1", Some("container postgres: CrashLoopBackOff"))],
            None,
        );
        assert_eq!(
            summary(&failing, "Ready"),
            s("False", "InstanceFailing", "1/2 replicas ready; db-1: container postgres: CrashLoopBackOff")
        );
    }

    #[test]
    fn a_configuration_postgres_refuses_makes_ready_false_with_one_warning_per_generation() {
        let cluster = running(3, "15.4");
        let sts = Observed::settled("15.4", 3, 3).build();
        let status = compute_status(&cluster, Some(&sts), at(1));
        assert_eq!(with_refused_configuration(status.clone(), &[], at(1)), status, "nothing refused");

        let refused = ["work_mem = 'lots' (setting could not be applied)".to_owned()];
        let refusing = with_refused_configuration(status.clone(), &refused, at(1));
        let ready = condition(&refusing, "Ready");
        assert_eq!((ready.status.as_str(), ready.reason.as_str()), ("False", "InvalidConfiguration"));
        assert!(ready.message.contains("work_mem = 'lots'"), "{}", ready.message);
        assert_eq!(refusing.phase, Some(Phase::Running), "the instances serve, with their old values");
        let events = status_events(cluster.status.as_ref(), &refusing);
        assert_eq!(events.len(), 1);
        assert_eq!(
            (events[0].type_, events[0].reason.as_str()),
            (EventType::Warning, "InvalidConfiguration")
        );
        let cluster = next(&cluster, &refusing);
        let again = with_refused_configuration(compute_status(&cluster, Some(&sts), at(2)), &refused, at(2));
        assert!(status_events(cluster.status.as_ref(), &again).is_empty(), "already reported");

        // With an instance down as well, Ready says both.
        let starting = Observed::settled("15.4", 3, 2).build();
        let down =
            with_refused_configuration(compute_status(&cluster, Some(&starting), at(3)), &refused, at(3));
        let ready = condition(&down, "Ready");
        assert_eq!(ready.reason, "InvalidConfiguration");
        assert!(ready.message.ends_with("; 2/3 replicas ready"), "{}", ready.message);
    }

    #[test]
    fn all_replicas_ready_is_running_and_ready() {
        let cluster = cluster(3, "15.4", 1);
        let status = compute_status(&cluster, Some(&Observed::settled("15.4", 3, 3).build()), at(1));
        assert_eq!(status.phase, Some(Phase::Running));
        assert_eq!(status.ready_replicas, 3);
        assert_eq!(status.current_version.as_deref(), Some("15.4"));
        assert_eq!(summary(&status, "Ready"), s("True", "AllReplicasReady", "All 3 replicas are ready"));
        assert_eq!(summary(&status, "Degraded"), s("False", "ReplicasReady", "All replicas are healthy"));
        assert_eq!(
            summary(&status, "Upgrading"),
            s("False", "UpgradeComplete", "Every instance runs version 15.4")
        );
        assert!(!needs_requeue(&status));
    }

    #[test]
    fn last_transition_time_moves_only_when_the_status_flips() {
        let first = cluster(3, "15.4", 1);
        let one_ready = compute_status(&first, Some(&Observed::settled("15.4", 3, 1).build()), at(10));
        let ready_at = condition(&one_ready, "Ready").last_transition_time.clone();
        assert_eq!(ready_at, Time(at(10)));

        let second = next(&first, &one_ready);
        let two_ready = compute_status(&second, Some(&Observed::settled("15.4", 3, 2).build()), at(20));
        assert_eq!(condition(&two_ready, "Ready").message, "2/3 replicas ready");
        assert_eq!(
            condition(&two_ready, "Ready").last_transition_time,
            ready_at,
            "message changed, status did not"
        );
        assert_eq!(condition(&two_ready, "Degraded").last_transition_time, Time(at(10)));

        let third = next(&second, &two_ready);
        let all_ready = compute_status(&third, Some(&Observed::settled("15.4", 3, 3).build()), at(30));
        assert_eq!(condition(&all_ready, "Ready").last_transition_time, Time(at(30)));
        assert_eq!(
            condition(&all_ready, "Degraded").last_transition_time,
            Time(at(10)),
            "Degraded stayed False while a new cluster's replicas became ready"
        );
        assert_eq!(
            condition(&all_ready, "Upgrading").last_transition_time,
            Time(at(10)),
            "Upgrading stayed False while its reason changed"
        );
    }

    #[test]
    fn an_unchanged_world_gives_an_identical_status_later() {
        let cluster = running(3, "15.4");
        let sts = Observed::settled("15.4", 3, 3).build();
        let later = compute_status(&cluster, Some(&sts), at(3600));
        assert_eq!(Some(&later), cluster.status.as_ref(), "nothing to write");
        assert!(status_events(cluster.status.as_ref(), &later).is_empty());
    }

    #[test]
    fn transition_times_are_whole_seconds_and_survive_a_round_trip() {
        let now = at(5).checked_add(jiff::SignedDuration::from_millis(750)).unwrap();
        let status = compute_status(&cluster(3, "15.4", 1), None, now);
        let round_trip: DatabaseClusterStatus =
            serde_json::from_value(serde_json::to_value(&status).unwrap()).unwrap();
        assert_eq!(round_trip, status);
    }

    #[test]
    fn observed_generation_is_on_the_status_and_every_condition() {
        let mut cluster = running(3, "15.4");
        cluster.spec.replicas = 5;
        cluster.metadata.generation = Some(2);
        let status = compute_status(&cluster, Some(&Observed::settled("15.4", 3, 3).build()), at(1));
        assert_eq!(status.observed_generation, Some(2));
        assert!(status.conditions.iter().all(|c| c.observed_generation == Some(2)));
    }

    #[test]
    fn scaling_up_is_scaling_until_the_new_replicas_are_ready() {
        let mut cluster = running(3, "15.4");
        cluster.spec.replicas = 5;
        cluster.metadata.generation = Some(2);
        let status = compute_status(&cluster, Some(&Observed::settled("15.4", 3, 3).build()), at(1));
        assert_eq!(status.phase, Some(Phase::Scaling));
        assert_eq!(summary(&status, "Ready"), s("False", "ReplicasNotReady", "3/5 replicas ready"));
        assert_eq!(
            summary(&status, "Degraded"),
            s("False", "ScalingUp", "3 of 5 replicas are ready; new instances are starting")
        );
        assert_eq!(condition(&status, "Upgrading").status, "False", "scaling is not an upgrade");
        assert!(needs_requeue(&status));
        let cluster = next(&cluster, &status);
        let four = compute_status(&cluster, Some(&Observed::settled("15.4", 5, 4).build()), at(2));
        assert_eq!(four.phase, Some(Phase::Scaling));

        let scaled =
            compute_status(&next(&cluster, &four), Some(&Observed::settled("15.4", 5, 5).build()), at(3));
        assert_eq!(scaled.phase, Some(Phase::Running));
    }

    #[test]
    fn scaling_events_name_the_direction() {
        let three = Observed::settled("15.4", 3, 3).build();
        let five = Observed::settled("15.4", 5, 5).build();
        let up = scaling_event(&three, &five).unwrap();
        assert_eq!(
            (up.type_, up.reason.as_str(), up.note.as_str()),
            (EventType::Normal, "ScalingUp", "Scaling from 3 to 5 replicas")
        );
        assert_eq!(scaling_event(&five, &three).unwrap().reason, "ScalingDown");
        assert_eq!(scaling_event(&three, &three), None);
    }

    #[test]
    fn an_upgrade_is_tracked_from_the_spec_change_to_the_completed_rollout() {
        let mut cluster = running(3, "15.4");
        cluster.spec.version = "15.5".into();
        cluster.metadata.generation = Some(2);
        let mut events = Vec::new();
        let mut step = |cluster: &mut DatabaseCluster, observed: Observed, second: i64| {
            let status = compute_status(cluster, Some(&observed.build()), at(second));
            events.extend(status_events(cluster.status.as_ref(), &status));
            *cluster = next(cluster, &status);
            status
        };

        // The cache still holds the old StatefulSet: the spec alone says an upgrade is due.
        let stale = step(&mut cluster, Observed::settled("15.4", 3, 3), 10);
        assert_eq!(stale.phase, Some(Phase::Upgrading));
        assert_eq!(stale.current_version.as_deref(), Some("15.4"));
        assert_eq!(
            summary(&stale, "Upgrading"),
            s("True", "VersionUpgradeInProgress", "Upgrading from 15.4 to 15.5")
        );

        // The new template is written but not yet observed by the StatefulSet controller.
        let unobserved = Observed { generation: 2, ..Observed::settled("15.5", 3, 3) };
        assert_eq!(step(&mut cluster, unobserved, 20).phase, Some(Phase::Upgrading));

        // Pods roll: one updated, one restarting. Upgrading, not Degraded.
        let rolling = Observed {
            generation: 2,
            observed_generation: 2,
            ready: 2,
            updated: 1,
            update_revision: "rev-b",
            ..Observed::settled("15.5", 3, 3)
        };
        let mid = step(&mut cluster, rolling, 30);
        assert_eq!(mid.phase, Some(Phase::Upgrading));
        assert_eq!(mid.ready_replicas, 2);
        assert_eq!(mid.current_version.as_deref(), Some("15.4"), "not every pod runs 15.5 yet");
        assert_eq!(condition(&mid, "Upgrading").last_transition_time, Time(at(10)));

        // Every pod updated and ready: the roll is finished, though with `OnDelete` the
        // controller never moves `currentRevision` off "rev-a".
        let done = Observed { ready: 3, updated: 3, ..rolling };
        let finished = step(&mut cluster, done, 50);
        assert_eq!(finished.phase, Some(Phase::Running));
        assert_eq!(finished.current_version.as_deref(), Some("15.5"));
        assert_eq!(
            summary(&finished, "Upgrading"),
            s("False", "UpgradeComplete", "Every instance runs version 15.5")
        );
        assert_eq!(condition(&finished, "Upgrading").last_transition_time, Time(at(50)));

        let reasons: Vec<_> = events.iter().map(|e| (e.reason.as_str(), e.note.as_str())).collect();
        assert_eq!(
            reasons,
            [
                ("UpgradeStarted", "Upgrading from 15.4 to 15.5"),
                ("UpgradeCompleted", "Upgrade to 15.5 complete")
            ]
        );
    }

    #[test]
    fn revisions_agreeing_is_not_enough_while_replicas_are_not_updated() {
        let cluster = running(3, "15.4");
        let partial = Observed { updated: 2, ..Observed::settled("15.5", 3, 3) };
        let status = compute_status(&cluster, Some(&partial.build()), at(1));
        assert_eq!(status.current_version.as_deref(), Some("15.4"));
        assert_eq!(status.phase, Some(Phase::Upgrading));
    }

    /// A roll is judged from the pods: exactly `replicas` of them, each at the update revision,
    /// ready and not terminating. `currentRevision` plays no part (`OnDelete` never moves it).
    #[test]
    fn a_roll_is_finished_when_every_pod_runs_the_update_revision_ready() {
        let cluster = running(3, "15.4");
        let observed = Observed {
            generation: 2,
            observed_generation: 2,
            update_revision: "rev-b",
            ..Observed::settled("15.5", 3, 3)
        }
        .build();
        let pod = |ordinal: i32, revision: &str| PodView {
            name: format!("db-{ordinal}"),
            ordinal,
            ready: true,
            revision: Some(revision.into()),
            ..PodView::default()
        };
        let all_new = [pod(0, "rev-b"), pod(1, "rev-b"), pod(2, "rev-b")];
        let version = |pods: &[PodView]| {
            let valid = validate(&cluster);
            super::compute_status(&cluster, valid.as_ref(), Some(&observed), pods, at(1)).current_version
        };
        assert_eq!(version(&all_new).as_deref(), Some("15.5"));
        let mut terminating = all_new.clone();
        terminating[1].deleting = true;
        assert_eq!(version(&terminating).as_deref(), Some("15.4"), "a pod is terminating");
        let mut unready = all_new.clone();
        unready[2].ready = false;
        assert_eq!(version(&unready).as_deref(), Some("15.4"), "a pod is not ready");
        assert_eq!(version(&all_new[..2]).as_deref(), Some("15.4"), "a pod is missing");
        let mut old = all_new.clone();
        old[0].revision = Some("rev-a".into());
        assert_eq!(version(&old).as_deref(), Some("15.4"), "a pod runs the old revision");
        let mut extra = all_new.to_vec();
        extra.push(pod(3, "rev-b"));
        assert_eq!(version(&extra).as_deref(), Some("15.4"), "a pod above the replicas is still there");
    }

    #[test]
    fn a_rollout_of_the_same_version_is_not_an_upgrade() {
        let cluster = running(3, "15.4");
        let restart =
            Observed { ready: 2, updated: 1, update_revision: "rev-b", ..Observed::settled("15.4", 3, 3) };
        let status = compute_status(&cluster, Some(&restart.build()), at(1));
        assert_eq!(status.phase, Some(Phase::Degraded));
        assert_eq!(condition(&status, "Upgrading").status, "False");
    }

    #[test]
    fn the_current_version_is_set_once_the_first_rollout_is_observed() {
        let cluster = next(&cluster(3, "15.4", 1), &initial_status(&cluster(3, "15.4", 1), at(0)));
        let unobserved = Observed { observed_generation: 0, ..Observed::settled("15.4", 0, 0) };
        assert_eq!(compute_status(&cluster, Some(&unobserved.build()), at(1)).current_version, None);
        let starting = Observed::settled("15.4", 1, 0);
        let status = compute_status(&cluster, Some(&starting.build()), at(2));
        assert_eq!(status.current_version, None, "its one pod is not ready yet");
        let first_pod = Observed::settled("15.4", 1, 1);
        let status = compute_status(&cluster, Some(&first_pod.build()), at(2));
        assert_eq!(status.current_version.as_deref(), Some("15.4"));
        assert_eq!(status.phase, Some(Phase::Provisioning));
        assert_eq!(condition(&status, "Upgrading").status, "False");
    }

    #[test]
    fn an_invalid_spec_fails_with_a_reason_and_one_warning_per_generation() {
        let mut cluster = running(3, "15.4");
        cluster.spec.storage_size = "lots".into();
        cluster.metadata.generation = Some(2);
        let sts = Observed::settled("15.4", 3, 3).build();
        let failed = compute_status(&cluster, Some(&sts), at(1));
        assert_eq!(failed.phase, Some(Phase::Failed));
        let ready = condition(&failed, "Ready");
        assert_eq!((ready.status.as_str(), ready.reason.as_str()), ("False", "InvalidSpec"));
        assert!(ready.message.contains("storageSize") && ready.message.contains("lots"), "{}", ready.message);
        assert!(!needs_requeue(&failed), "no retry until the spec changes");

        let events = status_events(cluster.status.as_ref(), &failed);
        assert_eq!(events.len(), 1);
        assert_eq!((events[0].type_, events[0].reason.as_str()), (EventType::Warning, "InvalidSpec"));
        assert_eq!(events[0].note, ready.message);

        let cluster = next(&cluster, &failed);
        let again = compute_status(&cluster, Some(&sts), at(2));
        assert_eq!(again, failed);
        assert!(status_events(cluster.status.as_ref(), &again).is_empty(), "already reported");

        let mut edited = cluster.clone();
        edited.spec.storage_size = "many".into();
        edited.metadata.generation = Some(3);
        let still_failed = compute_status(&edited, Some(&sts), at(3));
        assert_eq!(
            status_events(edited.status.as_ref(), &still_failed).len(),
            1,
            "a new generation, a new warning"
        );

        let mut fixed = edited.clone();
        fixed.spec.storage_size = "1Gi".into();
        fixed.metadata.generation = Some(4);
        let recovered = compute_status(&fixed, Some(&sts), at(4));
        assert_eq!(recovered.phase, Some(Phase::Running));
        assert_eq!(condition(&recovered, "Ready").last_transition_time, Time(at(4)));
    }

    #[test]
    fn a_major_version_change_that_slipped_past_the_crd_fails_without_upgrading() {
        let mut cluster = running(3, "15.4");
        cluster.spec.version = "16.1".into();
        cluster.metadata.generation = Some(2);
        let status = compute_status(&cluster, Some(&Observed::settled("15.4", 3, 3).build()), at(1));
        assert_eq!(status.phase, Some(Phase::Failed));
        assert!(condition(&status, "Ready").message.contains("major version"));
        assert_eq!(condition(&status, "Upgrading").status, "False");
        assert_eq!(status.current_version.as_deref(), Some("15.4"));
    }

    #[test]
    fn other_controllers_conditions_are_kept() {
        let mut cluster = running(3, "15.4");
        let foreign = Condition {
            type_: "example.com/Backed".into(),
            status: "True".into(),
            reason: "Nightly".into(),
            message: String::new(),
            observed_generation: Some(1),
            last_transition_time: Time(at(-100)),
        };
        cluster.status.as_mut().unwrap().conditions.push(foreign.clone());
        let status = compute_status(&cluster, Some(&Observed::settled("15.4", 3, 3).build()), at(1));
        assert_eq!(find_condition(&status, "example.com/Backed"), Some(&foreign));
        assert_eq!(status.conditions.iter().filter(|c| c.type_ == "Ready").count(), 1);
        let initial = initial_status(&cluster, at(2));
        assert_eq!(find_condition(&initial, "example.com/Backed"), Some(&foreign));
    }

    #[test]
    fn image_tags_are_read_past_registries_and_digests() {
        assert_eq!(image_tag("postgres:15.4"), Some("15.4"));
        assert_eq!(image_tag("registry:5000/library/postgres:15.5"), Some("15.5"));
        assert_eq!(image_tag("postgres:15.4@sha256:abc"), Some("15.4"));
        assert_eq!(image_tag("registry:5000/postgres"), None);
        assert_eq!(image_tag("postgres"), None);
    }
}
