//! Random draws for jitter, injectable so tests can assert exact delays.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};

/// A source of uniform draws in `[0, 1)` for backoff jitter.
///
/// Implementations must be cheap and thread-safe: one policy is shared by every call that uses it.
/// Values outside `[0, 1]` are clamped by the policy.
///
/// # Examples
///
/// A source that cycles through fixed draws, for tests that pin each jittered delay:
///
/// ```
/// use idem_retry::{RandomSource, RetryPolicy};
/// use std::sync::atomic::{AtomicUsize, Ordering};
/// use std::time::Duration;
///
/// struct Cycle {
///     draws: Vec<f64>,
///     next: AtomicUsize,
/// }
///
/// impl RandomSource for Cycle {
///     fn next_unit(&self) -> f64 {
///         let i = self.next.fetch_add(1, Ordering::Relaxed);
///         self.draws[i % self.draws.len()]
///     }
/// }
///
/// let policy = RetryPolicy::builder()
///     .random_source(Cycle { draws: vec![0.0, 0.75], next: AtomicUsize::new(0) })
///     .build()?;
/// assert_eq!(policy.delay_after(1), Duration::from_millis(16)); // 20 ms · 0.8
/// assert_eq!(policy.delay_after(1), Duration::from_millis(22)); // 20 ms · 1.1
/// # Ok::<(), idem_retry::InvalidPolicy>(())
/// ```
pub trait RandomSource: Send + Sync + 'static {
    /// The next draw, uniform in `[0, 1)`.
    fn next_unit(&self) -> f64;
}

/// Always returns the same draw. `FixedRandom::new(0.5)` turns jitter off; `0.0` gives the
/// shortest delay `(1 - jitter)·d`, values near `1.0` the longest.
///
/// ```
/// use idem_retry::{FixedRandom, RandomSource};
/// assert_eq!(FixedRandom::new(0.25).next_unit(), 0.25);
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FixedRandom(f64);

impl FixedRandom {
    /// A source that always draws `u` (clamped to `[0, 1]`; NaN becomes 0.5).
    pub fn new(u: f64) -> Self {
        FixedRandom(if u.is_nan() { 0.5 } else { u.clamp(0.0, 1.0) })
    }
}

impl RandomSource for FixedRandom {
    fn next_unit(&self) -> f64 {
        self.0
    }
}

/// The default source: SplitMix64 over one atomic counter, so it is lock-free and shareable.
///
/// Not cryptographic; jitter only needs clients to disagree.
///
/// ```
/// use idem_retry::{RandomSource, SplitMix64};
/// let a = SplitMix64::seeded(7);
/// let b = SplitMix64::seeded(7);
/// assert_eq!(a.next_unit(), b.next_unit()); // same seed, same draws
/// let u = SplitMix64::from_entropy().next_unit();
/// assert!((0.0..1.0).contains(&u));
/// ```
#[derive(Debug)]
pub struct SplitMix64 {
    state: AtomicU64,
}

const GOLDEN_GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

impl SplitMix64 {
    /// A source with a fixed seed (reproducible draws).
    pub const fn seeded(seed: u64) -> Self {
        SplitMix64 {
            state: AtomicU64::new(seed),
        }
    }

    /// A source seeded from the process's hash randomness (`RandomState`), different per process
    /// and per call.
    pub fn from_entropy() -> Self {
        let mut h = RandomState::new().build_hasher();
        h.write_u64(0x6964_656d); // any input: the seed lives in the hasher's keys
        Self::seeded(h.finish())
    }

    /// The next raw 64-bit output.
    pub fn next_u64(&self) -> u64 {
        let mut z = self
            .state
            .fetch_add(GOLDEN_GAMMA, Ordering::Relaxed)
            .wrapping_add(GOLDEN_GAMMA);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

impl RandomSource for SplitMix64 {
    fn next_unit(&self) -> f64 {
        // The top 53 bits as a fraction: uniform in [0, 1).
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}
