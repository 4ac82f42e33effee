//! PostgreSQL for the tests: the machine's running server (127.0.0.1:5432, database `test`,
//! trust auth; `IDEM_PG_URL` overrides) with a unique schema per test, or a cluster of the
//! test's own (`initdb` + `pg_ctl` from `/usr/lib/postgresql/15/bin`, or `IDEM_PG_BIN`) on a
//! free loopback port in a temp dir, for tests that stop or restart the server. A cluster is
//! stopped when dropped.
//!
//! A test that cannot get its server fails with the reason: it never passes silently.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use idem_postgres::{PgEngine, PgTier, TieredEngine};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::PgPool;
use tempfile::TempDir;

/// The running server's URL.
pub fn url() -> String {
    std::env::var("IDEM_PG_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

/// A pool of at most `max` connections, no ping before each acquire (both the tests and the
/// benchmark run that way; the default ping costs a round trip per acquire).
pub async fn pool(url: &str, max: u32) -> PgPool {
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
pub fn lazy_pool(url: &str, max: u32) -> PgPool {
    let opts: PgConnectOptions = url.parse().expect("a PostgreSQL URL");
    PgPoolOptions::new()
        .max_connections(max)
        .acquire_timeout(Duration::from_secs(2))
        .test_before_acquire(false)
        .connect_lazy_with(opts)
}

/// A schema name no other test (or run) uses: `t_<tag>_<pid>_<n>`.
pub fn unique_schema(tag: &str) -> String {
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
pub struct TestDb {
    pub url: String,
    pub pool: PgPool,
    pub schema: String,
}

impl TestDb {
    /// A fresh schema on the running server.
    pub async fn new(tag: &str) -> Self {
        Self::on(&url(), &unique_schema(tag)).await
    }

    /// `schema` on the server at `url`: idem's schema applied, and the orders table.
    pub async fn on(url: &str, schema: &str) -> Self {
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
    pub async fn engine(&self, conns: u32) -> PgEngine<String> {
        PgEngine::<String>::builder(pool(&self.url, conns).await)
            .schema(&self.schema)
            .query_timeout(Duration::from_secs(5))
            .apply_schema(false)
            .local_shards(2)
            .build()
            .await
            .expect("engine")
    }

    /// A remote tier on this schema (its own pool of `conns`).
    pub async fn tier(&self, conns: u32) -> PgTier {
        PgTier::builder(pool(&self.url, conns).await)
            .schema(&self.schema)
            .query_timeout(Duration::from_secs(5))
            .apply_schema(false)
            .build()
            .await
            .expect("tier")
    }

    /// A tiered engine over a new tier on this schema.
    pub async fn tiered(&self, conns: u32, lease: Duration) -> TieredEngine<String> {
        TieredEngine::<String>::builder(self.tier(conns).await)
            .lease(lease)
            .poll_interval(Duration::from_millis(5), Duration::from_millis(50))
            .local_shards(2)
            .build()
            .expect("tiered engine")
    }

    /// `INSERT INTO orders` inside a run's transaction.
    pub fn insert_order(&self) -> String {
        format!(
            "INSERT INTO \"{}\".orders (intent, by_worker, token) VALUES ($1, $2, $3)",
            self.schema
        )
    }

    /// Every order: (intent, by_worker).
    pub async fn orders(&self) -> Vec<(String, String)> {
        sqlx::query_as(&format!(
            "SELECT intent, by_worker FROM \"{}\".orders ORDER BY id",
            self.schema
        ))
        .fetch_all(&self.pool)
        .await
        .expect("read the orders")
    }

    /// Rows in idem's table.
    pub async fn records(&self) -> i64 {
        sqlx::query_scalar(&format!("SELECT count(*) FROM \"{}\".records", self.schema))
            .fetch_one(&self.pool)
            .await
            .expect("count the records")
    }

    /// Drops the schema (at the end of a test that passed).
    pub async fn drop_schema(self) {
        let _ = sqlx::raw_sql(&format!("DROP SCHEMA \"{}\" CASCADE", self.schema))
            .execute(&self.pool)
            .await;
    }
}

/// Where `initdb` and `pg_ctl` live.
fn bin(tool: &str) -> PathBuf {
    let dir = std::env::var("IDEM_PG_BIN").unwrap_or_else(|_| "/usr/lib/postgresql/15/bin".into());
    let p = Path::new(&dir).join(tool);
    assert!(
        p.exists(),
        "{} not found: tests that restart PostgreSQL need its server binaries \
         (Debian: apt-get install postgresql-15; or set IDEM_PG_BIN)",
        p.display()
    );
    p
}

/// The uid and gid of the `postgres` user, when these tests run as root (initdb refuses to
/// run as root, so the cluster is made and run as `postgres`).
fn run_as() -> Option<(u32, u32)> {
    let uid = Command::new("id").arg("-u").output().expect("run `id -u`");
    if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
        return None;
    }
    let id = |flag: &str| {
        let out = Command::new("id")
            .args([flag, "postgres"])
            .output()
            .expect("run `id`");
        assert!(
            out.status.success(),
            "these tests run as root, and initdb refuses to run as root: they need a \
             `postgres` user to run the cluster as (Debian's postgresql package makes one)"
        );
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse::<u32>()
            .unwrap()
    };
    Some((id("-u"), id("-g")))
}

fn command(tool: &str, as_user: Option<(u32, u32)>) -> Command {
    match as_user {
        Some(_) => {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(bin(tool));
            c
        }
        None => Command::new(bin(tool)),
    }
}

fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
    l.local_addr().unwrap().port()
}

/// A PostgreSQL cluster of the test's own: `initdb` in a temp dir, `pg_ctl start` on a free
/// loopback port (fsync off: the tests stop it with `-m immediate`, which is a crash, but the
/// data dir is thrown away after). Stopped on drop.
pub struct PgCluster {
    dir: TempDir,
    port: u16,
    as_user: Option<(u32, u32)>,
    running: bool,
}

impl PgCluster {
    /// Makes and starts a cluster; its database `postgres` is ready when this returns.
    pub fn start() -> Self {
        let as_user = run_as();
        let dir = tempfile::tempdir().expect("temp dir");
        if let Some((uid, gid)) = as_user {
            std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid))
                .expect("give the temp dir to the postgres user");
        }
        let data = dir.path().join("data");
        let out = command("initdb", as_user)
            .arg("-D")
            .arg(&data)
            .args(["-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8"])
            .output()
            .unwrap_or_else(|e| panic!("cannot run initdb ({e})"));
        assert!(
            out.status.success(),
            "initdb failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let mut c = PgCluster {
            dir,
            port: free_port(),
            as_user,
            running: false,
        };
        c.start_again();
        c
    }

    /// `postgres://postgres@127.0.0.1:<port>/postgres`.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    fn pg_ctl(&self, args: &[&str]) -> std::process::Output {
        command("pg_ctl", self.as_user)
            .arg("-D")
            .arg(self.dir.path().join("data"))
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("cannot run pg_ctl ({e})"))
    }

    /// Stops the server at once (`pg_ctl stop -m immediate`: every backend is killed, as in a
    /// crash; open transactions are lost).
    pub fn stop(&mut self) {
        if self.running {
            let _ = self.pg_ctl(&["stop", "-m", "immediate", "-w"]);
            self.running = false;
        }
    }

    /// Starts the (stopped) server again on the same port and waits until it accepts
    /// connections.
    pub fn start_again(&mut self) {
        let opts = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200",
            self.port,
            self.dir.path().display()
        );
        let log = self.dir.path().join("server.log");
        let out = self.pg_ctl(&[
            "start",
            "-w",
            "-t",
            "60",
            "-l",
            log.to_str().unwrap(),
            "-o",
            &opts,
        ]);
        assert!(
            out.status.success(),
            "pg_ctl start failed: {}{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        self.running = true;
    }
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Waits (on tokio's timer) until `check` holds, for at most `limit`; panics with `what`.
pub async fn eventually<F, Fut>(limit: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let until = tokio::time::Instant::now() + limit;
    while !check().await {
        assert!(
            tokio::time::Instant::now() < until,
            "{what}: not within {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
