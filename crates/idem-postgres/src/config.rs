//! Settings shared by the tier's and the transactional engine's builders: the schema, the time
//! limit of every query, whether to apply the schema, and the sweeper.

use std::sync::Arc;
use std::time::Duration;

use sqlx::PgPool;

use crate::db::Db;
use crate::schema::{check_schema, migrate, unreachable_or, SetupError, DEFAULT_SCHEMA};
use crate::sweeper::SweepConfig;

#[derive(Debug, Clone)]
pub(crate) struct Common {
    pub(crate) pool: PgPool,
    pub(crate) schema: String,
    pub(crate) query_timeout: Duration,
    pub(crate) apply_schema: bool,
    pub(crate) sweep: Option<SweepConfig>,
}

impl Common {
    pub(crate) fn new(pool: PgPool) -> Self {
        Common {
            pool,
            schema: DEFAULT_SCHEMA.to_owned(),
            query_timeout: Duration::from_secs(1),
            apply_schema: true,
            sweep: Some(SweepConfig::default()),
        }
    }

    pub(crate) fn sweep_every(&mut self, every: Duration) {
        self.sweep = Some(SweepConfig {
            every,
            ..self.sweep.unwrap_or_default()
        });
    }

    pub(crate) fn sweep_batch(&mut self, batch: u32) {
        self.sweep = Some(SweepConfig {
            batch,
            ..self.sweep.unwrap_or_default()
        });
    }

    /// Validates, applies the schema (unless told not to) and makes the database handle.
    pub(crate) async fn open(&self) -> Result<Arc<Db>, SetupError> {
        check_schema(&self.schema)?;
        if self.query_timeout.is_zero() {
            return Err(SetupError::Invalid(
                "query_timeout must be greater than zero",
            ));
        }
        if let Some(s) = &self.sweep {
            if s.every.is_zero() || s.batch == 0 {
                return Err(SetupError::Invalid(
                    "the sweep interval and batch must be greater than zero",
                ));
            }
        }
        if self.apply_schema {
            // Generous: DDL may wait behind other sessions' locks at start-up.
            let limit = self.query_timeout.max(Duration::from_secs(10));
            match tokio::time::timeout(limit, migrate(&self.pool, &self.schema)).await {
                Ok(done) => done?,
                Err(_) => return Err(unreachable_or(&self.pool, SetupError::Timeout(limit)).await),
            }
        }
        crate::metrics::describe();
        Ok(Arc::new(Db::new(
            self.pool.clone(),
            &self.schema,
            self.query_timeout,
        )))
    }
}

/// The builder methods both builders share, with their docs.
macro_rules! common_setters {
    () => {
        /// The PostgreSQL schema of idem's table, sequence and functions: 1 to 48 characters of
        /// `a-z`, `0-9` and `_`, not starting with a digit. Default: `idem`.
        pub fn schema(mut self, name: impl Into<String>) -> Self {
            self.common.schema = name.into();
            self
        }

        /// The time limit of every statement (pool acquisition included); a statement that
        /// fails or passes it answers `UNAVAILABLE` / `UPSTREAM_UNAVAILABLE`, retryable. When
        /// the time went on waiting for a connection that cannot open, one direct connection
        /// attempt (at most one a second per tier or engine) finds why, and the message says
        /// it: "cannot connect to PostgreSQL at 127.0.0.1:5433: connection refused".
        /// Default: 1 s.
        pub const fn query_timeout(mut self, d: std::time::Duration) -> Self {
            self.common.query_timeout = d;
            self
        }

        /// Whether `build` applies the schema ([`migrate`](crate::migrate); idempotent).
        /// Turn it off where DDL goes through your own migrations
        /// ([`schema_sql`](crate::schema_sql)). Default: `true`.
        pub const fn apply_schema(mut self, apply: bool) -> Self {
            self.common.apply_schema = apply;
            self
        }

        /// How often the sweeper deletes expired rows. Default: every 60 s.
        pub fn sweep_every(mut self, every: std::time::Duration) -> Self {
            self.common.sweep_every(every);
            self
        }

        /// How many expired rows one sweeper statement deletes (up to 100 statements a tick,
        /// while batches come back full). Default: 1,000.
        pub fn sweep_batch(mut self, rows: u32) -> Self {
            self.common.sweep_batch(rows);
            self
        }

        /// Starts no sweeper here (another instance, or a job of yours calling `sweep_now`,
        /// deletes expired rows). Expired rows are ignored either way.
        pub fn no_sweeper(mut self) -> Self {
            self.common.sweep = None;
            self
        }
    };
}
pub(crate) use common_setters;
