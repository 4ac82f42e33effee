//! The retry budget: a cap on retries across all calls.
//!
//! # Why a budget and not only max attempts?
//!
//! `max_attempts` bounds one call; it does not bound the system. When a dependency goes down,
//! every call fails and every call retries: with 3 attempts the dependency sees 3× its normal load
//! exactly when it can least take it, and the retries keep it down. A budget caps retries to a
//! fraction of recent requests (default 10%): in a brief blip everything that fails is retried; in
//! an outage the extra load stays at +10% and calls fail fast with their last error. A small
//! per-second floor keeps a quiet client (a few calls a minute) able to retry at all, without
//! letting it burst: the floor is a token bucket of `min_per_sec` tokens refilled at
//! `min_per_sec` per second, whatever the window's length.

mod builder;
mod window;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

pub use builder::RetryBudgetBuilder;
use window::Window;

/// Default cap on retries as a fraction of requests in the window.
pub const DEFAULT_BUDGET_RATIO: f64 = 0.1;
/// Default floor: 10 retries per second always allowed, whatever the ratio says, in bursts of at
/// most 10 (see [`RetryBudgetBuilder::min_per_sec`]).
pub const DEFAULT_MIN_RETRIES_PER_SEC: u32 = 10;
/// Default length of the sliding window.
pub const DEFAULT_BUDGET_WINDOW: Duration = Duration::from_secs(10);

/// A sliding-window retry budget, shared by every call and task that holds a clone.
///
/// Each call [`deposit`](Self::deposit)s once; each retry must [`try_withdraw`](Self::try_withdraw).
/// A withdrawal is allowed when either
///
/// * the ratio covers it: over the window, `retries + 1 <= ratio · requests`; or
/// * the floor has a token. The floor is a token bucket that holds at most `min_per_sec` tokens,
///   starts full and refills at `min_per_sec` tokens per second (continuously, independent of the
///   window). Every granted retry takes a token if one is there, so the floor tops the retry rate
///   up to `min_per_sec` per second rather than adding to what the ratio allows; a quiet client
///   may burst at most `min_per_sec` retries, then `min_per_sec` per second.
///
/// Otherwise it is refused and counted ([`refused`](Self::refused)), and the retrier fails the
/// call fast with its last error.
///
/// Time comes from tokio's clock, so paused-clock tests drive the window and the bucket. The state
/// sits behind one `std::sync::Mutex` whose critical sections are a handful of additions over 10
/// slots and never span an `.await`; the refusal counter is an atomic.
///
/// # Default
///
/// | setting | default | constant |
/// |---|---|---|
/// | ratio (retries / requests) | 10% | [`DEFAULT_BUDGET_RATIO`] |
/// | floor | 10 retries per second, bursts of at most 10 | [`DEFAULT_MIN_RETRIES_PER_SEC`] |
/// | window | 10 s (10 slots of 1 s) | [`DEFAULT_BUDGET_WINDOW`] |
///
/// # Sizing the budget
///
/// The defaults are sized for a dependency that is healthy or briefly blips: retries can add at
/// most 10% to its load (or 10 a second, for a quiet client), so a failing server is not
/// hammered by its clients' retries. When more than 10% of first attempts fail, the budget runs
/// out and the calls it does not cover end at once with their last error, reported as "the
/// retry budget was spent" ([`GiveUp::Budget`](crate::GiveUp::Budget)). That is the budget
/// doing its job, not a fault.
///
/// The arithmetic, with the defaults: 3,000 calls in 3 s, 40% of them (1,200) failing their
/// first attempt and succeeding on a retry. The window holds all 3,000 requests, so the ratio
/// grants 10% of them: 300 retries. The floor adds none here: every granted retry takes one of
/// its tokens, so it tops the rate up to 10 a second rather than adding to the ratio, and the
/// ratio already grants 100 a second. So 300 failing calls are retried and succeed, and 900
/// (three quarters of the failures, 30% of all calls) give up on the budget. At a steady rate
/// the same holds per window: retries are 10% of the last 10 s of requests.
///
/// To retry through a higher failure rate, size the budget for it:
///
/// * **ratio** ≈ expected failure rate of first attempts × (attempts − 1). That covers every
///   failing call up to its last attempt even when its retries fail too (with the default 3
///   attempts: 40% × 2 = 0.8); the failure rate alone covers one retry per failing call. The
///   cost is the same number: at 0.8, an outage can make the dependency see 1.8× its load.
/// * **floor** ([`min_per_sec`](RetryBudgetBuilder::min_per_sec)) for low traffic, where 10%
///   of a few requests in the window is less than one retry: at least the retries a quiet
///   client needs a second (its requests a second × failure rate × (attempts − 1)), rounded up.
/// * **window** ([`window`](RetryBudgetBuilder::window)): how far back the ratio looks; a
///   longer one lets a burst of failures spend what a calm stretch saved.
///
/// ```
/// use idem_retry::{Retrier, RetryBudget, RetryPolicy};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), idem_retry::InvalidPolicy> {
/// // Up to 40% of first attempts fail, 3 attempts per call: every failure may be retried
/// // twice. A client of 2 requests a second needs 2 × 0.4 × 2 = 1.6, so 2 retries a second.
/// let policy = RetryPolicy::default();
/// let failure_rate = 0.4;
/// let retries_per_call = f64::from(policy.max_attempts() - 1);
/// let sized = RetryBudget::builder()
///     .ratio(failure_rate * retries_per_call) // 0.8
///     .min_per_sec(2)
///     .build()?;
///
/// // 1,000 requests, 400 failing twice: 800 retries wanted.
/// let default = RetryBudget::new();
/// for _ in 0..1_000 {
///     sized.deposit();
///     default.deposit();
/// }
/// assert_eq!((0..800).filter(|_| sized.try_withdraw()).count(), 800); // all of them
/// assert_eq!((0..800).filter(|_| default.try_withdraw()).count(), 100); // 10% of 1,000
///
/// let retrier = Retrier::new(policy).with_budget(sized);
/// # let _ = retrier;
/// # Ok(())
/// # }
/// ```
///
/// # Examples
///
/// ```
/// use idem_retry::RetryBudget;
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), idem_retry::InvalidPolicy> {
/// // 10%, no floor: 100 requests pay for 10 retries.
/// let budget = RetryBudget::builder().ratio(0.1).min_per_sec(0).build()?;
/// let shared = budget.clone(); // clones share one window
/// for _ in 0..100 {
///     shared.deposit();
/// }
/// let granted = (0..20).filter(|_| budget.try_withdraw()).count();
/// assert_eq!(granted, 10);
/// assert_eq!(budget.refused(), 10);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct RetryBudget {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    ratio: f64,
    /// `min_per_sec`: the floor's refill, in units per nanosecond (and tokens per second).
    floor_rate: u128,
    slot_nanos: u128,
    origin: Instant,
    window: Mutex<Window>,
    refused: AtomicU64,
}

/// A view of a [`RetryBudget`]'s window, from [`RetryBudget::snapshot`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct BudgetSnapshot {
    /// Requests deposited in the current window.
    pub requests: u64,
    /// Retries granted in the current window.
    pub retries: u64,
    /// Withdrawals refused since the budget was made.
    pub refused: u64,
}

impl RetryBudget {
    /// A budget with the defaults: 10% of requests, a floor of 10 retries/s (bursts of at most
    /// 10), a 10 s window.
    pub fn new() -> Self {
        RetryBudgetBuilder::new().assemble()
    }

    /// A builder starting from the defaults.
    pub const fn builder() -> RetryBudgetBuilder {
        RetryBudgetBuilder::new()
    }

    /// The window, its current epoch and the time in nanoseconds since the origin.
    fn lock(&self) -> (MutexGuard<'_, Window>, u64, u128) {
        let now = Instant::now()
            .saturating_duration_since(self.inner.origin)
            .as_nanos();
        let epoch = u64::try_from(now / self.inner.slot_nanos).unwrap_or(u64::MAX - 1);
        let guard = self
            .inner
            .window
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        (guard, epoch, now)
    }

    /// Records one request (call it once per call, not per attempt).
    pub fn deposit(&self) {
        let (mut w, epoch, _) = self.lock();
        let i = w.slot(epoch);
        w.requests[i] += 1;
    }

    /// Asks for one retry. Records it and returns `true` if the ratio covers it or the floor has a
    /// token (see [`RetryBudget`]); otherwise counts a refusal and returns `false`.
    pub fn try_withdraw(&self) -> bool {
        let (mut w, epoch, now) = self.lock();
        let (req, ret) = w.totals(epoch);
        let by_ratio = (ret + 1) as f64 <= self.inner.ratio * req as f64;
        // Every grant takes a floor token when there is one; a grant the ratio does not cover
        // needs one.
        let by_floor = w.take_floor_token(now, self.inner.floor_rate);
        if by_ratio || by_floor {
            let i = w.slot(epoch);
            w.retries[i] += 1;
            true
        } else {
            drop(w);
            self.inner.refused.fetch_add(1, Ordering::Relaxed);
            false
        }
    }

    /// Withdrawals refused since the budget was made.
    pub fn refused(&self) -> u64 {
        self.inner.refused.load(Ordering::Relaxed)
    }

    /// Requests and retries in the current window, and refusals so far.
    pub fn snapshot(&self) -> BudgetSnapshot {
        let (w, epoch, _) = self.lock();
        let (requests, retries) = w.totals(epoch);
        drop(w);
        BudgetSnapshot {
            requests,
            retries,
            refused: self.refused(),
        }
    }
}

impl Default for RetryBudget {
    /// [`RetryBudget::new`].
    fn default() -> Self {
        Self::new()
    }
}
