//! A deduplicating, delaying, rate-limited work queue of keys (client-go's guarantees).
//!
//! - `queue.rs`: the [`WorkQueue`] handle, [`QueueConfig`] and the [`Claim`] guard.
//! - `state.rs`: the state behind the queue's single lock: a slab of per-key slots (one hash per
//!   operation, none to hand out or finish a key), the ready FIFO, the processing list.
//! - `delay.rs`: the timer heap and the one background task that fires it.
//! - `backoff.rs`: per-key exponential backoff; `bucket.rs`: the overall retry budget (governor,
//!   on tokio's clock).
//! - `metrics.rs`: the [`QueueMetrics`] hooks and an in-memory implementation.
//!
//! Waking: each key that becomes ready wakes at most one parked getter (a counted
//! `tokio::sync::Notify` permit), so an add costs the same with one waiting worker or a thousand.

mod backoff;
mod bucket;
mod delay;
mod metrics;
mod queue;
mod state;

pub use backoff::BackoffConfig;
pub use bucket::{BucketConfig, TokioClock, TokioInstant};
pub use metrics::{InMemoryMetrics, QueueMetrics};
pub use queue::{Claim, KeyPhase, KeyState, QueueConfig, WorkQueue};
