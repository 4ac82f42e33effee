//! [`EngineBuilder`]: the engine's settings, with every default listed.

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use idem_core::CodeSet;

use crate::config::{Config, ConfigError, InFlightPolicy, Weigher, DEFAULT_NAME};
use crate::trace::ScopeLogging;
use crate::Engine;

/// Builds an [`Engine`]. Every setting has a default:
///
/// # Default
///
/// | setting | default |
/// |---|---|
/// | [`shards`](Self::shards) | available parallelism (1 if unknown) |
/// | [`ttl`](Self::ttl) | 24 h |
/// | [`in_flight_timeout`](Self::in_flight_timeout) | 30 s |
/// | [`max_entries`](Self::max_entries) | 1,000,000 |
/// | [`mailbox_capacity`](Self::mailbox_capacity) | 1,024 messages per shard |
/// | [`batch_size`](Self::batch_size) | 128 messages per drain |
/// | [`in_flight_policy`](Self::in_flight_policy) | [`InFlightPolicy::Wait`] |
/// | [`cache_failures`](Self::cache_failures) | none cached |
/// | [`max_bytes`](Self::max_bytes) with a [`weigher`](Self::weigher) | no byte budget |
/// | [`tenant_share`](Self::tenant_share) | none: one tenant may fill the engine |
/// | [`retry_after`](Self::retry_after) | 1 s |
/// | [`name`](Self::name) | `"default"` |
/// | [`scope_logging`](Self::scope_logging) | [`ScopeLogging::Digest`]: never the raw tenant or key |
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), idem_dedup::ConfigError> {
/// use idem_core::{Code, CodeSet};
/// use idem_dedup::{Engine, InFlightPolicy};
/// use std::time::Duration;
///
/// let engine = Engine::<String>::builder()
///     .shards(4)
///     .ttl(Duration::from_secs(3600))
///     .in_flight_timeout(Duration::from_secs(10))
///     .max_entries(100_000)
///     .in_flight_policy(InFlightPolicy::Reject)
///     .cache_failures(CodeSet::EMPTY.with(Code::FailedPrecondition), Duration::from_secs(60))
///     .build()?;
/// assert_eq!(engine.shard_count(), 4);
/// # Ok(()) }
/// ```
#[must_use = "a builder does nothing until `build` is called"]
pub struct EngineBuilder<V> {
    cfg: Config,
    weigher: Option<Weigher<V>>,
    _v: PhantomData<fn() -> V>,
}

impl<V> fmt::Debug for EngineBuilder<V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EngineBuilder")
            .field("cfg", &self.cfg)
            .field("weigher", &self.weigher.as_ref().map(|_| "Fn(&V) -> usize"))
            .finish()
    }
}

impl<V> Default for EngineBuilder<V> {
    fn default() -> Self {
        Self::new()
    }
}

impl<V> EngineBuilder<V> {
    /// A builder with every default (see the table above).
    pub fn new() -> Self {
        let shards = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1);
        EngineBuilder {
            cfg: Config {
                shards,
                ttl: Duration::from_secs(24 * 3600),
                in_flight_timeout: Duration::from_secs(30),
                max_entries: 1_000_000,
                mailbox_capacity: 1024,
                batch_size: 128,
                in_flight_policy: InFlightPolicy::Wait,
                cached_failures: CodeSet::EMPTY,
                failure_ttl: Duration::ZERO,
                retry_after: Duration::from_secs(1),
                max_bytes: usize::MAX,
                tenant_share: None,
                name: Arc::from(DEFAULT_NAME),
                scope_logging: ScopeLogging::Digest,
                sets_run: true,
            },
            weigher: None,
            _v: PhantomData,
        }
    }

    /// Number of shards, each one actor task. Default: available parallelism.
    pub const fn shards(mut self, n: usize) -> Self {
        self.cfg.shards = n;
        self
    }

    /// How long a completed result is kept, counted from completion. Default: 24 h.
    /// Make it longer than the longest retry window of your clients.
    pub const fn ttl(mut self, ttl: Duration) -> Self {
        self.cfg.ttl = ttl;
        self
    }

    /// The in-flight lease: a run longer than this is cancelled and its waiters get `UNAVAILABLE`.
    /// Default: 30 s.
    pub const fn in_flight_timeout(mut self, t: Duration) -> Self {
        self.cfg.in_flight_timeout = t;
        self
    }

    /// Cap on in-flight + completed entries over all shards. Default: 1,000,000.
    pub const fn max_entries(mut self, n: usize) -> Self {
        self.cfg.max_entries = n;
        self
    }

    /// Messages a shard's mailbox holds before callers wait (asynchronously) for room.
    /// Default: 1,024.
    pub const fn mailbox_capacity(mut self, n: usize) -> Self {
        self.cfg.mailbox_capacity = n;
        self
    }

    /// Most messages a shard takes from its mailbox per drain. Default: 128.
    pub const fn batch_size(mut self, n: usize) -> Self {
        self.cfg.batch_size = n;
        self
    }

    /// Wait for or reject duplicates of an in-flight scope. Default: `Wait`.
    pub const fn in_flight_policy(mut self, p: InFlightPolicy) -> Self {
        self.cfg.in_flight_policy = p;
        self
    }

    /// Cache action failures whose code is in `codes` for `ttl`: permanent,
    /// deterministic failures such as `FAILED_PRECONDITION` or `INVALID_ARGUMENT`. Panics and
    /// lease expiries are never cached. Default: no failure is cached.
    ///
    /// The codes a client retries (`UNAVAILABLE`, `RESOURCE_EXHAUSTED`, `DEADLINE_EXCEEDED`,
    /// `ABORTED`) are refused by [`build`](Self::build) with [`ConfigError::Invalid`]: a cached
    /// failure is replayed to the retry, which would then get the outage back instead of a
    /// second try. So is `OK`, which is not a failure. `INTERNAL` and `UNKNOWN` are accepted:
    /// clients do not retry them unless told the failure is transient.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// use idem_core::{Code, CodeSet};
    /// use idem_dedup::Engine;
    /// use std::time::Duration;
    ///
    /// let minute = Duration::from_secs(60);
    /// let permanent = CodeSet::EMPTY.with(Code::FailedPrecondition).with(Code::InvalidArgument);
    /// assert!(Engine::<u32>::builder().cache_failures(permanent, minute).build().is_ok());
    ///
    /// let outages = permanent.with(Code::Unavailable);
    /// let err = Engine::<u32>::builder().cache_failures(outages, minute).build().unwrap_err();
    /// assert!(err.to_string().contains("UNAVAILABLE"));
    /// # }
    /// ```
    pub const fn cache_failures(mut self, codes: CodeSet, ttl: Duration) -> Self {
        self.cfg.cached_failures = codes;
        self.cfg.failure_ttl = ttl;
        self
    }

    /// The retry-after hint sent with `RESOURCE_EXHAUSTED` (full, or a tenant over its share)
    /// and `ABORTED` (in flight, under `Reject`). Default: 1 s.
    pub const fn retry_after(mut self, d: Duration) -> Self {
        self.cfg.retry_after = d;
        self
    }

    /// A byte budget for the stored values, over all shards, besides
    /// [`max_entries`](Self::max_entries); the values are weighed by the
    /// [`weigher`](Self::weigher), which must be set with it. Default: no byte budget.
    ///
    /// While the stored values weigh `n` bytes or more, new scopes get
    /// [`DedupError::Overloaded`](crate::DedupError::Overloaded) (`RESOURCE_EXHAUSTED` with the
    /// retry-after hint); replays and joins go on, and nothing is evicted (an evicted result
    /// would let the retry run the side effect twice).
    ///
    /// # Above the budget
    ///
    /// A value is weighed when its run completes, and a run admitted while there was room
    /// always has its value stored, returned to its leader and its waiters, and replayed, even
    /// if it takes the total past `n`: refusing to store it would let the retry run the side
    /// effect again. So the total may pass `n` by the values of the runs in flight when it was
    /// reached; new scopes are refused until expiries or forgets bring it back under `n`.
    /// Keep values small (an id and a status rather than a whole response), or set a
    /// cap in the server layer on what it stores.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use idem_dedup::Engine;
    /// use std::sync::Arc;
    ///
    /// // Stored responses may take 64 MiB in all.
    /// let engine = Engine::<Arc<[u8]>>::builder()
    ///     .max_bytes(64 << 20)
    ///     .weigher(|body: &Arc<[u8]>| body.len())
    ///     .build()?;
    /// # drop(engine);
    /// # Ok(()) }
    /// ```
    pub const fn max_bytes(mut self, n: usize) -> Self {
        self.cfg.max_bytes = n;
        self
    }

    /// Weighs a stored value in bytes, for [`max_bytes`](Self::max_bytes), as
    /// moka's weigher does. It is called once when a value is stored and once when it is
    /// removed, so it must give the same weight for the same value; count what the value holds
    /// (a body's length, say), the engine's own ~108 bytes per entry are bounded by
    /// `max_entries`. Cached failures weigh nothing. Default: none.
    pub fn weigher(mut self, weigher: impl Fn(&V) -> usize + Send + Sync + 'static) -> Self {
        self.weigher = Some(Arc::new(weigher));
        self
    }

    /// The most one tenant ([`Scope::tenant`](idem_core::Scope::tenant)) may hold, in percent of
    /// `max_entries` and of `max_bytes`. Default: none, one tenant may fill the
    /// engine.
    ///
    /// A tenant at its share gets [`DedupError::TenantQuotaExceeded`](crate::DedupError::TenantQuotaExceeded)
    /// (`RESOURCE_EXHAUSTED`, reason `TENANT_QUOTA_EXCEEDED`, with the retry-after hint) for
    /// new scopes, while other tenants go on and its own results keep replaying. So one
    /// tenant's flood of new keys is refused for that tenant alone, instead of filling the
    /// engine and locking everyone out for a whole TTL.
    ///
    /// # Accuracy
    ///
    /// Each shard decides alone: it limits a tenant to `percent` of its own part of
    /// the budget (`max_entries / shards` entries, `max_bytes / shards` bytes, at least one
    /// entry), with no shared map or lock. A tenant therefore never holds more than its share
    /// (rounded up to a whole entry per shard, plus the value that took a shard's part past its
    /// bytes), and a flood of new keys, which reaches every shard, holds it almost exactly; a
    /// tenant with a few keys may be refused on a shard whose part it has used while it holds
    /// less on the others.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use idem_core::{Code, Fingerprint, Scope};
    /// use idem_dedup::{DedupError, Engine};
    ///
    /// // One shard of 10 entries; a tenant may hold 20% of them.
    /// let engine = Engine::<u32>::builder().shards(1).max_entries(10).tenant_share(20).build()?;
    /// let call = |tenant: &str, key: &str| {
    ///     let scope = Scope::parse(tenant, "/shop.v1.Shop/CreateOrder", key).unwrap();
    ///     let engine = engine.clone();
    ///     async move { engine.execute(&scope, Fingerprint::of(b"qty=1"), |_| async { Ok(1) }).await }
    /// };
    /// call("flood", "order-0001").await?;
    /// call("flood", "order-0002").await?;
    /// let third = call("flood", "order-0003").await.unwrap_err();
    /// assert!(matches!(third, DedupError::TenantQuotaExceeded { .. }));
    /// assert_eq!(third.code(), Code::ResourceExhausted);
    /// call("calm", "order-0001").await?; // another tenant is still served
    /// # Ok(()) }
    /// ```
    pub const fn tenant_share(mut self, percent: u8) -> Self {
        self.cfg.tenant_share = Some(percent);
        self
    }

    /// The engine's name: the `engine` label of every metric it reports and the
    /// `engine` field of its spans and events, so two engines in one process keep
    /// their figures apart. 1 to 64 characters of `A-Z a-z 0-9 _ - .`; [`build`](Self::build)
    /// refuses others with [`ConfigError::Invalid`]. Give each engine of a process its own
    /// name: engines with the same name report into the same series. Default: `"default"`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), idem_dedup::ConfigError> {
    /// use idem_dedup::Engine;
    ///
    /// let orders = Engine::<u64>::builder().name("orders").build()?; // idem_dedup_*{engine="orders"}
    /// let refunds = Engine::<u64>::builder().name("refunds").build()?;
    /// assert!(Engine::<u64>::builder().name("no spaces").build().is_err());
    /// # drop((orders, refunds)); Ok(()) }
    /// ```
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.cfg.name = Arc::from(name.into());
        self
    }

    /// For an engine used as another engine's local cache, whose actions set the run
    /// themselves.
    pub(crate) const fn without_run(mut self) -> Self {
        self.cfg.sets_run = false;
        self
    }

    /// What this engine's spans and events show of a scope. Default:
    /// [`ScopeLogging::Digest`], the method and a [digest](crate::trace::ScopeDigest) of the
    /// scope, never the tenant or the key; [`ScopeLogging::Raw`] adds them as they are.
    pub const fn scope_logging(mut self, logging: ScopeLogging) -> Self {
        self.cfg.scope_logging = logging;
        self
    }
}

impl<V: Clone + Send + Sync + 'static> EngineBuilder<V> {
    /// Validates the settings and starts the shard actors on the current tokio runtime.
    ///
    /// # Errors
    ///
    /// [`ConfigError::Invalid`] naming the rule a setting broke; [`ConfigError::NoRuntime`]
    /// outside a runtime.
    pub fn build(self) -> Result<Engine<V>, ConfigError> {
        let handle = tokio::runtime::Handle::try_current().map_err(|_| ConfigError::NoRuntime)?;
        self.build_on(handle)
    }

    /// As [`build`](Self::build), on the given runtime.
    ///
    /// # Errors
    ///
    /// [`ConfigError::Invalid`] naming the rule a setting broke.
    pub fn build_on(self, handle: tokio::runtime::Handle) -> Result<Engine<V>, ConfigError> {
        self.cfg.validate(self.weigher.is_some())?;
        Ok(Engine::launch(self.cfg, self.weigher, handle))
    }
}

#[cfg(test)]
impl<V> EngineBuilder<V> {
    /// The settings as built so far (for unit tests of what reads them).
    pub(crate) fn config(&self) -> Config {
        self.cfg.clone()
    }
}
