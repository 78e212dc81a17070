//! A histogram of durations in milliseconds (how long waiters waited, how
//! long holders held), for `INFO lock`: fixed memory, O(1) to record, and
//! percentiles with a known error.
//!
//! Why this shape: exact percentiles need every value kept (memory grows
//! with traffic), and a running mean hides the tail that users ask about.
//! Log-linear buckets keep a bounded relative error at every scale, from a
//! millisecond to weeks, in a few kilobytes.
//!
//! Buckets: values below 16 ms have a bucket each; above, every power of two
//! `[2^e, 2^(e+1))` is cut into 8 equal sub-buckets, up to `2^32 - 1` ms
//! (49 days). One last bucket takes everything from `2^32` ms up.
//!
//! Error bound: [`Histogram::percentile`] answers the upper bound of the
//! bucket holding the exact nearest-rank percentile `x`, capped at the
//! largest value recorded. So it never answers below `x`, and for
//! `x < 2^32` it answers at most `x + x / 8` (12.5% above; exact below 16):
//! a bucket starting at `8 * 2^s` is `2^s` wide. For `x >= 2^32` it answers
//! at most the maximum recorded.

/// Sub-buckets per power of two, as a power of two: 8 sub-buckets, so the
/// relative error is below 1/8.
const SUB_BITS: u32 = 3;
const SUB: u64 = 1 << SUB_BITS;
/// Values below `2^RANGE_BITS` ms are bucketed with the error bound.
const RANGE_BITS: u32 = 32;
/// Buckets for values below `2^RANGE_BITS`: `2 * SUB` exact ones, then
/// `SUB` per power of two from `2^(SUB_BITS + 1)` on.
const RANGED: usize = ((RANGE_BITS - SUB_BITS + 1) as usize) * (SUB as usize);
/// The bucket for values of `2^RANGE_BITS` ms and more.
const OVERFLOW: usize = RANGED;
pub const BUCKETS: usize = RANGED + 1;

// Every value has a bucket: `record` never misses one.
const _: () = assert!(OVERFLOW < BUCKETS);
// The last ranged bucket ends exactly at 2^RANGE_BITS - 1.
const _: () = assert!(bucket_upper(RANGED - 1) == (1u64 << RANGE_BITS) - 1);
const _: () = assert!(bucket_of((1u64 << RANGE_BITS) - 1) == RANGED - 1);
const _: () = assert!(bucket_of(1u64 << RANGE_BITS) == OVERFLOW);

/// The bucket of a value. A value `v >= 2 * SUB` with its top bit at `e`
/// is `m << s` plus a remainder, where `s = e - SUB_BITS` and the mantissa
/// `m` is in `[SUB, 2 * SUB)`; its bucket is `s * SUB + m`. Below `2 * SUB`,
/// `s = 0` and the bucket is the value itself.
const fn bucket_of(ms: u64) -> usize {
    if ms >> RANGE_BITS != 0 {
        return OVERFLOW;
    }
    let top_bit = match ms.checked_ilog2() {
        Some(bit) => bit,
        None => 0,
    };
    let shift = top_bit.saturating_sub(SUB_BITS);
    // Below 2^32, so at most 29 * 8 + 15: fits any usize.
    (shift as usize) * (SUB as usize) + ((ms >> shift) as usize)
}

/// The largest value that lands in `bucket` (the inverse of
/// [`bucket_of`]); `u64::MAX` for the overflow bucket.
const fn bucket_upper(bucket: usize) -> u64 {
    if bucket >= OVERFLOW {
        return u64::MAX;
    }
    let bucket = bucket as u64;
    let shift = (bucket / SUB).saturating_sub(1);
    let mantissa = bucket - shift * SUB;
    ((mantissa + 1) << shift) - 1
}

/// Counts per bucket plus the exact count, sum and maximum.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Histogram {
    buckets: [u64; BUCKETS],
    count: u64,
    sum_ms: u64,
    max_ms: u64,
}

/// What `INFO lock` shows of a histogram. Percentiles are 0 when empty.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Summary {
    pub count: u64,
    pub sum_ms: u64,
    pub p50_ms: u64,
    pub p90_ms: u64,
    pub p99_ms: u64,
    pub max_ms: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Self::new()
    }
}

impl Histogram {
    pub const fn new() -> Histogram {
        Histogram { buckets: [0; BUCKETS], count: 0, sum_ms: 0, max_ms: 0 }
    }

    /// Counts one duration. A negative one (a clock that stepped back)
    /// counts as 0 ms.
    pub fn record(&mut self, ms: i64) {
        let ms = u64::try_from(ms).unwrap_or(0);
        if let Some(bucket) = self.buckets.get_mut(bucket_of(ms)) {
            *bucket = bucket.saturating_add(1);
        }
        self.count = self.count.saturating_add(1);
        self.sum_ms = self.sum_ms.saturating_add(ms);
        self.max_ms = self.max_ms.max(ms);
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    /// The sum of every duration recorded (saturates at `u64::MAX`).
    pub fn sum_ms(&self) -> u64 {
        self.sum_ms
    }

    pub fn max_ms(&self) -> u64 {
        self.max_ms
    }

    /// The `p`-th percentile (`p` in 0..=100, clamped) by nearest rank: an
    /// upper bound of the value at rank `ceil(p / 100 * count)` (at least
    /// 1), within the error bound in the module doc. 0 when empty.
    pub fn percentile(&self, p: f64) -> u64 {
        if self.count == 0 {
            return 0;
        }
        let rank = nearest_rank(p, self.count);
        let mut seen = 0u64;
        for (bucket, &n) in self.buckets.iter().enumerate() {
            seen = seen.saturating_add(n);
            if seen >= rank {
                return bucket_upper(bucket).min(self.max_ms);
            }
        }
        self.max_ms
    }

    pub fn summary(&self) -> Summary {
        Summary {
            count: self.count,
            sum_ms: self.sum_ms,
            p50_ms: self.percentile(50.0),
            p90_ms: self.percentile(90.0),
            p99_ms: self.percentile(99.0),
            max_ms: self.max_ms,
        }
    }
}

/// `ceil(p / 100 * count)`, between 1 and `count`. `p` is first rounded to
/// millionths of a percent so that the rank is computed in integers: with
/// floats, `99.9 / 100 * 1000` may land a hair above 999 and round up to
/// the next rank.
fn nearest_rank(p: f64, count: u64) -> u64 {
    const SCALE: u128 = 100 * 1_000_000;
    // `as` saturates and sends NaN to 0; the clamp keeps the product in range.
    let micro = (p.clamp(0.0, 100.0) * 1_000_000.0).round() as u128;
    let rank = (micro * u128::from(count)).div_ceil(SCALE);
    u64::try_from(rank).unwrap_or(count).clamp(1, count)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The lowest value of a ranged bucket.
    fn bucket_lower(bucket: usize) -> u64 {
        if bucket == 0 {
            0
        } else {
            bucket_upper(bucket - 1) + 1
        }
    }

    #[test]
    fn buckets_tile_the_range_without_gaps() {
        for bucket in 0..RANGED {
            let (lo, hi) = (bucket_lower(bucket), bucket_upper(bucket));
            assert!(lo <= hi, "bucket {bucket}: {lo}..={hi}");
            assert_eq!(bucket_of(lo), bucket, "lowest value of bucket {bucket}");
            assert_eq!(bucket_of(hi), bucket, "highest value of bucket {bucket}");
            // The width bound behind the 12.5% error: hi - lo < lo / 8.
            assert!(8 * (hi - lo) <= lo.saturating_sub(8), "bucket {bucket}: {lo}..={hi} too wide");
        }
        assert_eq!(bucket_of(u64::MAX), OVERFLOW);
        assert_eq!(bucket_upper(OVERFLOW), u64::MAX);
    }

    #[test]
    fn small_values_are_exact() {
        let mut h = Histogram::new();
        for ms in [15, 3, 0, 7, 8, 12] {
            h.record(ms);
        }
        // Sorted: 0 3 7 8 12 15.
        assert_eq!(h.percentile(0.0), 0);
        assert_eq!(h.percentile(50.0), 7, "rank 3 of 6");
        assert_eq!(h.percentile(51.0), 8, "rank 4 of 6");
        assert_eq!(h.percentile(100.0), 15);
        assert_eq!((h.count(), h.sum_ms(), h.max_ms()), (6, 45, 15));
    }

    #[test]
    fn a_percentile_is_the_bucket_top_but_never_above_the_max() {
        let mut h = Histogram::new();
        h.record(1000); // bucket 960..=1023
        assert_eq!(h.percentile(50.0), 1000, "capped at the maximum");
        h.record(1001);
        h.record(2000);
        assert_eq!(h.percentile(50.0), 1023, "the top of 1001's bucket");
        assert_eq!(h.percentile(100.0), 2000);
    }

    #[test]
    fn negative_durations_count_as_zero() {
        let mut h = Histogram::new();
        h.record(-5);
        h.record(i64::MIN);
        assert_eq!((h.count(), h.sum_ms(), h.max_ms(), h.percentile(100.0)), (2, 0, 0, 0));
    }

    #[test]
    fn huge_durations_saturate_and_land_in_the_overflow_bucket() {
        let mut h = Histogram::new();
        h.record(i64::MAX);
        h.record(i64::MAX);
        h.record(i64::MAX);
        let max = i64::MAX as u64;
        assert_eq!(h.sum_ms(), u64::MAX, "the sum saturates");
        assert_eq!((h.count(), h.max_ms(), h.percentile(50.0)), (3, max, max));
        h.record(1 << 32);
        assert_eq!(h.percentile(0.0), max, "2^32 ms shares the overflow bucket; answered by the max");
    }

    #[test]
    fn empty_summary_is_zero() {
        let zero = Summary { count: 0, sum_ms: 0, p50_ms: 0, p90_ms: 0, p99_ms: 0, max_ms: 0 };
        assert_eq!(Histogram::new().summary(), zero);
        assert_eq!(Histogram::default(), Histogram::new());
        assert_eq!(Histogram::new().percentile(50.0), 0);
    }

    #[test]
    fn summary_reads_the_tail() {
        let mut h = Histogram::new();
        for ms in 1..=100 {
            h.record(ms);
        }
        let s = h.summary();
        assert_eq!((s.count, s.sum_ms, s.max_ms), (100, 5050, 100));
        // Exact values 50, 90, 99 in buckets 48..=51, 88..=95, 96..=103.
        assert_eq!((s.p50_ms, s.p90_ms, s.p99_ms), (51, 95, 100));
    }

    #[test]
    fn rank_is_exact_where_floats_are_not() {
        // 99.9 * 1000 / 100 in floats is not exactly 999.
        assert_eq!(nearest_rank(99.9, 1000), 999);
        assert_eq!(nearest_rank(99.9, 1001), 1000);
        assert_eq!(nearest_rank(0.0, 7), 1, "rank 0 reads the smallest value");
        assert_eq!(nearest_rank(50.0, 7), 4);
        assert_eq!(nearest_rank(250.0, 7), 7, "p above 100 is clamped");
        assert_eq!(nearest_rank(-3.0, 7), 1, "p below 0 is clamped");
        assert_eq!(nearest_rank(f64::NAN, 7), 1);
        assert_eq!(nearest_rank(100.0, u64::MAX), u64::MAX);
    }

    fn duration() -> impl Strategy<Value = i64> {
        prop_oneof![0i64..40, 0i64..100_000, 0i64..(1 << 34), any::<i64>()]
    }

    proptest! {
        /// The documented bound, against exact nearest-rank percentiles of
        /// the values recorded.
        #[test]
        fn percentile_is_within_the_bound(values in proptest::collection::vec(duration(), 1..400), tenths in proptest::collection::vec(0u64..=1000, 1..12)) {
            let mut h = Histogram::new();
            for &v in &values {
                h.record(v);
            }
            let mut exact: Vec<u64> = values.iter().map(|&v| u64::try_from(v).unwrap_or(0)).collect();
            exact.sort_unstable();
            let n = exact.len() as u64;
            prop_assert_eq!(h.count(), n);
            prop_assert_eq!(h.max_ms(), *exact.last().unwrap());
            let sum = exact.iter().fold(0u64, |s, &v| s.saturating_add(v));
            prop_assert_eq!(h.sum_ms(), sum);
            for t in tenths {
                let rank = (t * n).div_ceil(1000).max(1);
                let x = exact[rank as usize - 1];
                let got = h.percentile(t as f64 / 10.0);
                prop_assert!(got >= x, "p{}: {} below the exact {}", t as f64 / 10.0, got, x);
                prop_assert!(got <= h.max_ms());
                if x < (1 << RANGE_BITS) {
                    prop_assert!(got - x <= x / 8, "p{}: {} more than 12.5% above {}", t as f64 / 10.0, got, x);
                }
                if x < 16 {
                    prop_assert_eq!(got, x);
                }
            }
            let s = h.summary();
            prop_assert_eq!((s.p50_ms, s.p90_ms, s.p99_ms), (h.percentile(50.0), h.percentile(90.0), h.percentile(99.0)));
        }
    }
}
