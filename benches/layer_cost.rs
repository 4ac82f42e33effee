//! What `IdemLayer` costs per request, in process, without sockets: the axum shop's
//! `POST /orders` (the same routers as `http_shop`) called through `tower::Service` on a
//! one-thread tokio runtime, bare and layered, and each response body read to its end as hyper
//! would. It counts what a loopback run cannot: **heap allocations and bytes asked per request**
//! (exact, the same on every run), beside the time per request, which is paired: blocks of the
//! two routers alternate and the ratio is the median of the blocks' ratios.
//!
//! `cargo bench -p idem-benches --bench layer_cost`; `IDEM_BENCH_QUICK=1` for a shorter run;
//! `IDEM_LAYER_ONLY=unique` (or `replay`) runs one workload, `IDEM_LAYER_SIDE=layered` (or
//! `bare`) one router (for `valgrind --tool=callgrind` or `perf record`), `IDEM_LAYER_BLOCKS`
//! and `IDEM_LAYER_BLOCK` set the rounds (40; quick 12) and requests per block (2,000).
//!
//! Writes `target/idem-bench/layer_cost.json` and prints a table.

#[path = "support/alloc.rs"]
#[allow(dead_code)]
mod alloc;
#[path = "support/pinned.rs"]
#[allow(dead_code)]
mod pinned;
#[path = "support/shop_route.rs"]
mod shop_route;

use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use axum::body::Body;
use http_body_util::BodyExt;
use serde_json::{json, Map};
use tower::{Service, ServiceExt};

use pinned::{env_u64, median, out_dir, quick, r3};
use shop_route::{BODY, TENANT};

#[global_allocator]
static GLOBAL: alloc::Counting = alloc::Counting;

/// One request as wrk sends it: the shop's form, the bearer tenant, the key.
fn request(key: &str) -> http::Request<Body> {
    http::Request::post("/orders")
        .header("host", "127.0.0.1:8080")
        .header("content-type", "application/x-www-form-urlencoded")
        .header("authorization", "Bearer tenant-bench")
        .header("idempotency-key", key)
        .header("content-length", BODY.len())
        .body(Body::from(BODY))
        .expect("request")
}

/// The key of request `n` of a workload: fresh for `unique`, one for `replay`.
fn key(workload: &str, run: u64, n: u64) -> String {
    match workload {
        "unique" => format!("{run:08x}-0000-4000-8000-{n:012}"),
        _ => format!("{run:08x}-0000-4000-8000-000000000001"),
    }
}

/// What one block of requests cost.
#[derive(Debug, Clone, Copy, Default)]
struct Block {
    took: Duration,
    allocs: u64,
    bytes: u64,
}

/// Sends `n` requests through `router`, reading each body to its end. The keys are made before
/// the clock and the counters start.
async fn block(mut router: axum::Router, workload: &str, run: u64, first: u64, n: u64) -> Block {
    let keys: Vec<String> = (first..first + n).map(|i| key(workload, run, i)).collect();
    let (calls0, asked0) = (alloc::CALLS.load(Relaxed), alloc::ASKED.load(Relaxed));
    let t0 = Instant::now();
    for k in &keys {
        let req = request(k);
        let ready = ServiceExt::<http::Request<Body>>::ready(&mut router)
            .await
            .expect("ready");
        let resp = ready.call(req).await.expect("infallible");
        assert_eq!(
            resp.status(),
            201,
            "POST /orders answered {}",
            resp.status()
        );
        let body = resp.into_body().collect().await.expect("body");
        std::hint::black_box(body);
    }
    let took = t0.elapsed();
    drop(keys);
    Block {
        took,
        allocs: alloc::CALLS.load(Relaxed) - calls0,
        bytes: alloc::ASKED.load(Relaxed) - asked0,
    }
}

/// Runs a [`block`] as a task of its own, as hyper serves a connection: the engine's answers
/// wake it through the runtime's queue, not by unparking the thread that waits in `block_on`.
fn in_task(
    rt: &tokio::runtime::Runtime,
    router: &axum::Router,
    workload: &'static str,
    run: u64,
    first: u64,
    n: u64,
) -> Block {
    let router = router.clone();
    rt.block_on(async move { tokio::spawn(block(router, workload, run, first, n)).await })
        .expect("the block's task")
}

fn main() {
    // criterion-style arguments (`--bench`) are ignored.
    let quick = quick();
    let blocks = env_u64("IDEM_LAYER_BLOCKS", if quick { 12 } else { 40 });
    let per_block = env_u64("IDEM_LAYER_BLOCK", 2_000);
    let only = std::env::var("IDEM_LAYER_ONLY").unwrap_or_default();
    let side = std::env::var("IDEM_LAYER_SIDE").ok();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    // Results kept 1 s, as in `http_shop`: unique keys expire while the run goes on.
    let (mut bare, mut layered, _engine) = rt.block_on(async {
        shop_route::routers(Duration::from_millis(env_u64("IDEM_LAYER_TTL_MS", 1_000)))
    });
    alloc::ON.store(true, Relaxed);
    println!(
        "layer_cost: in process, one-thread runtime, {} ; {blocks} blocks of {per_block} requests \
         per router and workload, alternated; tenant {TENANT}",
        if quick { "QUICK" } else { "full" },
    );

    let mut workloads = Map::new();
    let mut table = Vec::new();
    let mut run: u64 = u64::from(std::process::id()) << 8;
    for workload in ["unique", "replay"] {
        if !only.is_empty() && only != workload {
            continue;
        }
        run += 1;
        let mut next = 0;
        let mut pairs = Vec::new();
        // Warm-up: the allocator, the engine's table, the replay's stored response.
        for (name, router) in [("bare", &mut bare), ("layered", &mut layered)] {
            if side.as_deref().is_none_or(|s| s == name) {
                in_task(&rt, router, workload, run, next, per_block);
            }
        }
        next += per_block;
        for b in 0..blocks {
            let one = |router: &mut axum::Router, next: u64| {
                in_task(&rt, router, workload, run, next, per_block)
            };
            let (x, y) = match side.as_deref() {
                Some("layered") => (Block::default(), one(&mut layered, next)),
                Some("bare") => (one(&mut bare, next), Block::default()),
                // The first of a pair alternates.
                _ if b % 2 == 0 => {
                    let x = one(&mut bare, next);
                    (x, one(&mut layered, next))
                }
                _ => {
                    let y = one(&mut layered, next);
                    (one(&mut bare, next), y)
                }
            };
            next += per_block;
            pairs.push((x, y));
        }
        if side.is_some() {
            continue;
        }
        let n = per_block as f64;
        let per =
            |f: fn(&Block, &Block) -> f64| median(pairs.iter().map(|(x, y)| f(x, y)).collect());
        let ns = |b: &Block| b.took.as_nanos() as f64;
        let bare_ns = per(|x, _| x.took.as_nanos() as f64) / n;
        let layered_ns = per(|_, y| y.took.as_nanos() as f64) / n;
        let ratio = median(pairs.iter().map(|(x, y)| ns(x) / ns(y)).collect());
        let extra_ns = median(pairs.iter().map(|(x, y)| ns(y) - ns(x)).collect()) / n;
        let bare_allocs = per(|x, _| x.allocs as f64) / n;
        let layered_allocs = per(|_, y| y.allocs as f64) / n;
        let bare_bytes = per(|x, _| x.bytes as f64) / n;
        let layered_bytes = per(|_, y| y.bytes as f64) / n;
        table.push(format!(
            "| {workload} | {bare_allocs:.1} | {layered_allocs:.1} | +{:.1} | {bare_bytes:.0} | \
             {layered_bytes:.0} | {:.0} | {:.0} | +{extra_ns:.0} | {ratio:.3}x |",
            layered_allocs - bare_allocs,
            bare_ns,
            layered_ns,
        ));
        workloads.insert(
            workload.into(),
            json!({
                "blocks": blocks, "requests_per_block": per_block,
                "allocs_per_request": {"bare": r3(bare_allocs), "layered": r3(layered_allocs),
                    "layer": r3(layered_allocs - bare_allocs)},
                "bytes_asked_per_request": {"bare": bare_bytes.round(), "layered": layered_bytes.round()},
                "ns_per_request": {"bare": bare_ns.round(), "layered": layered_ns.round(),
                    "layer_paired": extra_ns.round()},
                "throughput_layered_over_bare_paired": r3(ratio),
            }),
        );
    }
    if side.is_some() {
        return;
    }
    println!();
    println!("## layer_cost (in process; per request; medians of paired blocks)");
    println!(
        "| workload | allocs bare | layered | layer's | bytes asked bare | layered | ns bare | \
         ns layered | layer's ns (paired) | layered / bare throughput (paired) |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for row in &table {
        println!("{row}");
    }
    let path = out_dir().join("layer_cost.json");
    let summary = json!({ "quick": quick, "workloads": workloads });
    std::fs::write(&path, serde_json::to_string_pretty(&summary).expect("json"))
        .expect("write the summary");
    println!("\nsummary: {}", path.display());
}
