//! Recent latencies of successful attempts, per target: what an adaptive hedging delay (R9) and
//! the deadline-aware attempt rule (R10) read.
//!
//! # Why a rotating window and a minimum
//!
//! Latency drifts (a deploy, a cache warming up, a busier hour), so a percentile must forget old
//! samples: each target keeps two histograms, the current period's and the one before, and a
//! percentile reads both (between one and two periods of data). A percentile of three samples
//! is noise, and a hedge fired on noise doubles the load for nothing: below
//! [`min_samples`](LatencyTrackerBuilder::min_samples) a percentile is `None`, and the caller
//! falls back to its fixed rule (no hedge, the fixed minimum attempt time).

mod histogram;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use crate::policy::InvalidPolicy;
use histogram::Histogram;

/// Default length of one period of the rotating window: 10 s.
pub const DEFAULT_LATENCY_WINDOW: Duration = Duration::from_secs(10);
/// Default least number of samples a percentile needs: 100.
pub const DEFAULT_MIN_SAMPLES: u64 = 100;

/// Recent latencies of successful attempts, per target (the gRPC method, or HTTP method and
/// path), shared by every clone.
///
/// A [`Retrier`](crate::Retrier) given one ([`with_latencies`](crate::Retrier::with_latencies))
/// records each successful attempt of a call that names its target
/// ([`Call::with_target`](crate::Call::with_target)). Only successes are recorded: a failure's
/// time says nothing about how long an answer takes, and a copy cancelled by a faster one has
/// no end to measure.
///
/// Times come from tokio's clock, so paused-clock tests drive the window. The state sits behind
/// one `std::sync::Mutex` held for a hash lookup and an increment (or one walk of the buckets),
/// never across an `.await`.
///
/// # Default
///
/// | setting | default | constant |
/// |---|---|---|
/// | window period | 10 s (a percentile reads the last 10 to 20 s) | [`DEFAULT_LATENCY_WINDOW`] |
/// | minimum samples for a percentile | 100 | [`DEFAULT_MIN_SAMPLES`] |
/// | resolution | a percentile is at most 1/32 above the true value, never below | |
///
/// # Examples
///
/// ```
/// use idem_retry::LatencyTracker;
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), idem_retry::InvalidPolicy> {
/// let tracker = LatencyTracker::builder().min_samples(10).build()?;
/// for ms in 1..=9 {
///     tracker.record("/shop.v1.Shop/GetBook", Duration::from_millis(ms));
/// }
/// assert_eq!(tracker.percentile("/shop.v1.Shop/GetBook", 0.9), None); // 9 < 10 samples
/// tracker.record("/shop.v1.Shop/GetBook", Duration::from_millis(10));
/// let p90 = tracker.percentile("/shop.v1.Shop/GetBook", 0.9).unwrap();
/// assert!(p90 >= Duration::from_millis(9) && p90 < Duration::from_micros(9_300));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct LatencyTracker {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    period: Duration,
    min_samples: u64,
    targets: Mutex<HashMap<Box<str>, Window>>,
}

/// Two periods of one target's latencies.
struct Window {
    current: Histogram,
    previous: Histogram,
    started: Instant,
}

impl std::fmt::Debug for Window {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Window")
            .field("samples", &(self.current.len() + self.previous.len()))
            .finish_non_exhaustive()
    }
}

impl Window {
    /// Moves the window on to `now`: one period past, the current becomes the previous; two or
    /// more, both are emptied.
    fn rotate(&mut self, now: Instant, period: Duration) {
        let elapsed = now.saturating_duration_since(self.started);
        if elapsed < period {
            return;
        }
        if elapsed < period * 2 {
            std::mem::swap(&mut self.current, &mut self.previous);
            self.current.clear();
            self.started += period;
        } else {
            self.current.clear();
            self.previous.clear();
            self.started = now;
        }
    }
}

impl Default for LatencyTracker {
    fn default() -> Self {
        LatencyTracker::new()
    }
}

impl LatencyTracker {
    /// A tracker with the defaults (10 s periods, 100 samples).
    pub fn new() -> Self {
        LatencyTracker::builder().assemble()
    }

    /// A builder starting from the defaults.
    pub fn builder() -> LatencyTrackerBuilder {
        LatencyTrackerBuilder {
            period: DEFAULT_LATENCY_WINDOW,
            min_samples: DEFAULT_MIN_SAMPLES,
        }
    }

    /// Records that an attempt to `target` succeeded after `latency`.
    pub fn record(&self, target: &str, latency: Duration) {
        let now = Instant::now();
        let mut targets = self.lock();
        if let Some(w) = targets.get_mut(target) {
            w.rotate(now, self.inner.period);
            w.current.record(latency);
            return;
        }
        let mut w = Window {
            current: Histogram::new(),
            previous: Histogram::new(),
            started: now,
        };
        w.current.record(latency);
        targets.insert(target.into(), w);
    }

    /// The `q`-quantile (`0 < q <= 1`; 0.95 is p95) of `target`'s recent latencies, or `None`
    /// while fewer than the minimum samples are known (or `q` is out of range).
    pub fn percentile(&self, target: &str, q: f64) -> Option<Duration> {
        if !(q > 0.0 && q <= 1.0) {
            return None;
        }
        let now = Instant::now();
        let mut targets = self.lock();
        let w = targets.get_mut(target)?;
        w.rotate(now, self.inner.period);
        if w.current.len() + w.previous.len() < self.inner.min_samples {
            return None;
        }
        w.current.quantile_with(&w.previous, q)
    }

    /// How many samples of `target` a percentile would read now.
    pub fn samples(&self, target: &str) -> u64 {
        let now = Instant::now();
        let mut targets = self.lock();
        targets.get_mut(target).map_or(0, |w| {
            w.rotate(now, self.inner.period);
            w.current.len() + w.previous.len()
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Box<str>, Window>> {
        self.inner
            .targets
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// Builds a [`LatencyTracker`]; see its defaults.
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until `build` is called"]
pub struct LatencyTrackerBuilder {
    period: Duration,
    min_samples: u64,
}

impl LatencyTrackerBuilder {
    /// Length of one period of the window (a percentile reads one to two of them); greater than
    /// zero. Default: 10 s.
    pub const fn window(mut self, period: Duration) -> Self {
        self.period = period;
        self
    }

    /// Least number of samples a percentile needs; at least 1. Default: 100.
    pub const fn min_samples(mut self, n: u64) -> Self {
        self.min_samples = n;
        self
    }

    /// The tracker, or the first rule its settings break.
    ///
    /// # Errors
    ///
    /// [`InvalidPolicy`] naming the rule: a zero window, or a minimum of zero samples.
    pub fn build(self) -> Result<LatencyTracker, InvalidPolicy> {
        if self.period.is_zero() {
            return Err(InvalidPolicy::Invalid(
                "the latency window must be greater than zero",
            ));
        }
        if self.min_samples == 0 {
            return Err(InvalidPolicy::Invalid(
                "min_samples must be at least 1 (a percentile of nothing is not known)",
            ));
        }
        Ok(self.assemble())
    }

    fn assemble(self) -> LatencyTracker {
        LatencyTracker {
            inner: Arc::new(Inner {
                period: self.period,
                min_samples: self.min_samples,
                targets: Mutex::new(HashMap::new()),
            }),
        }
    }
}
