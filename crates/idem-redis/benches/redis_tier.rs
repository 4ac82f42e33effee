//! The Redis tier on loopback (D1–D3; issue 14's item "Redis at pipeline speed").
//!
//! Starts its own `redis-server` on a free port, then prints a table of **paired runs**: every
//! round runs each variant once, in a rotating order, on unique keys, 64 operations in flight, all
//! through **one client** (one `ConnectionManager`, which the first tier is built over with
//! `from_connection_manager`):
//!
//! | variant | what one operation is |
//! |---|---|
//! | `tier` | `TieredEngine::execute` on a new scope: claim script, the action, complete script |
//! | `tier_direct` | `RedisTier::claim` then `complete`, no engine in front |
//! | `floor` | `SET k run NX PX`, then `SET k done XX PX`: two plain commands, one after the other |
//! | `set_get` | `SET k run NX PX GET`, then `SET k done XX PX` |
//! | `lua_min` | the floor's two commands, each inside a one-line `EVAL` script |
//! | `lua_string` | a sketch of a cheaper record (one string per scope, claim = GET + TIME + SET, complete = GET + SET), one scope per script call |
//! | `lua_batch` | the same scripts carrying 16 scopes per call (4 calls in flight: 64 scopes) |
//! | `set_nx` | one `SET k v NX PX` |
//!
//! and each variant's rate relative to `floor`, the median over the rounds; then Redis' own time
//! per command (`INFO commandstats`, `usec_per_call`), the cross-instance join latency (instance B
//! waits for A's run; from A's action returning to B's call returning: p50, p99), and the Redis
//! commands that 20,000 replays of locally held results cost (must be 0).
//!
//! `cargo bench -p idem-redis --bench redis_tier` (`-- --rounds 9` for more rounds,
//! `-- --criterion` to add criterion's own measurements of `tier` and `floor`).

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput};
use idem_core::{Scope, Status};
use idem_dedup::remote::OwnerId;
use idem_redis::{RedisTier, TieredEngine};
use idem_test_support::redis::{self as support, RedisServer};
use redis::aio::ConnectionManager;
use tokio::runtime::Runtime;

#[path = "redis_tier/variants.rs"]
mod variants;
use variants::{batch, fp, Variant, VARIANTS};

/// Operations per variant per round.
const BATCH: usize = 4_000;
/// Operations in flight at once.
const IN_FLIGHT: usize = 64;

struct Env {
    a: TieredEngine<String>,
    b: TieredEngine<String>,
    tier: RedisTier,
    mgr: ConnectionManager,
    next: AtomicU64,
    owner: OwnerId,
}

impl Env {
    async fn new(url: &str) -> Self {
        let client = redis::Client::open(url).unwrap();
        let cfg = redis::aio::ConnectionManagerConfig::new()
            .set_response_timeout(Some(Duration::from_secs(10)));
        let mgr = client
            .get_connection_manager_with_config(cfg)
            .await
            .unwrap();
        // The bench's own redis-server keeps nothing on disk: opted in.
        let tier = RedisTier::builder()
            .allow_volatile(true)
            .from_connection_manager(mgr.clone(), Some(client))
            .await
            .expect("tier over the shared client");
        let other = RedisTier::builder()
            .allow_volatile(true)
            .connect(url)
            .await
            .expect("connect");
        let a = TieredEngine::<String>::builder(tier.clone())
            .build()
            .unwrap();
        let b = TieredEngine::<String>::builder(other).build().unwrap();
        Env {
            a,
            b,
            tier,
            mgr,
            next: AtomicU64::new(0),
            owner: OwnerId::random(),
        }
    }

    fn n(&self) -> u64 {
        self.next.fetch_add(1, Ordering::Relaxed)
    }

    fn scope(&self) -> Scope {
        Scope::parse(
            "tenant-1",
            "/bench/Create",
            &format!("bench-key-{:012}", self.n()),
        )
        .unwrap()
    }
}

/// One cross-instance join: A holds a scope, B waits, A's action returns; the time until B's
/// call returns.
async fn join_once(env: &Env) -> Duration {
    let s = env.scope();
    let (go, wait) = tokio::sync::oneshot::channel::<()>();
    let (started_tx, started) = tokio::sync::oneshot::channel::<()>();
    let (done_tx, done_rx) = tokio::sync::oneshot::channel::<Instant>();
    let a = env.a.clone();
    let sa = s.clone();
    let holder = tokio::spawn(async move {
        let _ = a
            .execute(&sa, fp(), move |_| async move {
                let _ = started_tx.send(());
                let _ = wait.await;
                let _ = done_tx.send(Instant::now());
                Ok::<_, Status>("order-1001".to_string())
            })
            .await
            .unwrap();
    });
    // A holds the claim; then B meets it and subscribes.
    started.await.unwrap();
    let b = env.b.clone();
    let sb = s.clone();
    let waiter = tokio::spawn(async move {
        let out = b
            .execute(&sb, fp(), |_| async {
                Ok::<_, Status>("never".to_string())
            })
            .await
            .unwrap();
        (Instant::now(), out.kind())
    });
    tokio::time::sleep(Duration::from_millis(10)).await;
    go.send(()).unwrap();
    let (b_done, kind) = waiter.await.unwrap();
    holder.await.unwrap();
    assert_eq!(kind, idem_dedup::OutcomeKind::Joined);
    b_done.saturating_duration_since(done_rx.await.unwrap())
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn block<F: Future>(rt: &Runtime, f: F) -> F::Output {
    rt.block_on(f)
}

fn summary(rt: &Runtime, env: &Env, redis: &RedisServer, rounds: usize) {
    let port = redis.port();
    // Warm-up: every variant once.
    for v in VARIANTS {
        block(rt, batch(env, v, BATCH / 4));
    }
    block(rt, support::raw(port, "CONFIG RESETSTAT")).unwrap();
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); VARIANTS.len()];
    let mut ratios: Vec<Vec<f64>> = vec![Vec::new(); VARIANTS.len()];
    let floor_at = VARIANTS.iter().position(|v| *v == Variant::Floor).unwrap();
    for round in 0..rounds {
        let mut this = vec![0.0; VARIANTS.len()];
        for k in 0..VARIANTS.len() {
            let i = (k + round) % VARIANTS.len();
            let d = block(rt, batch(env, VARIANTS[i], BATCH));
            this[i] = BATCH as f64 / d.as_secs_f64();
        }
        for i in 0..VARIANTS.len() {
            rates[i].push(this[i]);
            ratios[i].push(this[i] / this[floor_at]);
        }
    }
    println!(
        "unique keys, {IN_FLIGHT} in flight, one client, {rounds} paired rounds of {BATCH} each:"
    );
    println!("{:<12} {:>10} {:>14}", "variant", "ops/s", "× floor");
    for (i, v) in VARIANTS.iter().enumerate() {
        let r = &ratios[i];
        println!(
            "{:<12} {:>10.0} {:>8.2} ({:.2}–{:.2})",
            v.name(),
            median(rates[i].clone()),
            median(r.clone()),
            r.iter().cloned().fold(f64::INFINITY, f64::min),
            r.iter().cloned().fold(0.0, f64::max),
        );
    }
    let stats = block(rt, support::raw(port, "INFO commandstats")).unwrap();
    println!("redis time per command (INFO commandstats):");
    for l in stats.lines().filter(|l| l.starts_with("cmdstat_")) {
        let name = l
            .trim_start_matches("cmdstat_")
            .split(':')
            .next()
            .unwrap_or("");
        let field = |f: &str| {
            l.split(&format!("{f}="))
                .nth(1)
                .and_then(|x| x.split(',').next())
                .unwrap_or("?")
                .to_string()
        };
        println!(
            "  {name:<10} calls {:>9}  usec_per_call {:>6}",
            field("calls"),
            field("usec_per_call")
        );
    }
    let cpu = block(rt, support::raw(port, "INFO cpu")).unwrap();
    let used = cpu
        .lines()
        .find(|l| l.starts_with("used_cpu_user:"))
        .unwrap_or("");
    println!("  redis-server {used}");

    // Join latency.
    let mut lat: Vec<Duration> = (0..300).map(|_| block(rt, join_once(env))).collect();
    lat.sort();
    let pct = |p: f64| lat[((lat.len() as f64 * p) as usize).min(lat.len() - 1)];
    println!(
        "cross-instance join after the holder completes: p50 {:?}, p99 {:?}, max {:?}",
        pct(0.50),
        pct(0.99),
        lat[lat.len() - 1]
    );

    // Local replays cost no Redis command.
    let scopes: Vec<Scope> = (0..1_000).map(|_| env.scope()).collect();
    block(rt, async {
        for s in &scopes {
            for e in [&env.a, &env.b] {
                let _ = e
                    .execute(s, fp(), |_| async { Ok::<_, Status>("v".to_string()) })
                    .await
                    .unwrap();
            }
        }
        let server = redis.commands_processed().await;
        let (ca, cb) = (
            env.a.remote().commands_sent(),
            env.b.remote().commands_sent(),
        );
        for _ in 0..10 {
            for s in &scopes {
                for e in [&env.a, &env.b] {
                    let r = e
                        .execute(s, fp(), |_| async { Ok::<_, Status>("x".to_string()) })
                        .await
                        .unwrap();
                    assert_eq!(r.kind(), idem_dedup::OutcomeKind::Replayed);
                }
            }
        }
        let server_delta = redis.commands_processed().await - server;
        let tier_delta = env.a.remote().commands_sent() + env.b.remote().commands_sent() - ca - cb;
        println!(
            "local replays: 20000 replays on two instances, redis commands: {server_delta} \
             (server INFO commandstats), {tier_delta} (tier counters)"
        );
    });
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let rounds = args
        .iter()
        .position(|a| a == "--rounds")
        .and_then(|i| args.get(i + 1))
        .and_then(|r| r.parse().ok())
        .unwrap_or(5);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let redis = rt.block_on(RedisServer::start());
    let env = Arc::new(rt.block_on(Env::new(&redis.url())));
    summary(&rt, &env, &redis, rounds);
    if !args.iter().any(|a| a == "--criterion") {
        return;
    }

    let mut c = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    let mut g = c.benchmark_group("d1_unique_keys");
    g.throughput(Throughput::Elements(BATCH as u64));
    for v in [Variant::Tier, Variant::Floor] {
        g.bench_function(BenchmarkId::new(v.name(), BATCH), |b| {
            b.to_async(&rt).iter(|| batch(&env, v, BATCH))
        });
    }
    g.finish();
    c.bench_function("d2_cross_instance_join", |b| {
        b.to_async(&rt).iter_custom(|iters| {
            let env = env.clone();
            async move {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    total += join_once(&env).await;
                }
                total
            }
        })
    });
    c.final_summary();
}
