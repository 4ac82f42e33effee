//! Warm transactions: the open, empty transaction that a committed run leaves behind, kept for
//! the next run of this engine, which then sends its claim at once instead of a `BEGIN` first.
//!
//! Why: the record's round trip ends with `COMMIT; BEGIN` (see `Sql::tx_finish_sql`), so after a
//! run the connection already sits in a new transaction that sqlx knows of (one open level: a
//! nested `begin()` of the next action is still a savepoint, and dropping it still rolls back).
//! Returning it to the pool costs a `ROLLBACK` and the pool's ping; the next run would then pay
//! a `BEGIN` round trip of its own. Keeping it saves that round trip on the next run's path and
//! two statements per intent. The transaction holds nothing: no statement ran in it, so it has no
//! snapshot, no transaction id and no lock (`tx_claim` takes the scope's lock).
//!
//! Bounds, so that the user's pool is not starved and closes on time:
//! * at most [`MAX_KEPT`] are kept, and none while the pool has no idle connection and cannot
//!   open another (someone may be waiting for one: it goes back at once);
//! * one is kept at most [`MAX_IDLE`]: a reaper task returns older ones to the pool, so an idle
//!   service holds none, and `PgPool::close` finishes.
//!
//! A warm transaction whose connection died meanwhile (the server restarted) fails its claim;
//! the run then starts again on a fresh transaction of the pool (see `run::leader`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::Mutex;
use sqlx::{Postgres, Transaction};
use tokio::time::Instant;

use crate::db::Db;

/// The most warm transactions kept.
pub(crate) const MAX_KEPT: usize = 64;
/// How long one is kept before it goes back to the pool.
pub(crate) const MAX_IDLE: Duration = Duration::from_millis(200);

type Tx = Transaction<'static, Postgres>;

/// The warm transactions of one engine.
#[derive(Debug)]
pub(crate) struct Warm {
    db: Arc<Db>,
    kept: Mutex<Vec<(Instant, Tx)>>,
    reaping: AtomicBool,
}

impl Warm {
    pub(crate) fn new(db: Arc<Db>) -> Self {
        Warm {
            db,
            kept: Mutex::new(Vec::new()),
            reaping: AtomicBool::new(false),
        }
    }

    /// Drops `txs` (each queues its ROLLBACK and goes back to the pool), counting the ROLLBACKs.
    fn release(&self, txs: impl IntoIterator<Item = Tx>) {
        for tx in txs {
            self.db.count("rollback");
            drop(tx);
        }
    }

    /// The newest warm transaction younger than [`MAX_IDLE`], if any.
    pub(crate) fn take(&self) -> Option<Tx> {
        let (at, tx) = self.kept.lock().pop()?;
        if at.elapsed() < MAX_IDLE {
            Some(tx)
        } else {
            self.release([tx]);
            None
        }
    }

    /// Keeps `tx` (an open, empty transaction) for the next run, or drops it (back to the pool)
    /// when the pool may be short of connections or enough are kept. `this` is the engine's
    /// own handle of `self`, for the reaper.
    pub(crate) fn keep(this: &Arc<Self>, tx: Tx) {
        let pool = &this.db.pool;
        let short = pool.num_idle() == 0 && pool.size() >= pool.options().get_max_connections();
        {
            let mut kept = this.kept.lock();
            if short || kept.len() >= MAX_KEPT {
                drop(kept);
                this.release([tx]);
                return;
            }
            kept.push((Instant::now(), tx));
        }
        if !this.reaping.swap(true, Ordering::AcqRel) {
            tokio::spawn(reap(Arc::downgrade(this)));
        }
    }

    /// Drops the kept transactions older than [`MAX_IDLE`]; true while some are left.
    fn expire(&self) -> bool {
        let mut kept = self.kept.lock();
        let old: Vec<_> = {
            let cut = kept.partition_point(|(at, _)| at.elapsed() >= MAX_IDLE);
            kept.drain(..cut).collect()
        };
        let left = !kept.is_empty();
        drop(kept);
        self.release(old.into_iter().map(|(_, tx)| tx)); // outside the lock
        left
    }
}

/// Returns expired warm transactions to the pool until none is kept (then the next `keep`
/// starts a new reaper).
async fn reap(warm: Weak<Warm>) {
    loop {
        tokio::time::sleep(MAX_IDLE).await;
        let Some(w) = warm.upgrade() else { return };
        if w.expire() {
            continue;
        }
        w.reaping.store(false, Ordering::Release);
        // One kept between `expire` and the store above started no reaper: this one goes on.
        if w.kept.lock().is_empty() || w.reaping.swap(true, Ordering::AcqRel) {
            return;
        }
    }
}

impl Drop for Warm {
    fn drop(&mut self) {
        let kept = std::mem::take(self.kept.get_mut());
        if tokio::runtime::Handle::try_current().is_ok() {
            self.release(kept.into_iter().map(|(_, tx)| tx));
        } else {
            // sqlx returns a dropped connection to its pool on a task, which needs a runtime;
            // without one (the engine dropped after its runtime) the connections are left to
            // the pool's own end.
            std::mem::forget(kept);
        }
    }
}
