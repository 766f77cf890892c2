//! The reflector's reconnect schedule: exponential delays with jitter between retries of a failing
//! list or watch, reset after a quiet spell (client-go's reflector numbers by default). Not the
//! work queue's per-key `workqueue::BackoffConfig`, which spaces reconcile retries.

use std::time::Duration;

use tokio::time::Instant;

/// Settings of the reconnect schedule (client-go's reflector numbers by default).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ReconnectBackoffConfig {
    /// The first delay.
    pub initial: Duration,
    /// The largest delay before jitter.
    pub max: Duration,
    /// Each failure multiplies the delay by this.
    pub factor: f64,
    /// A delay `d` becomes a random value in `[d, d × (1 + jitter))`; 0 disables jitter.
    pub jitter: f64,
    /// After this long without a failure the next delay starts from `initial` again.
    pub reset_after: Duration,
}

impl Default for ReconnectBackoffConfig {
    fn default() -> Self {
        Self {
            initial: Duration::from_millis(800),
            max: Duration::from_secs(30),
            factor: 2.0,
            jitter: 1.0,
            reset_after: Duration::from_secs(120),
        }
    }
}

/// Delays between retries of a failing request: exponential with jitter, reset after a quiet spell.
#[derive(Debug, Clone)]
pub struct ReconnectBackoff {
    config: ReconnectBackoffConfig,
    next: Duration,
    /// When the last delay handed out ends: failures measure "healthy for" from here.
    quiet_since: Option<Instant>,
}

impl ReconnectBackoff {
    /// A backoff whose first delay is `config.initial`.
    pub fn new(config: ReconnectBackoffConfig) -> Self {
        Self { config, next: config.initial, quiet_since: None }
    }

    /// The delay before the next retry, for a failure observed at `now`; `unit` (in `[0, 1)`)
    /// draws the jitter.
    pub fn next_delay(&mut self, now: Instant, unit: f64) -> Duration {
        if self
            .quiet_since
            .is_some_and(|since| now.saturating_duration_since(since) >= self.config.reset_after)
        {
            self.next = self.config.initial;
        }
        let base = self.next;
        self.next = base.mul_f64(self.config.factor).min(self.config.max);
        let delay = base.mul_f64(1.0 + self.config.jitter * unit.clamp(0.0, 1.0));
        self.quiet_since = Some(now + delay);
        delay
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(d: Duration) -> u128 {
        d.as_millis()
    }

    #[test]
    fn backoff_doubles_from_800ms_caps_at_30s_and_resets_after_two_quiet_minutes() {
        let mut b = ReconnectBackoff::new(ReconnectBackoffConfig { jitter: 0.0, ..Default::default() });
        let mut now = Instant::now();
        let mut delays = Vec::new();
        for _ in 0..8 {
            let d = b.next_delay(now, 0.5);
            delays.push(ms(d));
            now += d;
        }
        assert_eq!(delays, [800, 1600, 3200, 6400, 12800, 25600, 30000, 30000]);
        assert_eq!(
            ms(b.next_delay(now + Duration::from_secs(119), 0.0)),
            30000,
            "not yet healthy long enough"
        );
        now += Duration::from_secs(119) + Duration::from_secs(30);
        assert_eq!(ms(b.next_delay(now + Duration::from_secs(120), 0.0)), 800);
    }

    #[test]
    fn backoff_jitter_stretches_each_delay_by_up_to_its_own_length() {
        let mut b = ReconnectBackoff::new(ReconnectBackoffConfig::default());
        let now = Instant::now();
        assert_eq!(ms(b.next_delay(now, 0.0)), 800);
        assert_eq!(ms(b.next_delay(now, 0.5)), 2400);
        assert_eq!(ms(b.next_delay(now, 0.999_999)), 6399);
    }
}
