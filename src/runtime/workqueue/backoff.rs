//! Per-key exponential backoff: how long a key waits before its n-th consecutive retry.

use std::time::Duration;

/// Per-key exponential backoff: `base · factor^(failures − 1)`, capped, with optional jitter.
///
/// The defaults are client-go's (5 ms, ×2, capped at 1000 s, no jitter). With `jitter` on, each
/// delay is drawn uniformly from its upper half, which spreads keys that failed together (an
/// API-server outage) without ever retrying sooner than half the nominal delay.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackoffConfig {
    /// Delay before the first retry.
    pub base: Duration,
    /// Longest delay, however many failures.
    pub cap: Duration,
    /// Growth per consecutive failure.
    pub factor: u32,
    /// Draw each delay uniformly from `[delay / 2, delay]`.
    pub jitter: bool,
}

impl Default for BackoffConfig {
    fn default() -> Self {
        Self { base: Duration::from_millis(5), cap: Duration::from_secs(1000), factor: 2, jitter: false }
    }
}

impl BackoffConfig {
    /// The nominal (jitter-free) delay before retry number `failures` (1 for the first failure).
    /// Never overflows: any product past the cap is the cap.
    pub fn nominal_delay(&self, failures: u32) -> Duration {
        let exponent = failures.saturating_sub(1);
        self.factor
            .checked_pow(exponent)
            .and_then(|multiplier| self.base.checked_mul(multiplier))
            .map_or(self.cap, |delay| delay.min(self.cap))
    }

    /// The delay to wait before retry number `failures`, jittered if configured.
    pub fn delay(&self, failures: u32) -> Duration {
        let nominal = self.nominal_delay(failures);
        if self.jitter && !nominal.is_zero() { rand::random_range(nominal / 2..=nominal) } else { nominal }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_from_five_milliseconds_up_to_the_cap() {
        let backoff = BackoffConfig::default();
        let ms = |n| backoff.nominal_delay(n).as_millis();
        assert_eq!([ms(1), ms(2), ms(3), ms(4)], [5, 10, 20, 40]);
        assert_eq!(ms(18), 5 << 17); // 655.36 s, the last uncapped step
        assert_eq!(backoff.nominal_delay(19), Duration::from_secs(1000));
        assert_eq!(backoff.nominal_delay(u32::MAX), Duration::from_secs(1000));
    }

    #[test]
    fn jitter_stays_within_the_upper_half() {
        let backoff = BackoffConfig { jitter: true, ..BackoffConfig::default() };
        for failures in 1..30 {
            let nominal = backoff.nominal_delay(failures);
            let delay = backoff.delay(failures);
            assert!(delay <= nominal && delay >= nominal / 2, "{delay:?} vs {nominal:?}");
        }
    }
}
