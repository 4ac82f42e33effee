//! The sweeper: deletes expired rows in bounded batches, on tokio's timer.
//!
//! Every row carries `expires_at` (the lease deadline while in flight, completion + TTL once
//! completed), and every function treats a row past it as absent, so correctness never waits
//! for the sweeper: it only bounds the table. Each tick deletes up to `batch` expired rows per
//! statement, found through the `expires_at` index and locked with `FOR UPDATE SKIP LOCKED`
//! (so sweepers of several instances, and claims taking an expired row over, never wait for each
//! other), and repeats while batches come back full, at most `max_batches` times; then it sleeps
//! until the next tick. Under a flood of unique keys the table holds at most the rows of one
//! TTL plus one sweep interval. Multi-step operations expire the same way: an operation's row
//! (and, by cascade, its recovery points) is deleted with the same batches once past its expiry,
//! which is its record's.

use std::sync::{Arc, Weak};
use std::time::Duration;

use idem_core::Status;

use crate::db::Db;
use crate::metrics;

/// When and how much the sweeper deletes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SweepConfig {
    pub(crate) every: Duration,
    pub(crate) batch: u32,
    pub(crate) max_batches: u32,
}

impl Default for SweepConfig {
    fn default() -> Self {
        SweepConfig {
            every: Duration::from_secs(60),
            batch: 1_000,
            max_batches: 100,
        }
    }
}

/// One sweep: expired records, then expired operations (their recovery points go with them),
/// each in batches until one comes back short or `max_batches` ran. Returns the rows deleted
/// (records and operations; the steps deleted with an operation are not counted).
pub(crate) async fn sweep_once(db: &Db, cfg: SweepConfig) -> Result<u64, Status> {
    let records = sweep_table(db, cfg, &db.sql.sweep).await?;
    Ok(records + sweep_table(db, cfg, &db.sql.sweep_operations).await?)
}

async fn sweep_table(db: &Db, cfg: SweepConfig, sql: &str) -> Result<u64, Status> {
    let mut total = 0;
    for _ in 0..cfg.max_batches {
        let q = sqlx::query(sql)
            .bind(i64::from(cfg.batch))
            .execute(&db.pool);
        let done = db
            .uncounted("sweep", q)
            .await
            .map_err(|f| db.status(f))?
            .rows_affected();
        total += done;
        ::metrics::counter!(metrics::SWEPT).increment(done);
        if done < u64::from(cfg.batch) {
            break;
        }
    }
    Ok(total)
}

/// Starts the sweeper task; it ends when `db` is dropped (its owner also aborts it).
pub(crate) fn spawn(db: &Arc<Db>, cfg: SweepConfig) -> tokio::task::JoinHandle<()> {
    let db: Weak<Db> = Arc::downgrade(db);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(cfg.every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await; // the first tick is immediate: sweep one interval after start
        loop {
            tick.tick().await;
            let Some(db) = db.upgrade() else { return };
            if let Err(e) = sweep_once(&db, cfg).await {
                tracing::debug!(error = %e, "idem-postgres sweep failed; retrying at the next tick");
            }
        }
    })
}
