//! [`PgTier`]: the [`RemoteTier`] on PostgreSQL.

use std::fmt;
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use idem_core::{Fingerprint, Scope, Status};
use idem_dedup::remote::{
    Claim, ClaimOutcome, Commit, FencingToken, OwnerId, RecordState, RemoteRecord, RemoteTier,
};
use sqlx::PgPool;

use crate::codes::{claim, commit, state};
use crate::config::{common_setters, Common};
use crate::db::{ms, ms_i32, Db};
use crate::digest::ScopeDigest;
use crate::notifier::{self, Notifier};
use crate::schema::SetupError;
use crate::sweeper;

/// The PostgreSQL tier: claims, completions and waits in one table that every instance shares.
/// Put it behind a [`TieredEngine`](crate::TieredEngine); cheap to clone (clones
/// share the pool, the listener and the sweeper).
///
/// Each call is one statement, a function of the schema ([`SCHEMA_SQL`](crate::SCHEMA_SQL)):
/// `claim` looks the scope up and claims it with a lease and a token from the schema's
/// sequence, or answers completed (with the value), in flight elsewhere, or conflict;
/// `complete`, `release` and `renew` (the holder's keep-alive, which extends the lease on the
/// server's clock) succeed only while no later claim wrote the row; `wait` listens for
/// the holder's `NOTIFY`, with the tiered engine's polling as a fallback. Every statement has a
/// time limit ([`PgTierBuilder::query_timeout`]): past it, or on any failure, the call answers
/// `UNAVAILABLE` / `UPSTREAM_UNAVAILABLE`, and the tiered engine fails closed.
///
/// The listener takes one connection of the pool for good; the sweeper borrows one per tick.
#[derive(Clone)]
pub struct PgTier {
    inner: Arc<Inner>,
}

struct Inner {
    db: Arc<Db>,
    notifier: Arc<Notifier>,
    /// Longest wait for the scope's lock in a remote-tier call (another call of the same
    /// scope, or a transactional holder).
    lock_wait: Duration,
    listener: tokio::task::JoinHandle<()>,
    sweeper: Option<tokio::task::JoinHandle<()>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.listener.abort();
        if let Some(s) = &self.sweeper {
            s.abort();
        }
    }
}

impl fmt::Debug for PgTier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgTier")
            .field("schema", &self.inner.db.schema)
            .field("query_timeout", &self.inner.db.query_timeout)
            .field("listening", &self.inner.notifier.is_listening())
            .finish_non_exhaustive()
    }
}

/// Builds a [`PgTier`] over your pool.
///
/// # Default
///
/// | setting | default | |
/// |---|---|---|
/// | [`schema`](Self::schema) | `idem` | where the table, sequence and functions live |
/// | [`query_timeout`](Self::query_timeout) | 1 s | every statement; past it: `UNAVAILABLE` |
/// | [`apply_schema`](Self::apply_schema) | yes | `build` runs [`migrate`](crate::migrate) |
/// | [`sweep_every`](Self::sweep_every) | 60 s | expired rows deleted ... |
/// | [`sweep_batch`](Self::sweep_batch) | 1,000 | ... this many per statement |
///
/// The lease, the TTL and the waits are the tiered engine's settings
/// ([`TieredBuilder`](crate::TieredBuilder)).
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use idem_postgres::{PgTier, TieredEngine};
/// use std::time::Duration;
///
/// let pool = sqlx::postgres::PgPoolOptions::new()
///     .max_connections(20)
///     .connect("postgres://app@127.0.0.1/shop")
///     .await?;
/// let tier = PgTier::builder(pool)
///     .schema("shop_idem")
///     .query_timeout(Duration::from_millis(500))
///     .build()
///     .await?;
/// let engine = TieredEngine::<String>::builder(tier).build()?;
/// # let _ = engine; Ok(()) }
/// ```
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until `build` is called"]
pub struct PgTierBuilder {
    common: Common,
}

impl PgTierBuilder {
    common_setters!();

    /// Applies the schema (unless told not to), starts the listener and the sweeper. Must be
    /// called inside a tokio runtime.
    ///
    /// # Errors
    ///
    /// [`SetupError`]: a bad setting, or the schema could not be applied.
    pub async fn build(self) -> Result<PgTier, SetupError> {
        let db = self.common.open().await?;
        let notifier = Arc::new(Notifier::default());
        let listener = tokio::spawn(notifier::run(
            Arc::downgrade(&notifier),
            db.pool.clone(),
            db.channel.clone(),
        ));
        let sweeper = self.common.sweep.map(|cfg| sweeper::spawn(&db, cfg));
        Ok(PgTier {
            inner: Arc::new(Inner {
                lock_wait: (db.query_timeout / 2).max(Duration::from_millis(1)),
                db,
                notifier,
                listener,
                sweeper,
            }),
        })
    }
}

impl PgTier {
    /// A builder over `pool`, with every default (see [`PgTierBuilder`]).
    pub fn builder(pool: PgPool) -> PgTierBuilder {
        PgTierBuilder {
            common: Common::new(pool),
        }
    }

    /// Statements this tier has sent (the listener's and the sweeper's are not counted). A
    /// replay served by the local engine adds nothing; a claim, completion or release adds one.
    pub fn queries_sent(&self) -> u64 {
        self.inner.db.queries()
    }

    /// Whether the listening connection is up (waits fall back to polling while it is not).
    pub fn is_listening(&self) -> bool {
        self.inner.notifier.is_listening()
    }

    /// The schema.
    pub fn schema(&self) -> &str {
        &self.inner.db.schema
    }

    /// The pool.
    pub fn pool(&self) -> &PgPool {
        &self.inner.db.pool
    }

    /// Deletes expired rows now, as the sweeper does at each tick; returns how many.
    ///
    /// # Errors
    ///
    /// The database failed or passed the time limit (`UNAVAILABLE`).
    pub async fn sweep_now(&self) -> Result<u64, Status> {
        sweeper::sweep_once(&self.inner.db, Default::default()).await
    }

    fn db(&self) -> &Db {
        &self.inner.db
    }
}

fn owner_bytes(owner: OwnerId) -> [u8; 16] {
    owner.get().to_be_bytes()
}

fn token_of(t: i64) -> FencingToken {
    FencingToken::new(u64::try_from(t).unwrap_or(0))
}

fn protocol(what: &'static str) -> Status {
    Status::new(
        idem_core::Code::Internal,
        format!("unexpected reply from the idem schema's {what} function"),
    )
}

impl RemoteTier for PgTier {
    async fn claim(
        &self,
        scope: &Scope,
        fingerprint: Fingerprint,
        lease: Duration,
        owner: OwnerId,
    ) -> Result<ClaimOutcome, Status> {
        let db = self.db();
        let d = ScopeDigest::of(scope);
        let q = sqlx::query_as::<_, (i16, i64, i64, Option<Vec<u8>>)>(&db.sql.claim)
            .bind(d.0)
            .bind(d.lock_key())
            .bind(fingerprint.to_bytes())
            .bind(owner_bytes(owner))
            .bind(ms(lease))
            .bind(ms_i32(self.inner.lock_wait))
            .fetch_one(&db.pool);
        let (outcome, token, left, result) = match db.query("claim", q).await {
            Ok(row) => row,
            // A transactional holder (or a slow call) holds the scope's lock: in flight.
            Err(f) if f.is_lock_timeout() => {
                return Ok(ClaimOutcome::InFlightElsewhere {
                    holder: FencingToken::UNFENCED,
                    lease_left: self.inner.lock_wait,
                })
            }
            Err(f) => return Err(db.status(f)),
        };
        Ok(match outcome {
            claim::CLAIMED | claim::RECLAIMED => ClaimOutcome::Claimed {
                token: token_of(token),
                reclaimed: outcome == claim::RECLAIMED,
            },
            claim::HELD => ClaimOutcome::InFlightElsewhere {
                holder: token_of(token),
                lease_left: Duration::from_millis(u64::try_from(left).unwrap_or(0)),
            },
            claim::COMPLETED => ClaimOutcome::Completed(result.unwrap_or_default()),
            claim::CONFLICT => ClaimOutcome::Conflict,
            _ => return Err(protocol("claim")),
        })
    }

    async fn complete(
        &self,
        claim: Claim<'_>,
        value: Vec<u8>,
        ttl: Duration,
    ) -> Result<Commit, Status> {
        let db = self.db();
        let d = ScopeDigest::of(claim.scope);
        let q = sqlx::query_scalar::<_, i16>(&db.sql.complete)
            .bind(d.0)
            .bind(d.lock_key())
            .bind(claim.fingerprint.to_bytes())
            .bind(i64::try_from(claim.token.get()).unwrap_or(i64::MAX))
            .bind(owner_bytes(claim.owner))
            .bind(value)
            .bind(ms(ttl))
            .bind(ms_i32(self.inner.lock_wait))
            .bind(&db.channel)
            .fetch_one(&db.pool);
        match db.query("complete", q).await.map_err(|f| db.status(f))? {
            commit::COMMITTED => Ok(Commit::Committed),
            commit::FENCED_OUT => Ok(Commit::FencedOut),
            _ => Err(protocol("complete")),
        }
    }

    async fn release(&self, claim: Claim<'_>) -> Result<Commit, Status> {
        let db = self.db();
        let d = ScopeDigest::of(claim.scope);
        let q = sqlx::query_scalar::<_, i16>(&db.sql.release)
            .bind(d.0)
            .bind(d.lock_key())
            .bind(i64::try_from(claim.token.get()).unwrap_or(i64::MAX))
            .bind(ms_i32(self.inner.lock_wait))
            .bind(&db.channel)
            .fetch_one(&db.pool);
        match db.query("release", q).await.map_err(|f| db.status(f))? {
            commit::COMMITTED => Ok(Commit::Committed),
            commit::FENCED_OUT => Ok(Commit::FencedOut),
            _ => Err(protocol("release")),
        }
    }

    async fn renew(&self, claim: Claim<'_>, lease: Duration) -> Result<Commit, Status> {
        let db = self.db();
        let d = ScopeDigest::of(claim.scope);
        let q = sqlx::query_scalar::<_, i16>(&db.sql.renew)
            .bind(d.0)
            .bind(d.lock_key())
            .bind(i64::try_from(claim.token.get()).unwrap_or(i64::MAX))
            .bind(ms(lease))
            .bind(ms_i32(self.inner.lock_wait))
            .fetch_one(&db.pool);
        match db.query("renew", q).await.map_err(|f| db.status(f))? {
            1 => Ok(Commit::Committed),
            0 => Ok(Commit::FencedOut),
            _ => Err(protocol("renew")),
        }
    }

    async fn wait(
        &self,
        scope: &Scope,
        holder: FencingToken,
        at_most: Duration,
    ) -> Result<(), Status> {
        let db = self.db();
        let d = ScopeDigest::of(scope);
        let watch = self.inner.notifier.watch(d);
        let mut notified = pin!(watch.notified());
        notified.as_mut().enable();
        // Registered: a completion cannot slip by unseen now. Did one happen since the claim?
        // (A transactional holder has no row to look at: just wait.)
        if holder.is_fenced() {
            let q = sqlx::query_as::<_, (i16, i64)>(&db.sql.held_by)
                .bind(d.0)
                .fetch_optional(&db.pool);
            let row = db.query("wait", q).await.map_err(|f| db.status(f))?;
            let held = (
                state::IN_FLIGHT,
                i64::try_from(holder.get()).unwrap_or(i64::MAX),
            );
            if row != Some(held) {
                return Ok(());
            }
        }
        tokio::select! {
            _ = notified => {}
            _ = tokio::time::sleep(at_most) => {}
        }
        Ok(())
    }

    async fn lookup(&self, scope: &Scope) -> Result<Option<RemoteRecord>, Status> {
        let db = self.db();
        let d = ScopeDigest::of(scope);
        let q = sqlx::query_as::<_, (i16, i64, i64, i64)>(&db.sql.lookup)
            .bind(d.0)
            .fetch_optional(&db.pool);
        let row = db.query("lookup", q).await.map_err(|f| db.status(f))?;
        Ok(row.map(|(state, token, left, _age)| RemoteRecord {
            state: if state == state::IN_FLIGHT {
                RecordState::InFlight {
                    holder: token_of(token),
                }
            } else {
                RecordState::Completed
            },
            expires_in: Some(Duration::from_millis(u64::try_from(left).unwrap_or(0))),
        }))
    }

    async fn forget(&self, scope: &Scope) -> Result<bool, Status> {
        let db = self.db();
        let d = ScopeDigest::of(scope);
        let q = sqlx::query_as::<_, (bool, i64)>(&db.sql.forget)
            .bind(d.0)
            .bind(d.hex())
            .fetch_one(&db.pool);
        let (was, _woken) = db.query("forget", q).await.map_err(|f| db.status(f))?;
        Ok(was)
    }
}
