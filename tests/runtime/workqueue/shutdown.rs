//! Rules 8 and 9: shutdown, and many workers never sharing a key.

use super::*;

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
    assert_eq!(tracked(&q), 3, "only the keys added before shutdown");
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
    assert_eq!(tracked(&q), 0);
}
