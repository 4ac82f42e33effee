//! A small log-linear latency histogram (about 3% resolution), one per client task, merged.

use std::time::Duration;

const LINEAR: usize = 64;
const SUB: usize = 32;
const BUCKETS: usize = LINEAR + (64 - 6) * SUB;

/// Counts of latencies in nanoseconds.
#[derive(Debug, Clone)]
pub struct Hist {
    counts: Box<[u64]>,
    total: u64,
}

impl Default for Hist {
    fn default() -> Self {
        Hist {
            counts: vec![0; BUCKETS].into_boxed_slice(),
            total: 0,
        }
    }
}

fn bucket(ns: u64) -> usize {
    if ns < LINEAR as u64 {
        return ns as usize;
    }
    let msb = 63 - ns.leading_zeros() as usize; // >= 6
    let shift = msb - 5;
    LINEAR + (msb - 6) * SUB + ((ns >> shift) as usize - SUB)
}

fn lower(b: usize) -> u64 {
    if b < LINEAR {
        return b as u64;
    }
    let msb = (b - LINEAR) / SUB + 6;
    let sub = ((b - LINEAR) % SUB + SUB) as u64;
    sub << (msb - 5)
}

impl Hist {
    /// Records one latency.
    pub fn record(&mut self, d: Duration) {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.counts[bucket(ns)] += 1;
        self.total += 1;
    }
    /// Adds another histogram's counts.
    pub fn merge(&mut self, o: &Hist) {
        for (a, b) in self.counts.iter_mut().zip(o.counts.iter()) {
            *a += b;
        }
        self.total += o.total;
    }
    /// The `q` quantile (0..=1) in nanoseconds: the middle of its bucket.
    pub fn quantile(&self, q: f64) -> f64 {
        if self.total == 0 {
            return f64::NAN;
        }
        let rank = ((q * self.total as f64).ceil() as u64).clamp(1, self.total);
        let mut seen = 0;
        for (b, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                let lo = lower(b) as f64;
                let hi = if b + 1 < BUCKETS {
                    lower(b + 1) as f64
                } else {
                    lo
                };
                return (lo + hi) / 2.0;
            }
        }
        f64::NAN
    }
}
