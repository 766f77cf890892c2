//! Unit tests of `causes`.

use super::*;
use crate::runtime::controller::writes::kind_name;

fn event(name: &str, rv: &str) -> ObjectEvent {
    ObjectEvent {
        informer: kind_name("apps/StatefulSet"),
        event: EventType::Modified,
        object: ObjectKey::namespaced("default", name),
        resource_version: Some(rv.into()),
    }
}

fn key() -> ObjectKey {
    ObjectKey::namespaced("default", "pg")
}

fn queue() -> ControllerQueue {
    ControllerQueue::with_notes(crate::runtime::workqueue::QueueConfig::default())
}

/// The next claim's causes (the key is done at once).
async fn next_causes(queue: &ControllerQueue) -> CauseLog {
    let mut claim = tokio::time::timeout(Duration::from_secs(60), queue.get())
        .await
        .expect("a key is ready in time")
        .expect("the queue runs");
    claim.take_notes()
}

/// Records `cause` about [`key`] in `notes`, due now; true if it was kept.
fn record_now(notes: &mut CauseNotes, cause: impl FnOnce(NoteKey<'_, ObjectKey>) -> Cause) -> bool {
    let (key, mut spare) = (key(), None);
    notes.record(NoteKey::new(&key, &mut spare), cause, Due::Now).is_none()
}

#[test]
fn rule4_the_trigger_is_the_first_cause_and_the_count_of_the_others() {
    let mut notes = CauseNotes::default();
    assert_eq!(notes.take().trigger().to_string(), "none recorded");
    assert!(record_now(&mut notes, |_| Cause::Mapped(event("pg", "4312"))), "kept");
    assert!(record_now(&mut notes, |_| Cause::Watch(event("pg", "4313"))), "kept");
    assert!(record_now(&mut notes, |_| Cause::Explicit("test".into())), "kept");
    let log = notes.take();
    assert_eq!(log.trigger().to_string(), "\"StatefulSet default/pg modified rv=4312 (owned)\" (+2)");
    let single = CauseLog { kept: [Cause::Watch(event("pg", "7"))].into(), more: 0 };
    assert_eq!(single.trigger().to_string(), "\"StatefulSet default/pg modified rv=7\"");
}

#[tokio::test(start_paused = true)]
async fn rule2_an_already_queued_key_keeps_its_first_causes_and_counts_the_rest() {
    let queue = queue();
    let enqueuer = Enqueuer::new(queue.clone(), true);
    for rv in 0..20 {
        enqueuer.add(key(), Priority::Normal, |_| Cause::Watch(event("pg", &rv.to_string())));
    }
    assert_eq!(queue.len(), 1, "one queued key");
    assert_eq!(pending(&queue, &key()).total(), 20);
    let log = next_causes(&queue).await;
    assert_eq!(log.kept.len(), KEPT_CAUSES);
    assert_eq!(log.more, 20 - KEPT_CAUSES as u64);
    let first = log.kept[0].event().and_then(|e| e.resource_version.clone());
    assert_eq!(first, Some(ResourceVersion::Number(0)), "the first cause is kept: it queued the key");
    let last = log.kept[KEPT_CAUSES - 1].event().and_then(|e| e.resource_version.clone());
    assert_eq!(last, Some(ResourceVersion::Number(KEPT_CAUSES as u64 - 1)));
    assert_eq!(pending(&queue, &key()).total(), 0, "the claim took them all");
    assert_eq!(queue.snapshot().len(), 0, "a finished key leaves nothing behind, causes included");
}

#[tokio::test(start_paused = true)]
async fn rule2_a_cause_about_the_keys_own_object_is_built_from_the_queues_key_only_when_kept() {
    let queue = queue();
    let enqueuer = Enqueuer::new(queue.clone(), true);
    let built = std::sync::atomic::AtomicUsize::new(0);
    for rv in 0..20 {
        enqueuer.add(key(), Priority::Normal, |own| {
            built.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            Cause::Watch(ObjectEvent { object: own.into_owned(), ..event("other", &rv.to_string()) })
        });
    }
    assert_eq!(
        built.load(std::sync::atomic::Ordering::Relaxed),
        KEPT_CAUSES,
        "a cause past the bound is never built"
    );
    let log = next_causes(&queue).await;
    assert_eq!(log.total(), 20);
    assert!(log.kept.iter().all(|cause| cause.event().is_some_and(|e| e.object == key())));
}

#[tokio::test(start_paused = true)]
async fn rule3_a_timer_cause_waits_for_its_timer() {
    let queue = queue();
    let enqueuer = Enqueuer::new(queue.clone(), true);
    enqueuer.requeue_after(key(), Duration::from_secs(30));
    enqueuer.add(key(), Priority::Normal, |_| Cause::Watch(event("pg", "1")));
    assert_eq!(next_causes(&queue).await.kept[..], [Cause::Watch(event("pg", "1"))]);
    assert_eq!(pending(&queue, &key()).total(), 1, "the timer's cause is still pending");
    let started = tokio::time::Instant::now();
    let later = next_causes(&queue).await;
    assert_eq!(started.elapsed(), Duration::from_secs(30), "handed out when the timer fired");
    assert_eq!(later.kept[..], [Cause::RequeueAfter(Duration::from_secs(30))]);
    assert_eq!(queue.snapshot().len(), 0);
}

#[tokio::test(start_paused = true)]
async fn rule3_a_retry_cause_waits_for_the_retry() {
    let queue = queue();
    let enqueuer = Enqueuer::new(queue.clone(), true);
    enqueuer.retry(key(), Duration::from_secs(2), "boom");
    enqueuer.add(key(), Priority::Normal, |_| Cause::Watch(event("pg", "1")));
    assert_eq!(next_causes(&queue).await.kept[..], [Cause::Watch(event("pg", "1"))]);
    let started = tokio::time::Instant::now();
    let retry = next_causes(&queue).await;
    assert!(started.elapsed() >= Duration::from_secs(2), "no earlier than the floor");
    assert_eq!(retry.kept[..], [Cause::Retry("boom".into())]);
}

#[tokio::test(start_paused = true)]
async fn rule3_timer_causes_are_due_with_the_earliest_pending_timer() {
    // Passes started by watch events, each asking to run again in 10 s: the queue keeps the
    // first timer only, so the pass it starts is the answer to all of them.
    let queue = queue();
    let enqueuer = Enqueuer::new(queue.clone(), true);
    let requeue = || Cause::RequeueAfter(Duration::from_secs(10));
    let rounds = KEPT_CAUSES + 2;
    for rv in 0..rounds {
        enqueuer.requeue_after(key(), Duration::from_secs(10));
        enqueuer.add(key(), Priority::Normal, |_| Cause::Watch(event("pg", &rv.to_string())));
        let watch = next_causes(&queue).await;
        assert_eq!(watch.kept[..], [Cause::Watch(event("pg", &rv.to_string()))]);
        tokio::time::advance(Duration::from_millis(100)).await;
    }
    // The first timer fires: its pass says why, though the first requests were dropped from
    // the bounded log.
    let timer = next_causes(&queue).await;
    assert_eq!(timer.kept[..], vec![requeue(); KEPT_CAUSES]);
    assert_eq!(timer.more, (rounds - KEPT_CAUSES) as u64);
    assert_eq!(timer.trigger().to_string(), format!("\"requeue after 10s\" (+{})", rounds - 1));
    assert_eq!(queue.snapshot().len(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_settled_key_drops_the_causes_that_waited_for_its_timer() {
    let queue = queue();
    let enqueuer = Enqueuer::new(queue.clone(), true);
    enqueuer.requeue_after(key(), Duration::from_secs(10));
    assert_eq!(pending(&queue, &key()).total(), 1);
    queue.settle(&key());
    assert_eq!(pending(&queue, &key()).total(), 0, "gone with the timer");
    enqueuer.add(key(), Priority::Normal, |_| Cause::Watch(event("pg", "2")));
    tokio::time::advance(Duration::from_secs(20)).await;
    assert_eq!(next_causes(&queue).await.kept[..], [Cause::Watch(event("pg", "2"))]);
}

#[tokio::test(start_paused = true)]
async fn a_held_back_pass_keeps_its_causes_for_the_pass_its_timer_starts() {
    let queue = queue();
    let enqueuer = Enqueuer::new(queue.clone(), true);
    enqueuer.add(key(), Priority::Normal, |_| Cause::Watch(event("pg", "1")));
    let held = next_causes(&queue).await;
    enqueuer.hold_back(key(), Duration::from_secs(5), held);
    enqueuer.add(key(), Priority::Normal, |_| Cause::Watch(event("pg", "2")));
    assert_eq!(next_causes(&queue).await.kept[..], [Cause::Watch(event("pg", "2"))]);
    assert_eq!(next_causes(&queue).await.kept[..], [Cause::Watch(event("pg", "1"))], "after the hold");
}

#[tokio::test(start_paused = true)]
async fn rule5_switched_off_nothing_is_built_or_kept() {
    let queue = queue();
    let enqueuer = Enqueuer::new(queue.clone(), false);
    enqueuer.add(key(), Priority::Normal, |_| unreachable!("no cause is built while recording is off"));
    enqueuer.retry(key(), Duration::ZERO, "boom");
    assert_eq!(pending(&queue, &key()).total(), 0);
    assert_eq!(next_causes(&queue).await.total(), 0);
}

#[test]
fn resource_versions_are_shown_exactly_as_received() {
    for text in ["0", "4312", "18446744073709551615", "007", "+5", "", "abc", "18446744073709551616"] {
        assert_eq!(ResourceVersion::from(text).to_string(), text);
    }
    assert_eq!(ResourceVersion::from("4312"), ResourceVersion::Number(4312));
    assert!(matches!(ResourceVersion::from("007"), ResourceVersion::Text(_)));
    assert!(std::ptr::eq(
        kind_name("apps/StatefulSet").as_str(),
        kind_name(&String::from("apps/StatefulSet")).as_str()
    ));
}

#[test]
fn causes_serialize_with_their_fields() {
    let json = serde_json::to_value(Cause::Watch(event("pg", "9"))).unwrap();
    assert_eq!(json["type"], "watch");
    assert_eq!(json["kind"], "StatefulSet");
    assert_eq!(json["namespace"], "default");
    assert_eq!(json["name"], "pg");
    assert_eq!(json["event"], "modified");
    assert_eq!(json["resource_version"], "9");
    let retry = serde_json::to_value(Cause::Retry("boom".into())).unwrap();
    assert_eq!((retry["type"].as_str(), retry["error"].as_str()), (Some("retry"), Some("boom")));
}

/// Rule 2 under contention: producers on four threads add a few keys while workers claim
/// them. Every add's cause is kept or counted in exactly one pass.
#[test]
fn every_add_is_in_exactly_one_pass_under_contention() {
    use std::sync::atomic::{AtomicU64, Ordering};
    const PRODUCERS: u64 = 4;
    const ADDS: u64 = 20_000;
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let queue = ControllerQueue::with_notes(crate::runtime::workqueue::QueueConfig::default());
    let enqueuer = Enqueuer::new(queue.clone(), true);
    let seen = Arc::new(AtomicU64::new(0));
    let passed = Arc::new(tokio::sync::Notify::new());
    let workers: Vec<_> = (0..4)
        .map(|_| {
            let (queue, seen, passed) = (queue.clone(), Arc::clone(&seen), Arc::clone(&passed));
            runtime.spawn(async move {
                while let Some(mut claim) = queue.get().await {
                    seen.fetch_add(claim.take_notes().total(), Ordering::Relaxed);
                    tokio::task::yield_now().await;
                    drop(claim);
                    passed.notify_one();
                }
            })
        })
        .collect();
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|p| {
            let enqueuer = enqueuer.clone();
            std::thread::spawn(move || {
                for n in 0..ADDS {
                    let key = ObjectKey::namespaced("default", &format!("pg-{}", (n + p) % 8));
                    enqueuer.add(key, Priority::Normal, |key| Cause::Watch(event(key.name(), "1")));
                }
            })
        })
        .collect();
    for producer in producers {
        producer.join().unwrap();
    }
    let all_seen = async {
        while seen.load(Ordering::Relaxed) < PRODUCERS * ADDS {
            passed.notified().await;
        }
    };
    runtime.block_on(async {
        let _ = tokio::time::timeout(std::time::Duration::from_secs(30), all_seen).await;
        queue.shutdown();
        for worker in workers {
            worker.await.unwrap();
        }
    });
    assert_eq!(seen.load(Ordering::Relaxed), PRODUCERS * ADDS, "every add's cause, once");
}
