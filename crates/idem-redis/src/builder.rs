//! [`TieredBuilder`]: the tier's settings and the local engine's, with every default listed.

use std::marker::PhantomData;
use std::time::Duration;

use idem_dedup::remote::RemoteTier;
use idem_dedup::{ConfigError, Engine};

use crate::codec::Codec;
use crate::stats::Counters;
use crate::tiered::{Inner, TieredEngine};

/// What a call does when Redis fails or does not answer in time (SPEC D3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnUnavailable {
    /// Refuse the call with `UNAVAILABLE` (retryable); never run an action without a claim. The
    /// default: a duplicate side effect is worse than a retried request.
    #[default]
    FailClosed,
    /// Run the action without a claim (it gets [`FencingToken::UNFENCED`](idem_dedup::remote::FencingToken::UNFENCED)).
    /// Duplicates across instances become possible while Redis is down; each such run is counted
    /// (`idem_redis_calls_total{result="fail_open"}`, [`TierStats::fail_open`](crate::TierStats::fail_open)).
    /// Only for side effects where availability matters more than effectively-once.
    FailOpen,
}

#[derive(Debug, Clone)]
pub(crate) struct TierConfig {
    pub(crate) lease: Duration,
    pub(crate) ttl: Duration,
    pub(crate) max_wait: Duration,
    pub(crate) poll_first: Duration,
    pub(crate) poll_max: Duration,
    pub(crate) on_unavailable: OnUnavailable,
}

/// Builds a [`TieredEngine`].
///
/// # Default
///
/// | setting | default | SPEC |
/// |---|---|---|
/// | [`lease`](Self::lease) | 30 s: a claim lapses this long after it was taken unless completed | D1, D2 |
/// | [`ttl`](Self::ttl) | 24 h: results live this long in Redis, counted from completion | D1, E2 |
/// | [`local_ttl`](Self::local_ttl) | the `ttl`: how long this instance keeps its copy | E2 |
/// | [`max_wait`](Self::max_wait) | 30 s: longest wait for another instance's run | D2 |
/// | [`poll_interval`](Self::poll_interval) | 10 ms doubling to 250 ms: the polling fallback of waits | D2 |
/// | [`on_unavailable`](Self::on_unavailable) | [`OnUnavailable::FailClosed`] | D3 |
/// | [`local_shards`](Self::local_shards) | available parallelism | E8 |
/// | [`max_local_entries`](Self::max_local_entries) | 1,000,000 | E7 |
/// | [`local_in_flight_timeout`](Self::local_in_flight_timeout) | `max_wait` + `lease` + 5 s | E6 |
/// | [`codec`](Self::codec) | [`BytesCodec`](crate::BytesCodec) (`Vec<u8>`, `String`) | D1 |
///
/// ```no_run
/// # #[tokio::main]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use idem_redis::{OnUnavailable, RedisTier, TieredEngine};
/// use std::time::Duration;
///
/// let tier = RedisTier::builder().connect("redis://127.0.0.1:6379/").await?;
/// let engine = TieredEngine::<Vec<u8>>::builder(tier)
///     .lease(Duration::from_secs(10))
///     .ttl(Duration::from_secs(3600))
///     .max_wait(Duration::from_secs(5))
///     .on_unavailable(OnUnavailable::FailClosed)
///     .build()?;
/// # let _ = engine; Ok(()) }
/// ```
#[derive(Debug)]
pub struct TieredBuilder<V, R, C> {
    remote: R,
    codec: C,
    cfg: TierConfig,
    local_ttl: Option<Duration>,
    local_shards: Option<usize>,
    max_local_entries: usize,
    local_in_flight_timeout: Option<Duration>,
    _v: PhantomData<fn() -> V>,
}

impl<V, R: RemoteTier> TieredBuilder<V, R, crate::BytesCodec> {
    pub(crate) fn new(remote: R) -> Self {
        TieredBuilder {
            remote,
            codec: crate::BytesCodec,
            cfg: TierConfig {
                lease: Duration::from_secs(30),
                ttl: Duration::from_secs(24 * 3600),
                max_wait: Duration::from_secs(30),
                poll_first: Duration::from_millis(10),
                poll_max: Duration::from_millis(250),
                on_unavailable: OnUnavailable::FailClosed,
            },
            local_ttl: None,
            local_shards: None,
            max_local_entries: 1_000_000,
            local_in_flight_timeout: None,
            _v: PhantomData,
        }
    }
}

impl<V, R, C> TieredBuilder<V, R, C> {
    /// The codec that turns values into stored bytes. Default: [`BytesCodec`](crate::BytesCodec).
    pub fn codec<C2>(self, codec: C2) -> TieredBuilder<V, R, C2> {
        TieredBuilder {
            remote: self.remote,
            codec,
            cfg: self.cfg,
            local_ttl: self.local_ttl,
            local_shards: self.local_shards,
            max_local_entries: self.max_local_entries,
            local_in_flight_timeout: self.local_in_flight_timeout,
            _v: PhantomData,
        }
    }

    /// How long a claim holds before another instance may take over (Redis `PX`). Make it longer
    /// than your slowest action: a holder that passes it is fenced out (SPEC D1). Default: 30 s.
    pub const fn lease(mut self, d: Duration) -> Self {
        self.cfg.lease = d;
        self
    }

    /// How long results live in Redis, counted from completion (SPEC D1, E2). Default: 24 h.
    pub const fn ttl(mut self, d: Duration) -> Self {
        self.cfg.ttl = d;
        self
    }

    /// How long this instance keeps its own copy of a result (replayed without a Redis call).
    /// A copy of another instance's result may outlive the Redis record by up to this much.
    /// Default: the [`ttl`](Self::ttl).
    pub const fn local_ttl(mut self, d: Duration) -> Self {
        self.local_ttl = Some(d);
        self
    }

    /// The longest this instance waits for another instance's run before answering
    /// `UNAVAILABLE` / `REQUEST_IN_FLIGHT` with a retry-after hint; a caller's own deadline cuts
    /// its wait shorter (SPEC D2). Default: 30 s.
    pub const fn max_wait(mut self, d: Duration) -> Self {
        self.cfg.max_wait = d;
        self
    }

    /// The polling fallback of waits: a waiter re-claims after `first`, then doubling up to
    /// `max`, even if no completion notice came (and at the holder's lease end at the latest).
    /// Pub/sub normally wakes it first. Default: 10 ms to 250 ms.
    pub const fn poll_interval(mut self, first: Duration, max: Duration) -> Self {
        self.cfg.poll_first = first;
        self.cfg.poll_max = max;
        self
    }

    /// Fail closed (default) or open when Redis is unreachable or slow (SPEC D3).
    pub const fn on_unavailable(mut self, p: OnUnavailable) -> Self {
        self.cfg.on_unavailable = p;
        self
    }

    /// Shards of the local engine (SPEC E8). Default: available parallelism.
    pub const fn local_shards(mut self, n: usize) -> Self {
        self.local_shards = Some(n);
        self
    }

    /// Cap on the local engine's entries (SPEC E7). Default: 1,000,000.
    pub const fn max_local_entries(mut self, n: usize) -> Self {
        self.max_local_entries = n;
        self
    }

    /// The local engine's in-flight lease (SPEC E6), which bounds a whole local run: waiting for
    /// another instance, then the action. Default: `max_wait` + `lease` + 5 s.
    pub const fn local_in_flight_timeout(mut self, d: Duration) -> Self {
        self.local_in_flight_timeout = Some(d);
        self
    }
}

impl<V, R, C> TieredBuilder<V, R, C>
where
    V: Clone + Send + Sync + 'static,
    R: RemoteTier,
    C: Codec<V>,
{
    /// Validates the settings and starts the local engine on the current tokio runtime.
    ///
    /// # Errors
    ///
    /// [`ConfigError::Invalid`] naming the broken rule; [`ConfigError::NoRuntime`] outside a
    /// runtime.
    pub fn build(self) -> Result<TieredEngine<V, R, C>, ConfigError> {
        let c = &self.cfg;
        if c.lease.is_zero() || c.ttl.is_zero() || c.max_wait.is_zero() {
            return Err(ConfigError::Invalid(
                "lease, ttl and max_wait must be greater than zero",
            ));
        }
        if c.poll_first.is_zero() || c.poll_max < c.poll_first {
            return Err(ConfigError::Invalid("poll_interval needs 0 < first <= max"));
        }
        let mut local = Engine::builder()
            .ttl(self.local_ttl.unwrap_or(c.ttl))
            .max_entries(self.max_local_entries)
            .in_flight_timeout(
                self.local_in_flight_timeout
                    .unwrap_or(c.max_wait + c.lease + Duration::from_secs(5)),
            );
        if let Some(n) = self.local_shards {
            local = local.shards(n);
        }
        let local = local.build()?;
        Ok(TieredEngine::from_parts(Inner {
            local,
            remote: self.remote,
            codec: self.codec,
            cfg: self.cfg,
            counters: Counters::default(),
        }))
    }
}
