//! Unit tests of `plan`: one per rule of the module docs.

use super::*;

fn facts(running: &str, desired: &'static str, job: JobState, pods: usize) -> Facts<'static> {
    Facts { running: Some(Box::leak(running.to_owned().into_boxed_str())), desired, job, pods }
}

#[test]
fn rule1_no_upgrade_without_a_later_major() {
    assert_eq!(next_step(&facts("15.4", "15.5", JobState::Absent, 3)), Step::None);
    assert_eq!(next_step(&facts("18", "18", JobState::Succeeded(String::new()), 3)), Step::None);
    let new = Facts { running: None, desired: "18", job: JobState::Absent, pods: 0 };
    assert_eq!(next_step(&new), Step::None, "a new cluster starts on its version");
}

#[test]
fn rule2_a_failed_job_rolls_back_to_the_old_version_with_every_instance() {
    let step = next_step(&facts("15.4", "18", JobState::Failed("refused".into()), 0));
    assert_eq!(step, Step::RolledBack { reason: "refused".into() });
    assert_eq!(step.statefulset(Some("15.4"), 3), Some(("15.4".into(), 3)));
}

#[test]
fn rule3_a_succeeded_job_starts_the_new_version() {
    let step = next_step(&facts("15.4", "18", JobState::Succeeded("ok".into()), 0));
    assert_eq!(step, Step::Starting { message: "ok".into() });
    assert_eq!(step.statefulset(Some("15.4"), 3), None, "as the spec says");
}

#[test]
fn rule4_a_running_job_is_waited_for_with_no_instance() {
    let step = next_step(&facts("15.4", "18", JobState::Running, 0));
    assert_eq!(step, Step::Upgrading { create: false });
    assert_eq!(step.statefulset(Some("15.4"), 3), Some(("15.4".into(), 0)));
}

#[test]
fn rule5_the_instances_stop_before_the_job_is_created() {
    let step = next_step(&facts("15.4", "18", JobState::Absent, 2));
    assert_eq!(step, Step::Stopping { pods: 2 });
    assert_eq!(step.statefulset(Some("15.4"), 3), Some(("15.4".into(), 0)), "old version, none");
    assert_eq!(next_step(&facts("15.4", "18", JobState::Absent, 0)), Step::Upgrading { create: true });
}

#[test]
fn the_status_says_where_the_upgrade_is_and_that_writes_are_refused() {
    let now = Timestamp::UNIX_EPOCH;
    let stopping = with_major_upgrade(
        DatabaseClusterStatus::default(),
        &Step::Stopping { pods: 3 },
        ("15.4", "18"),
        now,
    );
    assert_eq!(stopping.phase, Some(Phase::Upgrading));
    let find =
        |s: &DatabaseClusterStatus, t: &str| s.conditions.iter().find(|c| c.type_ == t).cloned().unwrap();
    assert_eq!(find(&stopping, MAJOR_UPGRADE).reason, "StoppingInstances");
    assert_eq!(find(&stopping, condition::READY).status, "False");
    let failed = Step::RolledBack { reason: "pg_upgrade --check refused: reg* types".into() };
    let rolled = with_major_upgrade(stopping, &failed, ("15.4", "18"), now);
    let ready = find(&rolled, condition::READY);
    assert_eq!((ready.status.as_str(), ready.reason.as_str()), ("False", "MajorUpgradeFailed"));
    assert!(
        ready.message.contains("reg* types") && ready.message.contains("15.4 runs again"),
        "{}",
        ready.message
    );
    let done = with_major_upgrade(DatabaseClusterStatus::default(), &Step::None, ("18", "18"), now);
    assert!(done.conditions.is_empty(), "no upgrade ever: nothing said");
}
