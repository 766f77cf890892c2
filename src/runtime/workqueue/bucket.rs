//! The overall retry budget: a governor token bucket shared by every key, on tokio's clock.
//!
//! client-go reserves a token when a retry is *scheduled* (so a retry due in ten minutes spends a
//! token now). Here the bucket is consulted when a retry becomes *due*: keys whose backoff has
//! elapsed line up in a FIFO and are released as tokens arrive, so the bucket bounds the rate at
//! which retries actually reach the workers.

use std::num::NonZeroU32;
use std::ops::Add;

use governor::clock::{Clock, Reference};
use governor::middleware::NoOpMiddleware;
use governor::nanos::Nanos;
use governor::state::{InMemoryState, NotKeyed};
use governor::{Quota, RateLimiter};
use tokio::time::Instant;

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
        Self {
            per_second: NonZeroU32::new(10).unwrap_or(NonZeroU32::MIN),
            burst: NonZeroU32::new(100).unwrap_or(NonZeroU32::MIN),
        }
    }
}

/// A point in time on tokio's clock, as governor needs it (so paused-clock tests drive the bucket).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct TokioInstant(pub Instant);

impl Add<Nanos> for TokioInstant {
    type Output = Self;

    fn add(self, nanos: Nanos) -> Self {
        Self(self.0 + std::time::Duration::from(nanos))
    }
}

impl Reference for TokioInstant {
    fn duration_since(&self, earlier: Self) -> Nanos {
        self.0.saturating_duration_since(earlier.0).into()
    }

    fn saturating_sub(&self, duration: Nanos) -> Self {
        self.0.checked_sub(duration.into()).map_or(*self, Self)
    }
}

/// governor's view of `tokio::time::Instant::now()`.
#[derive(Clone, Copy, Debug, Default)]
pub struct TokioClock;

impl Clock for TokioClock {
    type Instant = TokioInstant;

    fn now(&self) -> TokioInstant {
        TokioInstant(Instant::now())
    }
}

/// The token bucket itself.
pub(crate) struct RetryBucket {
    limiter: RateLimiter<NotKeyed, InMemoryState, TokioClock, NoOpMiddleware<TokioInstant>>,
}

impl RetryBucket {
    pub(crate) fn new(config: &BucketConfig) -> Self {
        let quota = Quota::per_second(config.per_second).allow_burst(config.burst);
        Self { limiter: RateLimiter::direct_with_clock(quota, TokioClock) }
    }

    /// Takes one token, or says when the next one can be taken.
    pub(crate) fn try_take(&self) -> Result<(), Instant> {
        self.limiter.check().map_err(|not_until| not_until.earliest_possible().0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn follows_the_paused_tokio_clock() {
        let config =
            BucketConfig { per_second: NonZeroU32::new(10).unwrap(), burst: NonZeroU32::new(2).unwrap() };
        let bucket = RetryBucket::new(&config);
        assert!(bucket.try_take().is_ok() && bucket.try_take().is_ok());
        let next = bucket.try_take().unwrap_err();
        assert_eq!(next - Instant::now(), Duration::from_millis(100));
        tokio::time::advance(Duration::from_millis(100)).await;
        assert!(bucket.try_take().is_ok());
    }
}
