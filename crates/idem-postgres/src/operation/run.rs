//! The local leader's run of a multi-step operation: claim the scope with a lease (waiting
//! while another run holds it), begin or resume the operation, run the handler with its lease
//! renewed, then store the result fenced on the claim — or release the claim after a failure.

use std::collections::{HashMap, HashSet};
use std::convert::Infallible;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use idem_core::run::{Run, RunStart};
use idem_core::{Code, Fingerprint, Scope, Status};
use idem_dedup::remote::FencingToken;
use idem_dedup::Codec;
use parking_lot::Mutex;
use tokio::time::Instant;

use super::handle::{Operation, State};
use crate::codes::claim;
use crate::db::{ms, ms_i32, Db};
use crate::digest::ScopeDigest;
use crate::engine::run::{conflict, from_record, in_flight};
use crate::engine::Inner;

/// What `op_begin` answers.
const NEW: i16 = 0;
const RESUMED: i16 = 1;
const OTHER_REQUEST: i16 = 3;

/// Whether a run that finds the operation held by another run waits for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum IfHeld {
    /// Up to the engine's `max_wait` (a caller).
    Wait,
    /// Not at all (a completer: the holder is alive and will finish it).
    Skip,
}

/// The operation's claim, held by this run.
struct Held<'a> {
    db: &'a Db,
    d: ScopeDigest,
    token: FencingToken,
    lock_wait: Duration,
}

impl Held<'_> {
    fn token(&self) -> i64 {
        i64::try_from(self.token.get()).unwrap_or(i64::MAX)
    }

    /// Frees the scope after a failed run (its recovery points stay for the next run). A
    /// failure here only delays the next run until the lease lapses.
    async fn release(&self) {
        let db = self.db;
        let q = sqlx::query_scalar::<_, i16>(&db.sql.release)
            .bind(self.d.0)
            .bind(self.d.lock_key())
            .bind(self.token())
            .bind(ms_i32(self.lock_wait))
            .bind(&db.channel)
            .fetch_one(&db.pool);
        if let Err(f) = db.query("release", q).await {
            tracing::debug!(error = %f, "an operation's claim was not released; it lapses with its lease");
        }
    }
}

/// The local leader's run of an operation.
pub(crate) async fn leader<V, C, F, Fut>(
    inner: Arc<Inner<V, C>>,
    scope: Scope,
    fp: Fingerprint,
    request: Arc<[u8]>,
    if_held: IfHeld,
    action: Option<F>,
) -> Result<V, Status>
where
    V: Clone + Send + Sync + 'static,
    C: Codec<V>,
    F: FnOnce(Operation) -> Fut + Send + 'static,
    Fut: Future<Output = Result<V, Status>> + Send + 'static,
{
    let Some(action) = action else {
        return Err(Status::new(
            Code::Internal,
            "the action of this call was already taken by another run",
        ));
    };
    let db = &*inner.db;
    let lock_wait = (db.query_timeout / 2).max(Duration::from_millis(1));
    let d = ScopeDigest::of(&scope);
    let (token, reclaimed) = claim(&inner, &d, fp, lock_wait, if_held).await?;
    let held = Held {
        db,
        d,
        token,
        lock_wait,
    };
    let begun = match begin(&inner, &held, &scope, fp, &request).await {
        Ok(begun) => begun,
        Err(status) => {
            held.release().await;
            return Err(status);
        }
    };
    let Begun { resumed, committed } = begun;
    let start = if resumed || reclaimed {
        RunStart::TakeOver
    } else {
        RunStart::Fresh
    };
    let run = Run::new(&scope, Some(token.get()), start);
    let op = Operation::new(State {
        db: inner.db.clone(),
        digest: d,
        scope,
        token,
        lease: inner.cfg.lease,
        lock_wait,
        run: run.clone(),
        request,
        resumed,
        committed: Mutex::new(committed),
        used: Mutex::new(HashSet::new()),
    });
    let result = match std::panic::catch_unwind(AssertUnwindSafe(|| action(op))) {
        Ok(fut) => {
            let work = AssertUnwindSafe(run.clone().attach(fut)).catch_unwind();
            tokio::select! {
                out = work => out,
                never = keep_alive(&held, inner.cfg.lease, &run) => match never {},
            }
        }
        Err(panic) => Err(panic),
    };
    let value = match result {
        Err(panic) => {
            held.release().await;
            std::panic::resume_unwind(panic)
        }
        Ok(Err(status)) => {
            held.release().await;
            return Err(status);
        }
        Ok(Ok(value)) => value,
    };
    finish(&inner, &held, fp, &run, value).await
}

/// Claims the scope: the token and whether it was this owner's orphan, taken back. Waits while
/// another run holds it (for `IfHeld::Wait`), up to `max_wait`.
async fn claim<V: Clone + Send + Sync + 'static, C: Codec<V>>(
    inner: &Inner<V, C>,
    d: &ScopeDigest,
    fp: Fingerprint,
    lock_wait: Duration,
    if_held: IfHeld,
) -> Result<(FencingToken, bool), Status> {
    let (db, cfg) = (&*inner.db, &inner.cfg);
    let give_up = Instant::now() + cfg.max_wait;
    let mut poll = cfg.poll_first;
    loop {
        let q = sqlx::query_as::<_, (i16, i64, i64, Option<Vec<u8>>)>(&db.sql.claim)
            .bind(d.0)
            .bind(d.lock_key())
            .bind(fp.to_bytes())
            .bind(cfg.owner.get().to_be_bytes())
            .bind(ms(cfg.lease))
            .bind(ms_i32(lock_wait))
            .fetch_one(&db.pool);
        let (outcome, token, left, result) = match db.query("claim", q).await {
            Ok(row) => row,
            // A transactional run of the scope holds its lock: held.
            Err(f) if f.is_lock_timeout() => (claim::HELD, 0, ms(lock_wait), None),
            Err(f) => return Err(db.status(f)),
        };
        match outcome {
            claim::CLAIMED | claim::RECLAIMED => {
                let token = FencingToken::new(u64::try_from(token).unwrap_or(0));
                return Ok((token, outcome == claim::RECLAIMED));
            }
            claim::COMPLETED => {
                return Err(from_record(
                    inner.codec.decode(&result.unwrap_or_default())?,
                ))
            }
            claim::CONFLICT => return Err(conflict()),
            claim::HELD => {
                let left = Duration::from_millis(u64::try_from(left).unwrap_or(0));
                let now = Instant::now();
                if if_held == IfHeld::Skip || now >= give_up {
                    let waited = cfg
                        .max_wait
                        .saturating_sub(give_up.saturating_duration_since(now));
                    return Err(in_flight(waited, left.max(cfg.poll_first)));
                }
                tokio::time::sleep(poll.min(left + Duration::from_millis(1)).min(give_up - now))
                    .await;
                poll = (poll * 2).min(cfg.poll_max);
            }
            _ => {
                return Err(Status::new(
                    Code::Internal,
                    "unexpected reply from the idem schema's claim function",
                ))
            }
        }
    }
}

struct Begun {
    resumed: bool,
    committed: HashMap<String, Vec<u8>>,
}

/// Records the operation's request (first run) or counts a resumption, and loads the recovery
/// points earlier runs committed.
async fn begin<V, C>(
    inner: &Inner<V, C>,
    held: &Held<'_>,
    scope: &Scope,
    fp: Fingerprint,
    request: &[u8],
) -> Result<Begun, Status> {
    let db = held.db;
    let q = sqlx::query_scalar::<_, i16>(&db.sql.op.begin)
        .bind(held.d.0)
        .bind(scope.as_bytes())
        .bind(scope.method())
        .bind(fp.to_bytes())
        .bind(request)
        .bind(ms(inner.cfg.ttl))
        .fetch_one(&db.pool);
    let resumed = match db.query("op_begin", q).await.map_err(|f| db.status(f))? {
        NEW => false,
        RESUMED => true,
        OTHER_REQUEST => return Err(conflict()),
        _ => {
            return Err(Status::new(
                Code::Internal,
                "unexpected reply from the idem schema's op_begin function",
            ))
        }
    };
    let committed = if resumed {
        let q = sqlx::query_as::<_, (String, Vec<u8>)>(&db.sql.op.steps)
            .bind(held.d.0)
            .fetch_all(&db.pool);
        let rows = db.query("op_steps", q).await.map_err(|f| db.status(f))?;
        rows.into_iter().collect()
    } else {
        HashMap::new()
    };
    Ok(Begun { resumed, committed })
}

/// Renews the claim's lease every third of it, from the handler's own task (so it stops when
/// the run dies or stalls). A refused renewal marks the run's lease lost, and renewing stops.
async fn keep_alive(held: &Held<'_>, lease: Duration, run: &Run) -> Infallible {
    let db = held.db;
    let every = (lease / 3).max(Duration::from_millis(1));
    loop {
        tokio::time::sleep(every).await;
        let q = sqlx::query_scalar::<_, i16>(&db.sql.renew)
            .bind(held.d.0)
            .bind(held.d.lock_key())
            .bind(held.token())
            .bind(ms(lease))
            .bind(ms_i32(held.lock_wait))
            .fetch_one(&db.pool);
        match db.query("renew", q).await {
            Ok(1) => {}
            Ok(_) => {
                run.mark_lease_lost();
                return std::future::pending().await;
            }
            Err(f) => {
                tracing::debug!(error = %f, "an operation's lease renewal failed; retried at the next tick");
            }
        }
    }
}

/// Stores the operation's result, fenced on the claim, and marks it finished.
async fn finish<V, C: Codec<V>>(
    inner: &Inner<V, C>,
    held: &Held<'_>,
    fp: Fingerprint,
    run: &Run,
    value: V,
) -> Result<V, Status> {
    let db = held.db;
    let bytes = match inner.codec.encode(&value) {
        Ok(bytes) => bytes,
        Err(status) => {
            held.release().await;
            return Err(status);
        }
    };
    let q = sqlx::query_scalar::<_, i16>(&db.sql.op.finish)
        .bind(held.d.0)
        .bind(held.d.lock_key())
        .bind(fp.to_bytes())
        .bind(held.token())
        .bind(inner.cfg.owner.get().to_be_bytes())
        .bind(bytes)
        .bind(ms(inner.cfg.ttl))
        .bind(ms_i32(held.lock_wait))
        .bind(&db.channel)
        .fetch_one(&db.pool);
    match db.query("op_finish", q).await {
        Ok(1) => Ok(value),
        Ok(_) => {
            run.mark_lease_lost();
            Err(Status::new(
                Code::Unavailable,
                "another run took this operation over (this run's lease lapsed): its result was \
                 not stored; retry with the same key for that run's result",
            )
            .with_reason(idem_core::Reason::FENCED_OUT))
        }
        // Every step is recorded: a retry resumes after the last and stores the result then.
        Err(f) => Err(db.status(f)),
    }
}
