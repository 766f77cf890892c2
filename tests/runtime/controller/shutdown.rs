//! Shutdown lets the pass in flight finish and starts no new one; an aborted worker leaks nothing.

use super::*;

#[tokio::test]
async fn shutdown_lets_the_pass_in_flight_finish_and_starts_no_new_one() {
    let h = Harness::start().await;
    let (release, gate) = oneshot::channel();
    *h.recorder.gate.lock() = Some(gate);
    h.start_with("slow", Some(Behaviour::Hang)).await;
    let (stop, task) = h.run(h.controller());
    h.recorder.wait_until(|r| r.passes_of("slow").len() == 1).await;

    stop.send(()).unwrap();
    // Intake has stopped: an event for a new object after shutdown starts no pass.
    h.api::<ConfigMap>().create(&PostParams::default(), &config_map("too-late")).await.unwrap();
    tokio::task::yield_now().await;
    assert!(!task.is_finished(), "run must wait for the pass in flight");
    release.send(()).unwrap();
    task.await.unwrap();
    assert!(h.recorder.passes_of("too-late").is_empty());
}

/// The value of `controller_runtime_active_workers` for the test controller.
fn active_workers(metrics: &Metrics) -> Option<i64> {
    let prefix = "controller_runtime_active_workers{controller=\"test\"} ";
    metrics.encode().lines().find_map(|line| line.strip_prefix(prefix)?.parse().ok())
}

#[tokio::test]
async fn a_worker_aborted_mid_pass_does_not_leak_the_active_workers_gauge() {
    let h = Harness::start().await;
    h.start_with("stuck", Some(Behaviour::Hang)).await;
    let mut config = ControllerConfig::named("test");
    config.shutdown_timeout = Duration::from_millis(50);
    config.metrics = Some(h.metrics.controller("test"));
    let (stop, task) = h.run(Controller::new(&h.config_maps, config).workers(1));
    h.recorder.wait_until(|r| r.passes_of("stuck").len() == 1).await;
    assert_eq!(active_workers(&h.metrics), Some(1), "the hung pass counts as active");

    // The pass never ends: shutdown aborts its worker at the deadline.
    stop.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(30), task)
        .await
        .expect("run returns after the deadline")
        .unwrap();
    assert_eq!(active_workers(&h.metrics), Some(0));
}
