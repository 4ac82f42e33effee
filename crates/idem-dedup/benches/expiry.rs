//! What a shard spends to expire a stored result (E2, E7), measured alone.
//!
//! Under unique keys the shard actors expire as many results as they store, and that work lands
//! inside the peers bench's samples, spread over every sample. Its cost per entry is a few cache
//! misses, so on a shared 2-vCPU VM it drowns in the noise of a throughput figure. This bench
//! isolates it: one shard on a current-thread runtime with tokio's clock paused is filled with
//! `N` completed entries (256 concurrent callers, the peers bench's own scopes and fresh 64-byte
//! values, from `benches/support/common.rs`), the clock jumps past the TTL, and the time until the engine holds nothing is the
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

// The workspace benches' request shape, values, quick switch and criterion settings, shared so
// this bench's scopes are the peers bench's own; not every helper is used here, and its items
// are `pub` for the benches package, which does not take the workspace's lints.
#[allow(dead_code, unreachable_pub)]
#[path = "../../../benches/support/common.rs"]
mod common;

use common::{fresh_value, median, tenant, uuid, Val, CLIENT_TASKS, METHOD};

const TTL: Duration = Duration::from_secs(60);

/// The scope and fingerprint of request `n`, as the peers bench builds them.
fn key(n: u64) -> (Scope, Fingerprint) {
    let uuid = uuid(n);
    let scope = Scope::parse(&tenant(n), METHOD, &uuid).expect("a valid scope");
    (scope, Fingerprint::of(uuid.as_bytes()))
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
        let mut tasks = Vec::with_capacity(CLIENT_TASKS);
        for t in 0..CLIENT_TASKS {
            let (engine, keys) = (engine.clone(), keys.clone());
            tasks.push(tokio::spawn(async move {
                for (scope, fp) in keys.iter().skip(t).step_by(CLIENT_TASKS) {
                    let out = engine
                        .execute(scope, *fp, |_| async { Ok(fresh_value()) })
                        .await;
                    let _ = std::hint::black_box(out.expect("a stored result"));
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
