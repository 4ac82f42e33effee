//! PostgreSQL for the tests: the machine's running server (127.0.0.1:5432, database `test`,
//! trust auth; `IDEM_PG_URL` overrides) with a unique schema per test. Tests that stop or restart
//! the server start a cluster of their own (idem-test-support's `PgCluster`) and use the same
//! schemas on it.
//!
//! A test that cannot get its server fails with the reason: it never passes silently.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use idem_postgres::{LocalCache, PgEngine, PgTier, TieredEngine};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::PgPool;

/// The running server's URL.
pub(crate) fn url() -> String {
    std::env::var("IDEM_PG_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

/// A pool of at most `max` connections, no ping before each acquire (both the tests and the
/// benchmark run that way; the default ping costs a round trip per acquire).
pub(crate) async fn pool(url: &str, max: u32) -> PgPool {
    let opts: PgConnectOptions = url.parse().expect("a PostgreSQL URL");
    PgPoolOptions::new()
        .max_connections(max)
        .acquire_timeout(Duration::from_secs(5))
        .test_before_acquire(false)
        .connect_with(opts)
        .await
        .unwrap_or_else(|e| {
            panic!(
                "cannot connect to PostgreSQL at {url} ({e}): these tests need a server \
                 (127.0.0.1:5432, database `test`, trust auth, or IDEM_PG_URL)"
            )
        })
}

/// A pool that connects lazily (for a server that may be down when it is made).
pub(crate) fn lazy_pool(url: &str, max: u32) -> PgPool {
    let opts: PgConnectOptions = url.parse().expect("a PostgreSQL URL");
    PgPoolOptions::new()
        .max_connections(max)
        .acquire_timeout(Duration::from_secs(2))
        .test_before_acquire(false)
        .connect_lazy_with(opts)
}

/// A schema name no other test (or run) uses: `t_<tag>_<pid>_<n>`.
pub(crate) fn unique_schema(tag: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    let tag: String = tag.chars().take(16).collect();
    format!(
        "t_{tag}_{}_{}_{}",
        std::process::id(),
        nanos % 100_000,
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// One test's schema on a server, with an `orders` table beside idem's.
pub(crate) struct TestDb {
    pub(crate) url: String,
    pub(crate) pool: PgPool,
    pub(crate) schema: String,
}

impl TestDb {
    /// A fresh schema on the running server.
    pub(crate) async fn new(tag: &str) -> Self {
        Self::on(&url(), &unique_schema(tag)).await
    }

    /// `schema` on the server at `url`: idem's schema applied, and the orders table.
    pub(crate) async fn on(url: &str, schema: &str) -> Self {
        let pool = pool(url, 8).await;
        idem_postgres::migrate(&pool, schema)
            .await
            .expect("apply the schema");
        sqlx::raw_sql(&format!(
            "CREATE TABLE IF NOT EXISTS \"{schema}\".orders (\
               id bigserial PRIMARY KEY, intent text NOT NULL, by_worker text NOT NULL, \
               token bigint NOT NULL)"
        ))
        .execute(&pool)
        .await
        .expect("create the orders table");
        TestDb {
            url: url.to_owned(),
            pool,
            schema: schema.to_owned(),
        }
    }

    /// A transactional engine on this schema (its own pool of `conns`).
    pub(crate) async fn engine(&self, conns: u32) -> PgEngine<String> {
        PgEngine::<String>::builder(pool(&self.url, conns).await)
            .schema(&self.schema)
            .query_timeout(Duration::from_secs(5))
            .apply_schema(false)
            .local(LocalCache::new().shards(2))
            .build()
            .await
            .expect("engine")
    }

    /// A remote tier on this schema (its own pool of `conns`).
    pub(crate) async fn tier(&self, conns: u32) -> PgTier {
        PgTier::builder(pool(&self.url, conns).await)
            .schema(&self.schema)
            .query_timeout(Duration::from_secs(5))
            .apply_schema(false)
            .build()
            .await
            .expect("tier")
    }

    /// A tiered engine over a new tier on this schema.
    pub(crate) async fn tiered(&self, conns: u32, lease: Duration) -> TieredEngine<String> {
        TieredEngine::<String>::builder(self.tier(conns).await)
            .lease(lease)
            .poll_interval(Duration::from_millis(5), Duration::from_millis(50))
            .local(LocalCache::new().shards(2))
            .build()
            .expect("tiered engine")
    }

    /// `INSERT INTO orders` inside a run's transaction.
    pub(crate) fn insert_order(&self) -> String {
        format!(
            "INSERT INTO \"{}\".orders (intent, by_worker, token) VALUES ($1, $2, $3)",
            self.schema
        )
    }

    /// Every order: (intent, by_worker).
    pub(crate) async fn orders(&self) -> Vec<(String, String)> {
        sqlx::query_as(&format!(
            "SELECT intent, by_worker FROM \"{}\".orders ORDER BY id",
            self.schema
        ))
        .fetch_all(&self.pool)
        .await
        .expect("read the orders")
    }

    /// Rows in idem's table.
    pub(crate) async fn records(&self) -> i64 {
        sqlx::query_scalar(&format!("SELECT count(*) FROM \"{}\".records", self.schema))
            .fetch_one(&self.pool)
            .await
            .expect("count the records")
    }

    /// Drops the schema (at the end of a test that passed).
    pub(crate) async fn drop_schema(self) {
        let _ = sqlx::raw_sql(&format!("DROP SCHEMA \"{}\" CASCADE", self.schema))
            .execute(&self.pool)
            .await;
    }
}
