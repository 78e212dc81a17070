//! How often a cluster member may fetch its cluster's topology: at most
//! one fetch at a time, and not again within a minimum interval of the
//! last one's start, so that a storm of `MOVED` replies (every call of a
//! moved slot gets one) costs one fetch. Each `MOVED` updates its own slot
//! at once, so a refresh that is skipped leaves no call misrouted for
//! long. Pure: the caller passes the time.

use std::time::Duration;

use tokio::time::Instant;

/// The least time between the starts of two topology fetches.
pub(crate) const REFRESH_INTERVAL_MIN: Duration = Duration::from_millis(100);

#[derive(Debug, Default)]
pub(crate) struct Throttle {
    last_start: Option<Instant>,
    in_flight: bool,
}

impl Throttle {
    /// Whether a fetch may start at `now`; if so it counts as started.
    pub fn try_start(&mut self, now: Instant) -> bool {
        let too_soon = self.last_start.is_some_and(|at| now.saturating_duration_since(at) < REFRESH_INTERVAL_MIN);
        if self.in_flight || too_soon {
            return false;
        }
        self.in_flight = true;
        self.last_start = Some(now);
        true
    }

    /// The fetch started last has ended.
    pub fn finish(&mut self) {
        self.in_flight = false;
    }

    pub fn in_flight(&self) -> bool {
        self.in_flight
    }

    /// When the next fetch may start (now, if none started yet).
    pub fn next_start(&self, now: Instant) -> Instant {
        self.last_start.map_or(now, |at| (at + REFRESH_INTERVAL_MIN).max(now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_fetch_at_a_time_and_not_too_often() {
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        let mut throttle = Throttle::default();
        assert_eq!(throttle.next_start(t0), t0);
        assert!(throttle.try_start(t0));
        assert!(throttle.in_flight());
        // A storm of requests while it runs, and after it within the interval.
        assert!((1..50).all(|n| !throttle.try_start(ms(n))));
        throttle.finish();
        assert!(!throttle.try_start(ms(99)), "within the interval of the last start");
        assert_eq!(throttle.next_start(ms(60)), ms(100));
        assert!(throttle.try_start(ms(100)));
        // A fetch that runs longer than the interval still blocks the next.
        assert!(!throttle.try_start(ms(500)));
        throttle.finish();
        assert!(throttle.try_start(ms(501)));
    }
}
