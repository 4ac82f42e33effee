//! R9, E5 over real sockets (HTTP/2): a hedged keyed write runs once on the server, on one
//! instance (the hedge overtakes a copy held up before the dedup layer, which is cancelled; or
//! it joins the run in flight) and across two instances on one Redis tier (the hedge on the
//! second instance waits for the first's run); an unkeyed write is never hedged, a read is.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::Request as AxumRequest;
use axum::middleware::Next;
use axum::routing::{get, post};
use axum::Router;
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use idem_dedup::{Deduplicator, Engine};
use idem_redis::{RedisTier, TieredEngine};
use idem_retry::{HedgeDelay, HedgingPolicy, RetryBudget};
use idem_test_support::redis::{Options, RedisServer};
use idem_tower::{
    BoxError, CallReport, IdemLayer, MissingKey, RetryLayer, SetTenantLayer, StoredResponse, Tenant,
};
use tower::ServiceExt;

/// What every instance of one test shares: side effects, and what each instance saw.
#[derive(Clone, Default)]
struct World {
    /// Runs of the write's handler, all instances together.
    runs: Arc<AtomicU32>,
    /// Requests that reached an instance, before its dedup layer.
    hits: Arc<AtomicU32>,
    /// Requests dropped before their answer (the client cancelled them).
    cancelled: Arc<AtomicU32>,
    /// The order each answered request got, by instance.
    answers: Arc<Mutex<Vec<(&'static str, String)>>>,
    /// The next request to arrive is held up this long before the dedup layer (a paused
    /// instance, a queue), then this is cleared.
    hold_next: Arc<AtomicU32>,
}

/// Counts a request that was dropped before it finished.
struct DropGuard(Arc<AtomicU32>, bool);
impl Drop for DropGuard {
    fn drop(&mut self) {
        if !self.1 {
            self.0.fetch_add(1, SeqCst);
        }
    }
}

/// One instance: the hold-up and the bookkeeping in front, then the idem layer over `engine`,
/// then `POST /orders` (a side effect that takes `handler_ms`) and `GET /books`.
async fn instance<D>(name: &'static str, engine: D, world: World, handler_ms: u64) -> SocketAddr
where
    D: Deduplicator<Value = StoredResponse> + Clone + Send + Sync + 'static,
{
    let runs = world.runs.clone();
    let order = post(move || {
        let runs = runs.clone();
        async move {
            let n = runs.fetch_add(1, SeqCst) + 1;
            tokio::time::sleep(Duration::from_millis(handler_ms)).await;
            (StatusCode::CREATED, format!("order-{n}"))
        }
    });
    let app = Router::new()
        .route("/orders", order)
        .route("/books", get(|| async { "a book" }))
        .layer(IdemLayer::new(engine))
        .layer(SetTenantLayer::new(|_: &http::request::Parts| {
            Some(Tenant::new("tenant-0042"))
        }))
        .layer(axum::middleware::from_fn(
            move |req: AxumRequest, next: Next| {
                let w = world.clone();
                async move {
                    w.hits.fetch_add(1, SeqCst);
                    let mut guard = DropGuard(w.cancelled.clone(), false);
                    let hold = w.hold_next.swap(0, SeqCst);
                    tokio::time::sleep(Duration::from_millis(u64::from(hold))).await;
                    let resp = next.run(req).await;
                    let (parts, body) = resp.into_parts();
                    let bytes = body.collect().await.unwrap().to_bytes();
                    w.answers
                        .lock()
                        .unwrap()
                        .push((name, String::from_utf8_lossy(&bytes).into_owned()));
                    guard.1 = true;
                    axum::response::Response::from_parts(parts, axum::body::Body::from(bytes))
                }
            },
        ));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

/// An HTTP/2 client sending its `n`-th request (from 0) to `addrs[n % len]`: a balancer that
/// sends a hedge to the next instance.
fn balancer(
    addrs: Vec<SocketAddr>,
) -> impl tower::Service<
    Request<Full<Bytes>>,
    Response = http::Response<hyper::body::Incoming>,
    Error = BoxError,
    Future = impl Future + Send,
> + Clone
       + Send
       + Sync
       + 'static {
    let client = Client::builder(TokioExecutor::new())
        .http2_only(true)
        .build_http::<Full<Bytes>>();
    let next = Arc::new(AtomicU32::new(0));
    tower::service_fn(move |mut req: Request<Full<Bytes>>| {
        let n = next.fetch_add(1, SeqCst) as usize;
        let addr = addrs[n % addrs.len()];
        let path = req.uri().path().to_owned();
        *req.uri_mut() = format!("http://{addr}{path}").parse().unwrap();
        let client = client.clone();
        async move { client.request(req).await.map_err(BoxError::from) }
    })
}

fn hedged(missing_key: MissingKey) -> RetryLayer {
    RetryLayer::builder()
        .hedging(
            HedgingPolicy::builder()
                .delay(HedgeDelay::Fixed(Duration::from_millis(30)))
                .build()
                .unwrap(),
        )
        .budget(RetryBudget::builder().ratio(1.0).build().unwrap())
        .missing_key(missing_key)
        .build()
        .unwrap()
}

fn order() -> Request<Full<Bytes>> {
    Request::post("http://shop/orders")
        .body(Full::new(Bytes::from_static(b"sku=book-42&qty=1")))
        .unwrap()
}

/// Waits (bounded) until `n` reads `want`: the server sees a cancellation after the client's
/// call has returned.
async fn until(n: &AtomicU32, want: u32) {
    for _ in 0..500 {
        if n.load(SeqCst) == want {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(n.load(SeqCst), want);
}

async fn body(r: http::Response<idem_tower::ReplayBody>) -> String {
    String::from_utf8_lossy(&r.into_body().collect().await.unwrap().to_bytes()).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r9_hedged_write_overtakes_a_held_copy_which_is_cancelled() {
    let world = World::default();
    let engine = Engine::<StoredResponse>::builder().build().unwrap();
    let addr = instance("a", engine, world.clone(), 0).await;
    let layer = hedged(MissingKey::Generate);
    world.hold_next.store(2_000, SeqCst); // the first copy waits 2 s before the dedup layer
    let svc = tower::Layer::layer(&layer, balancer(vec![addr]));
    let r = svc.oneshot(order()).await.unwrap();
    assert_eq!(r.extensions().get::<CallReport>().unwrap().attempts, 2);
    assert_eq!(body(r).await, "order-1");
    until(&world.cancelled, 1).await; // the held copy was dropped: the loser is cancelled
    assert_eq!(world.runs.load(SeqCst), 1);
    assert_eq!(world.hits.load(SeqCst), 2);
    let stats = layer.stats();
    assert_eq!((stats.retrier.hedges, stats.retrier.retries), (1, 0));
    assert_eq!(
        layer.retrier().budget().snapshot().retries,
        1,
        "the hedge was charged"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r9_hedged_write_joins_the_run_on_the_same_instance() {
    let world = World::default();
    let engine = Engine::<StoredResponse>::builder().build().unwrap();
    let addr = instance("a", engine, world.clone(), 400).await;
    let layer = hedged(MissingKey::Generate);
    let svc = tower::Layer::layer(&layer, balancer(vec![addr]));
    let r = svc.oneshot(order()).await.unwrap();
    assert_eq!(body(r).await, "order-1");
    assert_eq!(world.runs.load(SeqCst), 1, "the write ran once");
    assert_eq!(world.hits.load(SeqCst), 2, "and was hedged");
    // The copy whose answer came second may be dropped before it is written.
    let answers = world.answers.lock().unwrap().clone();
    assert!(
        !answers.is_empty() && answers.iter().all(|(_, a)| a == "order-1"),
        "{answers:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r9_hedged_write_runs_once_across_two_instances_on_one_tier() {
    let redis = RedisServer::start_with(Options::volatile()).await;
    let tier = || async {
        RedisTier::builder()
            .prefix("r9-hedge")
            .allow_volatile(true)
            .connect(&redis.url())
            .await
            .unwrap()
    };
    let a = TieredEngine::<StoredResponse>::builder(tier().await)
        .build()
        .unwrap();
    let b = TieredEngine::<StoredResponse>::builder(tier().await)
        .build()
        .unwrap();
    let world = World::default();
    let addr_a = instance("a", a, world.clone(), 400).await;
    let addr_b = instance("b", b, world.clone(), 400).await;
    let layer = hedged(MissingKey::Generate);
    let svc = tower::Layer::layer(&layer, balancer(vec![addr_a, addr_b]));
    let r = svc.oneshot(order()).await.unwrap();
    assert_eq!(r.extensions().get::<CallReport>().unwrap().attempts, 2);
    assert_eq!(body(r).await, "order-1");
    assert_eq!(world.runs.load(SeqCst), 1, "one run across both instances");
    assert_eq!(world.hits.load(SeqCst), 2);
    let answers = world.answers.lock().unwrap().clone();
    assert!(
        !answers.is_empty() && answers.iter().all(|(_, a)| a == "order-1"),
        "{answers:?}"
    );
    assert_eq!(layer.stats().retrier.hedges, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r9_unkeyed_write_is_never_hedged_a_read_is() {
    let world = World::default();
    let engine = Engine::<StoredResponse>::builder().build().unwrap();
    let addr = instance("a", engine, world.clone(), 0).await;
    let layer = hedged(MissingKey::SendOnce);
    let svc = tower::Layer::layer(&layer, balancer(vec![addr]));

    // Held past the hedging delay, sent once; the server refuses a write without a key.
    world.hold_next.store(300, SeqCst);
    let err = svc.clone().oneshot(order()).await.unwrap_err();
    let failed = err.downcast_ref::<idem_tower::CallFailed>().unwrap();
    assert_eq!(failed.attempts(), 1);
    assert_eq!(
        world.hits.load(SeqCst),
        1,
        "a write without a key is sent once"
    );
    assert_eq!(layer.stats().retrier.hedges, 0);

    world.hold_next.store(2_000, SeqCst);
    let read = Request::get("http://shop/books")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let r = svc.oneshot(read).await.unwrap();
    assert_eq!(r.extensions().get::<CallReport>().unwrap().attempts, 2);
    assert_eq!(world.hits.load(SeqCst), 3, "a read is hedged");
    assert_eq!(layer.stats().retrier.hedges, 1);
}
