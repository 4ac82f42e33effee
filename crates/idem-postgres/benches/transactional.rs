//! The transactional mode on loopback PostgreSQL (D4; issue 15's performance targets):
//!
//! * `unique/idem` vs `unique/bare`: new intents through a [`PgEngine`] (BEGIN, claim, the
//!   order INSERT, the record with the COMMIT: four round trips) against the same
//!   transaction without idem (BEGIN, the order INSERT, COMMIT: three), at the same concurrency, on pools of the same size. Target:
//!   idem >= 0.7x bare. Besides criterion's figures, `paired` alternates bursts of the two and
//!   prints the median of the bursts' throughput ratios (the machine may be shared; a paired
//!   ratio is what a noisy neighbour disturbs least), at 16, 4 and 1 clients.
//! * `replay/local`: replays of results the instance holds; the statements they cost are
//!   counted and printed (must be 0), as are those of a cross-instance replay.
//!
//! Uses the running server (`IDEM_PG_URL`, default `postgres://postgres@127.0.0.1:5432/test`)
//! with a schema of its own, dropped at the end.
//! `cargo bench -p idem-postgres --bench transactional`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput};
use idem_core::{Fingerprint, Scope, Status};
use idem_postgres::{sqlx_status, PgEngine};
use sqlx::postgres::PgPoolOptions;
use sqlx::PgPool;
use tokio::runtime::Runtime;

/// Concurrent clients (and connections per pool).
const CONCURRENCY: usize = 16;
/// Intents per burst.
const BURST: usize = 800;
const SCHEMA: &str = "idem_bench_tx";

struct Env {
    engine: PgEngine<String>,
    other: PgEngine<String>,
    bare: PgPool,
    insert: String,
    next: AtomicU64,
}

async fn pool(url: &str) -> PgPool {
    PgPoolOptions::new()
        .max_connections(CONCURRENCY as u32)
        .min_connections(CONCURRENCY as u32)
        .test_before_acquire(false)
        .connect(url)
        .await
        .expect("connect to PostgreSQL (IDEM_PG_URL)")
}

impl Env {
    async fn new() -> Self {
        let url = std::env::var("IDEM_PG_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
        let bare = pool(&url).await;
        sqlx::raw_sql(&format!(
            "DROP SCHEMA IF EXISTS {SCHEMA} CASCADE; CREATE SCHEMA {SCHEMA}; \
             CREATE TABLE {SCHEMA}.orders (id bigserial PRIMARY KEY, intent text NOT NULL, \
             sku text NOT NULL, qty int NOT NULL, token bigint NOT NULL)"
        ))
        .execute(&bare)
        .await
        .unwrap();
        let engine = |p: PgPool| PgEngine::<String>::builder(p).schema(SCHEMA).build();
        Env {
            engine: engine(pool(&url).await).await.unwrap(),
            other: engine(pool(&url).await).await.unwrap(),
            bare,
            insert: format!(
                "INSERT INTO {SCHEMA}.orders (intent, sku, qty, token) VALUES ($1, $2, $3, $4)"
            ),
            next: AtomicU64::new(0),
        }
    }

    fn scope(&self) -> Scope {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        Scope::parse(
            "tenant-1",
            "/bench/CreateOrder",
            &format!("bench-key-{n:012}"),
        )
        .unwrap()
    }
}

fn fp() -> Fingerprint {
    Fingerprint::of(b"sku=book-42&qty=1")
}

/// One intent through the engine: the order INSERT inside the run's transaction.
async fn idem_one(env: &Env, engine: &PgEngine<String>, scope: &Scope) {
    let insert = env.insert.clone();
    let intent = scope.key().to_owned();
    let _ = engine
        .execute(scope, fp(), move |tx| async move {
            let token = tx.token().get() as i64;
            let mut conn = tx.lock().await?;
            sqlx::query(&insert)
                .bind(intent)
                .bind("book-42")
                .bind(1)
                .bind(token)
                .execute(&mut *conn)
                .await
                .map_err(sqlx_status)?;
            Ok::<_, Status>("order".to_string())
        })
        .await
        .unwrap();
}

/// The same transaction without idem.
async fn bare_one(env: &Env, scope: &Scope) {
    let mut tx = env.bare.begin().await.unwrap();
    sqlx::query(&env.insert)
        .bind(scope.key())
        .bind("book-42")
        .bind(1)
        .bind(0i64)
        .execute(&mut *tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();
}

/// `n` intents by CONCURRENCY clients; `idem` picks the engine or the bare transaction.
async fn burst(env: &Env, n: usize, idem: bool) -> Duration {
    burst_at(env, n, idem, CONCURRENCY).await
}

/// `n` intents by `clients` clients.
async fn burst_at(env: &Env, n: usize, idem: bool, clients: usize) -> Duration {
    let scopes: Vec<Scope> = (0..n).map(|_| env.scope()).collect();
    let start = Instant::now();
    let per = n.div_ceil(clients);
    let clients = scopes.chunks(per).map(|chunk| async move {
        for s in chunk {
            if idem {
                idem_one(env, &env.engine, s).await;
            } else {
                bare_one(env, s).await;
            }
        }
    });
    futures::future::join_all(clients).await;
    start.elapsed()
}

fn unique(c: &mut Criterion, rt: &Runtime, env: &Env) {
    let mut g = c.benchmark_group("unique");
    g.throughput(Throughput::Elements(BURST as u64));
    g.sample_size(10);
    g.warm_up_time(Duration::from_secs(2));
    g.measurement_time(Duration::from_secs(10));
    g.bench_function("bare", |b| {
        b.to_async(rt).iter_custom(|iters| async move {
            let mut t = Duration::ZERO;
            for _ in 0..iters {
                t += burst(env, BURST, false).await;
            }
            t
        })
    });
    g.bench_function("idem", |b| {
        b.to_async(rt).iter_custom(|iters| async move {
            let mut t = Duration::ZERO;
            for _ in 0..iters {
                t += burst(env, BURST, true).await;
            }
            t
        })
    });
    g.finish();
}

/// Alternates bursts, bare then idem, at `clients` clients, and prints the median ratio of
/// their throughputs.
fn paired(rt: &Runtime, env: &Env, clients: usize, n: usize) {
    let pairs = 12;
    let mut ratios = Vec::new();
    let (mut bare_tps, mut idem_tps) = (Vec::new(), Vec::new());
    rt.block_on(async {
        for _ in 0..pairs {
            let b = burst_at(env, n, false, clients).await;
            let i = burst_at(env, n, true, clients).await;
            bare_tps.push(n as f64 / b.as_secs_f64());
            idem_tps.push(n as f64 / i.as_secs_f64());
            ratios.push(b.as_secs_f64() / i.as_secs_f64());
        }
    });
    let median = |v: &mut Vec<f64>| {
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        v[v.len() / 2]
    };
    let (lo, hi) = {
        let mut r = ratios.clone();
        r.sort_by(|a, b| a.partial_cmp(b).unwrap());
        (r[0], r[r.len() - 1])
    };
    println!(
        "paired unique intents, {clients} clients, {pairs} x {n}: bare {:.0} tx/s, \
         idem {:.0} tx/s (medians); idem/bare median {:.2}x (range {lo:.2}-{hi:.2})",
        median(&mut bare_tps),
        median(&mut idem_tps),
        median(&mut ratios)
    );
}

fn replays(c: &mut Criterion, rt: &Runtime, env: &Env) {
    let scope = env.scope();
    rt.block_on(idem_one(env, &env.engine, &scope));
    // A cross-instance replay: the other engine holds nothing locally.
    let before = env.other.queries_sent();
    rt.block_on(idem_one(env, &env.other, &scope));
    let cross = env.other.queries_sent() - before;
    let before = env.engine.queries_sent();
    let mut g = c.benchmark_group("replay");
    g.throughput(Throughput::Elements(1));
    g.bench_function("local", |b| {
        b.to_async(rt).iter(|| idem_one(env, &env.engine, &scope))
    });
    g.finish();
    let local = env.engine.queries_sent() - before;
    println!(
        "statements: local replays {local} (over every iteration); a cross-instance replay \
         {cross} (BEGIN, the claim that returns the record, the ROLLBACK queued with the \
         connection)"
    );
    assert_eq!(local, 0, "local replays must cost no statement");
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let env: &'static Env = Box::leak(Box::new(rt.block_on(Env::new())));
    let mut c = Criterion::default().configure_from_args();
    unique(&mut c, &rt, env);
    paired(&rt, env, CONCURRENCY, BURST);
    paired(&rt, env, 4, BURST / 2);
    paired(&rt, env, 1, BURST / 8);
    replays(&mut c, &rt, env);
    c.final_summary();
    rt.block_on(async {
        let _ = sqlx::raw_sql(&format!("DROP SCHEMA {SCHEMA} CASCADE"))
            .execute(&env.bare)
            .await;
    });
}
