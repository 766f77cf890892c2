//! Time for the queue: the one background task that fires due timers (the heap itself is in
//! `state.rs`), the queue's compact nanosecond timestamps, and a clock read at most once per
//! operation, only if the operation needs it.

use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

/// What the timer task should do after releasing due keys.
pub(crate) enum Next {
    /// Sleep until this instant (or until poked).
    At(Instant),
    /// Nothing scheduled: sleep until poked.
    Idle,
    /// The queue is shut down or gone.
    Stop,
}

/// The queue side of the timer task: release what is due, say when to come back.
pub(crate) trait TimerTarget: Send + Sync + 'static {
    fn release_due(&self) -> Next;
}

/// The single background task that turns due timers into ready keys. It holds the queue weakly,
/// so dropping the last handle ends it (the queue pokes `wake` on drop).
pub(crate) async fn run_timers<T: TimerTarget>(queue: Weak<T>, wake: Arc<Notify>) {
    loop {
        let poked = wake.notified();
        tokio::pin!(poked);
        poked.as_mut().enable();
        let next = match queue.upgrade() {
            Some(queue) => queue.release_due(),
            None => Next::Stop,
        };
        match next {
            Next::Stop => return,
            Next::Idle => poked.await,
            Next::At(at) => {
                tokio::select! {
                    () = tokio::time::sleep_until(at) => {}
                    () = &mut poked => {}
                }
            }
        }
    }
}

/// Converts between instants and the queue's compact nanosecond timestamps.
#[derive(Clone, Copy)]
pub(crate) struct Epoch(Instant);

impl Epoch {
    pub(crate) fn now() -> Self {
        Self(Instant::now())
    }

    /// Nanoseconds from the epoch to `at` (0 before it, saturating after ~584 years).
    pub(crate) fn nanos(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.0).as_nanos()).unwrap_or(u64::MAX - 1)
    }

    pub(crate) fn nanos_now(&self) -> u64 {
        self.nanos(Instant::now())
    }

    pub(crate) fn instant(&self, nanos: u64) -> Instant {
        self.0 + Duration::from_nanos(nanos)
    }
}

/// The time of one operation in queue nanoseconds, read on first use: queues without metrics
/// and without low keys never read it.
pub(crate) struct Clock<'a> {
    epoch: Option<&'a Epoch>,
    now: Option<u64>,
}

impl<'a> Clock<'a> {
    /// Reads `epoch`'s clock when first asked.
    pub(crate) fn new(epoch: &'a Epoch) -> Self {
        Self { epoch: Some(epoch), now: None }
    }

    /// Always `now`.
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
