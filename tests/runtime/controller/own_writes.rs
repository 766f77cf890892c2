//! A pass's own writes: their echoes bring no pass, the next pass waits for the cache to hold
//! them, and a key whose passes keep writing is reported and slowed.

use super::*;

/// What [`Harness::run_writer`] returns: kept while the controller runs.
type Running = (Introspection, oneshot::Sender<()>, tokio::task::JoinHandle<()>);

/// Runs `Behaviour::WriteSelf(requeue)` on the ConfigMap `self`.
async fn write_self(requeue: Option<Duration>) -> (Harness, Running) {
    let h = Harness::start().await;
    h.start_with("self", None).await;
    let running = h.run_writer("self", Behaviour::WriteSelf(requeue));
    (h, running)
}

/// Whether the cache holds the `passes` label that pass `n` of [`write_self`] wrote.
fn labelled(h: &Harness, n: usize) -> impl Future<Output = Result<(), Option<String>>> {
    let cached = h.config_maps.cache().get(&ObjectKey::namespaced("default", "self"));
    let passes = cached.and_then(|c| c.metadata.labels.clone()).and_then(|l| l.get("passes").cloned());
    async move {
        match passes {
            Some(passes) if passes == n.to_string() => Ok(()),
            other => Err(other),
        }
    }
}

#[tokio::test(start_paused = true)]
async fn the_echo_of_a_settled_passs_own_write_queues_no_pass() {
    let (h, _running) = write_self(None).await;
    h.recorder.wait_until(|r| r.passes_of("self").len() == 1).await;
    common::eventually("the cache to hold the pass's write", Duration::from_secs(5), || labelled(&h, 1))
        .await;
    // Its watch event came back and queued nothing: the pass that wrote it had settled the key.
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(h.recorder.passes_of("self").len(), 1);

    // Someone else's write queues a pass as ever, and that pass's own echo again nothing.
    let change = json!({"data": {"changed": "yes"}});
    h.api::<ConfigMap>().patch("self", &PatchParams::default(), &Patch::Merge(&change)).await.unwrap();
    h.recorder.wait_until(|r| r.passes_of("self").len() == 2).await;
    common::eventually("the cache to hold the second write", Duration::from_secs(5), || labelled(&h, 2))
        .await;
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(h.recorder.passes_of("self").len(), 2);
    assert_eq!(metric(&h.metrics, "controller_runtime_hot_loop_keys{controller=\"test\"}"), Some(0.0));
}

#[tokio::test(start_paused = true)]
async fn passes_that_write_only_their_own_object_each_brought_by_another_change_are_no_hot_loop() {
    let (h, _running) = write_self(None).await;
    // 15 writing passes within a minute, more than the 10 that make a key hot, each queued by
    // someone else's change, none by its own echo.
    for n in 1..=15 {
        h.recorder.wait_until(|r| r.passes_of("self").len() == n).await;
        common::eventually("the cache to hold the pass's write", Duration::from_secs(5), || labelled(&h, n))
            .await;
        tokio::time::sleep(Duration::from_secs(1)).await;
        let change = json!({"data": {"changed": n.to_string()}});
        h.api::<ConfigMap>().patch("self", &PatchParams::default(), &Patch::Merge(&change)).await.unwrap();
    }
    h.recorder.wait_until(|r| r.passes_of("self").len() == 16).await;
    assert_eq!(metric(&h.metrics, "controller_runtime_hot_loop_keys{controller=\"test\"}"), Some(0.0));
}

#[tokio::test(start_paused = true)]
async fn the_echo_of_a_requeueing_passs_own_write_queues_no_pass_before_its_timer() {
    let (h, _running) = write_self(Some(Duration::from_secs(30))).await;
    h.recorder.wait_until(|r| r.passes_of("self").len() == 1).await;
    let first = Instant::now();
    common::eventually("the cache to hold the pass's write", Duration::from_secs(5), || labelled(&h, 1))
        .await;
    // The echo queued nothing: the next pass is the one the first asked for, 30 s on.
    tokio::time::sleep(Duration::from_secs(20)).await;
    assert_eq!(h.recorder.passes_of("self").len(), 1);
    h.recorder.wait_until(|r| r.passes_of("self").len() == 2).await;
    assert!(first.elapsed() >= Duration::from_secs(30), "{:?}", first.elapsed());
}

#[tokio::test]
async fn a_pass_waits_for_the_cache_to_hold_the_previous_passs_write() {
    let h = Harness::start().await;
    // The watch lags 300 ms behind every write: a pass right after its own write would read the
    // old value, and its precondition would fail with 409.
    h.sim.faults().set_watch_event_latency(Duration::from_millis(300));
    h.start_with("counter", None).await;
    let (debug, _stop, _task) = h.run_writer("counter", Behaviour::CountToThree);
    // `/debug/queue` shows a pass's wait for the previous pass's writes (polled: it is the state
    // between two passes, bounded by the wait for the passes below).
    let waits_shown = std::cell::RefCell::new(Vec::new());
    let look = || {
        waits_shown.borrow_mut().extend(last_pass_field(
            &debug,
            "default/counter",
            "stale_cache_wait_seconds",
        ))
    };
    h.recorder
        .wait_until(|r| {
            look();
            r.passes_of("counter").len() >= 4
        })
        .await;
    look();
    let waits_shown = waits_shown.into_inner();
    assert!(
        waits_shown.iter().any(|w| w.as_f64().is_some_and(|s| s > 0.0)),
        "/debug/queue showed no wait: {waits_shown:?}"
    );
    // Each write's own event requeues the key at once; it still ran only on fresh data.
    assert_eq!(*h.recorder.conflicts.lock(), 0, "a pass acted on a stale cache");
    let live: ConfigMap = h.api().get("counter").await.unwrap();
    assert_eq!(live.data.unwrap()["n"], "3");
    let waits = metric(&h.metrics, "controller_runtime_stale_cache_waits_total{controller=\"test\"}");
    assert!(waits.is_some_and(|n| n >= 1.0), "stale cache waits: {waits:?}");
}

/// A harness whose controller has two Secret informers, `owned=yes` (registered first) and
/// `picked=yes`, with the watch 300 ms behind every write; runs `behaviour` on key `name` (a
/// ConfigMap, beside a Secret of that name labelled `picked=yes`).
async fn two_secret_informers(name: &str, behaviour: Behaviour) -> (Harness, oneshot::Sender<()>) {
    let h = Harness::start().await;
    h.sim.faults().set_watch_event_latency(Duration::from_millis(300));
    let selected = |selector: &str| {
        let config = ReflectorConfig { label_selector: Some(selector.into()), ..ReflectorConfig::default() };
        let transform = Arc::new(dbcluster_operator::runtime::cache::strip_managed_fields::<Secret>);
        Arc::new(Informer::with_config(h.api::<Secret>(), config, transform))
    };
    let (owned, picked) = (selected("owned=yes"), selected("picked=yes"));
    h.api::<ConfigMap>().create(&PostParams::default(), &config_map(name)).await.unwrap();
    let secret: Secret =
        serde_json::from_value(json!({"metadata": {"name": name, "labels": {"picked": "yes"}}})).unwrap();
    h.api::<Secret>().create(&PostParams::default(), &secret).await.unwrap();
    for informer in [&owned, &picked] {
        informer.start();
    }
    h.config_maps.start();
    h.recorder.behaviour.lock().insert(name.into(), behaviour);
    *h.recorder.client.lock() = Some((h.sim.client(), Arc::clone(&h.config_maps)));
    *h.recorder.picked.lock() = Some(Arc::clone(&picked));
    let mut config = ControllerConfig::named("test");
    config.metrics = Some(h.metrics.controller("test"));
    let controller = Controller::new(&h.config_maps, config)
        .owns(&owned)
        .watches(&picked, |s: &Secret| Some(ObjectKey::of(s)))
        .workers(1);
    let (stop, _task) = h.run(controller);
    (h, stop)
}

/// The stale cache waits that ran to their bound.
fn stale_wait_timeouts(h: &Harness) -> f64 {
    metric(&h.metrics, "controller_runtime_stale_cache_wait_timeouts_total{controller=\"test\"}")
        .unwrap_or(0.0)
}

#[tokio::test]
async fn a_write_is_waited_for_on_the_informer_whose_selector_matches_it() {
    let (h, _stop) = two_secret_informers("counter", Behaviour::CountLabelToThree).await;
    h.recorder.wait_until(|r| r.passes_of("counter").len() >= 4).await;
    let live: Secret = h.api().get("counter").await.unwrap();
    assert_eq!(live.metadata.labels.unwrap()["n"], "3");
    assert_eq!(*h.recorder.conflicts.lock(), 0, "a pass acted on a stale cache");
    // Each pass after a write waited, and on the informer that delivers the write (the second
    // Secret informer): waiting on the first would run every wait to its 5 s bound.
    let waits = metric(&h.metrics, "controller_runtime_stale_cache_waits_total{controller=\"test\"}");
    assert!(waits.is_some_and(|n| n >= 1.0), "stale cache waits: {waits:?}");
    assert_eq!(stale_wait_timeouts(&h), 0.0, "a wait ran to its bound");
}

#[tokio::test]
async fn a_write_that_leaves_an_informers_selector_is_waited_for_on_that_informer() {
    let (h, _stop) = two_secret_informers("leaver", Behaviour::LeavePicked).await;
    h.recorder.wait_until(|r| r.passes_of("leaver").len() >= 2).await;
    // The labels written match neither informer, but the picked one held the Secret, and its
    // watch delivers the write as a deletion: the second pass waited for it.
    assert_eq!(*h.recorder.conflicts.lock(), 0, "the second pass still found the Secret in the picked cache");
    assert_eq!(stale_wait_timeouts(&h), 0.0, "a wait ran to its bound");
}

#[tokio::test(start_paused = true)]
async fn a_key_whose_passes_keep_writing_is_reported_and_slowed() {
    let h = Harness::start().await;
    h.start_with("flapping", None).await;
    let (debug, _stop, _task) = h.run_writer("flapping", Behaviour::Flap);
    // Ten writing passes are tolerated; from the eleventh the backoff (5 ms, 10 ms, ...) holds it.
    h.recorder.wait_until(|r| r.passes_of("flapping").len() >= 16).await;
    let hot = metric(&h.metrics, "controller_runtime_hot_loop_keys{controller=\"test\"}");
    assert_eq!(hot, Some(1.0));
    assert_eq!(
        last_pass_field(&debug, "default/flapping", "hot_loop"),
        Some(json!(true)),
        "/debug/queue shows the hot loop"
    );
    let passes = h.recorder.passes_of("flapping");
    let gaps: Vec<Duration> = passes.windows(2).map(|p| p[1] - p[0]).collect();
    // Passes 12.. each wait at least the growing backoff: 5, 10, 20, 40 ms.
    for (n, gap) in gaps[11..15].iter().enumerate() {
        let floor = Duration::from_millis(5 << n);
        assert!(*gap >= floor, "pass {} came {gap:?} after the previous, backoff {floor:?}", n + 13);
    }
    // Settling: once a pass writes nothing the key is calm again.
    h.recorder.behaviour.lock().insert("flapping".into(), Behaviour::Done);
    // The gauge moves after a pass ends (no event to await).
    let hot_keys = || metric(&h.metrics, "controller_runtime_hot_loop_keys{controller=\"test\"}");
    common::eventually("the hot-loop gauge to drop to 0", Duration::from_secs(60), || async {
        match hot_keys() {
            Some(0.0) => Ok(()),
            other => Err(other),
        }
    })
    .await;
}
