//! Hedged keyed writes and deadline-aware attempts, measured over real sockets.
//!
//! `cargo bench -p idem-benches --bench hedging` (starts its own redis-server; about 20 s, a
//! minute in the dev profile); `IDEM_BENCH_QUICK=1` for a quarter of the calls (under 10 s; 15 s
//! in the dev profile), to check that it runs: its p99 is the 10th slowest call. Prints two
//! tables (BENCHMARKS.md has the last ones).
//!
//! * **Hedging.** Two axum instances, HTTP/2 on loopback, each a `TieredEngine` on one Redis
//!   tier, `POST /orders` behind `IdemLayer` (a side effect counted per key, 1 ms of work).
//!   Instance A holds every 20th request it receives 200 ms *before* its dedup layer (a pause, a
//!   queue); B is healthy. The client's balancer sends a call's first copy by the hash of its
//!   key and a hedge to the other instance. Three sides take turns call by call in 16
//!   concurrent workers (paired, interleaved): a client layer over both instances hedging (p95
//!   of recent latencies, 2 copies), the same without hedging, and the same without hedging over
//!   B alone, the healthy instance's latency that hedging aims at (target: hedged p99 at most
//!   1.5× it). A warm-up of the same shape fills the latency tracker first. Reported: p50, p99,
//!   p99.9 of call latency, requests sent per call, and side effects per intent (must be exactly
//!   1 for every intent).
//! * **Deadline-aware attempts.** `GET /report` takes 80 ms; every 5th request fails with 503
//!   instead, half of them early (10 ms) and half late (120 ms). Calls have 200 ms. With R3's
//!   fixed 50 ms minimum, a retry after a late failure starts with ~60 ms left and cannot finish;
//!   with R10 (p50 of observed attempts) it is not started. Each rule has an instance of its own
//!   (its failure script, its count of cancelled requests); 16 workers alternate the rules call
//!   by call. Reported: attempts started per call, attempts that could not finish (the server
//!   saw them cancelled), and the success rate.

#[path = "support/pinned.rs"]
#[allow(dead_code)]
mod pinned;

#[path = "support/hedge_world.rs"]
mod hedge_world;

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use idem_retry::{HedgeDelay, HedgingPolicy, LatencyTracker, RetryBudget, RetryPolicy};
use idem_test_support::redis::{Options, RedisServer};
use idem_tower::RetryLayer;
use tower::{Layer, ServiceExt};

use hedge_world::{instance, tier, Balancer, Counts, Http};

const WORKERS: usize = 16;

/// Calls per side: (measured, warm-up) for hedging, (measured, warm-up) per R10 rule.
fn sizes() -> (usize, usize, usize, usize) {
    if pinned::quick() {
        (1_000, 150, 160, 32)
    } else {
        (4_000, 400, 400, 48)
    }
}

/// One side of a paired run: its layer over its balancer.
struct Side {
    name: &'static str,
    layer: RetryLayer,
    balancer: Balancer,
}

/// What `WORKERS` tasks measured taking the sides in turn, `per_side` calls each.
struct Measured {
    latencies: Vec<Vec<Duration>>,
    ok: Vec<usize>,
}

/// Runs `per_side` calls of each side, the sides in turn call by call in every worker (each
/// worker starting at another side), and returns each side's latencies and successes.
async fn paired(
    sides: &[Side],
    per_side: usize,
    request: fn() -> Request<Full<Bytes>>,
) -> Measured {
    let n = sides.len();
    let lat: Arc<Vec<Mutex<Vec<Duration>>>> = Arc::new((0..n).map(|_| Mutex::default()).collect());
    let ok: Arc<Vec<AtomicU64>> = Arc::new((0..n).map(|_| AtomicU64::new(0)).collect());
    let mut tasks = Vec::new();
    for w in 0..WORKERS {
        let svcs: Vec<_> = sides
            .iter()
            .map(|s| s.layer.layer(s.balancer.clone()))
            .collect();
        let (lat, ok) = (lat.clone(), ok.clone());
        let calls = (n * per_side).div_ceil(WORKERS);
        tasks.push(tokio::spawn(async move {
            for i in 0..calls {
                let side = (i + w) % n;
                let t = Instant::now();
                let r = svcs[side].clone().oneshot(request()).await;
                let good = match r {
                    Ok(r) => {
                        let status = r.status();
                        r.into_body().collect().await.is_ok() && status.is_success()
                    }
                    Err(_) => false,
                };
                lat[side].lock().unwrap().push(t.elapsed());
                if good {
                    ok[side].fetch_add(1, Relaxed);
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    Measured {
        latencies: lat
            .iter()
            .map(|l| std::mem::take(&mut *l.lock().unwrap()))
            .collect(),
        ok: ok.iter().map(|o| o.load(Relaxed) as usize).collect(),
    }
}

fn percentile(sorted: &[Duration], q: f64) -> Duration {
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

fn ms(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1e3)
}

fn order() -> Request<Full<Bytes>> {
    Request::post("http://shop/orders")
        .body(Full::new(Bytes::from_static(b"sku=book-42&qty=1")))
        .unwrap()
}

fn report() -> Request<Full<Bytes>> {
    Request::get("http://shop/report")
        .body(Full::new(Bytes::new()))
        .unwrap()
}

async fn hedging(redis: &RedisServer, client: &Http, calls: usize, warmup: usize) {
    let counts = Counts::default();
    let a = instance(tier(redis).await, counts.clone(), Some(20)).await;
    let b = instance(tier(redis).await, counts.clone(), None).await;
    let budget = || RetryBudget::builder().ratio(0.2).build().unwrap();
    let plain = || RetryLayer::builder().budget(budget()).build().unwrap();
    let policy = HedgingPolicy::builder()
        .delay(HedgeDelay::Percentile(0.95))
        .build()
        .unwrap();
    let hedged = RetryLayer::builder()
        .budget(budget())
        .hedging(policy)
        .build()
        .unwrap();
    let sides = [
        Side {
            name: "hedged (p95, 2 copies)",
            layer: hedged,
            balancer: Balancer::new(client, vec![a, b]),
        },
        Side {
            name: "without hedging",
            layer: plain(),
            balancer: Balancer::new(client, vec![a, b]),
        },
        Side {
            name: "healthy instance B alone, without hedging",
            layer: plain(),
            balancer: Balancer::new(client, vec![b]),
        },
    ];
    // Warm-up: connections, and the hedged side's latency tracker.
    paired(&sides, warmup, order).await;
    let sent_before: Vec<u64> = sides
        .iter()
        .map(|s| s.balancer.sent.load(Relaxed))
        .collect();
    let hedges_before = sides[0].layer.stats().retrier.hedges;
    let m = paired(&sides, calls, order).await;
    let hedges = sides[0].layer.stats().retrier.hedges - hedges_before;
    let runs = counts.runs.lock().unwrap().clone();
    let duplicates = runs.values().filter(|n| **n != 1).count();

    println!("hedging: {calls} keyed writes per side, {WORKERS} workers, instance A +200 ms on every 20th request before its dedup layer");
    println!("| | p50 ms | p99 ms | p99.9 ms | requests per call | side effects per intent |");
    println!("|---|---|---|---|---|---|");
    let mut p99 = Vec::new();
    for (i, side) in sides.iter().enumerate() {
        let mut v = m.latencies[i].clone();
        v.sort();
        let sent = side.balancer.sent.load(Relaxed) - sent_before[i];
        p99.push(percentile(&v, 0.99));
        println!(
            "| {} | {} | {} | {} | {:.3} | {} |",
            side.name,
            ms(percentile(&v, 0.5)),
            ms(percentile(&v, 0.99)),
            ms(percentile(&v, 0.999)),
            sent as f64 / v.len() as f64,
            if duplicates == 0 { "1 (all)" } else { "NOT 1" },
        );
        assert_eq!(m.ok[i], v.len(), "every write succeeded");
    }
    println!(
        "intents: {}, run more or less than once: {duplicates}; hedges: {hedges} ({:.1}% extra requests)",
        runs.len(),
        100.0 * hedges as f64 / m.latencies[0].len() as f64,
    );
    println!(
        "hedged p99 / healthy p99: {:.2} (target at most 1.5); hedged p99 / unhedged p99: {:.2}",
        p99[0].as_secs_f64() / p99[2].as_secs_f64(),
        p99[0].as_secs_f64() / p99[1].as_secs_f64(),
    );
    assert_eq!(duplicates, 0, "every intent must run exactly once");
}

async fn deadline_aware(redis: &RedisServer, client: &Http, calls: usize, warmup: usize) {
    let rule = |observed: bool| {
        let mut p = RetryPolicy::builder();
        if observed {
            p = p.observed_min_attempt(0.5);
        }
        let mut l = RetryLayer::builder()
            .policy(p.build().unwrap())
            .budget(RetryBudget::builder().ratio(1.0).build().unwrap())
            .call_timeout(Duration::from_millis(200));
        if observed {
            l = l.latencies(LatencyTracker::builder().min_samples(20).build().unwrap());
        }
        l.build().unwrap()
    };
    let mut sides = Vec::new();
    let mut counts = Vec::new();
    for (name, observed) in [
        ("R3: fixed 50 ms minimum", false),
        ("R10: p50 of observed attempts", true),
    ] {
        let c = Counts::default();
        let addr = instance(tier(redis).await, c.clone(), None).await;
        counts.push(c);
        sides.push(Side {
            name,
            layer: rule(observed),
            balancer: Balancer::new(client, vec![addr]),
        });
    }
    paired(&sides, warmup, report).await;
    // The server sees a cancellation just after the client gives up.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let before: Vec<(u64, u64)> = sides
        .iter()
        .zip(&counts)
        .map(|(s, c)| (c.cancelled.load(Relaxed), s.layer.stats().retrier.attempts))
        .collect();
    let m = paired(&sides, calls, report).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    println!();
    println!("deadline-aware attempts: {calls} reads per rule, {WORKERS} workers, 200 ms each; 80 ms answers, every 5th a 503 (early or late)");
    println!(
        "| rule | attempts per call | attempts started that could not finish | success rate |"
    );
    println!("|---|---|---|---|");
    for (i, side) in sides.iter().enumerate() {
        let attempts = side.layer.stats().retrier.attempts - before[i].1;
        println!(
            "| {} | {:.3} | {} | {:.1}% |",
            side.name,
            attempts as f64 / calls as f64,
            counts[i].cancelled.load(Relaxed) - before[i].0,
            100.0 * m.ok[i] as f64 / calls as f64
        );
    }
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let (calls, warmup, r10_calls, r10_warmup) = sizes();
    let began = Instant::now();
    let redis = RedisServer::start_with(Options::volatile()).await;
    let client = Client::builder(TokioExecutor::new())
        .http2_only(true)
        .build_http();
    hedging(&redis, &client, calls, warmup).await;
    let r9 = began.elapsed();
    deadline_aware(&redis, &client, r10_calls, r10_warmup).await;
    println!(
        "\n{} mode; hedging {:.0} s, deadline-aware {:.0} s",
        if pinned::quick() { "quick" } else { "full" },
        r9.as_secs_f64(),
        (began.elapsed() - r9).as_secs_f64()
    );
}
