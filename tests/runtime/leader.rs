//! Leader election against the simulated API server, on tokio's paused clock: one leader among
//! candidates, takeover after a crash within the lease's bounds, immediate takeover after a clean
//! release, and a leader that cannot renew stopping its work before the lease can expire.
#![cfg(feature = "sim")]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use dbcluster_operator::runtime::manager::leader::{LeaderElector, LeaderError, LeaseConfig};
use dbcluster_operator::sim::SimServer;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use kube::Api;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

fn config(identity: &str) -> LeaseConfig {
    LeaseConfig::new("default", "dbcluster-operator", identity)
}

async fn lease_spec(sim: &SimServer) -> LeaseSpec {
    let leases: Api<Lease> = Api::namespaced(sim.client(), "default");
    leases.get("dbcluster-operator").await.unwrap().spec.unwrap()
}

/// A running candidate: its task, its leadership signal and how many times its work started.
struct Candidate {
    task: JoinHandle<Result<Option<()>, LeaderError>>,
    leading: watch::Receiver<bool>,
    shutdown: CancellationToken,
}

/// Starts a candidate whose work counts its starts in `started` and runs until told to stop.
fn candidate(sim: &SimServer, identity: &str, started: &Arc<AtomicUsize>) -> Candidate {
    let elector = LeaderElector::new(sim.client(), config(identity)).unwrap();
    let leading = elector.leading();
    let shutdown = CancellationToken::new();
    let started = Arc::clone(started);
    let task = tokio::spawn(elector.run(shutdown.clone(), move |stop| async move {
        started.fetch_add(1, Ordering::SeqCst);
        stop.cancelled().await;
    }));
    Candidate { task, leading, shutdown }
}

async fn becomes_leader(candidate: &mut Candidate) {
    candidate.leading.wait_for(|leading| *leading).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn of_two_candidates_exactly_one_leads() {
    let sim = SimServer::start().await.unwrap();
    let started = Arc::new(AtomicUsize::new(0));
    // Both start at once against a missing lease: both try to create it; one gets 409.
    let mut a = candidate(&sim, "a", &started);
    let mut b = candidate(&sim, "b", &started);
    tokio::select! {
        _ = becomes_leader(&mut a) => {}
        _ = becomes_leader(&mut b) => {}
    }
    // Several lease durations pass with both candidates alive: leadership stays where it is.
    tokio::time::sleep(Duration::from_secs(60)).await;
    let (a_leads, b_leads) = (*a.leading.borrow(), *b.leading.borrow());
    assert!(a_leads ^ b_leads, "exactly one leads (a: {a_leads}, b: {b_leads})");
    assert_eq!(started.load(Ordering::SeqCst), 1, "the work started once");

    let spec = lease_spec(&sim).await;
    assert_eq!(spec.holder_identity.as_deref(), Some(if a_leads { "a" } else { "b" }));
    assert_eq!(spec.lease_transitions, Some(0));
    assert_eq!(spec.lease_duration_seconds, Some(15));
    assert!(spec.renew_time.unwrap().0 > spec.acquire_time.unwrap().0, "the leader renews");
}

#[tokio::test(start_paused = true)]
async fn a_standby_takes_over_after_the_leader_dies() {
    let sim = SimServer::start().await.unwrap();
    let started = Arc::new(AtomicUsize::new(0));
    let mut a = candidate(&sim, "a", &started);
    becomes_leader(&mut a).await;
    let first = lease_spec(&sim).await;
    let mut b = candidate(&sim, "b", &started);
    // Not a wait for a condition: for 5 s (paused clock) of the leader renewing, the standby must
    // not lead.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(!*b.leading.borrow());

    // The leader's process dies: no release, the lease must run out.
    a.task.abort();
    let died = Instant::now();
    becomes_leader(&mut b).await;
    let took = died.elapsed();
    let config = config("b");
    assert!(
        took <= config.lease_duration + config.retry_period.mul_f64(2.4),
        "took over {took:?} after the leader died"
    );
    assert!(took >= config.lease_duration - config.retry_period.mul_f64(1.2), "not before expiry: {took:?}");

    let spec = lease_spec(&sim).await;
    assert_eq!(spec.holder_identity.as_deref(), Some("b"));
    assert_eq!(spec.lease_transitions, Some(1));
    assert!(spec.acquire_time.unwrap().0 > first.acquire_time.unwrap().0);
    assert_eq!(started.load(Ordering::SeqCst), 2);
}

#[tokio::test(start_paused = true)]
async fn a_clean_shutdown_releases_the_lease_and_the_standby_takes_over_at_once() {
    let sim = SimServer::start().await.unwrap();
    let started = Arc::new(AtomicUsize::new(0));
    let mut a = candidate(&sim, "a", &started);
    becomes_leader(&mut a).await;
    let mut b = candidate(&sim, "b", &started);
    // Not a wait for a condition: the standby runs for 5 s (paused clock), retrying the held
    // lease, so that the takeover measured below is a running standby's, not a starting one's.
    tokio::time::sleep(Duration::from_secs(5)).await;

    a.shutdown.cancel();
    assert!(matches!(a.task.await.unwrap(), Ok(Some(()))));
    let released = Instant::now();
    assert!(!*a.leading.borrow());
    let spec = lease_spec(&sim).await;
    assert_eq!(spec.holder_identity, None);
    assert_eq!(spec.lease_duration_seconds, Some(1));

    becomes_leader(&mut b).await;
    let took = released.elapsed();
    assert!(took <= config("b").retry_period.mul_f64(1.2), "took over {took:?} after the release");
    let spec = lease_spec(&sim).await;
    assert_eq!(spec.holder_identity.as_deref(), Some("b"));
    assert_eq!(spec.lease_transitions, Some(1));
}

/// Records when it is dropped: the moment the aborted work stopped.
struct StopClock(Arc<parking_lot::Mutex<Option<Instant>>>);

impl Drop for StopClock {
    fn drop(&mut self) {
        *self.0.lock() = Some(Instant::now());
    }
}

#[tokio::test(start_paused = true)]
async fn a_leader_that_cannot_renew_stops_its_work_before_the_lease_can_expire() {
    let sim = SimServer::start().await.unwrap();
    let elector = LeaderElector::new(sim.client(), config("a")).unwrap();
    let mut leading = elector.leading();
    let stopped = Arc::new(parking_lot::Mutex::new(None));
    let stop_clock = StopClock(Arc::clone(&stopped));
    let task = tokio::spawn(elector.run(CancellationToken::new(), move |_stop| async move {
        let _clock = stop_clock;
        // Work that ignores its token: only an abort stops it.
        std::future::pending::<()>().await
    }));
    leading.wait_for(|leading| *leading).await.unwrap();
    let last_renewal_at_most = Instant::now();

    sim.faults().fail_next("leases", 1000, 500);
    let result = task.await.unwrap();
    assert!(matches!(result, Err(LeaderError::Lost { .. })), "{result:?}");
    assert!(!*leading.borrow());
    let stopped = stopped.lock().expect("the work was stopped");
    let config = config("a");
    // The last successful renewal was at or before the faults began, so the work stopped within
    // the renew deadline of it: before others, counting the lease duration, could take over.
    assert!(stopped <= last_renewal_at_most + config.renew_deadline);
    assert!(stopped < last_renewal_at_most + config.lease_duration);
}
