//! Timers for delayed keys: one min-heap of due times, driven by one background task.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

/// Delayed keys ordered by due time (nanoseconds since the queue's epoch).
///
/// Entries are never removed early: when a key's due time moves earlier, a new entry is pushed
/// and the old one is recognised as stale when it surfaces (its due time no longer matches the
/// key's). A key's due time only ever moves earlier, so stale entries are bounded by the number
/// of `add_after` calls that shortened a wait, and each is popped by the time it would have fired.
#[derive(Default)]
pub(crate) struct TimerHeap {
    heap: BinaryHeap<Reverse<(u64, u32)>>,
}

impl TimerHeap {
    /// Registers `slot` as due at `due`; returns true when this is now the earliest timer.
    pub(crate) fn push(&mut self, due: u64, slot: u32) -> bool {
        let earliest = self.next_due().is_none_or(|next| due < next);
        self.heap.push(Reverse((due, slot)));
        earliest
    }

    /// The earliest due time, stale or not.
    pub(crate) fn next_due(&self) -> Option<u64> {
        self.heap.peek().map(|Reverse((due, _))| *due)
    }

    /// Removes and returns the earliest entry if it is due at `now`.
    pub(crate) fn pop_due(&mut self, now: u64) -> Option<(u64, u32)> {
        match self.heap.peek() {
            Some(Reverse((due, _))) if *due <= now => self.heap.pop().map(|Reverse(entry)| entry),
            _ => None,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.heap.len()
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pops_in_due_order_and_only_when_due() {
        let mut heap = TimerHeap::default();
        assert!(heap.push(30, 1));
        assert!(heap.push(10, 2));
        assert!(!heap.push(20, 3));
        assert_eq!(heap.pop_due(5), None);
        assert_eq!(heap.pop_due(25), Some((10, 2)));
        assert_eq!(heap.pop_due(25), Some((20, 3)));
        assert_eq!(heap.pop_due(25), None);
        assert_eq!(heap.next_due(), Some(30));
    }
}
