//! Prometheus metrics for the runtime, under controller-runtime's names, so that the dashboards and
//! alerts written for Go operators work unchanged.
//!
//! One [`Metrics`] registry per process. Queues and controllers take pre-resolved handles from it
//! ([`Metrics::queue`], [`Metrics::controller`]): recording a figure is then one atomic operation,
//! with no label lookup on the hot path.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::runtime::controller::PassResult;
use crate::runtime::workqueue::QueueMetrics;

type Labels = Vec<(&'static str, String)>;
type HistogramFamily = Family<Labels, Histogram, fn() -> Histogram>;
type SecondsGauge = Gauge<f64, std::sync::atomic::AtomicU64>;

/// Workqueue durations span nanoseconds to minutes: controller-runtime's buckets, 10 ns × 10ⁿ.
fn queue_histogram() -> Histogram {
    Histogram::new(exponential_buckets(10e-9, 10.0, 12))
}

/// Reconcile durations: controller-runtime's buckets, 5 ms to 60 s.
fn reconcile_histogram() -> Histogram {
    Histogram::new([
        0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0,
        1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 15.0, 20.0, 25.0, 30.0,
        40.0, 50.0, 60.0,
    ])
}

struct WorkqueueFamilies {
    depth: Family<Labels, Gauge>,
    adds: Family<Labels, Counter>,
    retries: Family<Labels, Counter>,
    queue_duration: HistogramFamily,
    work_duration: HistogramFamily,
    unfinished_work: Family<Labels, SecondsGauge>,
    longest_running: Family<Labels, SecondsGauge>,
}

struct ControllerFamilies {
    total: Family<Labels, Counter>,
    errors: Family<Labels, Counter>,
    terminal_errors: Family<Labels, Counter>,
    panics: Family<Labels, Counter>,
    timeouts: Family<Labels, Counter>,
    stale_waits: Family<Labels, Counter>,
    stale_wait_timeouts: Family<Labels, Counter>,
    stale_wait_time: HistogramFamily,
    hot_loop_keys: Family<Labels, Gauge>,
    time: HistogramFamily,
    active_workers: Family<Labels, Gauge>,
    max_concurrent: Family<Labels, Gauge>,
}

impl WorkqueueFamilies {
    /// Registers the families under client-go's names and help texts.
    fn register(&self, r: &mut Registry) {
        let w = self;
        r.register("workqueue_depth", "Current depth of workqueue", w.depth.clone());
        r.register("workqueue_adds", "Total number of adds handled by workqueue", w.adds.clone());
        r.register("workqueue_retries", "Total number of retries handled by workqueue", w.retries.clone());
        r.register(
            "workqueue_queue_duration_seconds",
            "How long in seconds an item stays in workqueue before being requested",
            w.queue_duration.clone(),
        );
        r.register(
            "workqueue_work_duration_seconds",
            "How long in seconds processing an item from workqueue takes",
            w.work_duration.clone(),
        );
        r.register(
            "workqueue_unfinished_work_seconds",
            "How many seconds of work has been done that is in progress and hasn't been observed by work_duration",
            w.unfinished_work.clone(),
        );
        r.register(
            "workqueue_longest_running_processor_seconds",
            "How many seconds has the longest running processor for workqueue been running",
            w.longest_running.clone(),
        );
    }
}

impl ControllerFamilies {
    /// Registers the families under controller-runtime's names and help texts.
    fn register(&self, r: &mut Registry) {
        let c = self;
        r.register(
            "controller_runtime_reconcile",
            "Total number of reconciliations per controller",
            c.total.clone(),
        );
        r.register(
            "controller_runtime_reconcile_errors",
            "Total number of reconciliation errors per controller",
            c.errors.clone(),
        );
        r.register(
            "controller_runtime_terminal_reconcile_errors",
            "Total number of terminal reconciliation errors per controller",
            c.terminal_errors.clone(),
        );
        r.register(
            "controller_runtime_reconcile_panics",
            "Total number of reconciliation panics per controller",
            c.panics.clone(),
        );
        r.register(
            "controller_runtime_reconcile_timeouts",
            "Total number of reconciliation timeouts per controller",
            c.timeouts.clone(),
        );
        r.register(
            "controller_runtime_stale_cache_waits",
            "Passes that first waited for the caches to deliver the previous pass's writes",
            c.stale_waits.clone(),
        );
        r.register(
            "controller_runtime_stale_cache_wait_timeouts",
            "Waits for the caches to deliver a pass's writes that ended at their bound",
            c.stale_wait_timeouts.clone(),
        );
        r.register(
            "controller_runtime_stale_cache_wait_seconds",
            "How long passes waited for the caches to deliver the previous pass's writes",
            c.stale_wait_time.clone(),
        );
        r.register(
            "controller_runtime_hot_loop_keys",
            "Keys whose passes keep writing (hot loops), slowed by the per-key backoff",
            c.hot_loop_keys.clone(),
        );
        r.register(
            "controller_runtime_reconcile_time_seconds",
            "Length of time per reconciliation per controller",
            c.time.clone(),
        );
        r.register(
            "controller_runtime_active_workers",
            "Number of currently used workers per controller",
            c.active_workers.clone(),
        );
        r.register(
            "controller_runtime_max_concurrent_reconciles",
            "Maximum number of concurrent reconciles per controller",
            c.max_concurrent.clone(),
        );
    }
}

/// The process's metrics registry: every queue's and controller's figures, encoded on demand.
pub struct Metrics {
    registry: Mutex<Registry>,
    workqueue: WorkqueueFamilies,
    controller: ControllerFamilies,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// A registry holding the workqueue and reconcile metric families.
    pub fn new() -> Self {
        let workqueue = WorkqueueFamilies {
            depth: Family::default(),
            adds: Family::default(),
            retries: Family::default(),
            queue_duration: Family::new_with_constructor(queue_histogram),
            work_duration: Family::new_with_constructor(queue_histogram),
            unfinished_work: Family::default(),
            longest_running: Family::default(),
        };
        let controller = ControllerFamilies {
            total: Family::default(),
            errors: Family::default(),
            terminal_errors: Family::default(),
            panics: Family::default(),
            timeouts: Family::default(),
            stale_waits: Family::default(),
            stale_wait_timeouts: Family::default(),
            stale_wait_time: Family::new_with_constructor(reconcile_histogram),
            hot_loop_keys: Family::default(),
            time: Family::new_with_constructor(reconcile_histogram),
            active_workers: Family::default(),
            max_concurrent: Family::default(),
        };
        let mut registry = Registry::default();
        workqueue.register(&mut registry);
        controller.register(&mut registry);
        Self { registry: Mutex::new(registry), workqueue, controller }
    }

    /// Lets other parts of the process (the informers, the process collector) add their metrics.
    pub fn with_registry<T>(&self, f: impl FnOnce(&mut Registry) -> T) -> T {
        f(&mut self.registry.lock())
    }

    /// The workqueue metrics of the queue called `name`, ready to hand to `QueueConfig`. Labelled
    /// `name` and `controller` (both the queue's name), as controller-runtime labels them.
    pub fn queue(&self, name: &str) -> Arc<dyn QueueMetrics> {
        let labels: Labels = vec![("name", name.to_string()), ("controller", name.to_string())];
        let w = &self.workqueue;
        Arc::new(PrometheusQueueMetrics {
            depth: w.depth.get_or_create_owned(&labels),
            adds: w.adds.get_or_create_owned(&labels),
            retries: w.retries.get_or_create_owned(&labels),
            queue_duration: w.queue_duration.get_or_create_owned(&labels),
            work_duration: w.work_duration.get_or_create_owned(&labels),
            unfinished_work: w.unfinished_work.get_or_create_owned(&labels),
            longest_running: w.longest_running.get_or_create_owned(&labels),
        })
    }

    /// The reconcile metrics of the controller called `name`.
    pub fn controller(&self, name: &str) -> ControllerMetrics {
        let c = &self.controller;
        let labels: Labels = vec![("controller", name.to_string())];
        let result = |r: &str| {
            let mut l = labels.clone();
            l.push(("result", r.to_string()));
            c.total.get_or_create_owned(&l)
        };
        ControllerMetrics {
            success: result("success"),
            error: result("error"),
            requeue_after: result("requeue_after"),
            errors: c.errors.get_or_create_owned(&labels),
            terminal_errors: c.terminal_errors.get_or_create_owned(&labels),
            panics: c.panics.get_or_create_owned(&labels),
            timeouts: c.timeouts.get_or_create_owned(&labels),
            stale_waits: c.stale_waits.get_or_create_owned(&labels),
            stale_wait_timeouts: c.stale_wait_timeouts.get_or_create_owned(&labels),
            stale_wait_time: c.stale_wait_time.get_or_create_owned(&labels),
            hot_loop_keys: c.hot_loop_keys.get_or_create_owned(&labels),
            time: c.time.get_or_create_owned(&labels),
            active_workers: c.active_workers.get_or_create_owned(&labels),
            max_concurrent: c.max_concurrent.get_or_create_owned(&labels),
        }
    }

    /// Every metric in the Prometheus text exposition format.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = encode(&mut out, &self.registry.lock());
        out
    }
}

/// A [`QueueMetrics`] that records into the registry's `workqueue_*` families.
struct PrometheusQueueMetrics {
    depth: Gauge,
    adds: Counter,
    retries: Counter,
    queue_duration: Histogram,
    work_duration: Histogram,
    unfinished_work: SecondsGauge,
    longest_running: SecondsGauge,
}

impl QueueMetrics for PrometheusQueueMetrics {
    fn depth(&self, delta: i64) {
        self.depth.inc_by(delta);
    }

    fn added(&self) {
        self.adds.inc();
    }

    fn queue_duration(&self, waited: Duration) {
        self.queue_duration.observe(waited.as_secs_f64());
    }

    fn work_duration(&self, worked: Duration) {
        self.work_duration.observe(worked.as_secs_f64());
    }

    fn unfinished_work(&self, total: Duration, longest: Duration) {
        self.unfinished_work.set(total.as_secs_f64());
        self.longest_running.set(longest.as_secs_f64());
    }

    fn retried(&self) {
        self.retries.inc();
    }
}

/// One controller's reconcile metrics (`controller_runtime_*`), resolved once.
#[derive(Debug, Clone)]
pub struct ControllerMetrics {
    success: Counter,
    error: Counter,
    requeue_after: Counter,
    errors: Counter,
    terminal_errors: Counter,
    panics: Counter,
    timeouts: Counter,
    stale_waits: Counter,
    stale_wait_timeouts: Counter,
    stale_wait_time: Histogram,
    hot_loop_keys: Gauge,
    time: Histogram,
    active_workers: Gauge,
    max_concurrent: Gauge,
}

impl ControllerMetrics {
    /// A pass first waited `waited` for the caches to deliver the previous pass's writes
    /// (`timed_out`: it gave up at the bound).
    pub fn stale_cache_wait(&self, waited: Duration, timed_out: bool) {
        self.stale_waits.inc();
        self.stale_wait_time.observe(waited.as_secs_f64());
        if timed_out {
            self.stale_wait_timeouts.inc();
        }
    }

    /// The number of keys in a hot loop now.
    pub fn set_hot_loop_keys(&self, keys: usize) {
        self.hot_loop_keys.set(keys as i64);
    }

    /// Records one finished pass and how long it took.
    pub fn pass(&self, result: PassResult, took: Duration) {
        self.time.observe(took.as_secs_f64());
        match result {
            PassResult::Success => self.success.inc(),
            PassResult::RequeueAfter => self.requeue_after.inc(),
            PassResult::Error | PassResult::TerminalError | PassResult::Panic | PassResult::Timeout => {
                self.error.inc();
                self.errors.inc();
                match result {
                    PassResult::TerminalError => self.terminal_errors.inc(),
                    PassResult::Panic => self.panics.inc(),
                    PassResult::Timeout => self.timeouts.inc(),
                    _ => 0,
                }
            }
        };
    }

    /// Counts a worker as busy (`controller_runtime_active_workers`) until the returned guard is
    /// dropped: a pass that is cancelled or aborted drops it too, so the gauge cannot leak.
    pub fn active_worker(&self) -> ActiveWorker {
        self.active_workers.inc();
        ActiveWorker { gauge: self.active_workers.clone() }
    }

    /// Records the number of workers the controller runs.
    pub fn set_max_concurrent(&self, workers: usize) {
        self.max_concurrent.set(workers as i64);
    }
}

/// One busy worker, counted in `controller_runtime_active_workers` while this lives (see
/// [`ControllerMetrics::active_worker`]); like the work queue's `Claim`, dropping is releasing.
#[derive(Debug)]
pub struct ActiveWorker {
    gauge: Gauge,
}

impl Drop for ActiveWorker {
    fn drop(&mut self) {
        self.gauge.dec();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_appear_under_controller_runtime_names() {
        let metrics = Metrics::new();
        let queue = metrics.queue("databasecluster");
        queue.added();
        queue.added();
        queue.depth(2);
        queue.retried();
        queue.queue_duration(Duration::from_millis(3));
        queue.unfinished_work(Duration::from_secs(3), Duration::from_secs(2));
        let controller = metrics.controller("databasecluster");
        controller.set_max_concurrent(4);
        controller.pass(PassResult::Success, Duration::from_millis(20));
        controller.pass(PassResult::TerminalError, Duration::from_millis(20));
        controller.pass(PassResult::Timeout, Duration::from_secs(2));
        controller.pass(PassResult::Panic, Duration::from_millis(1));
        let busy = controller.active_worker();
        let done = controller.active_worker();
        drop(done);

        let text = metrics.encode();
        for line in [
            "workqueue_adds_total{name=\"databasecluster\",controller=\"databasecluster\"} 2",
            "workqueue_depth{name=\"databasecluster\",controller=\"databasecluster\"} 2",
            "workqueue_retries_total{name=\"databasecluster\",controller=\"databasecluster\"} 1",
            "workqueue_queue_duration_seconds_count{name=\"databasecluster\",controller=\"databasecluster\"} 1",
            "workqueue_unfinished_work_seconds{name=\"databasecluster\",controller=\"databasecluster\"} 3.0",
            "workqueue_longest_running_processor_seconds{name=\"databasecluster\",controller=\"databasecluster\"} 2.0",
            "controller_runtime_reconcile_total{controller=\"databasecluster\",result=\"success\"} 1",
            "controller_runtime_reconcile_total{controller=\"databasecluster\",result=\"error\"} 3",
            "controller_runtime_reconcile_errors_total{controller=\"databasecluster\"} 3",
            "controller_runtime_terminal_reconcile_errors_total{controller=\"databasecluster\"} 1",
            "controller_runtime_reconcile_timeouts_total{controller=\"databasecluster\"} 1",
            "controller_runtime_reconcile_panics_total{controller=\"databasecluster\"} 1",
            "controller_runtime_reconcile_time_seconds_count{controller=\"databasecluster\"} 4",
            "controller_runtime_active_workers{controller=\"databasecluster\"} 1",
            "controller_runtime_max_concurrent_reconciles{controller=\"databasecluster\"} 4",
        ] {
            assert!(text.lines().any(|l| l == line), "missing {line:?} in\n{text}");
        }
        drop(busy);
        assert!(
            metrics
                .encode()
                .lines()
                .any(|l| l == "controller_runtime_active_workers{controller=\"databasecluster\"} 0")
        );
    }

    /// The `le` bounds of histogram `name`'s first series, in order.
    fn bucket_bounds(text: &str, name: &str) -> Vec<f64> {
        let prefix = format!("{name}_bucket{{");
        let mut bounds = Vec::new();
        for line in text.lines().filter(|l| l.starts_with(&prefix)) {
            let le = line.split("le=\"").nth(1).and_then(|rest| rest.split('"').next()).unwrap();
            if le == "+Inf" {
                break;
            }
            bounds.push(le.parse::<f64>().unwrap());
        }
        bounds
    }

    #[test]
    fn histograms_use_controller_runtimes_buckets() {
        let metrics = Metrics::new();
        let queue = metrics.queue("q");
        queue.queue_duration(Duration::from_millis(1));
        queue.work_duration(Duration::from_millis(1));
        metrics.controller("c").pass(PassResult::Success, Duration::from_millis(1));
        let text = metrics.encode();
        // client-go / controller-runtime: prometheus.ExponentialBuckets(10e-9, 10, 12).
        let queue_buckets: Vec<f64> = (0..12).map(|i| 10e-9 * 10f64.powi(i)).collect();
        for name in ["workqueue_queue_duration_seconds", "workqueue_work_duration_seconds"] {
            let bounds = bucket_bounds(&text, name);
            assert_eq!(bounds.len(), queue_buckets.len(), "{name}: {bounds:?}");
            for (got, want) in bounds.iter().zip(&queue_buckets) {
                assert!((got / want - 1.0).abs() < 1e-9, "{name}: {got} vs {want}");
            }
        }
        let reconcile = [
            0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9,
            1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 15.0, 20.0,
            25.0, 30.0, 40.0, 50.0, 60.0,
        ];
        assert_eq!(bucket_bounds(&text, "controller_runtime_reconcile_time_seconds"), reconcile);
    }
}
