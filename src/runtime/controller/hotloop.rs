//! Hot loops: a key whose passes keep writing (a non-deterministic child spec, a status field that
//! flips) triggers its own watch event and would run forever.
//!
//! The rule: a key whose passes each made a write that can queue it again more than `writes`
//! times within `window` (defaults: 10 in 60 s) is hot. It is reported once per window (the
//! controller logs a WARN with the objects written and counts it in
//! `controller_runtime_hot_loop_keys`), and each further such pass is held back by the queue's
//! per-key backoff (`not_before`), growing per pass, until a pass makes no such write: then the
//! key has settled and its history goes. A write to the key's own object whose echo queues
//! nothing (see `echoes`) cannot feed a loop, so it does not count: a busy cluster whose passes
//! each write only their status, each pass brought by another object's event, is not hot. Pure
//! bookkeeping: the caller passes the time.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use tokio::time::Instant;

use crate::runtime::ObjectKey;
use crate::runtime::workqueue::BackoffConfig;

/// When a key counts as hot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HotLoopConfig {
    /// Writing passes tolerated within `window`; one more makes the key hot.
    pub writes: usize,
    /// The sliding window.
    pub window: Duration,
}

impl Default for HotLoopConfig {
    fn default() -> Self {
        Self { writes: 10, window: Duration::from_secs(60) }
    }
}

/// What the controller does about a finished pass.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Not hot (or no longer: `settled` when it was hot until this pass).
    Calm {
        /// The key was hot and this pass wrote nothing.
        settled: bool,
    },
    /// Hot: the next pass may not start before `not_before`.
    Hot {
        /// Earliest start of the next pass (the per-key backoff after this many hot passes).
        not_before: Instant,
        /// First hot pass of this window: log it (with the writes) and count the key.
        report: bool,
        /// The key just became hot (the gauge goes up by one).
        new: bool,
    },
}

/// A hot key's state, for `/debug/queue`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HotState {
    /// Writing passes within the window.
    pub writing_passes: usize,
    /// Hot passes since it became hot.
    pub hot_passes: u32,
    /// Earliest start of its next pass.
    pub not_before: Instant,
}

#[derive(Default)]
struct History {
    /// When each writing pass within the window ended.
    passes: VecDeque<Instant>,
    /// Hot passes since it became hot (0: not hot).
    hot_passes: u32,
    reported_at: Option<Instant>,
    not_before: Option<Instant>,
}

/// Every key's recent writing passes.
#[derive(Default)]
pub struct HotLoops {
    config: HotLoopConfig,
    backoff: BackoffConfig,
    keys: HashMap<ObjectKey, History>,
    /// How many of `keys` are hot, kept on each change (counting them would cost a pass O(keys)).
    hot: usize,
}

impl std::fmt::Debug for HotLoops {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HotLoops").field("config", &self.config).field("keys", &self.keys.len()).finish()
    }
}

impl HotLoops {
    /// A detector with `config`, slowing hot keys by `backoff`.
    pub fn new(config: HotLoopConfig, backoff: BackoffConfig) -> Self {
        Self { config, backoff, keys: HashMap::new(), hot: 0 }
    }

    /// Records a pass of `key` that ended at `now`; `feeds_back`: it made a write that can queue
    /// the key again.
    pub fn observe(&mut self, key: &ObjectKey, now: Instant, feeds_back: bool) -> Verdict {
        if !feeds_back {
            let settled = self.remove(key);
            return Verdict::Calm { settled };
        }
        let window = self.config.window;
        let history = self.keys.entry(key.clone()).or_default();
        while history.passes.front().is_some_and(|&at| now.saturating_duration_since(at) >= window) {
            history.passes.pop_front();
        }
        history.passes.push_back(now);
        if history.passes.len() <= self.config.writes {
            let settled = history.hot_passes > 0;
            history.hot_passes = 0;
            history.not_before = None;
            self.hot -= usize::from(settled);
            return Verdict::Calm { settled };
        }
        let new = history.hot_passes == 0;
        self.hot += usize::from(new);
        history.hot_passes = history.hot_passes.saturating_add(1);
        let report = history.reported_at.is_none_or(|at| now.saturating_duration_since(at) >= window);
        if report {
            history.reported_at = Some(now);
        }
        let not_before = now + self.backoff.nominal_delay(history.hot_passes);
        history.not_before = Some(not_before);
        Verdict::Hot { not_before, report, new }
    }

    /// When the next pass of `key` may start, if it is held back.
    pub fn not_before(&self, key: &ObjectKey) -> Option<Instant> {
        self.keys.get(key).and_then(|h| h.not_before)
    }

    /// Keys hot now.
    pub fn hot_keys(&self) -> usize {
        self.hot
    }

    /// `key`'s state if it is hot.
    pub fn state(&self, key: &ObjectKey) -> Option<HotState> {
        let history = self.keys.get(key).filter(|h| h.hot_passes > 0)?;
        Some(HotState {
            writing_passes: history.passes.len(),
            hot_passes: history.hot_passes,
            not_before: history.not_before?,
        })
    }

    /// Forgets `key` (its object is gone, or its pass wrote nothing); true if it was hot.
    pub fn remove(&mut self, key: &ObjectKey) -> bool {
        let was_hot = self.keys.remove(key).is_some_and(|h| h.hot_passes > 0);
        self.hot -= usize::from(was_hot);
        was_hot
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_eleventh_writing_pass_in_a_minute_is_hot_and_reported_once_per_window() {
        let mut loops = HotLoops::new(HotLoopConfig::default(), BackoffConfig::default());
        let key = ObjectKey::namespaced("prod", "pg");
        let start = Instant::now();
        let at = |s: u64| start + Duration::from_secs(s);
        for n in 0..10 {
            assert_eq!(loops.observe(&key, at(n), true), Verdict::Calm { settled: false });
        }
        let verdict = loops.observe(&key, at(10), true);
        let delay = |n| BackoffConfig::default().nominal_delay(n);
        assert_eq!(verdict, Verdict::Hot { not_before: at(10) + delay(1), report: true, new: true });
        assert_eq!(loops.hot_keys(), 1);
        let verdict = loops.observe(&key, at(11), true);
        assert_eq!(verdict, Verdict::Hot { not_before: at(11) + delay(2), report: false, new: false });
        // A window after the report it is reported again.
        for s in 12..70 {
            loops.observe(&key, at(s), true);
        }
        assert!(matches!(loops.observe(&key, at(70), true), Verdict::Hot { report: true, .. }));
        // A pass that writes nothing settles it.
        assert_eq!(loops.observe(&key, at(71), false), Verdict::Calm { settled: true });
        assert_eq!((loops.hot_keys(), loops.not_before(&key)), (0, None));
    }

    #[tokio::test(start_paused = true)]
    async fn the_hot_count_follows_keys_that_get_hot_settle_and_go() {
        let mut loops = HotLoops::new(HotLoopConfig::default(), BackoffConfig::default());
        let (a, b) = (ObjectKey::namespaced("prod", "a"), ObjectKey::namespaced("prod", "b"));
        let start = Instant::now();
        for n in 0..11 {
            loops.observe(&a, start + Duration::from_secs(n), true);
            loops.observe(&b, start + Duration::from_secs(n), true);
        }
        assert_eq!(loops.hot_keys(), 2);
        assert!(loops.remove(&a), "a was hot");
        assert_eq!(loops.hot_keys(), 1);
        assert!(!loops.remove(&a), "a is gone");
        // A writing pass after the window has passed: calm again, and no longer counted.
        assert_eq!(
            loops.observe(&b, start + Duration::from_secs(200), true),
            Verdict::Calm { settled: true }
        );
        assert_eq!(loops.hot_keys(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn writing_passes_spread_wider_than_the_window_never_get_hot() {
        let mut loops = HotLoops::new(HotLoopConfig::default(), BackoffConfig::default());
        let key = ObjectKey::namespaced("prod", "pg");
        let start = Instant::now();
        for n in 0..100 {
            let verdict = loops.observe(&key, start + Duration::from_secs(7 * n), true);
            assert_eq!(verdict, Verdict::Calm { settled: false });
        }
    }
}
