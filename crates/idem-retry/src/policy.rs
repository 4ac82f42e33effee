//! The backoff policy (R1): how many attempts, and how long to wait between them.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::random::{RandomSource, SplitMix64};

/// Default total attempts, the first one included (R1).
pub const DEFAULT_MAX_ATTEMPTS: u32 = 3;
/// Default delay after the first failure (R1).
pub const DEFAULT_BASE_DELAY: Duration = Duration::from_millis(20);
/// Default growth factor between consecutive delays (R1).
pub const DEFAULT_MULTIPLIER: f64 = 2.0;
/// Default cap on the un-jittered delay (R1).
pub const DEFAULT_MAX_DELAY: Duration = Duration::from_secs(1);
/// Default jitter: each delay is scaled by a uniform factor in `[1 - 0.2, 1 + 0.2)` (R1).
pub const DEFAULT_JITTER: f64 = 0.2;
/// Default minimum time one attempt needs; a retry that would leave less than this before the
/// deadline is not started (R3).
pub const DEFAULT_MIN_ATTEMPT_TIME: Duration = Duration::from_millis(50);

/// How often and how patiently a call is retried (R1, R3).
///
/// The delay after the `n`-th failure (`n` from 1) is
/// `min(base_delay · multiplier^(n-1), max_delay) · U(1 - jitter, 1 + jitter)`.
/// Jitter is not an optimisation: without it, clients that failed together retry together and hit
/// the recovering server in synchronized waves.
///
/// A `RetryPolicy` is always valid: the only ways to get one are [`Default`] and
/// [`RetryPolicyBuilder::build`], which checks every rule. Cloning is cheap (the random source is
/// shared).
///
/// # Default
///
/// | field | default | constant |
/// |---|---|---|
/// | `max_attempts` (total, first included) | 3 | [`DEFAULT_MAX_ATTEMPTS`] |
/// | `base_delay` | 20 ms | [`DEFAULT_BASE_DELAY`] |
/// | `multiplier` | ×2 | [`DEFAULT_MULTIPLIER`] |
/// | `max_delay` | 1 s | [`DEFAULT_MAX_DELAY`] |
/// | `jitter` | ±20% | [`DEFAULT_JITTER`] |
/// | `min_attempt_time` | 50 ms | [`DEFAULT_MIN_ATTEMPT_TIME`] |
/// | random source | [`SplitMix64::from_entropy`] | |
///
/// Attempts are also bounded by the retry budget, which the retrier shares between calls: with
/// its default of 10% of requests, a failure rate above 10% leaves most failing calls without a
/// retry (see [`RetryBudget`](crate::RetryBudget)'s "Sizing the budget").
///
/// # Examples
///
/// ```
/// use idem_retry::{FixedRandom, RetryPolicy};
/// use std::time::Duration;
///
/// // A fixed random source of 0.5 means "no jitter", so delays are exact.
/// let policy = RetryPolicy::builder()
///     .random_source(FixedRandom::new(0.5))
///     .build()?;
/// assert_eq!(policy.max_attempts(), 3);
/// assert_eq!(policy.delay_after(1), Duration::from_millis(20));
/// assert_eq!(policy.delay_after(2), Duration::from_millis(40));
/// assert_eq!(policy.delay_after(u32::MAX), Duration::from_secs(1)); // the cap, no overflow
///
/// // A broken rule is an error that names it.
/// let err = RetryPolicy::builder().max_attempts(0).build().unwrap_err();
/// assert!(err.to_string().contains("max_attempts"));
/// # Ok::<(), idem_retry::InvalidPolicy>(())
/// ```
#[derive(Clone)]
pub struct RetryPolicy {
    max_attempts: u32,
    base_delay: Duration,
    multiplier: f64,
    max_delay: Duration,
    jitter: f64,
    min_attempt_time: Duration,
    observed_min_attempt: Option<f64>,
    random: Arc<dyn RandomSource>,
}

impl RetryPolicy {
    /// A builder starting from the defaults.
    pub fn builder() -> RetryPolicyBuilder {
        RetryPolicyBuilder::new()
    }

    /// Total attempts, the first one included.
    pub const fn max_attempts(&self) -> u32 {
        self.max_attempts
    }

    /// The delay after the first failure, before jitter.
    pub const fn base_delay(&self) -> Duration {
        self.base_delay
    }

    /// The growth factor between consecutive delays.
    pub const fn multiplier(&self) -> f64 {
        self.multiplier
    }

    /// The cap on the un-jittered delay.
    pub const fn max_delay(&self) -> Duration {
        self.max_delay
    }

    /// The jitter fraction `j`: delays are scaled by a factor in `[1 - j, 1 + j)`.
    pub const fn jitter(&self) -> f64 {
        self.jitter
    }

    /// The least time an attempt needs; a retry is not started with less left (R3).
    pub const fn min_attempt_time(&self) -> Duration {
        self.min_attempt_time
    }

    /// The quantile of observed attempt latency that replaces the fixed minimum attempt time,
    /// if set ([`RetryPolicyBuilder::observed_min_attempt`]).
    pub const fn observed_min_attempt(&self) -> Option<f64> {
        self.observed_min_attempt
    }

    /// The delay after the `n`-th failure (`n` from 1; `0` is treated as `1`), before jitter:
    /// `min(base_delay · multiplier^(n-1), max_delay)`.
    ///
    /// Never overflows or panics, for any `n`.
    pub fn capped_delay(&self, n: u32) -> Duration {
        let exp = i32::try_from(n.saturating_sub(1)).unwrap_or(i32::MAX);
        // multiplier is finite and >= 1 (validated), so growth is >= 1, or +inf for large n.
        let growth = self.multiplier.powi(exp);
        if self.base_delay.as_secs_f64() * growth >= self.max_delay.as_secs_f64() {
            self.max_delay
        } else {
            scale(self.base_delay, growth).min(self.max_delay)
        }
    }

    /// The delay after the `n`-th failure, with jitter drawn from the policy's random source.
    ///
    /// Never overflows or panics, for any `n`; `delay_after(u32::MAX)` is the cap (times jitter).
    pub fn delay_after(&self, n: u32) -> Duration {
        self.delay_after_with(n, self.random.next_unit())
    }

    /// The delay after the `n`-th failure for a given uniform draw `u` in `[0, 1)` (clamped):
    /// `capped_delay(n) · (1 - jitter + 2·jitter·u)`. `u = 0.5` gives the un-jittered delay.
    pub fn delay_after_with(&self, n: u32, u: f64) -> Duration {
        let u = if u.is_nan() { 0.5 } else { u.clamp(0.0, 1.0) };
        let factor = 1.0 - self.jitter + 2.0 * self.jitter * u;
        scale(self.capped_delay(n), factor)
    }
}

/// `d · factor`, rounded to the nanosecond; saturates instead of overflowing. `factor` is finite
/// and non-negative.
fn scale(d: Duration, factor: f64) -> Duration {
    let nanos = (d.as_nanos() as f64 * factor).round();
    if nanos < u64::MAX as f64 {
        Duration::from_nanos(nanos as u64)
    } else {
        Duration::try_from_secs_f64(nanos / 1e9).unwrap_or(Duration::MAX)
    }
}

impl Default for RetryPolicy {
    /// 3 attempts, 20 ms, ×2, 1 s cap, ±20% jitter, 50 ms minimum attempt time (R1, R3).
    fn default() -> Self {
        RetryPolicy {
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            base_delay: DEFAULT_BASE_DELAY,
            multiplier: DEFAULT_MULTIPLIER,
            max_delay: DEFAULT_MAX_DELAY,
            jitter: DEFAULT_JITTER,
            min_attempt_time: DEFAULT_MIN_ATTEMPT_TIME,
            observed_min_attempt: None,
            random: Arc::new(SplitMix64::from_entropy()),
        }
    }
}

impl fmt::Debug for RetryPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryPolicy")
            .field("max_attempts", &self.max_attempts)
            .field("base_delay", &self.base_delay)
            .field("multiplier", &self.multiplier)
            .field("max_delay", &self.max_delay)
            .field("jitter", &self.jitter)
            .field("min_attempt_time", &self.min_attempt_time)
            .finish_non_exhaustive()
    }
}

/// Builds a [`RetryPolicy`]; [`build`](Self::build) checks every rule.
///
/// Every setter starts from the default listed on [`RetryPolicy`].
#[derive(Clone)]
#[must_use = "a builder does nothing until `build` is called"]
pub struct RetryPolicyBuilder {
    max_attempts: u32,
    base_delay: Duration,
    multiplier: f64,
    max_delay: Duration,
    jitter: f64,
    min_attempt_time: Duration,
    observed_min_attempt: Option<f64>,
    random: Option<Arc<dyn RandomSource>>,
}

impl RetryPolicyBuilder {
    /// A builder holding the defaults.
    pub const fn new() -> Self {
        RetryPolicyBuilder {
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            base_delay: DEFAULT_BASE_DELAY,
            multiplier: DEFAULT_MULTIPLIER,
            max_delay: DEFAULT_MAX_DELAY,
            jitter: DEFAULT_JITTER,
            min_attempt_time: DEFAULT_MIN_ATTEMPT_TIME,
            observed_min_attempt: None,
            random: None,
        }
    }

    /// Total attempts, the first one included. Must be at least 1 (1 = never retry).
    pub const fn max_attempts(mut self, n: u32) -> Self {
        self.max_attempts = n;
        self
    }

    /// The delay after the first failure. Must be greater than zero and at most `max_delay`.
    pub const fn base_delay(mut self, d: Duration) -> Self {
        self.base_delay = d;
        self
    }

    /// The growth factor. Must be finite and at least 1.
    pub const fn multiplier(mut self, m: f64) -> Self {
        self.multiplier = m;
        self
    }

    /// The cap on the un-jittered delay. Must be at least `base_delay`.
    pub const fn max_delay(mut self, d: Duration) -> Self {
        self.max_delay = d;
        self
    }

    /// The jitter fraction. Must be in `[0, 1)`: a jitter of 1 could make a delay zero.
    pub const fn jitter(mut self, j: f64) -> Self {
        self.jitter = j;
        self
    }

    /// The least time an attempt needs (R3). Any value is valid; zero disables the margin.
    pub const fn min_attempt_time(mut self, d: Duration) -> Self {
        self.min_attempt_time = d;
        self
    }

    /// Deadline-aware attempts (R10): an attempt (a retry or a hedge) is not started when the
    /// time left is shorter than this quantile (`0 < q <= 1`; 0.5 is the median) of the
    /// target's observed successful attempts, instead of the fixed
    /// [`min_attempt_time`](Self::min_attempt_time). The fixed minimum still applies while the
    /// retrier's [`LatencyTracker`](crate::LatencyTracker) holds too few samples, or when the
    /// call names no target ([`Call::with_target`](crate::Call::with_target)). Default: off.
    pub const fn observed_min_attempt(mut self, q: f64) -> Self {
        self.observed_min_attempt = Some(q);
        self
    }

    /// The source of jitter draws; inject [`FixedRandom`](crate::FixedRandom) for exact delays.
    pub fn random_source(mut self, source: impl RandomSource) -> Self {
        self.random = Some(Arc::new(source));
        self
    }

    /// The policy, or the first rule it breaks.
    ///
    /// # Errors
    ///
    /// [`InvalidPolicy`] naming the rule: `max_attempts >= 1`, `base_delay > 0`,
    /// `base_delay <= max_delay`, `multiplier` finite and `>= 1`, `jitter` in `[0, 1)`.
    pub fn build(self) -> Result<RetryPolicy, InvalidPolicy> {
        if self.max_attempts == 0 {
            return Err(InvalidPolicy::Invalid(
                "max_attempts must be at least 1 (it counts the first attempt)",
            ));
        }
        if self.base_delay.is_zero() {
            return Err(InvalidPolicy::Invalid(
                "base_delay must be greater than zero (a retry is never immediate)",
            ));
        }
        if self.base_delay > self.max_delay {
            return Err(InvalidPolicy::Invalid(
                "base_delay must not exceed max_delay",
            ));
        }
        if !(self.multiplier.is_finite() && self.multiplier >= 1.0) {
            return Err(InvalidPolicy::Invalid(
                "multiplier must be a finite number of at least 1",
            ));
        }
        if !(self.jitter.is_finite() && (0.0..1.0).contains(&self.jitter)) {
            return Err(InvalidPolicy::Invalid("jitter must be in [0, 1)"));
        }
        if let Some(q) = self.observed_min_attempt {
            if !(q > 0.0 && q <= 1.0) {
                return Err(InvalidPolicy::Invalid(
                    "the observed minimum attempt percentile must be in (0, 1] (0.5 is the median)",
                ));
            }
        }
        Ok(RetryPolicy {
            max_attempts: self.max_attempts,
            base_delay: self.base_delay,
            multiplier: self.multiplier,
            max_delay: self.max_delay,
            jitter: self.jitter,
            min_attempt_time: self.min_attempt_time,
            observed_min_attempt: self.observed_min_attempt,
            random: self
                .random
                .unwrap_or_else(|| Arc::new(SplitMix64::from_entropy())),
        })
    }
}

impl Default for RetryPolicyBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for RetryPolicyBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryPolicyBuilder")
            .field("max_attempts", &self.max_attempts)
            .field("base_delay", &self.base_delay)
            .field("multiplier", &self.multiplier)
            .field("max_delay", &self.max_delay)
            .field("jitter", &self.jitter)
            .field("min_attempt_time", &self.min_attempt_time)
            .finish_non_exhaustive()
    }
}

/// Why a [`RetryPolicy`] or [`RetryBudget`](crate::RetryBudget) was refused by its builder; the
/// message names the rule, in words.
///
/// ```
/// use idem_retry::{InvalidPolicy, RetryPolicy};
///
/// let err = RetryPolicy::builder().max_attempts(0).build().unwrap_err();
/// assert!(matches!(err, InvalidPolicy::Invalid(rule) if rule.contains("max_attempts")));
/// assert_eq!(
///     err.to_string(),
///     "invalid retry policy setting: max_attempts must be at least 1 (it counts the first attempt)"
/// );
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum InvalidPolicy {
    /// A setting is out of range; the text names the rule it broke.
    Invalid(&'static str),
}

impl fmt::Display for InvalidPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InvalidPolicy::Invalid(rule) => write!(f, "invalid retry policy setting: {rule}"),
        }
    }
}

impl std::error::Error for InvalidPolicy {}
