//! What a shard spends to expire a stored result (SPEC E2, E7), measured alone.
//!
//! Under unique keys the shard actors expire as many results as they store, and that work lands
//! inside the peers bench's samples, spread over every sample. Its cost per entry is a few cache
//! misses, so on a shared 2-vCPU VM it drowns in the noise of a throughput figure. This bench
//! isolates it: one shard on a current-thread runtime with tokio's clock paused is filled with
//! `N` completed entries (256 concurrent callers, the peers bench's real scopes and 64-byte
//! values), the clock jumps past the TTL, and the time until the engine holds nothing is the
//! sweep's time for `N` entries: every table probe, box and value is cold, as it is a TTL after
//! it was stored. The fill is outside the clock.
//!
//! `cargo bench --bench expiry`; `IDEM_BENCH_QUICK=1` for a short run. Prints ns per expired
//! entry (median of the samples); `BENCHMARKS.md` says what it moved.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Throughput};

// Shared with the peers bench; not every helper is used here.
#[allow(dead_code)]
#[path = "support/common.rs"]
mod common;
#[allow(dead_code)]
#[path = "support/driver.rs"]
mod driver;
#[allow(dead_code)]
#[path = "support/hist.rs"]
mod hist;
#[allow(dead_code)]
#[path = "peers/idem.rs"]
mod idem_store;
#[allow(dead_code)]
#[path = "support/store.rs"]
mod store;

use idem_store::Idem;
use store::{Store, StoreConfig};

const TTL: Duration = Duration::from_secs(60);

/// Fills a one-shard engine with `n` completed entries, then returns how long the shard takes
/// to expire them all once the clock has passed their TTL.
fn expire(n: usize) -> Duration {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime");
    rt.block_on(async move {
        let cfg = StoreConfig {
            ttl: TTL,
            capacity: 2 * n,
            shards: Some(1),
        };
        let store = Arc::new(Idem::build(&cfg));
        let keys = Arc::new(driver::fresh_keys::<Idem>(n));
        let mut tasks = Vec::with_capacity(common::CLIENT_TASKS);
        for t in 0..common::CLIENT_TASKS {
            let (store, keys) = (store.clone(), keys.clone());
            tasks.push(tokio::spawn(async move {
                for key in keys.iter().skip(t).step_by(common::CLIENT_TASKS) {
                    std::hint::black_box(store.call(key, || async { common::fresh_value() }).await);
                }
            }));
        }
        for t in tasks {
            t.await.expect("fill task");
        }
        store.settle().await;
        drop(keys);
        let engine = &store.0;
        let held = engine.stats().entries();
        assert_eq!(held, n as u64, "every entry stored before the clock moves");
        let start = Instant::now();
        tokio::time::advance(TTL + Duration::from_secs(1)).await;
        while engine.stats().entries() > 0 {
            tokio::task::yield_now().await;
        }
        let took = start.elapsed();
        drop(store);
        took
    })
}

fn main() {
    let quick = common::quick();
    let n: usize = if quick { 200_000 } else { 1_000_000 };
    let (cpus, model) = common::machine();
    println!(
        "idem expiry bench: {} mode; {cpus} CPUs ({model}); one shard, {n} entries per sample",
        if quick { "QUICK" } else { "full" }
    );
    let mut c = common::criterion(quick).sample_size(10);
    let per_entry: Arc<Mutex<Vec<f64>>> = Arc::default();
    let mut g = c.benchmark_group("expiry");
    g.throughput(Throughput::Elements(n as u64));
    g.bench_function(BenchmarkId::new("idem", n), |b| {
        let per_entry = per_entry.clone();
        b.iter_custom(move |iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let took = expire(n);
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
        common::median(per_entry.clone()),
        per_entry.len()
    );
}
