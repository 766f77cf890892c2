//! A deduplicating, delaying, rate-limited work queue of keys with priorities (client-go's
//! guarantees, and controller-runtime's priority queue without its starvation). Its design, one
//! lock around a plain state, is in docs/ARCHITECTURE.md ("Work queue").
//!
//! Semantics (each has a test in `tests/runtime/workqueue/`):
//! 1. A key is queued at most once; ready keys of one priority leave first in, first out.
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
//! 9. Any number of workers and producers at once: no key is processed by two workers at
//!    once, and every key runs after its last add.
//! 10. Keys added at [`Priority::Low`] (the controller's initial lists and resyncs) are handed
//!     out only when no normal key is ready. A normal add of a key queued low moves it to the
//!     back of the normal line; a low add of a queued key changes nothing.
//! 11. Ageing: a low key that has waited `low_priority_max_wait` (default 60 s) joins the back
//!     of the normal line, so a stream of live events never starves the backlog
//!     (controller-runtime#3496).
//! 12. A key added while processing re-runs at the highest priority it was added with; timers
//!     and retries add at normal priority (they are explicit requeues).
//! 13. `add_rate_limited_after(key, d)` is `add_rate_limited` that retries no earlier than `d`
//!     from now: a server's `Retry-After` is a floor under the backoff.

mod config;
mod notes;
mod queue;
mod state;
#[cfg(test)]
mod tests;

pub use crate::runtime::observe::introspection::{KeyPhase, KeyState};
pub use config::{BackoffConfig, BucketConfig, DEFAULT_LOW_PRIORITY_MAX_WAIT, QueueConfig, QueueMetrics};
pub use notes::{KeyNotes, NoteKey};
pub use queue::{Claim, When, WorkQueue};
pub use state::Priority;
