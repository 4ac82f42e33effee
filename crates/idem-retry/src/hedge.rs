//! The hedging policy (R9), as gRPC's proposal A6 defines it: how many copies, after what delay,
//! and which failures of one copy leave the others running.
//!
//! # Why hedge, and why it is safe here
//!
//! A retry helps a call that failed; it does nothing for one that is merely slow (a pause on one
//! instance, a cold cache, a noisy neighbour). A hedge sends a second copy after a delay and
//! takes the first answer: the tail of the latency distribution is cut to about the delay plus
//! a healthy answer. Everywhere else hedging is limited to reads, because a hedged write runs
//! twice. With an idempotency key it does not: every copy carries the same key, and the server
//! joins the second copy to the run in flight (on the same instance through its engine, on
//! another through the shared tier), so the write runs once and every copy gets its result.
//! A write without a key is never hedged.
//!
//! The cost is load: each hedge is one more request. With the delay at the 95th percentile of
//! recent latencies about 5% of calls send a second copy; hedges are drawn from the
//! [`RetryBudget`](crate::RetryBudget), so in an outage they stay within its share.
//!
//! Hedging cuts the time a copy spends *before* the server takes it on (queueing, a paused
//! instance, the network); once the run has started, a copy that joins it waits for the same
//! run, which still runs once.

use std::time::Duration;

use idem_core::{Code, Reason};

use crate::classify::Classify;
use crate::policy::InvalidPolicy;

/// Default copies of a hedged call, the first included: 2.
pub const DEFAULT_HEDGE_ATTEMPTS: u32 = 2;
/// The most copies a hedged call may send, as gRPC A6 caps it: 5.
pub const MAX_HEDGE_ATTEMPTS: u32 = 5;
/// Default delay: the 95th percentile of the target's recent successful attempts.
pub const DEFAULT_HEDGE_PERCENTILE: f64 = 0.95;

/// When the next copy of a hedged call is sent.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum HedgeDelay {
    /// After this long without an answer (zero: every copy at once).
    Fixed(Duration),
    /// After this quantile (`0 < q <= 1`; 0.95 is p95) of the target's recent successful
    /// attempts, read from the retrier's [`LatencyTracker`](crate::LatencyTracker). While it
    /// holds too few samples, the call is not hedged: it is retried by the retry policy.
    Percentile(f64),
}

/// How a call is hedged (R9): up to [`max_attempts`](HedgingPolicyBuilder::max_attempts)
/// copies, each sent after the [`delay`](HedgingPolicyBuilder::delay) without an answer; the
/// first success wins and the copies still in flight are dropped (cancelled).
///
/// A failed copy is *non-fatal* when its code is one of
/// [`non_fatal_codes`](HedgingPolicyBuilder::non_fatal_codes) (or it says its twin is still
/// running: reason `REQUEST_IN_FLIGHT`): the next copy is then sent at once, and the others keep
/// running. Any other failure is *fatal*: the call ends with it, the other copies dropped. When
/// every copy has failed, the call ends with the last failure; a hedged call is not retried
/// after that (A6). A copy after the first is sent only if the
/// [`RetryBudget`](crate::RetryBudget) grants it and the deadline leaves an attempt's time;
/// a server's pushback that forbids retries stops further copies, and one with a delay makes the
/// next copy wait that long.
///
/// Only reads and keyed writes are hedged: [`Retrier::call_hedged`](crate::Retrier::call_hedged)
/// makes a single attempt of a call without a key that is not idempotent.
///
/// # Default
///
/// | setting | default | constant |
/// |---|---|---|
/// | `max_attempts` (copies, first included; at most 5) | 2 | [`DEFAULT_HEDGE_ATTEMPTS`] |
/// | `delay` | p95 of the target's recent successes ([`HedgeDelay::Percentile`]) | [`DEFAULT_HEDGE_PERCENTILE`] |
/// | `non_fatal_codes` | `UNAVAILABLE` | |
///
/// # Examples
///
/// ```
/// use idem_core::Code;
/// use idem_retry::{HedgeDelay, HedgingPolicy};
/// use std::time::Duration;
///
/// let policy = HedgingPolicy::builder()
///     .max_attempts(3)
///     .delay(HedgeDelay::Fixed(Duration::from_millis(30)))
///     .non_fatal_codes([Code::Unavailable, Code::ResourceExhausted])
///     .build()?;
/// assert_eq!(policy.max_attempts(), 3);
/// assert!(HedgingPolicy::builder().max_attempts(6).build().is_err()); // A6 caps it at 5
/// # Ok::<(), idem_retry::InvalidPolicy>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct HedgingPolicy {
    max_attempts: u32,
    delay: HedgeDelay,
    non_fatal: Vec<Code>,
}

impl Default for HedgingPolicy {
    fn default() -> Self {
        HedgingPolicy {
            max_attempts: DEFAULT_HEDGE_ATTEMPTS,
            delay: HedgeDelay::Percentile(DEFAULT_HEDGE_PERCENTILE),
            non_fatal: vec![Code::Unavailable],
        }
    }
}

impl HedgingPolicy {
    /// A builder starting from the defaults.
    pub fn builder() -> HedgingPolicyBuilder {
        HedgingPolicyBuilder(HedgingPolicy::default())
    }

    /// Copies, the first included.
    pub const fn max_attempts(&self) -> u32 {
        self.max_attempts
    }

    /// When the next copy is sent.
    pub const fn delay(&self) -> HedgeDelay {
        self.delay
    }

    /// The codes of a failed copy that leave the others running.
    pub fn non_fatal_codes(&self) -> &[Code] {
        &self.non_fatal
    }

    /// Whether `failure` of one copy leaves the others running: its code is non-fatal, or the
    /// server says the same key is still running (its twin's run).
    pub fn is_non_fatal<E: Classify + ?Sized>(&self, failure: &E) -> bool {
        self.non_fatal.contains(&failure.code())
            || failure.reason() == Some(&Reason::REQUEST_IN_FLIGHT)
    }
}

/// Builds a [`HedgingPolicy`]; see its defaults.
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until `build` is called"]
pub struct HedgingPolicyBuilder(HedgingPolicy);

impl HedgingPolicyBuilder {
    /// Copies, the first included: 1 to 5. Default: 2.
    pub const fn max_attempts(mut self, n: u32) -> Self {
        self.0.max_attempts = n;
        self
    }

    /// When the next copy is sent. Default: p95 of recent successes.
    pub const fn delay(mut self, delay: HedgeDelay) -> Self {
        self.0.delay = delay;
        self
    }

    /// The codes of a failed copy that leave the others running (A6's `nonFatalStatusCodes`).
    /// Default: `UNAVAILABLE`.
    pub fn non_fatal_codes(mut self, codes: impl IntoIterator<Item = Code>) -> Self {
        self.0.non_fatal = codes.into_iter().collect();
        self
    }

    /// The policy, or the first rule it breaks.
    ///
    /// # Errors
    ///
    /// [`InvalidPolicy`] naming the rule: `max_attempts` from 1 to 5, a percentile in (0, 1].
    pub fn build(self) -> Result<HedgingPolicy, InvalidPolicy> {
        if !(1..=MAX_HEDGE_ATTEMPTS).contains(&self.0.max_attempts) {
            return Err(InvalidPolicy::Invalid(
                "hedging max_attempts must be from 1 to 5 (it counts the first copy)",
            ));
        }
        if let HedgeDelay::Percentile(q) = self.0.delay {
            if !(q > 0.0 && q <= 1.0) {
                return Err(InvalidPolicy::Invalid(
                    "the hedging percentile must be in (0, 1] (0.95 is p95)",
                ));
            }
        }
        Ok(self.0)
    }
}
