//! The retrier: runs an async operation, retrying it by the policy, the classifier, the deadline
//! and the budget, waiting through the scheduler (R1–R6, S2, S3).

mod attempts;
mod hedged;
mod refresh;

use std::future::Future;
use std::sync::Arc;

use crate::budget::RetryBudget;
use crate::call::{Attempt, Call};
use crate::classify::Classify;
use crate::error::RetryError;
use crate::latency::LatencyTracker;
use crate::policy::RetryPolicy;
use crate::scheduler::{Scheduler, TokioScheduler};
use crate::stats::{Counters, RetryStats};
use refresh::{NoRefresh, WithRefresh};

/// Retries any async operation `FnMut(Attempt) -> impl Future<Output = Result<T, E>>`; usable
/// without tower.
///
/// For each call: the first attempt always runs. After a failure the retrier
/// 1. [`classify`](crate::classify)s it against the [`Call`] (R2, S2, S3), and stops if it is not retryable
///    or the server's pushback forbids a retry (R8);
/// 2. stops if the attempts are used up, or if the remaining deadline does not cover the wait plus
///    the policy's minimum attempt time (R3) — never starting a hopeless attempt, never
///    waiting past the deadline;
/// 3. asks the [`RetryBudget`] for a retry (R5), and stops if refused;
/// 4. waits through the [`Scheduler`] (R4): exactly the server's pushback if it sent one,
///    else the policy's backoff. The backoff counts the failures since the last pushback, so the
///    first backoff after a pushback is the base delay again, then ×2, ... (gRPC A6, R8);
/// 5. for `ABORTED`, runs the caller's refresh step ([`call_with_refresh`](Self::call_with_refresh));
/// 6. runs the next attempt with the **same key** and the next attempt number (R6).
///
/// When it stops it returns the last error unchanged and counts why ([`GiveUp`](crate::GiveUp));
/// [`call_reporting`](Self::call_reporting) returns the why and the attempt count with it.
///
/// Clones share the policy, budget, scheduler and counters. Retry at one layer only (R7): a
/// retrier inside a server handler multiplies with the client's.
///
/// # Default
///
/// [`RetryPolicy::default`] (3 attempts, 20 ms, ×2, 1 s cap, ±20%, 50 ms minimum attempt),
/// [`RetryBudget::new`] (10%, 10 retries/s floor, 10 s window), [`TokioScheduler`].
///
/// # Examples
///
/// ```
/// use idem_core::{Code, IdempotencyKey, Status};
/// use idem_retry::{Call, Retrier, RetryPolicy};
/// use std::sync::atomic::{AtomicU32, Ordering};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let retrier = Retrier::default();
/// let key = IdempotencyKey::derive("order-1001", "CreateOrder");
/// let tries = AtomicU32::new(0);
///
/// let order_id = retrier
///     .call(&Call::keyed(key.clone()), |attempt| {
///         let n = tries.fetch_add(1, Ordering::Relaxed);
///         let key = key.clone();
///         async move {
///             assert_eq!(attempt.key(), Some(&key)); // the same key on every attempt
///             if n == 0 {
///                 Err(Status::new(Code::Unavailable, "connection refused"))
///             } else {
///                 Ok(format!("order-for-{}", attempt.key().unwrap()))
///             }
///         }
///     })
///     .await
///     .unwrap();
/// assert!(order_id.starts_with("order-for-"));
/// assert_eq!(retrier.stats().attempts, 2);
/// # }
/// ```
///
/// # Concurrent calls with the same key
///
/// The retrier does not coordinate calls: two tasks calling with the same [`Call`] both make their
/// attempts. That is safe for keyed calls because the server deduplicates by key — the second
/// caller's attempts join the first run or replay its stored result — and harmless for idempotent
/// ones. Both calls count against the shared [`RetryBudget`].
///
/// # Cancellation safety
///
/// Dropping the future of [`call`](Self::call) drops the attempt in progress (or the wait) and
/// makes no further attempt. Whether a dropped attempt reached the server is unknown, so call again
/// with the **same** [`Call`] (same key): the server's dedup joins or replays the first run.
#[derive(Debug, Clone)]
pub struct Retrier<S = TokioScheduler> {
    policy: RetryPolicy,
    budget: RetryBudget,
    scheduler: S,
    counters: Arc<Counters>,
    latencies: Option<LatencyTracker>,
}

impl Retrier<TokioScheduler> {
    /// A retrier with `policy`, its own default [`RetryBudget`] and the tokio scheduler.
    pub fn new(policy: RetryPolicy) -> Self {
        crate::metrics::describe();
        Retrier {
            policy,
            budget: RetryBudget::new(),
            scheduler: TokioScheduler,
            counters: Arc::default(),
            latencies: None,
        }
    }
}

impl Default for Retrier<TokioScheduler> {
    /// `Retrier::new(RetryPolicy::default())`.
    fn default() -> Self {
        Self::new(RetryPolicy::default())
    }
}

impl<S> Retrier<S> {
    /// Uses `budget` (share one budget between retriers by passing clones).
    #[must_use]
    pub fn with_budget(mut self, budget: RetryBudget) -> Self {
        self.budget = budget;
        self
    }

    /// Waits through `scheduler` instead.
    #[must_use]
    pub fn with_scheduler<S2>(self, scheduler: S2) -> Retrier<S2> {
        Retrier {
            policy: self.policy,
            budget: self.budget,
            scheduler,
            counters: self.counters,
            latencies: self.latencies,
        }
    }

    /// Records the latency of every successful attempt of a call that names its target
    /// ([`Call::with_target`]) in `tracker`, and reads its percentiles: an adaptive hedging
    /// delay ([`HedgeDelay::Percentile`](crate::HedgeDelay::Percentile)) and the deadline-aware
    /// minimum attempt time ([`RetryPolicyBuilder::observed_min_attempt`](crate::RetryPolicyBuilder::observed_min_attempt))
    /// need one. Default: none, nothing recorded.
    #[must_use]
    pub fn with_latencies(mut self, tracker: LatencyTracker) -> Self {
        self.latencies = Some(tracker);
        self
    }

    /// The latency tracker, if any.
    pub fn latencies(&self) -> Option<&LatencyTracker> {
        self.latencies.as_ref()
    }

    /// The least time left for which an attempt of `call` is started: the policy's observed
    /// quantile of the call's target when it is set and known (R10), else its fixed minimum
    /// (R3).
    pub fn min_attempt_time(&self, call: &Call) -> std::time::Duration {
        let observed = match (
            self.policy.observed_min_attempt(),
            &self.latencies,
            call.target(),
        ) {
            (Some(q), Some(t), Some(target)) => t.percentile(target, q),
            _ => None,
        };
        observed.unwrap_or(self.policy.min_attempt_time())
    }

    /// Records a successful attempt of `call` that took `took`, if latencies are tracked.
    fn record(&self, call: &Call, took: std::time::Duration) {
        if let (Some(t), Some(target)) = (&self.latencies, call.target()) {
            t.record(target, took);
        }
    }

    /// The policy.
    pub fn policy(&self) -> &RetryPolicy {
        &self.policy
    }

    /// The budget.
    pub fn budget(&self) -> &RetryBudget {
        &self.budget
    }

    /// The scheduler.
    pub fn scheduler(&self) -> &S {
        &self.scheduler
    }

    /// Counters of calls, attempts, retries and give-ups, shared by clones.
    pub fn stats(&self) -> RetryStats {
        self.counters.snapshot()
    }
}

impl<S: Scheduler> Retrier<S> {
    /// Runs `op` for `call`, retrying as described on [`Retrier`]. `ABORTED` failures are not
    /// retried: that needs a refresh step ([`call_with_refresh`](Self::call_with_refresh)).
    ///
    /// # Errors
    ///
    /// The last attempt's error, when a failure is not retried.
    pub async fn call<T, E, F, Fut>(&self, call: &Call, op: F) -> Result<T, E>
    where
        F: FnMut(Attempt) -> Fut,
        Fut: Future<Output = Result<T, E>>,
        E: Classify,
    {
        self.run(call, op, NoRefresh)
            .await
            .map_err(RetryError::into_error)
    }

    /// Like [`call`](Self::call), and says why it gave up: the error is a [`RetryError`] with
    /// the last attempt's error, the [`GiveUp`](crate::GiveUp) reason and the number of attempts made.
    ///
    /// # Errors
    ///
    /// A [`RetryError`] when a failure is not retried.
    ///
    /// # Examples
    ///
    /// ```
    /// use idem_core::{Code, Status};
    /// use idem_retry::{Call, GiveUp, Retrier, RetryBudget, RetryPolicy};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), idem_retry::InvalidPolicy> {
    /// // No ratio and no floor: the budget refuses every retry.
    /// let budget = RetryBudget::builder().ratio(0.0).min_per_sec(0).build()?;
    /// let retrier = Retrier::new(RetryPolicy::default()).with_budget(budget);
    /// let err = retrier
    ///     .call_reporting(&Call::idempotent(), |_| async {
    ///         Err::<(), _>(Status::new(Code::Unavailable, "down"))
    ///     })
    ///     .await
    ///     .unwrap_err();
    /// assert_eq!((err.reason(), err.attempts()), (GiveUp::Budget, 1));
    /// assert_eq!(
    ///     err.to_string(),
    ///     "gave up after 1 attempt (the retry budget was spent): UNAVAILABLE: down"
    /// );
    /// # Ok(())
    /// # }
    /// ```
    pub async fn call_reporting<T, E, F, Fut>(&self, call: &Call, op: F) -> Result<T, RetryError<E>>
    where
        F: FnMut(Attempt) -> Fut,
        Fut: Future<Output = Result<T, E>>,
        E: Classify,
    {
        self.run(call, op, NoRefresh).await
    }

    /// Like [`call`](Self::call), and retries `ABORTED` / `STOCK_CONFLICT` failures too: after the
    /// backoff it awaits `refresh(&error)` (re-read the version the write lost on, update the
    /// request the next attempt sends), then makes the next attempt.
    ///
    /// # Errors
    ///
    /// The last attempt's error, or the refresh step's error if it fails.
    ///
    /// # Examples
    ///
    /// ```
    /// use idem_core::{Code, IdempotencyKey, Reason, Status};
    /// use idem_retry::{Call, Retrier};
    /// use std::sync::atomic::{AtomicU64, Ordering};
    /// use std::sync::Arc;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let stock_version = Arc::new(AtomicU64::new(7)); // the server's row
    /// let seen = Arc::new(AtomicU64::new(6)); // the client's stale copy
    /// let call = Call::keyed(IdempotencyKey::derive("deduct-42", "DeductStock"));
    ///
    /// let result = Retrier::default()
    ///     .call_with_refresh(
    ///         &call,
    ///         |_attempt| {
    ///             let (server, seen) = (stock_version.clone(), seen.clone());
    ///             async move {
    ///                 let expected = seen.load(Ordering::Relaxed);
    ///                 server
    ///                     .compare_exchange(expected, expected + 1, Ordering::Relaxed, Ordering::Relaxed)
    ///                     .map_err(|_| Status::new(Code::Aborted, "version moved").with_reason(Reason::STOCK_CONFLICT))
    ///             }
    ///         },
    ///         |_err: &Status| {
    ///             let (server, seen) = (stock_version.clone(), seen.clone());
    ///             async move {
    ///                 seen.store(server.load(Ordering::Relaxed), Ordering::Relaxed); // re-read
    ///                 Ok(())
    ///             }
    ///         },
    ///     )
    ///     .await;
    /// assert_eq!(result, Ok(7));
    /// assert_eq!(stock_version.load(Ordering::Relaxed), 8);
    /// # }
    /// ```
    pub async fn call_with_refresh<T, E, F, Fut, R, RFut>(
        &self,
        call: &Call,
        op: F,
        refresh: R,
    ) -> Result<T, E>
    where
        F: FnMut(Attempt) -> Fut,
        Fut: Future<Output = Result<T, E>>,
        E: Classify,
        R: FnMut(&E) -> RFut,
        RFut: Future<Output = Result<(), E>>,
    {
        self.run(call, op, WithRefresh(refresh))
            .await
            .map_err(RetryError::into_error)
    }
}
