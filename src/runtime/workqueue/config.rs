//! What a [`WorkQueue`](super::WorkQueue) is made with ([`QueueConfig`]) and what its
//! `snapshot` reports per key ([`KeyState`]).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::backoff::BackoffConfig;
use super::bucket::BucketConfig;
use super::metrics::QueueMetrics;
#[cfg(doc)]
use super::{Priority, WorkQueue};

/// How a [`WorkQueue`] behaves: its name (for metrics), the per-key backoff, the overall retry
/// budget, how long a low-priority key may wait, and where metrics go.
#[derive(Clone)]
pub struct QueueConfig {
    /// The queue's name, the `name` label of its metrics.
    pub name: String,
    /// Per-key exponential backoff used by `add_rate_limited`.
    pub backoff: BackoffConfig,
    /// Overall budget for retries (`add_rate_limited`); `None` releases retries unthrottled.
    pub retry_bucket: Option<BucketConfig>,
    /// Where the workqueue metrics go; `None` also skips the clock reads they need.
    pub metrics: Option<Arc<dyn QueueMetrics>>,
    /// How long a [`Priority::Low`] key waits at most before it joins the normal line (ageing, so
    /// the initial backlog is never starved by a steady stream of live events).
    pub low_priority_max_wait: Duration,
}

/// The default [`QueueConfig::low_priority_max_wait`]: a minute, far longer than a restart's
/// backlog usually takes to drain, short enough that no key is put off for long.
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

impl fmt::Debug for QueueConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QueueConfig")
            .field("name", &self.name)
            .field("backoff", &self.backoff)
            .field("retry_bucket", &self.retry_bucket)
            .field("metrics", &self.metrics.is_some())
            .field("low_priority_max_wait", &self.low_priority_max_wait)
            .finish()
    }
}

/// Where a key stands, as `snapshot` reports it (for `/debug/queue`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeyPhase {
    /// Ready, waiting for a worker.
    Queued {
        /// When it was added (known when the queue reports metrics).
        since: Option<Instant>,
    },
    /// Handed out to a worker.
    Processing {
        /// When it was handed out (known when the queue reports metrics).
        since: Option<Instant>,
        /// Added meanwhile: it runs once more after the claim is dropped.
        again: bool,
    },
    /// Waiting for its timer.
    Waiting {
        /// When the timer fires.
        until: Instant,
    },
    /// Its retry is due and waits for a token of the overall retry budget.
    WaitingForRetryBudget,
    /// Nothing pending; only its failure count is kept (until `forget`).
    Idle,
}

/// One tracked key in a `snapshot`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyState<K> {
    /// The key.
    pub key: K,
    /// Where it stands.
    pub phase: KeyPhase,
    /// A pending timer, also when the key is queued or processing meanwhile.
    pub timer: Option<Instant>,
    /// Failures since the last `forget` (`num_requeues`).
    pub requeues: u32,
    /// Queued (or due back after its claim) at [`Priority::Low`].
    pub low_priority: bool,
}
