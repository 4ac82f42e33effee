//! A latency histogram of fixed size: log-linear buckets of microseconds, 32 to each power of
//! two, so a percentile read from it is at most 1/32 (about 3%) above the true value and never
//! below it. Recording is one increment; a percentile walks the buckets once.

use std::time::Duration;

/// Sub-buckets per power of two: the resolution, as `1 / SUB`.
const SUB_BITS: u32 = 5;
const SUB: u64 = 1 << SUB_BITS;
/// Powers of two above the linear part: up to 2^(SUB_BITS + POWERS) µs, about 9.8 hours.
const POWERS: u32 = 30;
const BUCKETS: usize = (SUB as usize) * (POWERS as usize + 1);

/// Counts of latencies by bucket.
#[derive(Clone)]
pub(super) struct Histogram {
    counts: Box<[u32; BUCKETS]>,
    len: u64,
}

impl Histogram {
    pub(super) fn new() -> Self {
        Histogram {
            counts: Box::new([0; BUCKETS]),
            len: 0,
        }
    }

    pub(super) fn len(&self) -> u64 {
        self.len
    }

    pub(super) fn record(&mut self, latency: Duration) {
        let i = bucket_of(u64::try_from(latency.as_micros()).unwrap_or(u64::MAX));
        self.counts[i] = self.counts[i].saturating_add(1);
        self.len = self.len.saturating_add(1);
    }

    pub(super) fn clear(&mut self) {
        self.counts.fill(0);
        self.len = 0;
    }

    /// The `q`-quantile (`0 < q <= 1`) of `self` and `other` together: the upper edge of the
    /// bucket holding the sample of rank `ceil(q · n)`. `None` when both are empty.
    pub(super) fn quantile_with(&self, other: &Histogram, q: f64) -> Option<Duration> {
        let n = self.len.saturating_add(other.len);
        if n == 0 {
            return None;
        }
        // The rank of the sample sought, from 1.
        let rank = ((q * n as f64).ceil() as u64).clamp(1, n);
        let mut seen = 0u64;
        for i in 0..BUCKETS {
            seen += u64::from(self.counts[i]) + u64::from(other.counts[i]);
            if seen >= rank {
                return Some(Duration::from_micros(upper_edge(i)));
            }
        }
        Some(Duration::from_micros(upper_edge(BUCKETS - 1)))
    }
}

/// The bucket of `us` microseconds: values below `SUB` each have their own; above, each power
/// of two is split into `SUB` equal parts; values past the last power share the last bucket.
fn bucket_of(us: u64) -> usize {
    if us < SUB {
        return us as usize;
    }
    let power = 63 - us.leading_zeros(); // >= SUB_BITS
    let shift = power - SUB_BITS;
    let group = (shift + 1) as usize;
    if group > POWERS as usize {
        return BUCKETS - 1;
    }
    let sub = ((us >> shift) - SUB) as usize;
    group * SUB as usize + sub
}

/// The smallest value of microseconds above every value of bucket `i`, minus one: the
/// bucket's largest value.
fn upper_edge(i: usize) -> u64 {
    let (group, sub) = (i as u64 / SUB, i as u64 % SUB);
    if group == 0 {
        return sub;
    }
    let shift = group - 1;
    ((SUB + sub + 1) << shift) - 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn r9_buckets_bound_each_value_within_a_thirty_second() {
        for us in (0..5_000u64).chain([65_535, 65_536, 90_000, 1_000_000, 123_456_789]) {
            let i = bucket_of(us);
            let edge = upper_edge(i);
            assert!(edge >= us, "{us} µs: edge {edge}");
            assert!(edge - us <= us / SUB, "{us} µs: edge {edge} too far");
            assert!(i == 0 || upper_edge(i - 1) < us, "{us} µs in bucket {i}");
        }
    }

    #[test]
    fn r9_quantile_of_scripted_latencies() {
        let mut h = Histogram::new();
        for ms in 1..=100u64 {
            h.record(Duration::from_millis(ms));
        }
        let p90 = h.quantile_with(&Histogram::new(), 0.9).unwrap();
        assert!(
            p90 >= Duration::from_millis(90) && p90 <= Duration::from_micros(92_900),
            "{p90:?}"
        );
        let p50 = h.quantile_with(&Histogram::new(), 0.5).unwrap();
        assert!(
            p50 >= Duration::from_millis(50) && p50 <= Duration::from_micros(51_600),
            "{p50:?}"
        );
        assert_eq!(Histogram::new().quantile_with(&Histogram::new(), 0.5), None);
    }
}
