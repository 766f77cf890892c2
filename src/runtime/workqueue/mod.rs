//! A deduplicating, delaying, rate-limited work queue of keys (client-go's guarantees).
//!
//! Semantics (each has a test in `tests/workqueue.rs`):
//! 1. A key is queued at most once; ready keys leave first in, first out.
//! 2. A key handed out by `get` is never handed out again until its [`Claim`] is dropped; if it
//!    was added meanwhile it runs exactly once more afterwards.
//! 3. `add_after` keeps the earlier due time; a timer that fires adds the key like `add` does.
//! 4. `add_rate_limited` waits `base · 2^(failures − 1)` (5 ms … 1000 s); `forget` resets.
//! 5. A failure reported while the key's retry is still pending is not counted
//!    (kubernetes/kubernetes#132805): event-triggered runs during an outage do not inflate backoff.
//! 6. The overall bucket (10/s, burst 100) throttles retries only, never plain adds. Unlike
//!    client-go, which takes a token when a retry is *scheduled* (max of both delays), a retry
//!    takes its token when its backoff has *elapsed*: retries wait in a FIFO line for tokens, so
//!    the bucket bounds the rate of retries actually reaching workers.
//! 7. `forget` drops all of a key's state once nothing is pending for it.
//! 8. `shutdown` stops intake and timers; getters drain what is ready, then get `None`.
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
