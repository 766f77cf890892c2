//! What a [`WorkQueue`](super::WorkQueue) is made with: its backoff (rule 4), its retry budget
//! (rule 6) and the hooks its metrics go to.

use std::{fmt, num::NonZeroU32, sync::Arc, time::Duration};

/// How a queue behaves: its name, the per-key backoff, the overall retry budget, how long a
/// low-priority key may wait, and where metrics go.
#[derive(Clone, Debug)]
pub struct QueueConfig {
    /// The queue's name, the `name` label of its metrics.
    pub name: String,
    /// Per-key exponential backoff used by `add_rate_limited`.
    pub backoff: BackoffConfig,
    /// Overall budget for retries (`add_rate_limited`); `None` releases retries unthrottled.
    pub retry_bucket: Option<BucketConfig>,
    /// Where the workqueue metrics go; `None` also skips the clock reads they need.
    pub metrics: Option<Arc<dyn QueueMetrics>>,
    /// How long a low-priority key waits at most before it joins the normal line (rule 11).
    pub low_priority_max_wait: Duration,
}

/// The default `low_priority_max_wait`: far longer than a restart's backlog usually takes to
/// drain, short enough that no key is put off for long.
pub const DEFAULT_LOW_PRIORITY_MAX_WAIT: Duration = Duration::from_secs(60);

impl Default for QueueConfig {
    fn default() -> Self {
        Self {
            name: "workqueue".to_string(),
            backoff: BackoffConfig::default(),
            retry_bucket: Some(BucketConfig::default()),
            metrics: None,
            low_priority_max_wait: DEFAULT_LOW_PRIORITY_MAX_WAIT,
        }
    }
}

impl QueueConfig {
    /// The default configuration under another name.
    pub fn named(name: impl Into<String>) -> Self {
        Self { name: name.into(), ..Self::default() }
    }

    /// This configuration, reporting to `metrics`.
    pub fn with_metrics(self, metrics: Arc<dyn QueueMetrics>) -> Self {
        Self { metrics: Some(metrics), ..self }
    }
}

/// Receives one queue's metrics, controller-runtime's seven `workqueue_*` figures. Called outside
/// the queue's lock, from several threads at once: each method must be cheap.
pub trait QueueMetrics: Send + Sync + 'static {
    /// `workqueue_depth`: the number of ready keys changed by `delta`.
    fn depth(&self, delta: i64);
    /// `workqueue_adds_total`: a key was queued, or marked to run again after its claim.
    fn added(&self);
    /// `workqueue_queue_duration_seconds`: a key waited this long from its add to `get`.
    fn queue_duration(&self, waited: Duration);
    /// `workqueue_work_duration_seconds`: a key was held this long by its claim.
    fn work_duration(&self, worked: Duration);
    /// Every 500 ms: the summed and the longest age of the outstanding claims
    /// (`workqueue_unfinished_work_seconds`, `workqueue_longest_running_processor_seconds`).
    fn unfinished_work(&self, total: Duration, longest: Duration);
    /// `workqueue_retries_total`: a failure was reported with `add_rate_limited`.
    fn retried(&self);
}

impl fmt::Debug for dyn QueueMetrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("QueueMetrics")
    }
}

/// Per-key backoff, `base · factor^(failures − 1)` capped; client-go's defaults (5 ms, ×2,
/// 1000 s). Jitter spreads keys that failed together (an outage), never below half the delay.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackoffConfig {
    /// Delay before the first retry.
    pub base: Duration,
    /// Longest delay, however many failures.
    pub cap: Duration,
    /// Growth per consecutive failure.
    pub factor: u32,
    /// Draw each delay uniformly from `[delay / 2, delay]`.
    pub jitter: bool,
}

impl Default for BackoffConfig {
    fn default() -> Self {
        Self { base: Duration::from_millis(5), cap: Duration::from_secs(1000), factor: 2, jitter: false }
    }
}

impl BackoffConfig {
    /// The jitter-free delay before retry number `failures` (from 1); past the cap, the cap.
    pub fn nominal_delay(&self, failures: u32) -> Duration {
        let multiplier = self.factor.checked_pow(failures.saturating_sub(1));
        let delay = multiplier.and_then(|multiplier| self.base.checked_mul(multiplier));
        delay.map_or(self.cap, |delay| delay.min(self.cap))
    }

    /// The delay before retry number `failures`, jittered if configured.
    pub fn delay(&self, failures: u32) -> Duration {
        let nominal = self.nominal_delay(failures);
        if self.jitter && !nominal.is_zero() { rand::random_range(nominal / 2..=nominal) } else { nominal }
    }
}

/// The retry budget shared by all keys of one queue: a sustained rate and a burst.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BucketConfig {
    /// Retries released per second once the burst is spent.
    pub per_second: NonZeroU32,
    /// Retries that may be released at once.
    pub burst: NonZeroU32,
}

impl Default for BucketConfig {
    /// client-go's default: 10 retries per second, burst 100.
    fn default() -> Self {
        let (per_second, burst) = (NonZeroU32::new(10), NonZeroU32::new(100));
        Self { per_second: per_second.unwrap_or(NonZeroU32::MIN), burst: burst.unwrap_or(NonZeroU32::MIN) }
    }
}

/// The bucket as a GCRA (the generic cell rate algorithm) on the queue's nanosecond clock: `tat`
/// is when the bucket is full again; a token may be taken while that is at most a burst ahead.
pub(crate) struct RetryBucket {
    interval: u64,
    tolerance: u64,
    tat: u64,
}

impl RetryBucket {
    pub(crate) fn new(config: &BucketConfig) -> Self {
        let interval = (1_000_000_000 / u64::from(config.per_second.get())).max(1);
        Self { interval, tolerance: interval * u64::from(config.burst.get()), tat: 0 }
    }

    /// Takes one token at `now`, or says when the next one can be taken.
    pub(crate) fn try_take(&mut self, now: u64) -> Result<(), u64> {
        let tat = self.tat.max(now).saturating_add(self.interval);
        let earliest = tat.saturating_sub(self.tolerance);
        if earliest > now {
            return Err(earliest);
        }
        self.tat = tat;
        Ok(())
    }
}
