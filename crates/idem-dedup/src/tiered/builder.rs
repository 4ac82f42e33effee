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

/// What a call does when the shared tier fails or does not answer in time.
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
    /// The `engine` label and field, of this engine and its local engine.
    pub(crate) name: Arc<str>,
    /// What spans and events show of a scope.
    pub(crate) scope_logging: ScopeLogging,
    /// The local engine's TTL (set by `build`), to tell the shared record's expiry from the
    /// local copy's.
    pub(crate) local_ttl: Duration,
    /// How often a holder renews its lease while the action runs (set by `build`); `None`: never.
    pub(crate) renew_every: Option<Duration>,
    /// The longest a run is renewed (set by `build`: the local in-flight timeout). Past it the
    /// renewals stop and the claim lapses with its lease, also for a run the local engine does
    /// not bound (one that bypassed a full local engine).
    pub(crate) run_limit: Duration,
}

/// How a holder renews its lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Renewal {
    /// Every third of the lease.
    Default,
    /// Every this long.
    Every(Duration),
    /// Never.
    Off,
}

/// With renewals, a run is bounded by the local in-flight timeout alone: by default `max_wait`
/// plus this, or plus `lease` + 5 s where that is longer.
const RENEWED_RUN: Duration = Duration::from_secs(300);

/// Builds a [`TieredEngine`].
///
/// # Default
///
/// | setting | default |
/// |---|---|
/// | [`lease`](Self::lease) | 30 s: a claim lapses this long after it was taken or last renewed, unless completed |
/// | [`renew_every`](Self::renew_every) | a third of the `lease`: the holder's keep-alive while its action runs ([`without_renewal`](Self::without_renewal) turns it off) |
/// | [`ttl`](Self::ttl) | 24 h: results live this long in the tier, counted from completion |
/// | [`max_wait`](Self::max_wait) | 30 s: longest wait for another instance's run |
/// | [`poll_interval`](Self::poll_interval) | 10 ms doubling to 250 ms: the polling fallback of waits |
/// | [`on_unavailable`](Self::on_unavailable) | [`OnUnavailable::FailClosed`] |
/// | [`local`](Self::local) | [`LocalCache`]'s defaults: copies kept 5 min (at most the `ttl`), 1,000,000 entries, available parallelism; a local run's lease (which bounds a renewed run) `max_wait` + 5 min, or `max_wait` + `lease` + 5 s where that is longer; without renewal always `max_wait` + `lease` + 5 s |
/// | [`codec`](Self::codec) | [`BytesCodec`] (`Vec<u8>`, `String`; `idem-tower` adds its stored responses) |
/// | [`name`](Self::name) | `"default"`, for this engine's metrics and its local engine's |
/// | [`scope_logging`](Self::scope_logging) | [`ScopeLogging::Digest`] |
///
/// When the local engine is full, calls go to the tier directly rather than being refused:
/// the tier arbitrates them, without local coalescing or a local copy.
///
/// ```no_run
/// # async fn demo(tier: impl idem_dedup::remote::RemoteTier) -> Result<(), Box<dyn std::error::Error>> {
/// use idem_dedup::tiered::{OnUnavailable, TieredEngine};
/// use std::time::Duration;
///
/// // `tier`: a RedisTier (idem-redis), a PgTier (idem-postgres), or your own RemoteTier.
/// let engine = TieredEngine::<Vec<u8>, _>::builder(tier)
///     .lease(Duration::from_secs(10)) // how long a crashed holder blocks its intent
///     .renew_every(Duration::from_secs(2)) // the holder's keep-alive while its action runs
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
    renewal: Renewal,
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
                renew_every: None,
                run_limit: Duration::ZERO,
            },
            local: LocalCache::new(),
            renewal: Renewal::Default,
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
            renewal: self.renewal,
            _v: PhantomData,
        }
    }

    /// How long a claim holds, from its claim or its last renewal, before another instance may
    /// take over. While the action runs, the holder renews it (see
    /// [`renew_every`](Self::renew_every)), so the lease need not outlast the action: it is how
    /// long a crashed or stalled holder blocks its intent, and the longest stall (a GC pause, a
    /// stopped process, a tier out of reach) a holder survives without being taken over. Once it
    /// lapses, another instance may run the action again; a holder that completes after another
    /// claimed is fenced out. A holder that completes late while nobody else claimed is still
    /// recorded. [Without renewal](Self::without_renewal), make it longer than your slowest
    /// action (give the action a timeout below it). Default: 30 s.
    pub const fn lease(mut self, d: Duration) -> Self {
        self.cfg.lease = d;
        self
    }

    /// How long results live in the tier, counted from completion. Default: 24 h.
    pub const fn ttl(mut self, d: Duration) -> Self {
        self.cfg.ttl = d;
        self
    }

    /// The longest this instance waits for another instance's run before answering
    /// `UNAVAILABLE` / `REQUEST_IN_FLIGHT` with a retry-after hint; a caller's own deadline cuts
    /// its wait shorter. Default: 30 s.
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

    /// Fail closed (default) or open when the tier is unreachable or slow.
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

    /// The engine's name: the `engine` label of the tier metrics
    /// (`idem_tier_*`) and of its local engine's (`idem_dedup_*`), and the `engine` field of
    /// their spans and events. The rule and the default are
    /// [`EngineBuilder::name`](crate::EngineBuilder::name)'s: 1 to 64 characters of
    /// `A-Z a-z 0-9 _ - .`, `"default"`.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.cfg.name = Arc::from(name.into());
        self
    }

    /// What this engine's spans and events show of a scope, its local engine's too.
    /// Default: [`ScopeLogging::Digest`], never the tenant or the key.
    pub const fn scope_logging(mut self, logging: ScopeLogging) -> Self {
        self.cfg.scope_logging = logging;
        self
    }

    /// How often a holder renews its claim's lease while the action runs: a keep-alive on
    /// the tier's clock, one round trip each, so the claim lasts as long as a live action (up to
    /// the local run's lease ([`LocalCache::in_flight_timeout`])) and lapses about one lease
    /// after its holder died. A renewal is fenced like a completion: one that finds another run
    /// holding the scope marks the action's [`Run`](idem_core::run::Run) lost
    /// ([`is_lease_lost`](idem_core::run::Run::is_lease_lost)), with a warn event
    /// (`idem_dedup.tier.lease_lost`) and a count ([`TierStats::lease_lost`](crate::tiered::TierStats::lease_lost));
    /// the action goes on, and its completion will be fenced out. A renewal the tier fails is
    /// counted and tried again at the next tick. At most one renewal is in flight, and each
    /// starts at least this long after the one before, so a run costs at most `lease / d` + 1
    /// round trips per lease. Must be shorter than the lease; leave room for a renewal or two
    /// to fail before the lease runs out. Default: a third of the lease.
    ///
    /// An action that must stop its side effects once another instance took over races them
    /// against the loss:
    ///
    /// ```no_run
    /// # async fn demo(tier: impl idem_dedup::remote::RemoteTier) -> Result<(), Box<dyn std::error::Error>> {
    /// # async fn ship_parcels(_token: u64) -> Result<String, Status> { Ok(String::new()) }
    /// use idem_core::run::Run;
    /// use idem_core::{Code, Fingerprint, Scope, Status};
    /// use idem_dedup::tiered::TieredEngine;
    /// use std::time::Duration;
    ///
    /// let engine = TieredEngine::<String, _>::builder(tier)
    ///     .lease(Duration::from_secs(6))
    ///     .renew_every(Duration::from_secs(2))
    ///     .build()?;
    /// let scope = Scope::parse("tenant-1", "/shop/Ship", "order-0001")?;
    /// let out = engine
    ///     .execute(&scope, Fingerprint::of(b"order=1001"), |token| async move {
    ///         let run = Run::current().expect("the action runs inside its run");
    ///         tokio::select! {
    ///             shipped = ship_parcels(token.get()) => shipped,
    ///             () = run.lease_lost() => Err(Status::new(
    ///                 Code::Aborted,
    ///                 "another instance took this order over; stopped shipping",
    ///             )),
    ///         }
    ///     })
    ///     .await?;
    /// # let _ = out; Ok(()) }
    /// ```
    pub const fn renew_every(mut self, d: Duration) -> Self {
        self.renewal = Renewal::Every(d);
        self
    }

    /// No renewals: a claim lapses `lease` after it was taken, however long the action runs, and
    /// another instance may then run it again. Make the lease longer than the slowest action.
    pub const fn without_renewal(mut self) -> Self {
        self.renewal = Renewal::Off;
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
        let renew_every = match self.renewal {
            Renewal::Default => Some((c.lease / 3).max(Duration::from_micros(1))),
            Renewal::Every(d) if d.is_zero() || d >= c.lease => {
                return Err(ConfigError::Invalid(
                    "renew_every must be greater than zero and shorter than the lease",
                ))
            }
            Renewal::Every(d) => Some(d),
            Renewal::Off => None,
        };
        // A local run: the wait for another instance's run, then the action under its lease;
        // a renewed action may outlive many leases, so it gets a bound of its own.
        let unrenewed = c.max_wait + c.lease + Duration::from_secs(5);
        let longest_run = match renew_every {
            Some(_) => unrenewed.max(c.max_wait + RENEWED_RUN),
            None => unrenewed,
        };
        let in_flight = self.local.in_flight_for(longest_run);
        let local = self
            .local
            .engine_builder(c.ttl, longest_run)
            .name(&*c.name)
            .scope_logging(c.scope_logging)
            .build()?;
        let counters = Counters::new(&self.cfg.name);
        let mut cfg = self.cfg;
        cfg.local_ttl = self.local.ttl_for(cfg.ttl);
        cfg.renew_every = renew_every;
        cfg.run_limit = in_flight;
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
