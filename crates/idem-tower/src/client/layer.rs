//! The client layer and its builder.

use std::sync::Arc;
use std::time::Duration;

use http::HeaderName;
use idem_retry::{HedgeDelay, HedgingPolicy, LatencyTracker, Retrier, RetryBudget, RetryPolicy};
use tower::Layer;

use crate::client::stats::{ClientStats, Counters};
use crate::client::RetryService;
use crate::{headers, ConfigError, Writes};

/// Default deadline of a whole call (every attempt and wait) when the request carries no
/// `grpc-timeout`: 10 s.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// What the client layer does with a write that comes without an idempotency key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MissingKey {
    /// Make one random key for the call (once, before the first attempt) and send it on every
    /// attempt: effectively-once. The default.
    #[default]
    Generate,
    /// Send the write once and never retry it: at-most-once (S2).
    SendOnce,
}

#[derive(Debug)]
pub(crate) struct ClientConfig {
    pub(crate) writes: Writes,
    pub(crate) grpc_key: HeaderName,
    pub(crate) http_key: HeaderName,
    pub(crate) call_timeout: Duration,
    pub(crate) attempt_timeout: Option<Duration>,
    pub(crate) missing_key: MissingKey,
    pub(crate) hedging: Option<HedgingPolicy>,
}

/// A tower [`Layer`] for clients: one key per logical write, the same key on every attempt,
/// retries decided by idem-retry, the server's pushback obeyed (T3, R1–R6, R8). A success
/// carries a [`CallReport`](crate::CallReport); a call given up on ends in a
/// [`CallFailed`](crate::CallFailed) error. See [`RetryService`].
///
/// Clones share the retrier, its [`RetryBudget`] and the counters ([`stats`](Self::stats)).
///
/// # Default
///
/// | setting | default | requirement |
/// |---|---|---|
/// | [`policy`](RetryLayerBuilder::policy) | [`RetryPolicy::default`]: 3 attempts, 20 ms, ×2, 1 s cap, ±20%, 50 ms minimum attempt | R1, R3 |
/// | [`budget`](RetryLayerBuilder::budget) | [`RetryBudget::new`]: 10% of calls, a floor of 10 retries/s (bursts of at most 10), 10 s window | R5 |
/// | [`writes`](RetryLayerBuilder::writes) | HTTP `POST`/`PATCH`; no gRPC method ([`Writes`]) | T3 |
/// | [`call_timeout`](RetryLayerBuilder::call_timeout) | the request's `grpc-timeout`, else 10 s | T3 |
/// | [`attempt_timeout`](RetryLayerBuilder::attempt_timeout) | none: an attempt may use all the time left | T3 |
/// | [`missing_key`](RetryLayerBuilder::missing_key) | [`MissingKey::Generate`]: a write without a key gets a random one | K2, T3 |
/// | [`hedging`](RetryLayerBuilder::hedging) | none: calls are retried, never hedged | R9 |
/// | [`latencies`](RetryLayerBuilder::latencies) | a [`LatencyTracker::new`] (10 s periods, 100 samples) when hedging at a percentile or [`observed_min_attempt`](idem_retry::RetryPolicyBuilder::observed_min_attempt) is set; else none | R9, R10 |
/// | key headers | `x-idempotency-key` (gRPC), `idempotency-key` (HTTP, sent as an sf-string) | T1 |
///
/// # Examples
///
/// ```
/// use idem_retry::{RetryBudget, RetryPolicy};
/// use idem_tower::{RetryLayer, Writes};
/// use std::time::Duration;
///
/// let layer = RetryLayer::builder()
///     .policy(RetryPolicy::builder().max_attempts(5).build()?)
///     .budget(RetryBudget::builder().ratio(0.2).build()?)
///     .writes(Writes::paths(["/shop.v1.Shop/CreateOrder"]))
///     .call_timeout(Duration::from_secs(2))
///     .attempt_timeout(Duration::from_millis(500))
///     .build()?;
/// // let channel = tower::ServiceBuilder::new().layer(layer.clone()).service(channel);
/// // let client = ShopClient::new(channel);
/// assert_eq!(layer.stats().retrier.calls, 0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
#[must_use = "a layer does nothing until it wraps a service"]
pub struct RetryLayer {
    pub(crate) retrier: Retrier,
    pub(crate) cfg: Arc<ClientConfig>,
    pub(crate) counters: Arc<Counters>,
}

impl RetryLayer {
    /// A layer with every default.
    pub fn new() -> Self {
        RetryLayer::builder().assemble()
    }

    /// A builder starting from the defaults.
    pub fn builder() -> RetryLayerBuilder {
        RetryLayerBuilder {
            policy: RetryPolicy::default(),
            budget: RetryBudget::new(),
            latencies: None,
            cfg: ClientConfig {
                writes: Writes::default(),
                grpc_key: headers::GRPC_KEY,
                http_key: headers::HTTP_KEY,
                call_timeout: DEFAULT_CALL_TIMEOUT,
                attempt_timeout: None,
                missing_key: MissingKey::Generate,
                hedging: None,
            },
        }
    }

    /// Counters of every service this layer made.
    pub fn stats(&self) -> ClientStats {
        self.counters.snapshot(self.retrier.stats())
    }

    /// The retrier (its policy, budget and counters).
    pub fn retrier(&self) -> &Retrier {
        &self.retrier
    }
}

impl Default for RetryLayer {
    fn default() -> Self {
        RetryLayer::new()
    }
}

impl<S> Layer<S> for RetryLayer {
    type Service = RetryService<S>;

    fn layer(&self, inner: S) -> RetryService<S> {
        RetryService::new(inner, self.clone())
    }
}

/// Builds a [`RetryLayer`]; every setting has a default (see [`RetryLayer`]).
#[derive(Debug)]
#[must_use = "a builder does nothing until `build` is called"]
pub struct RetryLayerBuilder {
    policy: RetryPolicy,
    budget: RetryBudget,
    latencies: Option<LatencyTracker>,
    cfg: ClientConfig,
}

impl RetryLayerBuilder {
    /// Attempts and backoff (R1, R3).
    pub fn policy(mut self, policy: RetryPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// The retry budget; pass clones of one budget to share it between layers (R5).
    pub fn budget(mut self, budget: RetryBudget) -> Self {
        self.budget = budget;
        self
    }

    /// Which calls are writes (keyed) — the others are retried as idempotent reads.
    pub fn writes(mut self, writes: Writes) -> Self {
        self.cfg.writes = writes;
        self
    }

    /// The key header on gRPC calls. Default: `x-idempotency-key`.
    pub fn grpc_key_header(mut self, name: HeaderName) -> Self {
        self.cfg.grpc_key = name;
        self
    }

    /// The key header on HTTP calls. Default: `idempotency-key`.
    pub fn http_key_header(mut self, name: HeaderName) -> Self {
        self.cfg.http_key = name;
        self
    }

    /// Deadline of a whole call when the request carries no `grpc-timeout`; greater than zero.
    /// Default: 10 s.
    pub fn call_timeout(mut self, d: Duration) -> Self {
        self.cfg.call_timeout = d;
        self
    }

    /// Longest one attempt may take (capped by the time left), so a slow answer leaves time for a
    /// retry; greater than zero. Default: none.
    pub fn attempt_timeout(mut self, d: Duration) -> Self {
        self.cfg.attempt_timeout = Some(d);
        self
    }

    /// What happens to a write that comes without a key. Default: [`MissingKey::Generate`].
    pub fn missing_key(mut self, what: MissingKey) -> Self {
        self.cfg.missing_key = what;
        self
    }

    /// Hedges every read and every keyed write by `policy` instead of retrying it (R9): a copy
    /// with the same key and the next `grpc-previous-rpc-attempts` after the hedging delay, the
    /// first success taken, the other copies dropped. A write without a key is never hedged (it
    /// is sent once). See [`RetryService`]'s "Hedging". Default: none.
    pub fn hedging(mut self, policy: HedgingPolicy) -> Self {
        self.cfg.hedging = Some(policy);
        self
    }

    /// The recent latencies an adaptive hedging delay and the deadline-aware minimum attempt time
    /// read, per gRPC method (or HTTP method and path); pass clones of one tracker to share it.
    /// Default: one of the layer's own when either needs it.
    pub fn latencies(mut self, tracker: LatencyTracker) -> Self {
        self.latencies = Some(tracker);
        self
    }

    /// The layer, or the first rule its settings break. Describes its metrics to the installed
    /// recorder (Prometheus `# HELP`).
    ///
    /// # Errors
    ///
    /// [`ConfigError::Invalid`] naming the rule: a zero [`call_timeout`](Self::call_timeout) or
    /// [`attempt_timeout`](Self::attempt_timeout), which would leave no time for any attempt.
    pub fn build(self) -> Result<RetryLayer, ConfigError> {
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

    /// The layer of these settings, which [`build`](Self::build) has checked (or which are the
    /// defaults).
    fn assemble(self) -> RetryLayer {
        crate::client::stats::describe();
        let adaptive = matches!(
            self.cfg.hedging.as_ref().map(HedgingPolicy::delay),
            Some(HedgeDelay::Percentile(_))
        );
        let needs_latencies = adaptive || self.policy.observed_min_attempt().is_some();
        let latencies = self
            .latencies
            .or_else(|| needs_latencies.then(LatencyTracker::new));
        let mut retrier = Retrier::new(self.policy).with_budget(self.budget);
        if let Some(t) = latencies {
            retrier = retrier.with_latencies(t);
        }
        RetryLayer {
            retrier,
            cfg: Arc::new(self.cfg),
            counters: Arc::default(),
        }
    }
}
