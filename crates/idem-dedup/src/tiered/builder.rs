//! [`TieredBuilder`]: the tier's settings and the local engine's, with every default listed.

use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use crate::codec::{BytesCodec, Codec};
use crate::config::{check_name, DEFAULT_NAME};
use crate::local::LocalCache;
use crate::remote::{OwnerId, RemoteTier};
use crate::tiered::stats::Counters;
use crate::tiered::{Inner, TieredEngine};
use crate::trace::ScopeLogging;
use crate::ConfigError;

/// What a call does when the shared tier fails or does not answer in time (D3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum OnUnavailable {
    /// Refuse the call with `UNAVAILABLE` (retryable); never run an action without a claim. The
    /// default: a duplicate side effect is worse than a retried request.
    #[default]
    FailClosed,
    /// Run the action without a claim (it gets [`FencingToken::UNFENCED`](crate::remote::FencingToken::UNFENCED)).
    /// Duplicates across instances become possible while the tier is down; each such run is
    /// counted (`idem_tier_calls_total{result="fail_open"}`,
    /// [`TierStats::fail_open`](crate::tiered::TierStats::fail_open)).
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
    /// Names this engine's claims (see the `remote` module's docs on owners and orphans).
    pub(crate) owner: OwnerId,
    /// The `engine` label and field, of this engine and its local engine (E15).
    pub(crate) name: Arc<str>,
    /// What spans and events show of a scope (E15).
    pub(crate) scope_logging: ScopeLogging,
    /// The local engine's TTL (set by `build`), to tell the shared record's expiry from the
    /// local copy's.
    pub(crate) local_ttl: Duration,
}

/// Builds a [`TieredEngine`].
///
/// # Default
///
/// | setting | default | |
/// |---|---|---|
/// | [`lease`](Self::lease) | 30 s: a claim lapses this long after it was taken unless completed | D1, D2 |
/// | [`ttl`](Self::ttl) | 24 h: results live this long in the tier, counted from completion | D1, E2 |
/// | [`max_wait`](Self::max_wait) | 30 s: longest wait for another instance's run | D2 |
/// | [`poll_interval`](Self::poll_interval) | 10 ms doubling to 250 ms: the polling fallback of waits | D2 |
/// | [`on_unavailable`](Self::on_unavailable) | [`OnUnavailable::FailClosed`] | D3 |
/// | [`local`](Self::local) | [`LocalCache`]'s defaults: copies kept 5 min (at most the `ttl`), 1,000,000 entries, available parallelism; a local run's lease `max_wait` + `lease` + 5 s | D6 |
/// | [`codec`](Self::codec) | [`BytesCodec`] (`Vec<u8>`, `String`; `idem-tower` adds its stored responses) | D1 |
/// | [`name`](Self::name) | `"default"`, for this engine's metrics and its local engine's | E9, E15 |
/// | [`scope_logging`](Self::scope_logging) | [`ScopeLogging::Digest`] | E15 |
///
/// When the local engine is full, calls go to the tier directly rather than being refused (D6):
/// the tier arbitrates them, without local coalescing or a local copy.
///
/// ```no_run
/// # async fn demo(tier: impl idem_dedup::remote::RemoteTier) -> Result<(), Box<dyn std::error::Error>> {
/// use idem_dedup::tiered::{OnUnavailable, TieredEngine};
/// use std::time::Duration;
///
/// // `tier`: a RedisTier (idem-redis), a PgTier (idem-postgres), or your own RemoteTier.
/// let engine = TieredEngine::<Vec<u8>, _>::builder(tier)
///     .lease(Duration::from_secs(10))
///     .ttl(Duration::from_secs(3600))
///     .max_wait(Duration::from_secs(5))
///     .on_unavailable(OnUnavailable::FailClosed)
///     .build()?;
/// # let _ = engine; Ok(()) }
/// ```
#[derive(Debug)]
#[must_use = "a builder does nothing until `build` is called"]
pub struct TieredBuilder<V, R, C> {
    remote: R,
    codec: C,
    cfg: TierConfig,
    local: LocalCache,
    _v: PhantomData<fn() -> V>,
}

impl<V, R: RemoteTier> TieredBuilder<V, R, BytesCodec> {
    pub(crate) fn new(remote: R) -> Self {
        TieredBuilder {
            remote,
            codec: BytesCodec,
            cfg: TierConfig {
                lease: Duration::from_secs(30),
                ttl: Duration::from_secs(24 * 3600),
                max_wait: Duration::from_secs(30),
                poll_first: Duration::from_millis(10),
                poll_max: Duration::from_millis(250),
                on_unavailable: OnUnavailable::FailClosed,
                owner: OwnerId::random(),
                name: Arc::from(DEFAULT_NAME),
                scope_logging: ScopeLogging::Digest,
                local_ttl: Duration::from_secs(24 * 3600),
            },
            local: LocalCache::new(),
            _v: PhantomData,
        }
    }
}

impl<V, R, C> TieredBuilder<V, R, C> {
    /// The codec that turns values into stored bytes. Default: [`BytesCodec`].
    pub fn codec<C2>(self, codec: C2) -> TieredBuilder<V, R, C2> {
        TieredBuilder {
            remote: self.remote,
            codec,
            cfg: self.cfg,
            local: self.local,
            _v: PhantomData,
        }
    }

    /// How long a claim holds before another instance may take over. Make it longer than your
    /// slowest action (give the action a timeout below it): once it lapses, another instance may
    /// run the action again; a holder that completes after another claimed is fenced out (D1).
    /// A holder that completes late while nobody else claimed is still recorded. Default: 30 s.
    pub const fn lease(mut self, d: Duration) -> Self {
        self.cfg.lease = d;
        self
    }

    /// How long results live in the tier, counted from completion (D1, E2). Default: 24 h.
    pub const fn ttl(mut self, d: Duration) -> Self {
        self.cfg.ttl = d;
        self
    }

    /// The longest this instance waits for another instance's run before answering
    /// `UNAVAILABLE` / `REQUEST_IN_FLIGHT` with a retry-after hint; a caller's own deadline cuts
    /// its wait shorter (D2). Default: 30 s.
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

    /// Fail closed (default) or open when the tier is unreachable or slow (D3).
    pub const fn on_unavailable(mut self, p: OnUnavailable) -> Self {
        self.cfg.on_unavailable = p;
        self
    }

    /// The local engine's settings: how long this instance keeps its copies, how many it holds,
    /// its shards and its runs' lease (see [`LocalCache`], whose defaults `idem-postgres`'
    /// engine shares). When the local engine is full, calls go to the tier directly instead of
    /// being refused. Default: [`LocalCache::new`]; a local run's lease is then
    /// `max_wait + lease + 5 s` (the wait for another instance's run, then the action).
    pub const fn local(mut self, local: LocalCache) -> Self {
        self.local = local;
        self
    }

    /// The engine's name (E9, E15): the `engine` label of the tier metrics
    /// (`idem_tier_*`) and of its local engine's (`idem_dedup_*`), and the `engine` field of
    /// their spans and events. The rule and the default are
    /// [`EngineBuilder::name`](crate::EngineBuilder::name)'s: 1 to 64 characters of
    /// `A-Z a-z 0-9 _ - .`, `"default"`.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.cfg.name = Arc::from(name.into());
        self
    }

    /// What this engine's spans and events show of a scope, its local engine's too (E15).
    /// Default: [`ScopeLogging::Digest`], never the tenant or the key.
    pub const fn scope_logging(mut self, logging: ScopeLogging) -> Self {
        self.cfg.scope_logging = logging;
        self
    }
}

impl<V, R, C> TieredBuilder<V, R, C>
where
    V: Clone + Send + Sync + 'static,
    R: RemoteTier,
    C: Codec<V>,
{
    /// Validates the settings and starts the local engine on the current tokio runtime. Each
    /// build gets its own random [`OwnerId`].
    ///
    /// # Errors
    ///
    /// [`ConfigError::Invalid`] naming the broken rule; [`ConfigError::NoRuntime`] outside a
    /// runtime.
    pub fn build(self) -> Result<TieredEngine<V, R, C>, ConfigError> {
        let c = &self.cfg;
        check_name(&c.name)?;
        if c.lease.is_zero() || c.ttl.is_zero() || c.max_wait.is_zero() {
            return Err(ConfigError::Invalid(
                "lease, ttl and max_wait must be greater than zero",
            ));
        }
        if c.poll_first.is_zero() || c.poll_max < c.poll_first {
            return Err(ConfigError::Invalid("poll_interval needs 0 < first <= max"));
        }
        // A local run: the wait for another instance's run, then the action under its lease.
        let longest_run = c.max_wait + c.lease + Duration::from_secs(5);
        let local = self
            .local
            .engine_builder(c.ttl, longest_run)
            .name(&*c.name)
            .scope_logging(c.scope_logging)
            .build()?;
        let counters = Counters::new(&self.cfg.name);
        let mut cfg = self.cfg;
        cfg.local_ttl = self.local.ttl_for(cfg.ttl);
        Ok(TieredEngine::from_parts(Inner {
            local,
            remote: self.remote,
            codec: self.codec,
            cfg,
            counters,
            unrecorded: Default::default(),
        }))
    }
}
