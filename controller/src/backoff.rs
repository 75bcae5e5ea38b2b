//! Bounded exponential backoff, the one retry policy of the controller: failed reconciles,
//! failed AWS actions on a member, failed notifications.

use std::time::Duration;

/// Bounded exponential backoff: `base · 2^(n-1)` after `n` consecutive failures, capped at `max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// Delay after the first failure.
    pub base: Duration,
    /// Largest delay.
    pub max: Duration,
}

impl Default for Backoff {
    /// The policy of failed AWS actions: 5 s doubling to 5 min.
    fn default() -> Self {
        Self::new(Duration::from_secs(5), Duration::from_secs(300))
    }
}

impl Backoff {
    /// A policy.
    pub const fn new(base: Duration, max: Duration) -> Self {
        Self { base, max }
    }

    /// The delay after `failures` consecutive failures (at least 1).
    pub fn delay(&self, failures: u32) -> Duration {
        let exp = failures.saturating_sub(1).min(20);
        self.base.saturating_mul(1u32 << exp).min(self.max)
    }

    /// [`Backoff::delay`] as a chrono duration.
    pub fn delay_chrono(&self, failures: u32) -> chrono::Duration {
        chrono::Duration::from_std(self.delay(failures)).unwrap_or(chrono::Duration::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_from_the_base_and_stops_at_the_cap() {
        let notifications = Backoff::new(Duration::from_secs(30), Duration::from_secs(600));
        let secs: Vec<u64> = (1..=8).map(|f| notifications.delay(f).as_secs()).collect();
        assert_eq!(secs, [30, 60, 120, 240, 480, 600, 600, 600]);
        let actions = Backoff::default();
        assert_eq!(actions.delay(0), Duration::from_secs(5));
        assert_eq!(actions.delay(1), Duration::from_secs(5));
        assert_eq!(actions.delay(3), Duration::from_secs(20));
        assert_eq!(actions.delay(u32::MAX), Duration::from_secs(300));
    }
}
