//! [`PgEngineBuilder`]: the transactional engine's settings, with every default listed.

use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use idem_dedup::remote::OwnerId;
use idem_dedup::trace::ScopeLogging;
use idem_dedup::{BytesCodec, Codec, ConfigError, LocalCache};
use sqlx::PgPool;

use super::{Inner, PgEngine};
use crate::config::{common_setters, Common};
use crate::schema::SetupError;
use crate::sweeper;

#[derive(Debug, Clone)]
pub(crate) struct TxConfig {
    pub(crate) ttl: Duration,
    pub(crate) max_wait: Duration,
    pub(crate) lease: Duration,
    pub(crate) poll_first: Duration,
    pub(crate) poll_max: Duration,
    pub(crate) owner: OwnerId,
}

/// Builds a [`PgEngine`] over your pool.
///
/// # Default
///
/// | setting | default | |
/// |---|---|---|
/// | [`ttl`](Self::ttl) | 24 h: records live this long, counted from the commit | |
/// | [`max_wait`](Self::max_wait) | 30 s: longest wait for another transaction of the same scope | |
/// | [`lease`](Self::lease) | 30 s: longest a run's transaction may sit idle before the server ends it | |
/// | [`poll_interval`](Self::poll_interval) | 10 ms doubling to 250 ms: waits for a remote-tier claim of the scope | |
/// | [`local`](Self::local) | [`LocalCache`]'s defaults: copies kept 5 min (at most the `ttl`), replayed without a query; 1,000,000 entries; available parallelism; a local run's lease `max_wait` + `lease` + 4 × `query_timeout` + 5 s | |
/// | [`name`](Self::name) | `"default"`, for its local engine's metrics and spans | |
/// | [`scope_logging`](Self::scope_logging) | [`ScopeLogging::Digest`] | |
/// | [`codec`](Self::codec) | [`BytesCodec`] (`Vec<u8>`, `String`; `idem-tower` adds its stored responses) | |
/// | [`schema`](Self::schema) | `idem` | |
/// | [`query_timeout`](Self::query_timeout) | 1 s: every statement idem sends (BEGIN, the claim, the record with the COMMIT) | |
/// | [`apply_schema`](Self::apply_schema) | yes | `build` runs [`migrate`](crate::migrate) |
/// | [`sweep_every`](Self::sweep_every), [`sweep_batch`](Self::sweep_batch) | 60 s, 1,000 rows | |
///
/// The local copy's TTL is short by default because the local engine is a cache in front of the
/// table: a result it no longer holds costs one transaction to replay, while a local engine
/// filled with long-lived copies would refuse new scopes (`RESOURCE_EXHAUSTED`) once its
/// `max_entries` are held. The tiered engine has the same default, for the same reasons (see
/// [`LocalCache`]).
///
/// ```no_run
/// # async fn demo(pool: sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
/// use idem_postgres::PgEngine;
/// use std::time::Duration;
///
/// let engine = PgEngine::<String>::builder(pool)
///     .schema("shop_idem")
///     .ttl(Duration::from_secs(3600))
///     .max_wait(Duration::from_secs(5))
///     .lease(Duration::from_secs(10))
///     .build()
///     .await?;
/// # let _ = engine; Ok(()) }
/// ```
#[derive(Debug)]
#[must_use = "a builder does nothing until `build` is called"]
pub struct PgEngineBuilder<V, C = BytesCodec> {
    common: Common,
    codec: C,
    cfg: TxConfig,
    local: LocalCache,
    name: Arc<str>,
    scope_logging: ScopeLogging,
    _v: PhantomData<fn() -> V>,
}

impl<V> PgEngineBuilder<V, BytesCodec> {
    pub(crate) fn new(pool: PgPool) -> Self {
        PgEngineBuilder {
            common: Common::new(pool),
            codec: BytesCodec,
            cfg: TxConfig {
                ttl: Duration::from_secs(24 * 3600),
                max_wait: Duration::from_secs(30),
                lease: Duration::from_secs(30),
                poll_first: Duration::from_millis(10),
                poll_max: Duration::from_millis(250),
                owner: OwnerId::random(),
            },
            local: LocalCache::new(),
            name: Arc::from("default"),
            scope_logging: ScopeLogging::Digest,
            _v: PhantomData,
        }
    }
}

impl<V, C> PgEngineBuilder<V, C> {
    common_setters!();

    /// The codec that turns values into the stored bytes. Default: [`BytesCodec`].
    pub fn codec<C2>(self, codec: C2) -> PgEngineBuilder<V, C2> {
        PgEngineBuilder {
            common: self.common,
            codec,
            cfg: self.cfg,
            local: self.local,
            name: self.name,
            scope_logging: self.scope_logging,
            _v: PhantomData,
        }
    }

    /// How long records live in the table, counted from the commit. Default: 24 h.
    pub const fn ttl(mut self, d: Duration) -> Self {
        self.cfg.ttl = d;
        self
    }

    /// The longest a run waits for another transaction of the same scope (on any instance) to
    /// commit or roll back, before answering `UNAVAILABLE` / `REQUEST_IN_FLIGHT` with a
    /// retry-after hint. Default: 30 s.
    pub const fn max_wait(mut self, d: Duration) -> Self {
        self.cfg.max_wait = d;
        self
    }

    /// The lease of a run: the longest its transaction may sit idle (the action waiting on
    /// something else than the database) before PostgreSQL ends the session and rolls it back
    /// (`idle_in_transaction_session_timeout`), so a stalled holder never keeps the scope.
    /// Default: 30 s.
    pub const fn lease(mut self, d: Duration) -> Self {
        self.cfg.lease = d;
        self
    }

    /// The polling of waits for a remote-tier claim of the same scope (a [`PgTier`](crate::PgTier)
    /// sharing the schema): `first`, doubling up to `max`. Default: 10 ms to 250 ms.
    pub const fn poll_interval(mut self, first: Duration, max: Duration) -> Self {
        self.cfg.poll_first = first;
        self.cfg.poll_max = max;
        self
    }

    /// The local engine's settings: how long this instance keeps its copies, how many it holds,
    /// its shards and its runs' lease (see [`LocalCache`], whose defaults the tiered engine
    /// shares). When it is full, new scopes get `RESOURCE_EXHAUSTED` with a retry-after hint
    /// until copies expire. Default: [`LocalCache::new`], with a local run's lease of
    /// `max_wait` + `lease` + 4 × `query_timeout` + 5 s (the wait for the scope's lock, the
    /// action, the record and the commit).
    pub const fn local(mut self, local: LocalCache) -> Self {
        self.local = local;
        self
    }

    /// The engine's name: the `engine` label of its local engine's metrics (`idem_dedup_*`)
    /// and the `engine` field of its spans and events, so two engines in one process keep
    /// their figures apart. The rule and the default are
    /// [`EngineBuilder::name`](idem_dedup::EngineBuilder::name)'s: 1 to 64 characters of
    /// `A-Z a-z 0-9 _ - .`, `"default"`; `build` refuses others.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Arc::from(name.into());
        self
    }

    /// What this engine's spans and events show of a scope. Default:
    /// [`ScopeLogging::Digest`], never the tenant or the key.
    pub const fn scope_logging(mut self, logging: ScopeLogging) -> Self {
        self.scope_logging = logging;
        self
    }
}

impl<V, C> PgEngineBuilder<V, C>
where
    V: Clone + Send + Sync + 'static,
    C: Codec<V>,
{
    /// Applies the schema (unless told not to), starts the local engine and the sweeper. Must
    /// be called inside a tokio runtime. Each build gets its own random owner id.
    ///
    /// # Errors
    ///
    /// [`SetupError`]: a bad setting, or the schema could not be applied.
    pub async fn build(self) -> Result<PgEngine<V, C>, SetupError> {
        let c = &self.cfg;
        if c.ttl.is_zero() || c.max_wait.is_zero() || c.lease.is_zero() {
            return Err(SetupError::Invalid(
                "ttl, max_wait and lease must be greater than zero",
            ));
        }
        if c.poll_first.is_zero() || c.poll_max < c.poll_first {
            return Err(SetupError::Invalid("poll_interval needs 0 < first <= max"));
        }
        // A local run: the wait for the scope's lock, the action (bounded by the lease while
        // idle), the record and the commit.
        let longest_run =
            c.max_wait + c.lease + self.common.query_timeout * 4 + Duration::from_secs(5);
        let local = self
            .local
            .engine_builder(c.ttl, longest_run)
            .name(&*self.name)
            .scope_logging(self.scope_logging)
            .build()
            .map_err(|e| match e {
                ConfigError::Invalid(rule) => SetupError::Invalid(rule),
                ConfigError::NoRuntime => SetupError::NoRuntime,
                _ => SetupError::Invalid("the local engine's settings were refused"),
            })?;
        let local_ttl = self.local.ttl_for(c.ttl);
        let db = self.common.open().await?;
        let sweeper = self.common.sweep.map(|cfg| sweeper::spawn(&db, cfg));
        Ok(PgEngine {
            inner: Arc::new(Inner {
                local,
                local_ttl,
                db: db.clone(),
                codec: self.codec,
                cfg: self.cfg,
                warm: Arc::new(super::warm::Warm::new(db.clone())),
                sweeper,
            }),
        })
    }
}
