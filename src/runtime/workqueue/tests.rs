//! Unit tests of the queue's parts: backoff, retry bucket, note keys, the state's entry numbers
//! and the clock. The rules themselves are tested through the queue in `tests/runtime/workqueue/`.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::Priority;
use super::config::{BackoffConfig, BucketConfig, RetryBucket};
use super::notes::NoteKey;
use super::state::{Clock, State};

#[test]
fn backoff_doubles_from_five_milliseconds_up_to_the_cap() {
    let backoff = BackoffConfig::default();
    let ms = |n| backoff.nominal_delay(n).as_millis();
    assert_eq!([ms(1), ms(2), ms(3), ms(4)], [5, 10, 20, 40]);
    assert_eq!(ms(18), 5 << 17); // 655.36 s, the last uncapped step
    assert_eq!(backoff.nominal_delay(19), Duration::from_secs(1000));
    assert_eq!(backoff.nominal_delay(u32::MAX), Duration::from_secs(1000));
}

#[test]
fn backoff_jitter_stays_within_the_upper_half() {
    let backoff = BackoffConfig { jitter: true, ..BackoffConfig::default() };
    for failures in 1..30 {
        let nominal = backoff.nominal_delay(failures);
        let delay = backoff.delay(failures);
        assert!(delay <= nominal && delay >= nominal / 2, "{delay:?} vs {nominal:?}");
    }
}

#[test]
fn the_retry_bucket_grants_a_burst_then_one_token_per_interval() {
    let config =
        BucketConfig { per_second: NonZeroU32::new(10).unwrap(), burst: NonZeroU32::new(2).unwrap() };
    let mut bucket = RetryBucket::new(&config);
    let ms = 1_000_000;
    assert!(bucket.try_take(5 * ms).is_ok() && bucket.try_take(5 * ms).is_ok());
    assert_eq!(bucket.try_take(5 * ms), Err(105 * ms));
    assert!(bucket.try_take(105 * ms).is_ok());
    assert_eq!(bucket.try_take(105 * ms), Err(205 * ms));
    assert!(bucket.try_take(10_000 * ms).is_ok() && bucket.try_take(10_000 * ms).is_ok(), "refilled");
}

#[test]
fn a_note_key_hands_over_the_adders_copy_or_else_clones_the_queues() {
    let queued: Arc<str> = "team/pg".into();
    let adders: Arc<str> = "team/pg".into();
    let mut spare = Some(Arc::clone(&adders));
    let key = NoteKey::new(&queued, &mut spare);
    assert_eq!(&**key, "team/pg");
    assert!(Arc::ptr_eq(&key.into_owned(), &adders), "the adder's copy, not a clone");
    assert!(spare.is_none(), "taken, so the add has nothing left to drop");

    let mut none = None;
    assert!(Arc::ptr_eq(&NoteKey::new(&queued, &mut none).into_owned(), &queued));
}

/// A clock fixed at the epoch.
fn at_zero() -> Clock {
    Clock(Instant::now(), Some(0))
}

fn add(state: &mut State<&'static str, ()>, key: &'static str, priority: Priority) -> u32 {
    let (id, _) = state.entry_for(key);
    state.enqueue(id, priority, &mut at_zero());
    id
}

#[test]
fn an_idle_entry_is_removed_and_its_number_reused_without_its_stale_low_place() {
    let mut state = State::new(false, u64::MAX, None);
    let a = add(&mut state, "a", Priority::Low);
    let z = add(&mut state, "z", Priority::Low);
    add(&mut state, "a", Priority::Normal); // promoted: its low place, before z's, goes stale
    assert_eq!(state.pop_ready(&mut at_zero()), Some(a));
    assert_eq!(state.finish(a, &mut at_zero()), 0);
    assert_eq!((state.find(&"a"), state.entries().count()), (None, 1), "nothing left of a");
    let b = add(&mut state, "b", Priority::Low);
    assert_eq!(b, a, "the number is reused");
    // a's stale place comes first in the low line, but it does not hand b out before z.
    let mut next = || state.pop_ready(&mut at_zero());
    assert_eq!([next(), next(), next()], [Some(z), Some(b), None]);
}

#[tokio::test(start_paused = true)]
async fn a_clock_reads_tokios_time_once() {
    let epoch = Instant::now();
    tokio::time::advance(Duration::from_millis(1)).await;
    let mut clock = Clock(epoch, None);
    assert_eq!(clock.get(), 1_000_000);
    tokio::time::advance(Duration::from_millis(2)).await;
    assert_eq!(clock.get(), 1_000_000, "read once");
    assert_eq!(Clock(epoch, None).get(), 3_000_000);
}
