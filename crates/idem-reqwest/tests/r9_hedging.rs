//! R9, E5 over real sockets: a reqwest client through the middleware with hedging, against an
//! axum server behind idem's `IdemLayer`. A hedged keyed write runs once on the server, both
//! copies carry the same key, and the copy held up before the dedup layer is cancelled; a POST
//! without a key is never hedged, a read is; a fatal status from the hedge ends the call.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::Request as AxumRequest;
use axum::middleware::Next;
use axum::routing::{get, post};
use axum::Router;
use http::StatusCode;
use idem_dedup::Engine;
use idem_reqwest::{CallReport, MissingKey, RetryMiddleware};
use idem_retry::{GiveUp, HedgeDelay, HedgingPolicy, RetryBudget};
use idem_test_support::time::eventually;
use idem_tower::{IdemLayer, SetTenantLayer, StoredResponse, Tenant};
use reqwest_middleware::{ClientBuilder, ClientWithMiddleware};

/// What the server saw.
#[derive(Clone, Default)]
struct World {
    /// Runs of `POST /orders`'s handler.
    runs: Arc<AtomicU32>,
    /// Requests that reached the server, before its dedup layer, with their key header.
    hits: Arc<Mutex<Vec<Option<String>>>>,
    /// Requests dropped before their answer (the client cancelled them).
    cancelled: Arc<AtomicU32>,
    /// The next request to arrive is held up this long (ms) before the dedup layer (a paused
    /// instance, a queue), then this is cleared.
    hold_next: Arc<AtomicU32>,
}

impl World {
    fn hits(&self) -> Vec<Option<String>> {
        self.hits.lock().unwrap().clone()
    }

    async fn cancelled(&self, want: u32) {
        // The server sees a cancellation after the client's call has returned.
        eventually(
            Duration::from_secs(5),
            "the held copy is cancelled",
            || async { self.cancelled.load(SeqCst) == want },
        )
        .await;
        assert_eq!(self.cancelled.load(SeqCst), want);
    }
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

/// The server: the hold-up and the bookkeeping, then `IdemLayer` over an in-memory engine, then
/// `POST /orders` (a side effect that takes `handler_ms`), `POST /refunds` (always 422: a
/// permanent refusal) and `GET /books`.
async fn server(world: World, handler_ms: u64) -> SocketAddr {
    let runs = world.runs.clone();
    let orders = post(move || {
        let runs = runs.clone();
        async move {
            let n = runs.fetch_add(1, SeqCst) + 1;
            tokio::time::sleep(Duration::from_millis(handler_ms)).await;
            (StatusCode::CREATED, format!("order-{n}"))
        }
    });
    let refunds = post(|| async { (StatusCode::UNPROCESSABLE_ENTITY, "refund window closed") });
    let app = Router::new()
        .route("/orders", orders)
        .route("/refunds", refunds)
        .route("/books", get(|| async { "a book" }))
        .layer(IdemLayer::new(
            Engine::<StoredResponse>::builder().build().unwrap(),
        ))
        .layer(SetTenantLayer::new(|_: &http::request::Parts| {
            Some(Tenant::new("tenant-0042"))
        }))
        .layer(axum::middleware::from_fn(
            move |req: AxumRequest, next: Next| {
                let w = world.clone();
                async move {
                    let key = req
                        .headers()
                        .get("idempotency-key")
                        .map(|v| v.to_str().unwrap().to_owned());
                    w.hits.lock().unwrap().push(key);
                    let mut guard = DropGuard(w.cancelled.clone(), false);
                    let hold = w.hold_next.swap(0, SeqCst);
                    tokio::time::sleep(Duration::from_millis(u64::from(hold))).await;
                    let resp = next.run(req).await;
                    guard.1 = true;
                    resp
                }
            },
        ));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

/// A middleware hedging after a fixed 30 ms, 2 copies, with a budget that grants every hedge.
fn hedging(missing_key: MissingKey) -> RetryMiddleware {
    RetryMiddleware::builder()
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

fn client(middleware: RetryMiddleware) -> ClientWithMiddleware {
    let inner = reqwest::Client::builder().no_proxy().build().unwrap();
    ClientBuilder::new(inner).with(middleware).build()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r9_hedged_keyed_write_runs_once_with_one_key_and_the_loser_is_cancelled() {
    let world = World::default();
    let addr = server(world.clone(), 0).await;
    let middleware = hedging(MissingKey::Generate);
    world.hold_next.store(2_000, SeqCst); // the first copy waits 2 s before the dedup layer
    let r = client(middleware.clone())
        .post(format!("http://{addr}/orders"))
        .body("sku=book-42&qty=1")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let report = CallReport::of(&r).unwrap().clone();
    assert_eq!((report.attempts, report.gave_up), (2, None));
    assert_eq!(r.text().await.unwrap(), "order-1");
    world.cancelled(1).await; // the held copy was dropped: the loser is cancelled
    assert_eq!(world.runs.load(SeqCst), 1, "the write ran once");
    let hits = world.hits();
    assert_eq!(hits.len(), 2, "and was hedged");
    let sent = format!("\"{}\"", report.key.as_ref().unwrap().as_str());
    assert!(
        hits.iter().all(|k| k.as_deref() == Some(sent.as_str())),
        "both copies carry the call's key: {hits:?}"
    );
    let stats = middleware.stats();
    assert_eq!((stats.retrier.hedges, stats.retrier.retries), (1, 0));
    assert_eq!(
        middleware.retrier().budget().snapshot().retries,
        1,
        "the hedge was charged"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r9_hedged_keyed_write_joins_the_run_in_flight_and_both_get_its_answer() {
    // No hold-up: the hedge reaches the server while the first copy's run is still going, joins
    // it, and whichever answers first carries the one run's result.
    let world = World::default();
    let addr = server(world.clone(), 300).await;
    let middleware = hedging(MissingKey::Generate);
    let r = client(middleware.clone())
        .post(format!("http://{addr}/orders"))
        .body("sku=book-42&qty=1")
        .send()
        .await
        .unwrap();
    assert_eq!(CallReport::of(&r).unwrap().attempts, 2);
    assert_eq!(r.text().await.unwrap(), "order-1");
    assert_eq!(world.hits().len(), 2);
    assert_eq!(world.runs.load(SeqCst), 1, "the join did not run it again");
    // The loser's run survives its caller (E5): a third call with the same key is a replay.
    let key = world.hits()[0].clone().unwrap();
    let again = client(hedging(MissingKey::Generate))
        .post(format!("http://{addr}/orders"))
        .header("idempotency-key", key)
        .body("sku=book-42&qty=1")
        .send()
        .await
        .unwrap();
    assert_eq!(again.text().await.unwrap(), "order-1");
    assert_eq!(world.runs.load(SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r9_unkeyed_post_is_never_hedged_a_read_is() {
    let world = World::default();
    let addr = server(world.clone(), 0).await;
    let middleware = hedging(MissingKey::SendOnce);
    let client = client(middleware.clone());

    // Held past the hedging delay, sent once; the server refuses a write without a key.
    world.hold_next.store(300, SeqCst);
    let r = client
        .post(format!("http://{addr}/orders"))
        .body("sku=book-42&qty=1")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    assert_eq!(CallReport::of(&r).unwrap().attempts, 1);
    assert_eq!(
        world.hits(),
        vec![None],
        "a write without a key is sent once"
    );
    assert_eq!(world.runs.load(SeqCst), 0);
    assert_eq!(middleware.stats().retrier.hedges, 0);

    world.hold_next.store(2_000, SeqCst);
    let r = client
        .get(format!("http://{addr}/books"))
        .send()
        .await
        .unwrap();
    assert_eq!(CallReport::of(&r).unwrap().attempts, 2);
    assert_eq!(r.text().await.unwrap(), "a book");
    assert_eq!(world.hits().len(), 3, "a read is hedged");
    assert_eq!(middleware.stats().retrier.hedges, 1);
    world.cancelled(1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r9_fatal_status_from_the_hedge_ends_the_call() {
    // The first copy is held for 5 s; the hedge gets 422 at once. The call ends with that
    // answer, not waiting for the held copy, which is cancelled.
    let world = World::default();
    let addr = server(world.clone(), 0).await;
    let middleware = hedging(MissingKey::Generate);
    world.hold_next.store(5_000, SeqCst);
    let r = client(middleware.clone())
        .post(format!("http://{addr}/refunds"))
        .body("order=order-1")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 422);
    let report = CallReport::of(&r).unwrap();
    assert_eq!(
        (report.attempts, report.gave_up),
        (2, Some(GiveUp::NotRetryable))
    );
    world.cancelled(1).await; // dropped while held, so it was not waited for
    assert_eq!(world.hits().len(), 2, "no third copy after a fatal status");
}
