//! The work queue's semantics (issue 2), one test per numbered rule, plus metrics and snapshot.
//! Time-dependent tests run on tokio's paused clock: waits are exact and instant.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use dbcluster_operator::runtime::ObjectKey;
use dbcluster_operator::runtime::workqueue::{
    BackoffConfig, DEFAULT_LOW_PRIORITY_MAX_WAIT, InMemoryMetrics, KeyPhase, Priority, QueueConfig,
    QueueMetrics, WorkQueue,
};
use tokio::time::{Instant, sleep, timeout};

const HOUR: Duration = Duration::from_secs(3600);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn key(n: usize) -> ObjectKey {
    ObjectKey::namespaced("default", &format!("k-{n}"))
}

fn queue() -> WorkQueue<ObjectKey> {
    WorkQueue::new(QueueConfig::default())
}

/// True if `future` is still pending after an hour of (paused) time: every timer had its chance.
async fn stays_pending<F: Future>(future: F) -> bool {
    timeout(HOUR, future).await.is_err()
}

/// Claims the next key and returns it with how long that took.
async fn next(q: &WorkQueue<ObjectKey>) -> (ObjectKey, Duration) {
    let start = Instant::now();
    let claim =
        timeout(HOUR * 24, q.get()).await.expect("no key became ready within a day").expect("running");
    (claim.key().clone(), start.elapsed())
}

#[tokio::test(start_paused = true)]
async fn rule1_duplicate_adds_collapse_and_ready_keys_leave_first_in_first_out() {
    let q = queue();
    for n in [1, 2, 1, 3, 2, 1] {
        q.add(key(n));
    }
    assert_eq!(q.len(), 3);
    let mut order = Vec::new();
    for _ in 0..3 {
        order.push(next(&q).await);
    }
    assert_eq!(order, [(key(1), ms(0)), (key(2), ms(0)), (key(3), ms(0))]);
    assert!(q.is_empty());
    assert!(stays_pending(q.get()).await, "a duplicate was handed out");
}

#[tokio::test(start_paused = true)]
async fn rule2_a_key_added_while_processing_runs_once_more_after_its_claim_is_dropped() {
    let q = queue();
    q.add(key(1));
    let claim = q.get().await.unwrap();
    for _ in 0..5 {
        q.add(key(1));
    }
    assert_eq!(q.len(), 0, "a processing key is not ready");
    assert!(stays_pending(q.get()).await, "handed out while still processing");
    drop(claim);
    assert_eq!(q.len(), 1);
    let again = q.get().await.unwrap();
    assert_eq!(*again, key(1));
    drop(again);
    assert!(stays_pending(q.get()).await, "ran more than once after five adds");
}

#[tokio::test(start_paused = true)]
async fn rule2_claim_done_is_the_same_as_dropping_it() {
    let q = queue();
    q.add(key(1));
    let claim = q.get().await.unwrap();
    q.add(key(1));
    claim.done();
    assert_eq!(next(&q).await, (key(1), ms(0)));
}

#[tokio::test(start_paused = true)]
async fn rule3_a_key_delayed_twice_keeps_the_earlier_due_time() {
    let q = queue();
    q.add_after(key(1), ms(20));
    q.add_after(key(1), ms(10));
    q.add_after(key(1), ms(30));
    assert_eq!(q.len(), 0);
    assert_eq!(next(&q).await, (key(1), ms(10)));
    assert!(stays_pending(q.get()).await, "a superseded timer fired again");
    assert_eq!(q.timer_entries(), 0, "superseded timers are dropped once expired");
    assert_eq!(q.tracked_keys(), 0);
}

#[tokio::test(start_paused = true)]
async fn rule3_a_delayed_key_also_added_directly_runs_once_now_and_once_when_its_timer_fires() {
    let q = queue();
    q.add_after(key(1), ms(10));
    q.add(key(1));
    assert_eq!(next(&q).await, (key(1), ms(0)));
    assert_eq!(next(&q).await, (key(1), ms(10)));
    assert!(stays_pending(q.get()).await, "ran a third time");
}

#[tokio::test(start_paused = true)]
async fn rule3_a_timer_firing_while_the_key_is_processing_never_runs_it_concurrently() {
    let q = queue();
    q.add_after(key(1), ms(10));
    q.add(key(1));
    let claim = q.get().await.unwrap();
    // The timer fires at 10 ms while the claim is held: the key must not be handed out.
    assert!(timeout(ms(50), q.get()).await.is_err(), "handed out twice at once");
    assert_eq!(q.len(), 0);
    drop(claim);
    assert_eq!(next(&q).await, (key(1), ms(0)));
    assert!(stays_pending(q.get()).await, "ran a third time");
}

#[tokio::test(start_paused = true)]
async fn rule3_a_delayed_key_already_queued_when_its_timer_fires_runs_once() {
    let q = queue();
    q.add_after(key(1), ms(10));
    sleep(ms(5)).await;
    q.add(key(1));
    sleep(ms(10)).await; // the timer fired while the key was queued
    assert_eq!(q.len(), 1);
    assert_eq!(next(&q).await, (key(1), ms(0)));
    assert!(stays_pending(q.get()).await, "ran twice");
}

#[tokio::test(start_paused = true)]
async fn rule3_a_delay_too_long_to_represent_waits_without_panicking() {
    let q = queue();
    q.add_after(key(1), Duration::MAX);
    assert!(matches!(q.snapshot()[0].phase, KeyPhase::Waiting { .. }));
    assert!(stays_pending(q.get()).await);
    q.add(key(1));
    assert_eq!(next(&q).await, (key(1), ms(0)));
}

#[tokio::test(start_paused = true)]
async fn a_getter_cancelled_after_being_woken_passes_the_key_to_another_waiting_getter() {
    let q = queue();
    let spawn_getter = || {
        let q = q.clone();
        tokio::spawn(async move { q.get().await.map(|claim| claim.key().clone()) })
    };
    let first = spawn_getter();
    tokio::task::yield_now().await;
    let second = spawn_getter();
    tokio::task::yield_now().await;
    q.add(key(1)); // wakes the getter that waited longest: the first
    first.abort();
    let got = timeout(HOUR, second).await.expect("the wake-up was lost with the cancelled getter");
    assert_eq!(got.unwrap(), Some(key(1)));
}

#[tokio::test(start_paused = true)]
async fn rule4_retries_back_off_exponentially_up_to_the_cap_and_forget_resets() {
    let q = queue();
    let k = key(1);
    let backoff = BackoffConfig::default();
    for failures in 1..=21u32 {
        q.add_rate_limited(k.clone());
        assert_eq!(q.num_requeues(&k), failures);
        let expected = (ms(5) * 2u32.pow(failures.min(20) - 1)).min(Duration::from_secs(1000));
        assert_eq!(expected, backoff.nominal_delay(failures));
        assert_eq!(next(&q).await, (k.clone(), expected), "failure {failures}");
    }
    q.forget(&k);
    assert_eq!(q.num_requeues(&k), 0);
    q.add_rate_limited(k.clone());
    assert_eq!(q.num_requeues(&k), 1);
    assert_eq!(next(&q).await, (k, ms(5)));
}

#[tokio::test(start_paused = true)]
async fn settle_cancels_the_pending_timer_that_forget_leaves() {
    let q = queue();
    // `forget` keeps a delayed add's timer (client-go's `Forget`): it still fires once.
    q.add_after(key(1), ms(30));
    q.forget(&key(1));
    assert_eq!(next(&q).await, (key(1), ms(30)));
    // `settle` cancels it, a retry's too: nothing becomes ready, and nothing stays tracked.
    q.add_after(key(2), ms(30));
    q.add_rate_limited(key(3));
    q.settle(&key(2));
    q.settle(&key(3));
    assert_eq!(q.num_requeues(&key(3)), 0);
    assert!(stays_pending(q.get()).await);
    assert_eq!((q.tracked_keys(), q.timer_entries()), (0, 0));
    // A settled key is added again as any other.
    q.add_after(key(2), ms(5));
    assert_eq!(next(&q).await, (key(2), ms(5)));
}

#[tokio::test(start_paused = true)]
async fn rule4_jitter_keeps_each_delay_within_the_upper_half_of_its_step() {
    let config = QueueConfig {
        backoff: BackoffConfig { jitter: true, ..BackoffConfig::default() },
        ..QueueConfig::default()
    };
    let q = WorkQueue::new(config);
    for failures in 1..=10u32 {
        q.add_rate_limited(key(1));
        let (_, waited) = next(&q).await;
        let nominal = ms(5) * 2u32.pow(failures - 1);
        // The timer wheel rounds up to the next millisecond.
        assert!(waited >= nominal / 2 && waited <= nominal + ms(1), "{waited:?} vs {nominal:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn rule5_a_failure_while_the_previous_retry_is_pending_does_not_raise_the_count() {
    let q = queue();
    let k = key(1);
    q.add_rate_limited(k.clone()); // failure 1: retry due at 5 ms
    for _ in 0..3 {
        // An event runs the key early; it fails again before the retry is due.
        q.add(k.clone());
        assert_eq!(next(&q).await, (k.clone(), ms(0)));
        q.add_rate_limited(k.clone());
        assert_eq!(q.num_requeues(&k), 1, "an early failure raised the count");
    }
    assert_eq!(next(&q).await, (k.clone(), ms(5)), "the pending due time stands");
    q.add_rate_limited(k.clone()); // a failure of the retry itself counts
    assert_eq!(q.num_requeues(&k), 2);
    assert_eq!(next(&q).await, (k, ms(10)));
}

#[tokio::test(start_paused = true)]
async fn rule6_the_retry_bucket_throttles_retries_only() {
    let q = queue();
    for n in 0..150 {
        q.add_rate_limited(key(n));
    }
    let start = Instant::now();
    let mut released = Vec::new();
    for _ in 0..100 {
        let claim = q.get().await.unwrap();
        released.push(start.elapsed());
        drop(claim);
    }
    assert!(released.iter().all(|&at| at == ms(5)), "the burst of 100 leaves after 5 ms");
    // The budget is spent, yet a plain add is handed out at once.
    q.add(key(1000));
    assert_eq!(next(&q).await, (key(1000), ms(0)));
    for n in 1..=50u32 {
        let (_, _) = next(&q).await;
        let at = start.elapsed();
        assert_eq!(at, ms(5) + ms(100) * n, "retry {n} beyond the burst");
    }
    assert!(start.elapsed() >= Duration::from_secs(5));
}

#[tokio::test(start_paused = true)]
async fn rule7_forgotten_keys_leave_nothing_behind() {
    let q = queue();
    for n in 0..1000 {
        q.add_rate_limited(key(n));
    }
    assert_eq!(q.failure_entries(), 1000);
    for _ in 0..1000 {
        let claim = q.get().await.unwrap();
        q.forget(&claim);
    }
    assert_eq!((q.failure_entries(), q.tracked_keys(), q.timer_entries()), (0, 0, 0));
    assert!(q.snapshot().is_empty());

    // Without forget the failure is remembered: the count above is not trivially zero.
    q.add_rate_limited(key(1));
    drop(q.get().await.unwrap());
    assert_eq!((q.failure_entries(), q.tracked_keys()), (1, 1));
    // Forgotten while its retry is pending: kept until the timer has fired and the key is done.
    q.add(key(1));
    drop(q.get().await.unwrap());
    q.add_rate_limited(key(2));
    q.forget(&key(2));
    q.forget(&key(1));
    assert_eq!((q.failure_entries(), q.tracked_keys()), (0, 1));
    assert_eq!(next(&q).await, (key(2), ms(5)));
    assert_eq!((q.failure_entries(), q.tracked_keys(), q.timer_entries()), (0, 0, 0));
}

#[tokio::test(start_paused = true)]
async fn rule8_after_shutdown_adds_are_ignored_and_queued_keys_are_still_handed_out() {
    let q = queue();
    q.add(key(1));
    q.add(key(2));
    q.add_after(key(3), ms(10));
    q.shutdown();
    q.add(key(4));
    q.add_after(key(5), ms(1));
    q.add_rate_limited(key(6));
    assert_eq!(q.len(), 2);
    assert_eq!(q.tracked_keys(), 3, "only the keys added before shutdown");
    let first = q.get().await.unwrap();
    let second = q.get().await.unwrap();
    assert_eq!((first.key(), second.key()), (&key(1), &key(2)));
    let start = Instant::now();
    assert!(q.get().await.is_none());
    assert_eq!(start.elapsed(), ms(0), "no wait for the pending timer: timers stop at shutdown");
    sleep(HOUR).await;
    assert_eq!(q.len(), 0);
}

#[tokio::test(start_paused = true)]
async fn rule8_shutdown_returns_none_to_every_waiting_worker() {
    let q = queue();
    let workers: Vec<_> = (0..4)
        .map(|_| {
            let q = q.clone();
            tokio::spawn(async move { q.get().await.map(|claim| claim.key().clone()) })
        })
        .collect();
    assert!(timeout(HOUR, q.get()).await.is_err(), "the queue is empty: workers wait");
    q.shutdown();
    for worker in workers {
        let outcome = timeout(ms(1), worker).await.expect("a waiting worker was not released");
        assert_eq!(outcome.unwrap(), None);
    }
}

#[tokio::test(start_paused = true)]
async fn rule8_shutdown_with_drain_waits_for_every_outstanding_claim() {
    let q = queue();
    q.add(key(1));
    q.add(key(2));
    q.add(key(3));
    let first = q.get().await.unwrap();
    let second = q.get().await.unwrap();
    let drain = q.shutdown_with_drain();
    tokio::pin!(drain);
    assert!(stays_pending(&mut drain).await, "drained with two claims out");
    assert!(q.is_shut_down());
    drop(first);
    assert!(stays_pending(&mut drain).await, "drained with one claim out");
    drop(second);
    timeout(ms(1), drain).await.expect("drained once every claim is dropped");
    // Workers still drain what was queued.
    assert_eq!(q.get().await.map(|claim| claim.key().clone()), Some(key(3)));
    assert!(q.get().await.is_none());
}

/// Per-key bookkeeping for the many-workers test.
struct Ledger {
    /// Set while a worker processes the key.
    active: Vec<AtomicBool>,
    /// Bumped by a producer right before each add: the version a reconcile must eventually see.
    version: Vec<AtomicU64>,
    /// The highest version seen by a run that started after the claim was handed out.
    seen: Vec<AtomicU64>,
    overlaps: AtomicUsize,
    runs: AtomicUsize,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rule9_many_workers_never_share_a_key_and_every_key_runs_after_its_last_add() {
    const KEYS: usize = 1000;
    const PRODUCERS: usize = 4;
    const ADDS_PER_PRODUCER: usize = 25_000;
    const WORKERS: usize = 8;
    let q = queue();
    let keys: Arc<Vec<ObjectKey>> = Arc::new((0..KEYS).map(key).collect());
    let index = |k: &ObjectKey| k.name()[2..].parse::<usize>().unwrap();
    let ledger = Arc::new(Ledger {
        active: (0..KEYS).map(|_| AtomicBool::new(false)).collect(),
        version: (0..KEYS).map(|_| AtomicU64::new(0)).collect(),
        seen: (0..KEYS).map(|_| AtomicU64::new(0)).collect(),
        overlaps: AtomicUsize::new(0),
        runs: AtomicUsize::new(0),
    });
    let workers: Vec<_> = (0..WORKERS)
        .map(|_| {
            let (q, ledger) = (q.clone(), ledger.clone());
            tokio::spawn(async move {
                while let Some(claim) = q.get().await {
                    let i = index(&claim);
                    if ledger.active[i].swap(true, Ordering::SeqCst) {
                        ledger.overlaps.fetch_add(1, Ordering::SeqCst);
                    }
                    let version = ledger.version[i].load(Ordering::SeqCst);
                    ledger.seen[i].fetch_max(version, Ordering::SeqCst);
                    if ledger.runs.fetch_add(1, Ordering::Relaxed) % 3 == 0 {
                        tokio::task::yield_now().await; // let other workers race for the key
                    }
                    ledger.active[i].store(false, Ordering::SeqCst);
                    drop(claim);
                }
            })
        })
        .collect();
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|p| {
            let (q, ledger, keys) = (q.clone(), ledger.clone(), keys.clone());
            tokio::spawn(async move {
                for j in 0..ADDS_PER_PRODUCER {
                    let i = (p * 7919 + j * 7 + j * j) % KEYS;
                    ledger.version[i].fetch_add(1, Ordering::SeqCst);
                    // Some at low priority: promotions, stale low places and duplicates of both
                    // kinds, under load.
                    let priority = if j % 5 == 0 { Priority::Low } else { Priority::Normal };
                    q.add_with_priority(keys[i].clone(), priority);
                    if j % 64 == 0 {
                        tokio::task::yield_now().await;
                    }
                }
            })
        })
        .collect();
    for producer in producers {
        producer.await.unwrap();
    }
    q.shutdown();
    for worker in workers {
        // A safety net against a hang, not a synchronisation: the workers finish in milliseconds.
        timeout(Duration::from_secs(60), worker).await.expect("a worker never saw the shutdown").unwrap();
    }
    assert_eq!(ledger.overlaps.load(Ordering::SeqCst), 0, "a key was processed by two workers at once");
    let stale: Vec<usize> = (0..KEYS)
        .filter(|&i| ledger.seen[i].load(Ordering::SeqCst) != ledger.version[i].load(Ordering::SeqCst))
        .collect();
    assert!(stale.is_empty(), "keys never run after their last add: {stale:?}");
    let total: u64 = ledger.version.iter().map(|v| v.load(Ordering::SeqCst)).sum();
    assert_eq!(total, (PRODUCERS * ADDS_PER_PRODUCER) as u64);
    assert!(ledger.runs.load(Ordering::SeqCst) >= KEYS);
    assert_eq!(q.tracked_keys(), 0);
}

/// Claims `n` keys one after the other (each claim dropped at once) and returns them.
async fn drain(q: &WorkQueue<ObjectKey>, n: usize) -> Vec<ObjectKey> {
    let mut keys = Vec::new();
    for _ in 0..n {
        keys.push(next(q).await.0);
    }
    keys
}

#[tokio::test(start_paused = true)]
async fn rule10_low_keys_wait_while_normal_keys_are_ready_and_leave_first_in_first_out() {
    let q = queue();
    for n in [1, 2, 3] {
        q.add_with_priority(key(n), Priority::Low);
    }
    q.add(key(10));
    q.add_with_priority(key(4), Priority::Low);
    q.add(key(11));
    q.add_with_priority(key(2), Priority::Low); // already queued: nothing changes
    assert_eq!(q.len(), 6);
    assert_eq!(drain(&q, 6).await, [key(10), key(11), key(1), key(2), key(3), key(4)]);
    assert!(stays_pending(q.get()).await, "a low duplicate was handed out");
    assert_eq!(q.tracked_keys(), 0);
}

#[tokio::test(start_paused = true)]
async fn rule10_a_normal_add_moves_a_low_key_to_the_back_of_the_normal_line_once() {
    let q = queue();
    for n in [1, 2, 3] {
        q.add_with_priority(key(n), Priority::Low);
    }
    q.add(key(10));
    q.add(key(2)); // a live event for a key of the backlog
    q.add(key(2));
    assert_eq!(q.len(), 4);
    assert!(q.snapshot().iter().any(|s| s.key == key(1) && s.low_priority));
    assert!(q.snapshot().iter().any(|s| s.key == key(2) && !s.low_priority));
    assert_eq!(drain(&q, 4).await, [key(10), key(2), key(1), key(3)]);
    assert!(stays_pending(q.get()).await, "the promoted key also ran from the low line");
    // Its old place in the low line is not handed to the next key of that slot.
    q.add_with_priority(key(5), Priority::Low);
    assert_eq!(drain(&q, 1).await, [key(5)]);
    assert!(stays_pending(q.get()).await);
    assert_eq!(q.tracked_keys(), 0);
}

#[tokio::test(start_paused = true)]
async fn rule11_a_low_key_that_waited_its_maximum_joins_the_back_of_the_normal_line() {
    let max_wait = ms(100);
    let q = WorkQueue::new(QueueConfig { low_priority_max_wait: max_wait, ..QueueConfig::default() });
    assert_eq!(QueueConfig::default().low_priority_max_wait, DEFAULT_LOW_PRIORITY_MAX_WAIT);
    q.add_with_priority(key(1), Priority::Low);
    sleep(ms(50)).await;
    q.add_with_priority(key(2), Priority::Low);
    // A steady stream of normal keys, each claimed and finished as it arrives: without ageing the
    // low keys would never run.
    let mut served_at = Vec::new();
    let start = Instant::now();
    for n in 100..400 {
        q.add(key(n));
        q.add(key(n + 1000));
        let claim = q.get().await.unwrap();
        if claim.key().name() == "k-1" || claim.key().name() == "k-2" {
            served_at.push((claim.key().clone(), start.elapsed()));
        }
        drop(claim);
        sleep(ms(1)).await;
    }
    let first = served_at.iter().find(|(k, _)| *k == key(1)).expect("key 1 starved").1;
    let second = served_at.iter().find(|(k, _)| *k == key(2)).expect("key 2 starved").1;
    // Key 1 was added 50 ms before `start`: it ages at 50 ms and joins the normal line behind the
    // 50 keys there (the line grows by one per millisecond), so it runs at 100 ms; key 2 ages at
    // 100 ms, behind 100 keys, and runs at 200 ms.
    // (Within a timer tick: the loop's 1 ms sleeps may round up.)
    assert!(first >= ms(100) && first <= ms(102), "key 1 served at {first:?}");
    assert!(second >= ms(200) && second <= ms(202), "key 2 served at {second:?}");
}

#[tokio::test(start_paused = true)]
async fn rule12_a_rerun_keeps_the_highest_priority_it_was_added_with_and_timers_add_at_normal() {
    let q = queue();
    q.add(key(1));
    let claim = q.get().await.unwrap();
    q.add_with_priority(key(1), Priority::Low); // a resync while it runs
    q.add_with_priority(key(2), Priority::Low);
    q.add(key(3));
    drop(claim);
    assert_eq!(drain(&q, 3).await, [key(3), key(2), key(1)], "the re-run waits at low priority");

    q.add(key(1));
    let claim = q.get().await.unwrap();
    q.add_with_priority(key(1), Priority::Low);
    q.add(key(1)); // then a live event
    q.add_with_priority(key(2), Priority::Low);
    drop(claim);
    assert_eq!(drain(&q, 2).await, [key(1), key(2)], "the live event made the re-run normal");

    q.add_with_priority(key(2), Priority::Low);
    q.add_after(key(1), ms(10));
    let both_ready = async {
        while q.len() < 2 {
            sleep(ms(1)).await;
        }
    };
    timeout(HOUR, both_ready).await.expect("the timer adds its key");
    assert_eq!(drain(&q, 2).await, [key(1), key(2)], "a timer adds at normal priority");
}

#[tokio::test(start_paused = true)]
async fn rule10_a_promoted_key_added_again_after_its_run_is_handed_out_with_its_key() {
    // Found by rule 9's stress test with low adds mixed in: queueing the key again first dropped
    // its own stale low entry, which released its slot, and the slot was queued without a key.
    for rerun in [Priority::Normal, Priority::Low] {
        let q = queue();
        q.add_with_priority(key(1), Priority::Low);
        q.add_with_priority(key(2), Priority::Low);
        q.add(key(2)); // promoted: its low entry stays in line, stale, behind key 1's
        let claim = next(&q).await.0;
        assert_eq!(claim, key(2));
        let claim = q.get().await.unwrap();
        assert_eq!(*claim.key(), key(1), "the low line's first key");
        let running = claim;
        q.add_with_priority(key(2), rerun); // key 2 is done, so this queues it again
        assert_eq!(q.len(), 1);
        let again = timeout(Duration::from_secs(1), q.get()).await.expect("key 2 is ready").unwrap();
        assert_eq!(*again.key(), key(2), "re-added at {rerun:?}");
        drop((again, running));
        assert_eq!(q.tracked_keys(), 0, "nothing is left behind");
    }
}

#[tokio::test(start_paused = true)]
async fn rule13_a_retry_after_hint_is_a_floor_for_the_backoff() {
    let q = queue();
    q.add_rate_limited_after(key(1), Duration::from_secs(2));
    assert_eq!(q.num_requeues(&key(1)), 1);
    assert_eq!(next(&q).await, (key(1), Duration::from_secs(2)), "retried before Retry-After");
    // A hint shorter than the backoff changes nothing: the backoff (10 ms now) stands.
    q.add_rate_limited_after(key(1), ms(1));
    assert_eq!(next(&q).await, (key(1), ms(10)));
}

#[tokio::test(start_paused = true)]
async fn metrics_report_the_seven_workqueue_figures() {
    let metrics = Arc::new(InMemoryMetrics::default());
    let sink: Arc<dyn QueueMetrics> = metrics.clone();
    let q = WorkQueue::new(QueueConfig::named("clusters").with_metrics(sink));
    assert_eq!(q.name(), "clusters");
    q.add(key(1));
    q.add(key(1)); // duplicate: not an add
    q.add(key(2));
    assert_eq!((metrics.adds(), metrics.depth()), (2, 2));
    sleep(ms(10)).await;
    let claim = q.get().await.unwrap();
    assert_eq!(metrics.depth(), 1);
    assert_eq!(metrics.queue_durations(), [ms(10)]);
    q.add(key(1)); // processing: counted as an add, not as depth until the claim is dropped
    assert_eq!((metrics.adds(), metrics.depth()), (3, 1));
    sleep(ms(700)).await; // the 500 ms sample sees the claim, 490 ms old
    assert_eq!(metrics.unfinished_work(), (ms(490), ms(490)));
    drop(claim);
    assert_eq!(metrics.work_durations(), [ms(700)]);
    assert_eq!(metrics.depth(), 2, "the dirty key is ready again");
    q.add_rate_limited(key(3));
    q.add_rate_limited(key(3));
    assert_eq!(metrics.retries(), 2);
    let second = q.get().await.unwrap();
    let third = q.get().await.unwrap();
    assert_eq!(metrics.queue_durations(), [ms(10), ms(710), ms(700)], "key 2 was queued first");
    sleep(ms(600)).await; // the sample at 1000 ms: both claims taken at 710 ms
    assert_eq!(metrics.unfinished_work(), (ms(290) * 2, ms(290)));
    drop((second, third));
    let retried = q.get().await.unwrap();
    assert_eq!(*retried, key(3));
    assert_eq!(metrics.adds(), 4, "the retry's release is an add");
    assert_eq!(metrics.depth(), 0);
}

#[tokio::test(start_paused = true)]
async fn snapshot_shows_each_key_phase_timer_and_requeues() {
    let metrics: Arc<dyn QueueMetrics> = Arc::new(InMemoryMetrics::default());
    let q = WorkQueue::new(QueueConfig::default().with_metrics(metrics));
    let t0 = Instant::now();
    q.add(key(1));
    q.add(key(2));
    q.add_after(key(3), ms(50));
    q.add_rate_limited(key(4));
    sleep(ms(1)).await;
    let claim = q.get().await.unwrap();
    q.add(key(1));
    q.add_rate_limited(key(2));
    let mut snapshot = q.snapshot();
    snapshot.sort_by(|a, b| a.key.cmp(&b.key));
    let phases: Vec<_> =
        snapshot.iter().map(|s| (s.key.clone(), s.phase.clone(), s.timer, s.requeues)).collect();
    assert_eq!(
        phases,
        [
            (key(1), KeyPhase::Processing { since: Some(t0 + ms(1)), again: true }, None, 0),
            (key(2), KeyPhase::Queued { since: Some(t0) }, Some(t0 + ms(6)), 1),
            (key(3), KeyPhase::Waiting { until: t0 + ms(50) }, Some(t0 + ms(50)), 0),
            (key(4), KeyPhase::Waiting { until: t0 + ms(5) }, Some(t0 + ms(5)), 1),
        ]
    );
    drop(claim);
}
