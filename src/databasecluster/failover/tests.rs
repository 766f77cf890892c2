//! Unit tests of `failover`.

use super::*;

fn pod(ordinal: i32, ready: bool) -> PodView {
    PodView { name: format!("db-{ordinal}"), ordinal, ready, ..PodView::default() }
}

fn standby(received: Option<i64>) -> InstanceFacts {
    InstanceFacts { in_recovery: true, received_lsn: received, ..InstanceFacts::default() }
}

fn at(seconds: i64) -> Timestamp {
    Timestamp::from_second(1_700_000_000 + seconds).unwrap()
}

fn down_primary(since: i64) -> PodView {
    PodView { not_ready_since: Some(at(since)), ..pod(0, false) }
}

const DELAY: Duration = Duration::from_secs(30);

#[test]
fn a_ready_primary_is_left_alone() {
    let pods = [pod(0, true), pod(1, true)];
    let facts = BTreeMap::from([("db-1".to_owned(), standby(Some(100)))]);
    assert_eq!(decide("db-0", &pods, &facts, DELAY, None, None, at(100)), Decision::Healthy);
}

#[test]
fn the_standby_with_the_most_wal_is_promoted_after_the_delay() {
    let pods = [down_primary(0), pod(1, true), pod(2, true), pod(3, false)];
    let facts = BTreeMap::from([
        ("db-1".to_owned(), standby(Some(100))),
        ("db-2".to_owned(), standby(Some(200))),
        ("db-3".to_owned(), standby(Some(900))),
    ]);
    assert_eq!(
        decide("db-0", &pods, &facts, DELAY, None, None, at(10)),
        Decision::Waiting { down_for: Duration::from_secs(10), remaining: Duration::from_secs(20) }
    );
    assert_eq!(
        decide("db-0", &pods, &facts, DELAY, None, None, at(30)),
        Decision::Promote {
            pod: "db-2".into(),
            received_lsn: Some(200),
            resume: false,
            down_for: Duration::from_secs(30)
        },
        "db-3 has more WAL but is not ready"
    );
    let tie = BTreeMap::from([("db-1".to_owned(), standby(Some(5))), ("db-2".to_owned(), standby(Some(5)))]);
    assert!(
        matches!(decide("db-0", &pods, &tie, DELAY, None, None, at(30)), Decision::Promote { pod, .. } if pod == "db-1")
    );
}

/// The failover clock runs in every state of the primary's pod: deleted and not yet
/// recreated, recreated but unschedulable (`PodScheduled=False`, no `Ready` condition: its
/// view is not ready since its creation), a container waiting, `Ready` false; and an operator
/// restart does not reset it (the status keeps when it first saw the primary down).
#[test]
fn the_delay_runs_from_facts_that_exist_in_every_state_of_the_primarys_pod() {
    let standbys = [pod(1, true), pod(2, true)];
    let facts =
        BTreeMap::from([("db-1".to_owned(), standby(Some(100))), ("db-2".to_owned(), standby(Some(50)))]);
    let promotes = |decision: Decision| matches!(decision, Decision::Promote { pod, .. } if pod == "db-1");
    let with_primary =
        |primary: Option<PodView>| -> Vec<PodView> { primary.into_iter().chain(standbys.clone()).collect() };

    // Deleted, not recreated yet: first seen down at 0 (now), then the status remembers it.
    let missing = with_primary(None);
    assert_eq!(
        decide("db-0", &missing, &facts, DELAY, None, None, at(0)),
        Decision::Waiting { down_for: Duration::ZERO, remaining: Duration::from_secs(30) }
    );
    let written = with_failover(
        DatabaseClusterStatus::default(),
        "db-0",
        &decide("db-0", &missing, &facts, DELAY, None, None, at(0)),
        None,
        at(0),
    );
    let seen = seen_down_since(Some(&written), "db-0");
    assert_eq!(seen, Some(at(0)));
    assert!(promotes(decide("db-0", &missing, &facts, DELAY, None, seen, at(30))));
    assert_eq!(seen_down_since(Some(&written), "db-1"), None, "about another primary");

    // Recreated at 20 and unschedulable: never ready, so down at least since its creation;
    // the operator's own first sighting (0) is earlier and wins.
    let unschedulable = PodView { not_ready_since: Some(at(20)), ..pod(0, false) };
    let pods = with_primary(Some(unschedulable));
    assert!(promotes(decide("db-0", &pods, &facts, DELAY, None, seen, at(30))));
    assert!(
        matches!(decide("db-0", &pods, &facts, DELAY, None, None, at(30)), Decision::Waiting { .. }),
        "without the status, the pod's creation alone"
    );
    assert!(promotes(decide("db-0", &pods, &facts, DELAY, None, None, at(50))));

    // A container waiting, or Ready false: since the condition turned false.
    let pods = with_primary(Some(down_primary(5)));
    assert!(matches!(decide("db-0", &pods, &facts, DELAY, None, None, at(34)), Decision::Waiting { .. }));
    assert!(promotes(decide("db-0", &pods, &facts, DELAY, None, None, at(35))));

    // Being deleted: as missing.
    let deleting = PodView { deleting: true, ..pod(0, true) };
    let pods = with_primary(Some(deleting));
    assert!(promotes(decide("db-0", &pods, &facts, DELAY, None, seen, at(30))));

    // A primary seen ready again: the status no longer says it is down.
    let healthy = with_failover(written, "db-0", &Decision::Healthy, None, at(40));
    assert_eq!(seen_down_since(Some(&healthy), "db-0"), None);
}

#[test]
fn a_zero_delay_promotes_at_once_and_nothing_is_promoted_without_a_standby_that_streamed() {
    let pods = [down_primary(0), pod(1, true)];
    let streamed = BTreeMap::from([("db-1".to_owned(), standby(Some(100)))]);
    assert!(matches!(
        decide("db-0", &pods, &streamed, Duration::ZERO, None, None, at(0)),
        Decision::Promote { pod, down_for: Duration::ZERO, .. } if pod == "db-1"
    ));
    let never = BTreeMap::from([("db-1".to_owned(), standby(None))]);
    assert_eq!(
        decide("db-0", &pods, &never, DELAY, None, None, at(60)),
        Decision::NoCandidate { down_for: Duration::from_secs(60) }
    );
}

#[test]
fn the_delay_defaults_to_five_seconds_and_covers_an_in_place_restart() {
    let mut cluster = crate::databasecluster::fixtures::cluster(2, "15.4", 1);
    assert_eq!(failover_delay(&cluster), Duration::from_secs(5));
    cluster.spec.failover_delay = Some(0);
    assert_eq!(failover_delay(&cluster), Duration::ZERO);
    cluster.spec.primary_update_method = Some(PrimaryUpdateMethod::Restart);
    assert_eq!(failover_delay(&cluster), Duration::from_secs(30));
    cluster.spec.failover_delay = Some(120);
    assert_eq!(failover_delay(&cluster), Duration::from_secs(120));
}

#[test]
fn a_primary_whose_volume_is_full_is_held_not_failed_over() {
    let promote =
        Decision::Promote { pod: "db-1".into(), received_lsn: Some(1), resume: false, down_for: DELAY };
    assert_eq!(held_for_full_disk(promote.clone(), true), Decision::DiskFull);
    assert_eq!(held_for_full_disk(promote.clone(), false), promote);
    let waiting = Decision::Waiting { down_for: Duration::ZERO, remaining: DELAY };
    assert_eq!(held_for_full_disk(waiting, true), Decision::DiskFull);
    // The record already moved: finishing that failover is never held back.
    let resume = Decision::Promote { pod: "db-1".into(), received_lsn: None, resume: true, down_for: DELAY };
    assert_eq!(held_for_full_disk(resume.clone(), true), resume);
    assert_eq!(held_for_full_disk(Decision::Healthy, true), Decision::Healthy);
    let status = with_failover(DatabaseClusterStatus::default(), "db-0", &Decision::DiskFull, None, at(0));
    let condition = status.conditions.iter().find(|c| c.type_ == PRIMARY_AVAILABLE).unwrap();
    assert_eq!((condition.status.as_str(), condition.reason.as_str()), ("False", reason::DISK_FULL));
    assert_eq!(seen_down_since(Some(&status), "db-0").map(|_| ()), Some(()), "the clock keeps running");
}

#[test]
fn an_interrupted_failover_is_finished_and_never_makes_a_second_primary() {
    // The record names db-1, still in recovery, and nothing accepts writes: promote it.
    let pods = [down_primary(0), pod(1, false)];
    let facts = BTreeMap::from([("db-1".to_owned(), standby(Some(100)))]);
    assert!(matches!(
        decide("db-1", &pods, &facts, DELAY, None, None, at(1)),
        Decision::Promote { pod, resume: true, .. } if pod == "db-1"
    ));
    // Some instance already accepts writes (a cache behind the record): nothing is promoted.
    let primary = InstanceFacts { in_recovery: false, ..InstanceFacts::default() };
    let facts = BTreeMap::from([("db-1".to_owned(), primary), ("db-2".to_owned(), standby(Some(1)))]);
    let pods = [down_primary(0), pod(1, true), pod(2, true)];
    assert_eq!(decide("db-0", &pods, &facts, DELAY, None, None, at(600)), Decision::Healthy);
}

#[test]
fn the_status_says_the_primary_is_down_and_when_a_standby_was_promoted() {
    let down = Decision::NoCandidate { down_for: Duration::from_secs(42) };
    let status = with_failover(DatabaseClusterStatus::default(), "db-0", &down, None, at(0));
    let later = Decision::NoCandidate { down_for: Duration::from_secs(43) };
    let again = with_failover(status.clone(), "db-0", &later, None, at(1));
    assert_eq!(again, status, "a primary down for longer is no new status (no write per pass)");
    let condition = status.conditions.iter().find(|c| c.type_ == PRIMARY_AVAILABLE).unwrap();
    assert_eq!(
        (condition.status.as_str(), condition.reason.as_str()),
        ("False", reason::NO_FAILOVER_CANDIDATE)
    );
    assert!(condition.message.contains("db-0 is down"), "{}", condition.message);
    assert_eq!(status.target_primary.as_deref(), Some("db-0"));
    assert_eq!(status.current_primary_timestamp, None);

    let promote =
        Decision::Promote { pod: "db-1".into(), received_lsn: None, resume: false, down_for: Duration::ZERO };
    let record = outcome("db-0", "db-1", Some(0x3000148), 0, at(5));
    let status = with_failover(status, "db-0", &promote, Some(&record), at(5));
    assert_eq!(status.target_primary.as_deref(), Some("db-1"));
    assert_eq!(status.current_primary.as_deref(), Some("db-1"));
    assert_eq!(status.current_primary_timestamp, Some(Time(at(5))));
    let last = status.last_failover.as_ref().unwrap();
    assert!(last.possible_loss);
    assert!(
        last.message.contains("asynchronous: writes db-0 acknowledged after LSN 0/3000148 may be lost"),
        "{}",
        last.message
    );
    assert_eq!(failed_over(last).note, last.message);
    let synchronous = outcome("db-0", "db-1", Some(1), 1, at(5));
    assert!(!synchronous.possible_loss && synchronous.message.contains("every acknowledged write"));
}

fn members(required: usize, names: &[&str]) -> Synchronous {
    Synchronous { required, members: names.iter().map(|n| (*n).to_owned()).collect() }
}

#[test]
fn with_synchronous_replicas_only_a_recorded_synchronous_standby_is_promoted() {
    let pods = [down_primary(0), pod(1, true), pod(2, true)];
    let facts =
        BTreeMap::from([("db-1".to_owned(), standby(Some(100))), ("db-2".to_owned(), standby(Some(200)))]);
    let promoted = |sync: &Synchronous| match decide("db-0", &pods, &facts, DELAY, Some(sync), None, at(30)) {
        Decision::Promote { pod, .. } => Some(pod),
        Decision::NoSynchronousCandidate { .. } => None,
        other => panic!("{other:?}"),
    };
    assert_eq!(promoted(&members(1, &["db-1", "db-2"])).as_deref(), Some("db-2"));
    assert_eq!(
        promoted(&members(1, &["db-1"])),
        None,
        "db-2 has more WAL than the only synchronous standby: promoting db-1 could lose what db-2 has"
    );
    assert_eq!(promoted(&members(1, &["db-2"])).as_deref(), Some("db-2"));
    assert_eq!(promoted(&members(1, &[])), None, "no standby was synchronous");
    // Two members with ANY 1: a commit may be on either, so both must be observed.
    let one_down = [down_primary(0), pod(1, true), pod(2, false)];
    assert_eq!(
        decide("db-0", &one_down, &facts, DELAY, Some(&members(1, &["db-1", "db-2"])), None, at(30)),
        Decision::NoSynchronousCandidate { down_for: Duration::from_secs(30) }
    );
    // With ANY 2 of the two, each commit is on both: one of them is enough.
    assert!(matches!(
        decide("db-0", &one_down, &facts, DELAY, Some(&members(2, &["db-1", "db-2"])), None, at(30)),
        Decision::Promote { pod, .. } if pod == "db-1"
    ));
    let status = with_failover(
        DatabaseClusterStatus::default(),
        "db-0",
        &Decision::NoSynchronousCandidate { down_for: Duration::ZERO },
        None,
        at(30),
    );
    let condition = status.conditions.iter().find(|c| c.type_ == PRIMARY_AVAILABLE).unwrap();
    assert_eq!(condition.reason, reason::NO_SYNCHRONOUS_CANDIDATE);
}

#[test]
fn the_members_are_the_standbys_recorded_sync_or_quorum() {
    let status = |name: &str, sync: Option<&str>| InstanceStatus {
        name: name.into(),
        sync_state: sync.map(str::to_owned),
        ..InstanceStatus::default()
    };
    let statuses = [status("db-0", None), status("db-1", Some("quorum")), status("db-2", Some("potential"))];
    assert_eq!(synchronous(0, &statuses), None);
    assert_eq!(synchronous(1, &statuses), Some(members(1, &["db-1"])));
}

#[test]
fn a_promotion_a_stopped_operator_did_not_report_is_found() {
    let previous = DatabaseClusterStatus { current_primary: Some("db-0".into()), ..Default::default() };
    assert_eq!(unreported_promotion("db-1", Some("db-1"), Some(&previous)).as_deref(), Some("db-0"));
    assert_eq!(unreported_promotion("db-1", None, Some(&previous)), None, "not promoted yet");
    assert_eq!(unreported_promotion("db-0", Some("db-0"), Some(&previous)), None, "no failover");
    assert_eq!(unreported_promotion("db-0", Some("db-0"), None), None);
    let reported =
        DatabaseClusterStatus { last_failover: Some(outcome("db-0", "db-1", None, 0, at(0))), ..previous };
    assert_eq!(unreported_promotion("db-1", Some("db-1"), Some(&reported)), None);
}
