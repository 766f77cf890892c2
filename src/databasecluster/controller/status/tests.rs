//! Unit tests of `status`.

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
        status.clone(),
        vec![instance("db-0", None), instance("db-1", Some("container postgres: CrashLoopBackOff"))],
        None,
    );
    assert_eq!(
        summary(&failing, "Ready"),
        s("False", "InstanceFailing", "1/2 replicas ready; db-1: container postgres: CrashLoopBackOff")
    );
    // A full data volume has its own reason, and one Warning Event.
    let full = format!("the operator could not read the instance's status: {}", client::DISK_FULL);
    let filled =
        with_instances(status.clone(), vec![instance("db-0", None), instance("db-1", Some(&full))], None);
    let ready = condition(&filled, "Ready");
    assert_eq!((ready.status.as_str(), ready.reason.as_str()), ("False", "DiskFull"));
    assert!(ready.message.contains("db-1: ") && ready.message.contains("storageSize"), "{}", ready.message);
    let events = status_events(Some(&status), &filled);
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!((events[0].type_, events[0].reason.as_str()), (EventType::Warning, "DiskFull"));
    assert!(status_events(Some(&filled), &filled).is_empty(), "once per generation");
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
    assert_eq!((events[0].type_, events[0].reason.as_str()), (EventType::Warning, "InvalidConfiguration"));
    let cluster = next(&cluster, &refusing);
    let again = with_refused_configuration(compute_status(&cluster, Some(&sts), at(2)), &refused, at(2));
    assert!(status_events(cluster.status.as_ref(), &again).is_empty(), "already reported");

    // With an instance down as well, Ready says both.
    let starting = Observed::settled("15.4", 3, 2).build();
    let down = with_refused_configuration(compute_status(&cluster, Some(&starting), at(3)), &refused, at(3));
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
        [("UpgradeStarted", "Upgrading from 15.4 to 15.5"), ("UpgradeCompleted", "Upgrade to 15.5 complete")]
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
fn a_major_downgrade_that_slipped_past_the_crd_fails_without_rolling() {
    let mut cluster = running(3, "15.4");
    cluster.spec.version = "14.1".into();
    cluster.metadata.generation = Some(2);
    let status = compute_status(&cluster, Some(&Observed::settled("15.4", 3, 3).build()), at(1));
    assert_eq!(status.phase, Some(Phase::Failed));
    assert!(condition(&status, "Ready").message.contains("downgrade"));
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
