//! Rules 10 to 13: low-priority keys, promotion, reruns and retry-after hints.

use super::*;

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
    assert_eq!(tracked(&q), 0);
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
    assert_eq!(tracked(&q), 0);
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
    common::eventually("the timer to add its key", HOUR, || async {
        if q.len() >= 2 { Ok(()) } else { Err(q.len()) }
    })
    .await;
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
        assert_eq!(tracked(&q), 0, "nothing is left behind");
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
