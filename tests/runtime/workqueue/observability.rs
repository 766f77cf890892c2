//! The queue's metrics and its snapshot.

use std::sync::Mutex;
use std::sync::atomic::AtomicI64;

use super::*;

/// A [`QueueMetrics`] that keeps the figures in memory.
#[derive(Debug, Default)]
struct InMemoryMetrics {
    depth: AtomicI64,
    adds: AtomicU64,
    retries: AtomicU64,
    queue_durations: Mutex<Vec<Duration>>,
    work_durations: Mutex<Vec<Duration>>,
    unfinished: Mutex<(Duration, Duration)>,
}

impl InMemoryMetrics {
    fn depth(&self) -> i64 {
        self.depth.load(Ordering::Relaxed)
    }

    fn adds(&self) -> u64 {
        self.adds.load(Ordering::Relaxed)
    }

    fn retries(&self) -> u64 {
        self.retries.load(Ordering::Relaxed)
    }

    fn queue_durations(&self) -> Vec<Duration> {
        self.queue_durations.lock().unwrap().clone()
    }

    fn work_durations(&self) -> Vec<Duration> {
        self.work_durations.lock().unwrap().clone()
    }

    fn unfinished_work(&self) -> (Duration, Duration) {
        *self.unfinished.lock().unwrap()
    }
}

impl QueueMetrics for InMemoryMetrics {
    fn depth(&self, delta: i64) {
        self.depth.fetch_add(delta, Ordering::Relaxed);
    }

    fn added(&self) {
        self.adds.fetch_add(1, Ordering::Relaxed);
    }

    fn queue_duration(&self, waited: Duration) {
        self.queue_durations.lock().unwrap().push(waited);
    }

    fn work_duration(&self, worked: Duration) {
        self.work_durations.lock().unwrap().push(worked);
    }

    fn unfinished_work(&self, total: Duration, longest: Duration) {
        *self.unfinished.lock().unwrap() = (total, longest);
    }

    fn retried(&self) {
        self.retries.fetch_add(1, Ordering::Relaxed);
    }
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
