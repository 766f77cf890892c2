//! Rules 1 to 3: duplicate adds collapse, a key runs once at a time, and timers.

use super::*;

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
    assert_eq!(tracked(&q), 0);
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
