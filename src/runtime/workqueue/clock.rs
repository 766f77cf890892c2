//! The queue's time: compact nanosecond timestamps since the queue was made (on tokio's clock,
//! so paused-clock tests drive it), and a clock read at most once per operation, only if the
//! operation needs it (queues without metrics and without low keys never read it).

use std::time::Duration;

use tokio::time::Instant;

/// Converts between instants and the queue's nanosecond timestamps.
pub(crate) struct Epoch(Instant);

impl Epoch {
    pub(crate) fn now() -> Self {
        Self(Instant::now())
    }

    /// Nanoseconds from the epoch to now (saturating after about 584 years).
    pub(crate) fn nanos_now(&self) -> u64 {
        u64::try_from(self.0.elapsed().as_nanos()).unwrap_or(u64::MAX - 1)
    }

    pub(crate) fn instant(&self, nanos: u64) -> Instant {
        self.0 + Duration::from_nanos(nanos)
    }
}

/// The time of one operation, read on first use.
pub(crate) struct Clock<'a> {
    epoch: Option<&'a Epoch>,
    now: Option<u64>,
}

impl<'a> Clock<'a> {
    pub(crate) fn new(epoch: &'a Epoch) -> Self {
        Self { epoch: Some(epoch), now: None }
    }

    /// A clock that always says `now`.
    pub(crate) fn at(now: u64) -> Self {
        Self { epoch: None, now: Some(now) }
    }

    pub(crate) fn get(&mut self) -> u64 {
        let epoch = self.epoch;
        *self.now.get_or_insert_with(|| epoch.map_or(0, Epoch::nanos_now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clock_reads_once_and_a_fixed_clock_never() {
        let epoch = Epoch::now();
        let mut clock = Clock::new(&epoch);
        let first = clock.get();
        std::thread::sleep(Duration::from_millis(2));
        assert_eq!(clock.get(), first);
        assert_eq!(Clock::at(42).get(), 42);
    }
}
