//! Hedged keyed writes (R9) and deadline-aware attempts (R10), measured over real sockets.
//!
//! `cargo bench -p idem-benches --bench hedging` (about half a minute; starts its own
//! redis-server). Prints a table (BENCHMARKS.md has the last one).
//!
//! * **Hedging.** Two axum instances, HTTP/2 on loopback, each a `TieredEngine` on one Redis
//!   tier, `POST /orders` behind `IdemLayer` (a side effect counted per key, 1 ms of work).
//!   Instance A holds every 20th request it receives 200 ms *before* its dedup layer (a pause, a
//!   queue). The client's balancer sends a call's first copy by the hash of its key and a hedge
//!   to the other instance. Two client layers over it, one hedging (p95 of recent latencies,
//!   2 copies), one not, take turns call by call in 16 concurrent workers (paired, interleaved),
//!   after a warm-up that fills the latency tracker. Reported: p50, p99, p99.9 of call latency,
//!   requests sent per call, and side effects per intent (must be exactly 1 for every intent).
//! * **Deadline-aware attempts.** `GET /report` takes 80 ms; every 5th request fails with 503
//!   instead, half of them early (10 ms) and half late (120 ms). Calls have 200 ms. With R3's
//!   fixed 50 ms minimum, a retry after a late failure starts with ~60 ms left and cannot finish;
//!   with R10 (p50 of observed attempts) it is not started. Reported: attempts started that could
//!   not finish (the server saw them cancelled), and the success rate, paired the same way.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::Request as AxumRequest;
use axum::middleware::Next;
use axum::routing::{get, post};
use axum::Router;
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use idem_redis::{RedisTier, TieredEngine};
use idem_retry::{HedgeDelay, HedgingPolicy, LatencyTracker, RetryBudget, RetryPolicy};
use idem_test_support::redis::{Options, RedisServer};
use idem_tower::{BoxError, IdemLayer, RetryLayer, SetTenantLayer, StoredResponse, Tenant};
use tower::{Layer, ServiceExt};

const CALLS_PER_SIDE: usize = 4_000;
const WARMUP: usize = 400;
const WORKERS: usize = 16;
const R10_CALLS: usize = 400;

/// What the instances count.
#[derive(Clone, Default)]
struct Counts {
    /// Runs of the write's handler by key.
    runs: Arc<Mutex<HashMap<String, u32>>>,
    /// Requests received, all routes.
    requests: Arc<AtomicU64>,
    /// Requests dropped before their answer (the client gave up on them).
    cancelled: Arc<AtomicU64>,
    /// `GET /report` requests so far (its failure script).
    reports: Arc<AtomicU64>,
}

struct Unfinished(Arc<AtomicU64>, bool);
impl Drop for Unfinished {
    fn drop(&mut self) {
        if !self.1 {
            self.0.fetch_add(1, Relaxed);
        }
    }
}

async fn instance(tier: RedisTier, counts: Counts, slow_every: Option<u64>) -> SocketAddr {
    let engine = TieredEngine::<StoredResponse>::builder(tier).build().unwrap();
    let c = counts.clone();
    let orders = post(move |req: AxumRequest| {
        let c = c.clone();
        async move {
            let key = req.headers()["idempotency-key"].to_str().unwrap().to_owned();
            *c.runs.lock().unwrap().entry(key).or_default() += 1;
            tokio::time::sleep(Duration::from_millis(1)).await;
            (StatusCode::CREATED, "created")
        }
    });
    let c = counts.clone();
    let report = get(move || {
        let n = c.reports.fetch_add(1, Relaxed) + 1;
        async move {
            let (ms, status) = match (n % 5, n % 10) {
                (0, 0) => (120, StatusCode::SERVICE_UNAVAILABLE),
                (0, _) => (10, StatusCode::SERVICE_UNAVAILABLE),
                _ => (80, StatusCode::OK),
            };
            tokio::time::sleep(Duration::from_millis(ms)).await;
            status
        }
    });
    let seen = Arc::new(AtomicU64::new(0));
    let app = Router::new()
        .route("/orders", orders)
        .route("/report", report)
        .layer(IdemLayer::new(engine))
        .layer(SetTenantLayer::new(|_: &http::request::Parts| {
            Some(Tenant::new("bench"))
        }))
        .layer(axum::middleware::from_fn(move |req: AxumRequest, next: Next| {
            let (c, seen) = (counts.clone(), seen.clone());
            async move {
                c.requests.fetch_add(1, Relaxed);
                let mut guard = Unfinished(c.cancelled.clone(), false);
                let n = seen.fetch_add(1, Relaxed) + 1;
                if slow_every.is_some_and(|k| n % k == 0) {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                let r = next.run(req).await;
                guard.1 = true;
                r
            }
        }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

type Http = Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>;

/// A call's first copy by the hash of its key, each further copy to the next instance.
#[derive(Clone)]
struct Balancer {
    client: Http,
    addrs: Arc<Vec<SocketAddr>>,
    copies: Arc<Mutex<HashMap<String, usize>>>,
}

impl tower::Service<Request<Full<Bytes>>> for Balancer {
    type Response = http::Response<hyper::body::Incoming>;
    type Error = BoxError;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<Self::Response, BoxError>> + Send>,
    >;
    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), BoxError>> {
        std::task::Poll::Ready(Ok(()))
    }
    fn call(&mut self, mut req: Request<Full<Bytes>>) -> Self::Future {
        let key = req
            .headers()
            .get("idempotency-key")
            .map(|k| k.to_str().unwrap_or_default().to_owned());
        let i = match key {
            Some(key) => {
                let mut h = std::collections::hash_map::DefaultHasher::new();
                key.hash(&mut h);
                let mut copies = self.copies.lock().unwrap();
                let copy = copies.entry(key).or_default();
                *copy += 1;
                (h.finish() as usize + *copy - 1) % self.addrs.len()
            }
            None => 1 % self.addrs.len(),
        };
        let path = req.uri().path().to_owned();
        *req.uri_mut() = format!("http://{}{path}", self.addrs[i]).parse().unwrap();
        let client = self.client.clone();
        Box::pin(async move { client.request(req).await.map_err(BoxError::from) })
    }
}

fn percentile(sorted: &[Duration], q: f64) -> Duration {
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

fn ms(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1e3)
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let redis = RedisServer::start_with(Options::volatile()).await;
    let tier = || async {
        RedisTier::builder()
            .prefix("bench-hedging")
            .allow_volatile(true)
            .connect(&redis.url())
            .await
            .unwrap()
    };
    let counts = Counts::default();
    let a = instance(tier().await, counts.clone(), Some(20)).await;
    let b = instance(tier().await, counts.clone(), None).await;
    let balancer = Balancer {
        client: Client::builder(TokioExecutor::new())
            .http2_only(true)
            .build_http(),
        addrs: Arc::new(vec![a, b]),
        copies: Arc::default(),
    };
    let budget = || RetryBudget::builder().ratio(0.2).build().unwrap();
    let plain = RetryLayer::builder().budget(budget()).build().unwrap();
    let hedging = HedgingPolicy::builder()
        .delay(HedgeDelay::Percentile(0.95))
        .build()
        .unwrap();
    let hedged = RetryLayer::builder()
        .budget(budget())
        .hedging(hedging)
        .build()
        .unwrap();
    let sides = [("without hedging", plain), ("hedged (p95, 2 copies)", hedged)];
    let order = || {
        Request::post("http://shop/orders")
            .body(Full::new(Bytes::from_static(b"sku=book-42&qty=1")))
            .unwrap()
    };
    // Warm-up: connections, and the hedged side's latency tracker.
    for (_, layer) in &sides {
        let svc = layer.layer(balancer.clone());
        for _ in 0..WARMUP {
            let r = svc.clone().oneshot(order()).await.unwrap();
            r.into_body().collect().await.unwrap();
        }
    }
    let sent_before = counts.requests.load(Relaxed);
    let hedges_before = sides[1].1.stats().retrier.hedges;
    let lat: Arc<[Mutex<Vec<Duration>>; 2]> = Arc::new([Mutex::default(), Mutex::default()]);
    let sent: Arc<[AtomicU64; 2]> = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
    let mut tasks = Vec::new();
    for w in 0..WORKERS {
        let svcs = [sides[0].1.layer(balancer.clone()), sides[1].1.layer(balancer.clone())];
        let (lat, sent, counts) = (lat.clone(), sent.clone(), counts.clone());
        tasks.push(tokio::spawn(async move {
            for i in 0..(2 * CALLS_PER_SIDE / WORKERS) {
                let side = (i + w) % 2;
                let before = counts.requests.load(Relaxed);
                let t = Instant::now();
                let r = svcs[side].clone().oneshot(order()).await.unwrap();
                r.into_body().collect().await.unwrap();
                lat[side].lock().unwrap().push(t.elapsed());
                let _ = before;
                sent[side].fetch_add(1, Relaxed);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let hedges = sides[1].1.stats().retrier.hedges - hedges_before;
    let total_sent = counts.requests.load(Relaxed) - sent_before;
    let runs = counts.runs.lock().unwrap().clone();
    let duplicates = runs.values().filter(|n| **n != 1).count();

    println!("hedging: {CALLS_PER_SIDE} keyed writes per side, {WORKERS} workers, instance A +200 ms on every 20th request before its dedup layer");
    println!("| | p50 ms | p99 ms | p99.9 ms | requests per call | side effects per intent |");
    println!("|---|---|---|---|---|---|");
    for (side, (name, _)) in sides.iter().enumerate() {
        let mut v = lat[side].lock().unwrap().clone();
        v.sort();
        let calls = v.len() as f64;
        let per_call = if side == 1 {
            (calls + hedges as f64) / calls
        } else {
            (total_sent as f64 - calls - hedges as f64) / calls
        };
        println!(
            "| {name} | {} | {} | {} | {per_call:.3} | {} |",
            ms(percentile(&v, 0.5)),
            ms(percentile(&v, 0.99)),
            ms(percentile(&v, 0.999)),
            if duplicates == 0 { "1 (all)" } else { "NOT 1" },
        );
    }
    println!(
        "intents: {}, run more or less than once: {duplicates}; requests sent in all: {total_sent}, hedges: {hedges}",
        runs.len()
    );
    assert_eq!(duplicates, 0, "every intent must run exactly once");

    // R10: deadline-aware attempts, paired call by call on one healthy instance.
    let one = Balancer {
        addrs: Arc::new(vec![b]),
        ..balancer.clone()
    };
    let r10 = |observed: bool| {
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
    let rules = [("R3: fixed 50 ms minimum", r10(false)), ("R10: p50 of observed attempts", r10(true))];
    let mut ok = [0usize; 2];
    let mut unfinished = [0u64; 2];
    for i in 0..(2 * R10_CALLS) {
        let side = i % 2;
        let before = counts.cancelled.load(Relaxed);
        let read = Request::get("http://shop/report").body(Full::new(Bytes::new())).unwrap();
        if rules[side].1.layer(one.clone()).oneshot(read).await.is_ok() {
            ok[side] += 1;
        }
        // The server sees a cancellation just after the client gives up.
        tokio::time::sleep(Duration::from_millis(2)).await;
        unfinished[side] += counts.cancelled.load(Relaxed) - before;
    }
    println!();
    println!("deadline-aware attempts: {R10_CALLS} reads per rule, 200 ms each; 80 ms answers, every 5th a 503 (early or late)");
    println!("| rule | attempts started that could not finish | success rate |");
    println!("|---|---|---|");
    for (side, (name, _)) in rules.iter().enumerate() {
        println!(
            "| {name} | {} | {:.1}% |",
            unfinished[side],
            100.0 * ok[side] as f64 / R10_CALLS as f64
        );
    }
}
