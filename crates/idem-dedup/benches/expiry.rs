//! What a shard spends to expire a stored result (SPEC E2, E7), measured alone.
//!
//! Under unique keys the shard actors expire as many results as they store, and that work lands
//! inside the peers bench's samples, spread over every sample. Its cost per entry is a few cache
//! misses, so on a shared 2-vCPU VM it drowns in the noise of a throughput figure. This bench
//! isolates it: one shard on a current-thread runtime with tokio's clock paused is filled with
//! `N` completed entries (256 concurrent callers, scopes shaped like the peers bench's — a
//! `tenant-0042`, a gRPC method, a 36-character UUID key — and fresh 64-byte values), the clock
//! jumps past the TTL, and the time until the engine holds nothing is the
//! sweep's time for `N` entries: every table probe, box and value is cold, as it is a TTL after
//! it was stored. The fill is outside the clock.
//!
//! `cargo bench -p idem-dedup --bench expiry`; `IDEM_BENCH_QUICK=1` for a short run. Prints ns
//! per expired entry (median of the samples); the workspace's `BENCHMARKS.md` says what it moved.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Throughput};
use idem_core::{Fingerprint, Scope};
use idem_dedup::Engine;

type Val = Arc<[u8]>;

const TTL: Duration = Duration::from_secs(60);
/// Concurrent callers filling the engine.
const CALLERS: usize = 256;

/// The scope and fingerprint of request `n`: a tenant like `tenant-0042`, a gRPC method and a
/// 36-character UUID-shaped key, distinct for every `n`.
fn key(n: u64) -> (Scope, Fingerprint) {
    let h = mix(n);
    let tenant = format!("tenant-{:04}", h % 100);
    let uuid = format!(
        "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
        (h >> 32) as u32,
        (h >> 16) as u16,
        h & 0xfff,
        (n >> 48) & 0xfff,
        n & 0xffff_ffff_ffff
    );
    let scope = Scope::parse(&tenant, "/shop.v1.Shop/CreateOrder", &uuid).expect("a valid scope");
    (scope, Fingerprint::of(uuid.as_bytes()))
}

/// SplitMix64's finaliser: spreads the tenants and the UUIDs' leading digits.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A fresh 64-byte value, as an action would build it.
fn value() -> Val {
    Arc::from(&[0x5a_u8; 64][..])
}

fn quick() -> bool {
    std::env::var("IDEM_BENCH_QUICK").is_ok_and(|v| !v.is_empty() && v != "0")
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    match xs.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => xs[n / 2],
        n => (xs[n / 2 - 1] + xs[n / 2]) / 2.0,
    }
}

/// Fills a one-shard engine with `n` completed entries, then returns how long the shard takes
/// to expire them all once the clock has passed their TTL.
fn expire(n: usize, first: u64) -> Duration {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime");
    rt.block_on(async move {
        let engine = Engine::<Val>::builder()
            .shards(1)
            .ttl(TTL)
            .max_entries(2 * n)
            .build()
            .expect("an engine");
        let keys: Arc<Vec<(Scope, Fingerprint)>> =
            Arc::new((first..first + n as u64).map(key).collect());
        let mut tasks = Vec::with_capacity(CALLERS);
        for t in 0..CALLERS {
            let (engine, keys) = (engine.clone(), keys.clone());
            tasks.push(tokio::spawn(async move {
                for (scope, fp) in keys.iter().skip(t).step_by(CALLERS) {
                    let out = engine.execute(scope, *fp, || async { Ok(value()) }).await;
                    std::hint::black_box(out.expect("a stored result"));
                }
            }));
        }
        for t in tasks {
            t.await.expect("fill task");
        }
        drop(keys);
        while engine.stats().in_flight > 0 {
            tokio::task::yield_now().await;
        }
        assert_eq!(
            engine.stats().entries(),
            n as u64,
            "every entry stored before the clock moves"
        );
        let start = Instant::now();
        tokio::time::advance(TTL + Duration::from_secs(1)).await;
        while engine.stats().entries() > 0 {
            tokio::task::yield_now().await;
        }
        start.elapsed()
    })
}

fn main() {
    let quick = quick();
    let n: usize = if quick { 200_000 } else { 1_000_000 };
    println!(
        "idem expiry bench: {} mode; {} CPUs; one shard, {n} entries per sample",
        if quick { "QUICK" } else { "full" },
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    let c = criterion::Criterion::default().without_plots();
    let c = if quick {
        c.warm_up_time(Duration::from_millis(300))
            .measurement_time(Duration::from_millis(1_000))
    } else {
        c.warm_up_time(Duration::from_secs(2))
            .measurement_time(Duration::from_secs(5))
    };
    let mut c = c.sample_size(10).configure_from_args();
    let per_entry: Arc<Mutex<Vec<f64>>> = Arc::default();
    let mut g = c.benchmark_group("expiry");
    g.throughput(Throughput::Elements(n as u64));
    g.bench_function(BenchmarkId::new("idem", n), |b| {
        let per_entry = per_entry.clone();
        let mut first = 0;
        b.iter_custom(move |iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let took = expire(n, first);
                first += n as u64;
                per_entry
                    .lock()
                    .expect("record")
                    .push(took.as_nanos() as f64 / n as f64);
                total += took;
            }
            total
        })
    });
    g.finish();
    let per_entry = per_entry.lock().expect("record").clone();
    println!(
        "expiry: {:.0} ns per expired entry (median of {} runs of {n} entries)",
        median(per_entry.clone()),
        per_entry.len()
    );
}
