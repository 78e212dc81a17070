//! How often a cluster member may fetch its cluster's topology: at most
//! one fetch at a time, and not again within a minimum interval of the
//! last one's start, so that a storm of `MOVED` replies (every call of a
//! moved slot gets one) costs one fetch. A fetch asked for within the
//! interval is not lost: one runs when the interval ends. (Each `MOVED`
//! updates its own slot at once, so no call waits for a fetch.) Pure: the
//! caller passes the time.

use std::time::Duration;

use tokio::time::Instant;

/// The least time between the starts of two topology fetches.
pub(crate) const REFRESH_INTERVAL_MIN: Duration = Duration::from_millis(100);

/// What to do with a request for a fetch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Start {
    /// Start one now (it counts as started).
    Now,
    /// Start one at this instant (ask again then): the first request
    /// within the interval.
    At(Instant),
    /// Nothing: a fetch is running, or one is already planned.
    No,
}

#[derive(Debug, Default)]
pub(crate) struct Throttle {
    last_start: Option<Instant>,
    in_flight: bool,
    planned: bool,
}

impl Throttle {
    /// A fetch is asked for at `now`.
    pub fn ask(&mut self, now: Instant) -> Start {
        if self.in_flight {
            return Start::No;
        }
        match self.last_start.map(|at| at + REFRESH_INTERVAL_MIN) {
            Some(next) if now < next => {
                if self.planned {
                    return Start::No;
                }
                self.planned = true;
                Start::At(next)
            }
            _ => {
                self.in_flight = true;
                self.planned = false;
                self.last_start = Some(now);
                Start::Now
            }
        }
    }

    /// The planned time came: [`Throttle::ask`] again, as the plan's.
    pub fn due(&mut self, now: Instant) -> Start {
        self.planned = false;
        self.ask(now)
    }

    /// The fetch started last has ended.
    pub fn finish(&mut self) {
        self.in_flight = false;
    }

    pub fn in_flight(&self) -> bool {
        self.in_flight
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
        assert_eq!(throttle.ask(t0), Start::Now);
        assert!(throttle.in_flight());
        // A storm of requests while it runs: it serves them.
        assert!((1..50).all(|n| throttle.ask(ms(n)) == Start::No));
        throttle.finish();
        // Within the interval of the last start: one fetch planned for its
        // end, and no more.
        assert_eq!(throttle.ask(ms(60)), Start::At(ms(100)));
        assert!((61..99).all(|n| throttle.ask(ms(n)) == Start::No));
        assert_eq!(throttle.due(ms(100)), Start::Now);
        // A fetch that runs longer than the interval still blocks the next.
        assert_eq!(throttle.ask(ms(500)), Start::No);
        throttle.finish();
        assert_eq!(throttle.ask(ms(501)), Start::Now);
        throttle.finish();
        // A plan that comes due while a fetch runs ends there.
        assert_eq!(throttle.ask(ms(550)), Start::At(ms(601)));
        assert_eq!(throttle.ask(ms(601)), Start::Now);
        assert_eq!(throttle.due(ms(601)), Start::No);
        throttle.finish();
        assert_eq!(throttle.ask(ms(650)), Start::At(ms(701)), "a new plan may be made");
    }
}
