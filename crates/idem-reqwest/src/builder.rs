//! The middleware's settings and its builder.

use std::sync::Arc;
use std::time::Duration;

use idem_retry::{
    HedgeDelay, HedgingPolicy, LatencyTracker, Retrier, RetryBudget, RetryPolicy, TokioScheduler,
};
use reqwest::header::HeaderName;

use crate::{ConfigError, RetryMiddleware, Writes};

/// Default deadline of a whole call (every attempt and every wait) when the caller passes no
/// [`Deadline`](idem_core::Deadline) in the request's extensions: 10 s.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// The default key header, `Idempotency-Key`, as the IETF Idempotency-Key draft names it.
pub const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static(idem_core::headers::HTTP_KEY);

/// What the middleware does with a write that comes without an idempotency key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MissingKey {
    /// Make one key for the call, once, before the first attempt, and send it on every attempt:
    /// inside a deduplicated run the key derived from the run (the same on every run of the
    /// inbound intent), outside one a random key. Effectively-once. The default.
    #[default]
    Generate,
    /// Send the write once, without a key, and never retry it: at-most-once.
    SendOnce,
}

#[derive(Debug)]
pub(crate) struct Config {
    pub(crate) writes: Writes,
    pub(crate) key_header: HeaderName,
    pub(crate) call_timeout: Duration,
    pub(crate) attempt_timeout: Option<Duration>,
    pub(crate) missing_key: MissingKey,
    pub(crate) hedging: Option<HedgingPolicy>,
}

/// Builds a [`RetryMiddleware`]; every setting has a default (see [`RetryMiddleware`]).
#[derive(Debug)]
#[must_use = "a builder does nothing until `build` is called"]
pub struct RetryMiddlewareBuilder<S = TokioScheduler> {
    policy: RetryPolicy,
    budget: RetryBudget,
    scheduler: S,
    latencies: Option<LatencyTracker>,
    cfg: Config,
}

impl RetryMiddlewareBuilder<TokioScheduler> {
    pub(crate) fn new() -> Self {
        RetryMiddlewareBuilder {
            policy: RetryPolicy::default(),
            budget: RetryBudget::new(),
            scheduler: TokioScheduler,
            latencies: None,
            cfg: Config {
                writes: Writes::default(),
                key_header: IDEMPOTENCY_KEY,
                call_timeout: DEFAULT_CALL_TIMEOUT,
                attempt_timeout: None,
                missing_key: MissingKey::Generate,
                hedging: None,
            },
        }
    }
}

impl<S> RetryMiddlewareBuilder<S> {
    /// Attempts and backoff. Default: [`RetryPolicy::default`].
    pub fn policy(mut self, policy: RetryPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// The retry budget. Pass clones of one budget to share it between clients, and with
    /// idem-tower's client layer: retries then stay a share of all the calls they make together.
    /// Default: a budget of its own, [`RetryBudget::new`].
    pub fn budget(mut self, budget: RetryBudget) -> Self {
        self.budget = budget;
        self
    }

    /// Which requests are writes (keyed); the others are retried as idempotent reads. Default:
    /// `POST` and `PATCH` ([`Writes::default`]).
    pub fn writes(mut self, writes: Writes) -> Self {
        self.cfg.writes = writes;
        self
    }

    /// The key header. Default: `Idempotency-Key` ([`IDEMPOTENCY_KEY`]).
    pub fn key_header(mut self, name: HeaderName) -> Self {
        self.cfg.key_header = name;
        self
    }

    /// Deadline of a whole call when the caller passes no [`Deadline`](idem_core::Deadline) in
    /// the request's extensions; greater than zero. Default: 10 s ([`DEFAULT_CALL_TIMEOUT`]).
    pub fn call_timeout(mut self, d: Duration) -> Self {
        self.cfg.call_timeout = d;
        self
    }

    /// Longest one attempt may wait for the response's headers (capped by the time left of the
    /// call), so that a slow answer leaves time for a retry; greater than zero. Default: none,
    /// an attempt may use all the time left.
    pub fn attempt_timeout(mut self, d: Duration) -> Self {
        self.cfg.attempt_timeout = Some(d);
        self
    }

    /// What happens to a write that comes without a key. Default: [`MissingKey::Generate`].
    pub fn missing_key(mut self, what: MissingKey) -> Self {
        self.cfg.missing_key = what;
        self
    }

    /// Hedges every read and every keyed write by `policy` instead of retrying it: a copy with
    /// the same key after the hedging delay, the first success taken, the other copies dropped.
    /// A write without a key, or with a body that is a stream, is never hedged. Default: none.
    pub fn hedging(mut self, policy: HedgingPolicy) -> Self {
        self.cfg.hedging = Some(policy);
        self
    }

    /// The recent latencies, per method and path, that an adaptive hedging delay and the
    /// deadline-aware minimum attempt time read; pass clones of one tracker to share it.
    /// Default: one of the middleware's own when either needs it.
    pub fn latencies(mut self, tracker: LatencyTracker) -> Self {
        self.latencies = Some(tracker);
        self
    }

    /// Waits between attempts through `scheduler` instead of tokio's timer (a
    /// [`VirtualScheduler`](idem_retry::VirtualScheduler) in tests records every wait and makes
    /// none). Default: [`TokioScheduler`].
    pub fn scheduler<S2>(self, scheduler: S2) -> RetryMiddlewareBuilder<S2> {
        RetryMiddlewareBuilder {
            policy: self.policy,
            budget: self.budget,
            scheduler,
            latencies: self.latencies,
            cfg: self.cfg,
        }
    }

    /// The middleware, or the first rule its settings break. Describes its metrics and the
    /// retrier's to the installed recorder (Prometheus `# HELP`).
    ///
    /// # Errors
    ///
    /// [`ConfigError::Invalid`] naming the rule: a zero [`call_timeout`](Self::call_timeout) or
    /// [`attempt_timeout`](Self::attempt_timeout), which would leave no time for any attempt.
    pub fn build(self) -> Result<RetryMiddleware<S>, ConfigError> {
        if self.cfg.call_timeout.is_zero() {
            return Err(ConfigError::Invalid(
                "call_timeout must be greater than zero (no attempt could be made)",
            ));
        }
        if self.cfg.attempt_timeout.is_some_and(|t| t.is_zero()) {
            return Err(ConfigError::Invalid(
                "attempt_timeout must be greater than zero (no attempt could get an answer)",
            ));
        }
        Ok(self.assemble())
    }

    /// The middleware of these settings, which [`build`](Self::build) has checked (or which are
    /// the defaults).
    pub(crate) fn assemble(self) -> RetryMiddleware<S> {
        crate::stats::describe();
        let adaptive = matches!(
            self.cfg.hedging.as_ref().map(HedgingPolicy::delay),
            Some(HedgeDelay::Percentile(_))
        );
        let needs = adaptive || self.policy.observed_min_attempt().is_some();
        let mut retrier = Retrier::new(self.policy)
            .with_budget(self.budget)
            .with_scheduler(self.scheduler);
        if let Some(t) = self.latencies.or_else(|| needs.then(LatencyTracker::new)) {
            retrier = retrier.with_latencies(t);
        }
        RetryMiddleware {
            retrier,
            cfg: Arc::new(self.cfg),
            counters: Arc::default(),
        }
    }
}
