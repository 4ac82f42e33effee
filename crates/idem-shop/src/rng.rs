//! A tiny shared random source (SplitMix64) for fault decisions.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

#[derive(Debug)]
pub(crate) struct Rng(AtomicU64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Self {
        Rng(AtomicU64::new(seed))
    }

    /// Uniform in `[0, 1)`.
    pub(crate) fn next_f64(&self) -> f64 {
        let mut z = self
            .0
            .fetch_add(0x9E37_79B9_7F4A_7C15, Relaxed)
            .wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }
}
