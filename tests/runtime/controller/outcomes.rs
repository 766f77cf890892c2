//! How each way a pass ends tells the queue what to do: done, requeue, errors with backoff (panics
//! and timeouts included) and a retry-after hint.

use super::*;

#[tokio::test(start_paused = true)]
async fn each_outcome_tells_the_queue_the_right_thing() {
    let h = Harness::start().await;
    {
        let mut b = h.recorder.behaviour.lock();
        b.insert("done".into(), Behaviour::Done);
        b.insert("later".into(), Behaviour::RequeueAfter(Duration::from_secs(30)));
        b.insert("fail".into(), Behaviour::Fail);
        b.insert("terminal".into(), Behaviour::FailTerminally);
    }
    for name in ["done", "later", "fail", "terminal"] {
        h.api::<ConfigMap>().create(&PostParams::default(), &config_map(name)).await.unwrap();
    }
    h.start_informers();
    let controller = h.controller();
    let queue = controller.queue().clone();
    let (_stop, _task) = h.run(controller);

    // An error retries with per-key exponential backoff: 5 ms, 10 ms, 20 ms, 40 ms …
    h.recorder.wait_until(|r| r.passes_of("fail").len() >= 5).await;
    let fail = h.recorder.passes_of("fail");
    let gaps: Vec<u128> = fail.windows(2).map(|w| (w[1] - w[0]).as_millis()).collect();
    assert_eq!(gaps, [5, 10, 20, 40]);
    assert!(queue.num_requeues(&ObjectKey::namespaced("default", "fail")) >= 4);

    // RequeueAfter runs the key again after the delay, with its backoff reset.
    h.recorder.wait_until(|r| r.passes_of("later").len() >= 2).await;
    let later = h.recorder.passes_of("later");
    assert_eq!((later[1] - later[0]).as_secs(), 30);
    assert_eq!(queue.num_requeues(&ObjectKey::namespaced("default", "later")), 0);

    // Done and a terminal error run once: no retry, no backoff state left.
    assert_eq!(h.recorder.passes_of("done").len(), 1);
    assert_eq!(h.recorder.passes_of("terminal").len(), 1);
    assert_eq!(queue.num_requeues(&ObjectKey::namespaced("default", "terminal")), 0);
    let text = h.metrics.encode();
    assert!(
        text.contains("controller_runtime_terminal_reconcile_errors_total{controller=\"test\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("controller_runtime_reconcile_total{controller=\"test\",result=\"requeue_after\"}")
    );
}

#[tokio::test(start_paused = true)]
async fn a_pass_that_ends_done_cancels_the_requeue_an_earlier_pass_asked_for() {
    let h = Harness::start().await;
    h.start_with("settles", Some(Behaviour::RequeueAfter(Duration::from_secs(30)))).await;
    let controller = h.controller();
    let queue = controller.queue().clone();
    let (_stop, _task) = h.run(controller);
    h.recorder.wait_until(|r| r.passes_of("settles").len() == 1).await;

    // Before the 30 s are up, a change brings a pass that finds nothing left to do.
    h.recorder.behaviour.lock().insert("settles".into(), Behaviour::Done);
    let change = json!({"data": {"changed": "yes"}});
    h.api::<ConfigMap>().patch("settles", &PatchParams::default(), &Patch::Merge(&change)).await.unwrap();
    h.recorder.wait_until(|r| r.passes_of("settles").len() == 2).await;
    let key = ObjectKey::namespaced("default", "settles");
    common::eventually("the settled key to leave the queue", Duration::from_secs(5), || async {
        let tracked: Vec<_> = queue.snapshot().into_iter().filter(|state| state.key == key).collect();
        if tracked.is_empty() { Ok(()) } else { Err(tracked) }
    })
    .await;

    // The requeue the first pass asked for is cancelled: no third pass, however long we wait.
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(h.recorder.passes_of("settles").len(), 2);
    assert_eq!(queue.timer_entries(), 0, "the cancelled timer's entry was dropped when it came due");
}

#[tokio::test(start_paused = true)]
async fn a_panic_or_a_timeout_is_an_error_retried_with_backoff() {
    let h = Harness::start().await;
    h.recorder.behaviour.lock().insert("buggy".into(), Behaviour::Panic);
    h.recorder.behaviour.lock().insert("stuck".into(), Behaviour::Hang);
    for name in ["buggy", "stuck", "fine"] {
        h.api::<ConfigMap>().create(&PostParams::default(), &config_map(name)).await.unwrap();
    }
    h.start_informers();
    let mut config = ControllerConfig::named("test");
    config.reconcile_timeout = Some(Duration::from_secs(1));
    config.metrics = Some(h.metrics.controller("test"));
    let (_stop, _task) = h.run(Controller::new(&h.config_maps, config).workers(1));

    h.recorder.wait_until(|r| r.passes_of("buggy").len() >= 3 && r.passes_of("stuck").len() >= 2).await;
    let stuck = h.recorder.passes_of("stuck");
    // The hung pass was cancelled at its 1 s timeout and retried after 5 ms of backoff.
    assert_eq!((stuck[1] - stuck[0]).as_millis(), 1005);
    // The worker survived the panics and went on with other keys.
    assert_eq!(h.recorder.passes_of("fine").len(), 1);
    let text = h.metrics.encode();
    assert!(
        text.lines()
            .any(|l| l.starts_with("controller_runtime_reconcile_panics_total{controller=\"test\"} "))
    );
    let timeouts = metric(&h.metrics, "controller_runtime_reconcile_timeouts_total{controller=\"test\"}");
    assert!(timeouts.is_some_and(|n| n >= 1.0), "timeouts counted: {timeouts:?}");
}

#[tokio::test(start_paused = true)]
async fn an_error_with_a_retry_after_hint_is_retried_no_earlier() {
    let h = Harness::start().await;
    h.start_with("throttled", Some(Behaviour::FailRetryAfter(Duration::from_secs(2)))).await;
    let (_stop, _task) = h.run(h.controller());
    h.recorder.wait_until(|r| r.passes_of("throttled").len() >= 3).await;
    let passes = h.recorder.passes_of("throttled");
    // The backoff alone would retry after 5 ms, then 10 ms.
    for pair in passes.windows(2) {
        assert!(
            pair[1] - pair[0] >= Duration::from_secs(2),
            "retried {:?} after a 2 s hint",
            pair[1] - pair[0]
        );
    }
}
