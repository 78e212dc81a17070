//! How often and after which delays a failed attempt is tried again: the
//! policy, and the random delay between two attempts. Pure: the caller
//! supplies the random number and the time elapsed (the loop that sleeps is
//! `RetryPolicy::retry`, next to `Redlock::acquire`).

use std::time::Duration;

/// The random delay before retry: `min + (max - min) * unit`, with `unit`
/// a random number in `[0, 1)` chosen by the caller.
pub fn retry_delay(min: Duration, max: Duration, unit: f64) -> Duration {
    let spread = max.saturating_sub(min);
    min + spread.mul_f64(unit.clamp(0.0, 1.0))
}

/// How [`crate::Redlock::acquire`] (and [`RetryPolicy::retry`]) retries: at
/// most `attempts_max` attempts, a random delay in `delay_min..=delay_max`
/// between two, and no new attempt after `total_max` (when set).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    pub attempts_max: u32,
    pub delay_min: Duration,
    pub delay_max: Duration,
    pub total_max: Option<Duration>,
}

impl Default for RetryPolicy {
    fn default() -> RetryPolicy {
        RetryPolicy {
            attempts_max: 3,
            delay_min: Duration::from_millis(50),
            delay_max: Duration::from_millis(200),
            total_max: None,
        }
    }
}

impl RetryPolicy {
    /// A fixed number of attempts (at least one) with the default delays.
    pub fn attempts(attempts_max: u32) -> RetryPolicy {
        RetryPolicy { attempts_max: attempts_max.max(1), ..RetryPolicy::default() }
    }

    /// Keep trying for `total` (the last attempt starts at `total` at the
    /// latest); the attempt count is bounded by `total / delay_min + 2`.
    pub fn within(total: Duration) -> RetryPolicy {
        let policy = RetryPolicy { total_max: Some(total), ..RetryPolicy::default() };
        policy.with_delays(policy.delay_min, policy.delay_max)
    }

    /// Other delay bounds (`max` below `min` means `min`); a policy with a
    /// total time gets the attempt bound that goes with them.
    pub fn with_delays(mut self, min: Duration, max: Duration) -> RetryPolicy {
        self.delay_min = min;
        self.delay_max = max.max(min);
        if let Some(total) = self.total_max {
            let attempts = total.as_millis() / min.as_millis().max(1) + 2;
            self.attempts_max = u32::try_from(attempts).unwrap_or(u32::MAX);
        }
        self
    }

    /// The delay before the next attempt, after `attempts_done` attempts
    /// that failed with a retryable error and took `elapsed` since the
    /// first began; `None`: give up. `unit` is a random number in `[0, 1)`
    /// (see [`retry_delay`]). The delay is cut to what is left of
    /// `total_max`, so that no attempt starts after it.
    pub fn delay_after(&self, attempts_done: u32, elapsed: Duration, unit: f64) -> Option<Duration> {
        if attempts_done >= self.attempts_max {
            return None;
        }
        let delay = retry_delay(self.delay_min, self.delay_max, unit);
        match self.total_max {
            None => Some(delay),
            Some(total) => {
                let left = total.saturating_sub(elapsed);
                (!left.is_zero()).then(|| delay.min(left))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn retry_delay_stays_in_range() {
        assert_eq!(retry_delay(ms(50), ms(150), 0.0), ms(50));
        assert_eq!(retry_delay(ms(50), ms(150), 0.5), ms(100));
        assert!(retry_delay(ms(50), ms(150), 0.999_999) <= ms(150));
        assert_eq!(retry_delay(ms(50), ms(150), 7.0), ms(150), "clamped");
        assert_eq!(retry_delay(ms(80), ms(20), 0.5), ms(80), "max below min means min");
    }

    #[test]
    fn retry_policy_bounds_attempts_delays_and_total_time() {
        let policy = RetryPolicy::default();
        assert_eq!((policy.attempts_max, policy.delay_min, policy.delay_max), (3, ms(50), ms(200)));
        assert_eq!(policy.delay_after(1, ms(0), 0.0), Some(ms(50)));
        assert_eq!(policy.delay_after(2, ms(10_000), 0.5), Some(ms(125)), "no total bound");
        assert_eq!(policy.delay_after(3, ms(0), 0.0), None, "attempts spent");
        assert_eq!(RetryPolicy::attempts(0).attempts_max, 1, "at least one attempt");
        assert_eq!(RetryPolicy::attempts(1).delay_after(1, ms(0), 0.0), None);

        // within(1 s): 1000 / 50 + 2 attempts; the delay is cut to what is
        // left, and nothing is left at the total.
        let within = RetryPolicy::within(ms(1_000));
        assert_eq!((within.attempts_max, within.total_max), (22, Some(ms(1_000))));
        assert_eq!(within.delay_after(1, ms(900), 0.99), Some(ms(100)), "cut to the time left");
        assert_eq!(within.delay_after(1, ms(900), 0.0), Some(ms(50)));
        assert_eq!(within.delay_after(1, ms(1_000), 0.0), None, "no attempt after the total");
        assert_eq!(within.delay_after(1, ms(1_500), 0.0), None);
        assert_eq!(within.delay_after(22, ms(0), 0.0), None);

        // Other delays re-derive the attempt bound; max below min is min.
        let fast = RetryPolicy::within(ms(1_000)).with_delays(ms(10), ms(5));
        assert_eq!((fast.delay_min, fast.delay_max, fast.attempts_max), (ms(10), ms(10), 102));
        let zero = RetryPolicy::within(ms(100)).with_delays(ms(0), ms(0));
        assert_eq!(zero.attempts_max, 102, "a zero delay counts as 1 ms for the bound");
        let counted = RetryPolicy::attempts(4).with_delays(ms(1), ms(2));
        assert_eq!((counted.attempts_max, counted.total_max), (4, None), "a count stays a count");
        let huge = RetryPolicy::within(Duration::from_secs(u64::MAX / 1_000)).with_delays(ms(1), ms(1));
        assert_eq!(huge.attempts_max, u32::MAX, "saturates");
    }
}
