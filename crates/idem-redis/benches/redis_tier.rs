//! The Redis tier on loopback (SPEC D1–D3; results in BENCHMARKS.md):
//!
//! * `d1_unique_keys/tier` vs `d1_unique_keys/floor`: new scopes through a `TieredEngine` (claim +
//!   complete: two round trips each) against a floor of the same number of round trips by a bare
//!   client on one multiplexed connection (`SET NX PX`, then `SET XX PX`), same concurrency.
//! * `d2_cross_instance_join`: instance B waits for A's run; the time from A's action returning to
//!   B's call returning (A's completion, the pub/sub notice, B's re-claim); p50/p99 printed.
//! * `d1_local_replay`: replays of results the instance holds; the Redis commands they cost are
//!   counted with `INFO commandstats` (and the tier's own counter) and printed: must be 0.
//!
//! Starts its own `redis-server` on a free port. `cargo bench -p idem-redis --bench redis_tier`.

#[path = "../tests/redis_tier/support.rs"]
#[allow(dead_code)]
mod support;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput};
use idem_core::{Fingerprint, Scope, Status};
use idem_redis::{RedisTier, TieredEngine};
use redis::aio::MultiplexedConnection;
use tokio::runtime::Runtime;

use support::RedisServer;

const BATCH: usize = 2_000;

struct Env {
    a: TieredEngine<String>,
    b: TieredEngine<String>,
    bare: MultiplexedConnection,
    next: AtomicU64,
}

impl Env {
    async fn new(url: &str) -> Self {
        // The bench's own redis-server keeps nothing on disk: opted in.
        let tier = || async {
            RedisTier::builder()
                .allow_volatile(true)
                .connect(url)
                .await
                .expect("connect")
        };
        let a = TieredEngine::<String>::builder(tier().await)
            .build()
            .unwrap();
        let b = TieredEngine::<String>::builder(tier().await)
            .build()
            .unwrap();
        let bare = redis::Client::open(url)
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        Env {
            a,
            b,
            bare,
            next: AtomicU64::new(0),
        }
    }

    fn scope(&self) -> Scope {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        Scope::parse("tenant-1", "/bench/Create", &format!("bench-key-{n:012}")).unwrap()
    }
}

fn fp() -> Fingerprint {
    Fingerprint::of(b"bench body")
}

/// `BATCH` new scopes through the tier, all concurrently.
async fn tier_batch(env: &Env) {
    let scopes: Vec<Scope> = (0..BATCH).map(|_| env.scope()).collect();
    let calls = scopes.iter().map(|s| {
        env.a.execute(s, fp(), |_| async {
            Ok::<_, Status>("order-1001".to_string())
        })
    });
    for r in futures::future::join_all(calls).await {
        r.unwrap();
    }
}

/// The floor: the same number of round trips (two per scope, the second after the first) by a
/// bare client, all concurrently on one multiplexed connection.
async fn floor_batch(env: &Env) {
    let calls = (0..BATCH).map(|_| {
        let mut c = env.bare.clone();
        let key = format!("floor:{}", env.next.fetch_add(1, Ordering::Relaxed));
        async move {
            let _: Option<String> = redis::cmd("SET")
                .arg(&key)
                .arg("run")
                .arg("NX")
                .arg("PX")
                .arg(30_000)
                .query_async(&mut c)
                .await
                .unwrap();
            let _: Option<String> = redis::cmd("SET")
                .arg(&key)
                .arg("order-1001")
                .arg("XX")
                .arg("PX")
                .arg(86_400_000)
                .query_async(&mut c)
                .await
                .unwrap();
        }
    });
    futures::future::join_all(calls).await;
}

/// One cross-instance join: A holds a scope, B waits, A's action returns; the time until B's
/// call returns.
async fn join_once(env: &Env) -> Duration {
    let s = env.scope();
    let (go, wait) = tokio::sync::oneshot::channel::<()>();
    let (done_tx, done_rx) = tokio::sync::oneshot::channel::<Instant>();
    let a = env.a.clone();
    let sa = s.clone();
    let holder = tokio::spawn(async move {
        a.execute(&sa, fp(), move |_| async move {
            let _ = wait.await;
            let _ = done_tx.send(Instant::now());
            Ok::<_, Status>("order-1001".to_string())
        })
        .await
        .unwrap();
    });
    // Let A claim, then B meet the claim and subscribe.
    tokio::time::sleep(Duration::from_millis(2)).await;
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
    tokio::time::sleep(Duration::from_millis(5)).await;
    go.send(()).unwrap();
    let (b_done, kind) = waiter.await.unwrap();
    holder.await.unwrap();
    assert_eq!(kind, idem_dedup::OutcomeKind::Joined);
    b_done.saturating_duration_since(done_rx.await.unwrap())
}

fn summary(rt: &Runtime, env: &Env, redis: &RedisServer) {
    // Throughput, alternating tier and floor so both see the same machine state.
    rt.block_on(tier_batch(env));
    rt.block_on(floor_batch(env));
    let (mut tier, mut floor) = (Duration::ZERO, Duration::ZERO);
    let rounds = 10;
    for _ in 0..rounds {
        let t = Instant::now();
        rt.block_on(tier_batch(env));
        tier += t.elapsed();
        let t = Instant::now();
        rt.block_on(floor_batch(env));
        floor += t.elapsed();
    }
    let n = (rounds * BATCH) as f64;
    if std::env::var("IDEM_BENCH_DIAG").is_ok() {
        let info = rt
            .block_on(support::raw(redis_port(redis), "INFO commandstats"))
            .unwrap();
        for l in info
            .lines()
            .filter(|l| l.starts_with("cmdstat_evalsha") || l.starts_with("cmdstat_set"))
        {
            println!("diag {l}");
        }
        let cpu = rt
            .block_on(support::raw(redis_port(redis), "INFO cpu"))
            .unwrap();
        println!("diag server cpu: {}", cpu.replace("\r\n", " "));
    }
    let (tier_rate, floor_rate) = (n / tier.as_secs_f64(), n / floor.as_secs_f64());
    println!(
        "d1 unique keys: tier {tier_rate:.0}/s, floor (2 round trips each) {floor_rate:.0}/s, \
         ratio {:.2}",
        tier_rate / floor_rate
    );

    // Join latency.
    let mut lat: Vec<Duration> = (0..300).map(|_| rt.block_on(join_once(env))).collect();
    lat.sort();
    let pct = |p: f64| lat[((lat.len() as f64 * p) as usize).min(lat.len() - 1)];
    println!(
        "d2 cross-instance join after holder completes: p50 {:?}, p99 {:?}, max {:?}",
        pct(0.50),
        pct(0.99),
        lat[lat.len() - 1]
    );

    // Local replays cost no Redis round trip.
    let scopes: Vec<Scope> = (0..1_000).map(|_| env.scope()).collect();
    rt.block_on(async {
        for s in &scopes {
            env.a
                .execute(s, fp(), |_| async { Ok::<_, Status>("v".to_string()) })
                .await
                .unwrap();
            env.b
                .execute(s, fp(), |_| async { Ok::<_, Status>("v".to_string()) })
                .await
                .unwrap();
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
            "d1 local replays: 20000 replays on two instances, redis commands: {server_delta} \
             (server INFO commandstats), {tier_delta} (tier counters)"
        );
    });
}

fn redis_port(r: &RedisServer) -> u16 {
    r.url()
        .trim_start_matches("redis://127.0.0.1:")
        .trim_end_matches('/')
        .parse()
        .unwrap()
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let redis = rt.block_on(RedisServer::start());
    let env = Arc::new(rt.block_on(Env::new(&redis.url())));
    summary(&rt, &env, &redis);

    let mut c = Criterion::default()
        .configure_from_args()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    let mut g = c.benchmark_group("d1_unique_keys");
    g.throughput(Throughput::Elements(BATCH as u64));
    g.bench_function(BenchmarkId::new("tier", BATCH), |b| {
        b.to_async(&rt).iter(|| tier_batch(&env))
    });
    g.bench_function(BenchmarkId::new("floor", BATCH), |b| {
        b.to_async(&rt).iter(|| floor_batch(&env))
    });
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
    let replay_scope = env.scope();
    rt.block_on(env.a.execute(&replay_scope, fp(), |_| async {
        Ok::<_, Status>("v".to_string())
    }))
    .unwrap();
    c.bench_function("d1_local_replay", |b| {
        b.to_async(&rt).iter(|| async {
            env.a
                .execute(&replay_scope, fp(), |_| async {
                    Ok::<_, Status>("x".to_string())
                })
                .await
                .unwrap()
        })
    });
    c.final_summary();
}
