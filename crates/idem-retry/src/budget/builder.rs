//! The budget's builder: the settings and the rules they must keep.

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use super::window::{Window, SLOTS};
use super::{
    Inner, RetryBudget, DEFAULT_BUDGET_RATIO, DEFAULT_BUDGET_WINDOW, DEFAULT_MIN_RETRIES_PER_SEC,
};
use crate::policy::InvalidPolicy;

/// Builds a [`RetryBudget`]; [`build`](Self::build) checks every rule.
#[derive(Debug, Clone, Copy)]
#[must_use = "a builder does nothing until `build` is called"]
pub struct RetryBudgetBuilder {
    ratio: f64,
    min_per_sec: u32,
    window: Duration,
}

impl RetryBudgetBuilder {
    /// A builder holding the defaults.
    pub const fn new() -> Self {
        RetryBudgetBuilder {
            ratio: DEFAULT_BUDGET_RATIO,
            min_per_sec: DEFAULT_MIN_RETRIES_PER_SEC,
            window: DEFAULT_BUDGET_WINDOW,
        }
    }

    /// Retries allowed as a fraction of requests (0.1 = 10%). Finite and non-negative.
    pub const fn ratio(mut self, ratio: f64) -> Self {
        self.ratio = ratio;
        self
    }

    /// The floor: retries per second allowed whatever the ratio says. Default: 10
    /// ([`DEFAULT_MIN_RETRIES_PER_SEC`]); 0 = no floor.
    ///
    /// Exactly: a token bucket that holds at most `n` tokens, starts full and refills at `n`
    /// tokens per second, continuously (1 token every `1/n` s), whatever the
    /// [`window`](Self::window). Every granted retry takes a token if one is there; a retry the
    /// ratio does not cover is granted only by taking one. So a quiet client may burst at most `n`
    /// retries, then make `n` per second; under load the floor tops the retry rate up to `n` per
    /// second rather than adding to what the ratio allows.
    ///
    /// ```
    /// use idem_retry::RetryBudget;
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), idem_retry::InvalidPolicy> {
    /// // No ratio: only the floor of 10 retries per second, with a 60 s window.
    /// let budget = RetryBudget::builder()
    ///     .ratio(0.0)
    ///     .min_per_sec(10)
    ///     .window(Duration::from_secs(60))
    ///     .build()?;
    /// assert_eq!((0..100).filter(|_| budget.try_withdraw()).count(), 10); // a burst of 10
    /// tokio::time::advance(Duration::from_millis(500)).await;
    /// assert_eq!((0..100).filter(|_| budget.try_withdraw()).count(), 5); // 10 per second
    /// # Ok(())
    /// # }
    /// ```
    pub const fn min_per_sec(mut self, n: u32) -> Self {
        self.min_per_sec = n;
        self
    }

    /// The sliding window's length; at least 10 ns (it is kept as 10 slots).
    pub const fn window(mut self, window: Duration) -> Self {
        self.window = window;
        self
    }

    /// The budget, or the first rule it breaks.
    ///
    /// # Errors
    ///
    /// [`InvalidPolicy`] naming the rule: `ratio` finite and `>= 0`, `window` at least 10 ns.
    pub fn build(self) -> Result<RetryBudget, InvalidPolicy> {
        if !(self.ratio.is_finite() && self.ratio >= 0.0) {
            return Err(InvalidPolicy::Invalid(
                "budget ratio must be a finite number of at least 0",
            ));
        }
        if self.slot_nanos() == 0 {
            return Err(InvalidPolicy::Invalid(
                "budget window must be at least 10 ns",
            ));
        }
        Ok(self.assemble())
    }

    /// The window's slot length, in nanoseconds (zero for a window under 10 ns).
    fn slot_nanos(&self) -> u128 {
        self.window.as_nanos() / SLOTS as u128
    }

    /// The budget of these settings, which [`build`](Self::build) has checked (or which are the
    /// defaults).
    pub(super) fn assemble(self) -> RetryBudget {
        RetryBudget {
            inner: Arc::new(Inner {
                ratio: self.ratio,
                floor_rate: u128::from(self.min_per_sec),
                slot_nanos: self.slot_nanos(),
                origin: Instant::now(),
                window: Mutex::new(Window::new(self.min_per_sec)),
                refused: AtomicU64::new(0),
            }),
        }
    }
}

impl Default for RetryBudgetBuilder {
    fn default() -> Self {
        Self::new()
    }
}
