//! Rules 4 to 7: backoff, jitter, the retry budget and forgetting.

use super::*;

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
    assert_eq!((tracked(&q), q.timer_entries()), (0, 0));
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
    assert_eq!(with_failures(&q), 1000);
    for _ in 0..1000 {
        let claim = q.get().await.unwrap();
        q.forget(&claim);
    }
    assert_eq!((with_failures(&q), tracked(&q), q.timer_entries()), (0, 0, 0));
    assert!(q.snapshot().is_empty());

    // Without forget the failure is remembered: the count above is not trivially zero.
    q.add_rate_limited(key(1));
    drop(q.get().await.unwrap());
    assert_eq!((with_failures(&q), tracked(&q)), (1, 1));
    // Forgotten while its retry is pending: kept until the timer has fired and the key is done.
    q.add(key(1));
    drop(q.get().await.unwrap());
    q.add_rate_limited(key(2));
    q.forget(&key(2));
    q.forget(&key(1));
    assert_eq!((with_failures(&q), tracked(&q)), (0, 1));
    assert_eq!(next(&q).await, (key(2), ms(5)));
    assert_eq!((with_failures(&q), tracked(&q), q.timer_entries()), (0, 0, 0));
}
