//! K7 over real sockets: an order service behind `IdemLayer` calls a stock service (also behind
//! `IdemLayer`) through `RetryLayer` without setting a key. Its first run deducts, then fails
//! before its response is stored; the client's retry runs the handler again, and the stock call
//! carries the same derived key, so the stock service replays instead of deducting twice.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering::SeqCst};
use std::sync::{Arc, Mutex};

use axum::extract::{Request as AxumRequest, State};
use axum::routing::post;
use axum::Router;
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use idem_core::run::{Run, StepName};
use idem_dedup::Engine;
use idem_tower::{BoxError, IdemLayer, RetryLayer, SetTenantLayer, Tenant};
use tower::{Layer, Service, ServiceExt};

type HttpClient = Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>;

async fn serve(app: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

/// The stock service: deducts once per (caller, key); records the key of every request.
#[derive(Clone, Default)]
struct Stock {
    deductions: Arc<AtomicU32>,
    keys: Arc<Mutex<Vec<String>>>,
}

async fn stock_service(stock: Stock) -> SocketAddr {
    let seen = stock.clone();
    let deduct = post(move || {
        let stock = stock.clone();
        async move {
            let n = stock.deductions.fetch_add(1, SeqCst) + 1;
            (StatusCode::CREATED, format!("deduction-{n}"))
        }
    });
    let engine = Engine::builder().build().unwrap();
    let app = Router::new()
        .route("/stock/deduct", deduct)
        .route(
            "/stock/reserve",
            post(|| async { (StatusCode::CREATED, "reserved") }),
        )
        .layer(IdemLayer::new(engine))
        .layer(SetTenantLayer::new(|_: &http::request::Parts| {
            Some(Tenant::new("order-service"))
        }))
        .layer(axum::middleware::from_fn(
            move |req: AxumRequest, next: axum::middleware::Next| {
                let seen = seen.clone();
                async move {
                    if let Some(k) = req.headers().get("idempotency-key") {
                        seen.keys
                            .lock()
                            .unwrap()
                            .push(k.to_str().unwrap().to_owned());
                    }
                    next.run(req).await
                }
            },
        ));
    serve(app).await
}

/// The order service's state: its client of the stock service, and whether to fail a run after
/// its stock call (a run that dies before its record, as far as the client can tell).
#[derive(Clone)]
struct Orders {
    stock: SocketAddr,
    client: idem_tower::RetryService<HttpClient>,
    fail_after_stock: Arc<AtomicU32>,
    runs: Arc<AtomicU32>,
}

async fn create_order(State(o): State<Orders>, req: AxumRequest) -> (StatusCode, String) {
    o.runs.fetch_add(1, SeqCst);
    let run = req.extensions().get::<Run>().cloned();
    assert!(
        run.is_some(),
        "the layer puts the run in the request's extensions"
    );
    let call = Request::post(format!("http://{}/stock/deduct", o.stock))
        .body(Full::new(Bytes::from_static(b"sku=book-42&qty=1")))
        .unwrap();
    let mut client = o.client.clone();
    let reply = client.ready().await.unwrap().call(call).await;
    let deducted = match reply {
        Ok(r) => {
            String::from_utf8_lossy(&r.into_body().collect().await.unwrap().to_bytes()).into_owned()
        }
        Err(e) => return (StatusCode::BAD_GATEWAY, e.to_string()),
    };
    if o.fail_after_stock.load(SeqCst) > 0 {
        o.fail_after_stock.fetch_sub(1, SeqCst);
        // Retryable and not stored: the client's retry runs this handler again.
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "lost after the stock call".into(),
        );
    }
    (StatusCode::CREATED, format!("order with {deducted}"))
}

async fn order_service(stock: SocketAddr, fail_after_stock: u32) -> (SocketAddr, Orders) {
    let http: HttpClient = Client::builder(TokioExecutor::new()).build_http();
    let orders = Orders {
        stock,
        client: RetryLayer::new().layer(http),
        fail_after_stock: Arc::new(AtomicU32::new(fail_after_stock)),
        runs: Arc::new(AtomicU32::new(0)),
    };
    let engine = Engine::builder().build().unwrap();
    let app = Router::new()
        .route("/orders", post(create_order))
        .with_state(orders.clone())
        .layer(IdemLayer::new(engine))
        .layer(SetTenantLayer::new(|p: &http::request::Parts| {
            let t = p.headers.get("x-tenant")?.to_str().ok()?;
            Some(Tenant::new(t.to_owned()))
        }));
    (serve(app).await, orders)
}

async fn order(addr: SocketAddr, tenant: &str, key: &str) -> (StatusCode, String) {
    let c: HttpClient = Client::builder(TokioExecutor::new()).build_http();
    let req = Request::post(format!("http://{addr}/orders"))
        .header("x-tenant", tenant)
        .header("idempotency-key", key)
        .body(Full::new(Bytes::from_static(b"sku=book-42")))
        .unwrap();
    let resp = c.request(req).await.unwrap();
    let status = resp.status();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn k7_a_rerun_of_the_handler_sends_the_same_downstream_key_and_deducts_once() {
    let stock = Stock::default();
    let stock_addr = stock_service(stock.clone()).await;
    let (orders_addr, orders) = order_service(stock_addr, 1).await;

    // The first run deducts, then fails before its response is stored.
    let (status, _) = order(orders_addr, "tenant-a", "order-intent-0001").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    // The client retries the intent with the same key: the handler runs again...
    let (status, body) = order(orders_addr, "tenant-a", "order-intent-0001").await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(orders.runs.load(SeqCst), 2);
    // ...and its stock call was replayed, not run: one deduction for the intent.
    assert_eq!(body, "order with deduction-1");
    assert_eq!(stock.deductions.load(SeqCst), 1);
    let keys = stock.keys.lock().unwrap().clone();
    assert_eq!(keys.len(), 2);
    assert_eq!(keys[0], keys[1], "both runs sent one key downstream");
    let stats = orders.client.stats();
    assert_eq!((stats.keys_derived, stats.keys_generated), (2, 0));

    // The same inbound key from another tenant is another intent: another downstream key.
    let (status, body) = order(orders_addr, "tenant-b", "order-intent-0001").await;
    assert_eq!(
        (status, body.as_str()),
        (StatusCode::CREATED, "order with deduction-2")
    );
    let keys = stock.keys.lock().unwrap().clone();
    assert_ne!(keys[2], keys[0]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn k7_outside_a_run_the_client_draws_a_fresh_key_per_call_and_keeps_one_it_is_given(
) -> Result<(), BoxError> {
    let stock = Stock::default();
    let stock_addr = stock_service(stock.clone()).await;
    let http: HttpClient = Client::builder(TokioExecutor::new()).build_http();
    let client = RetryLayer::new().layer(http);
    let call = |key: Option<&str>| {
        let mut b = Request::post(format!("http://{stock_addr}/stock/deduct"));
        if let Some(k) = key {
            b = b.header("idempotency-key", k);
        }
        b.body(Full::new(Bytes::from_static(b"sku=book-42&qty=1")))
            .unwrap()
    };
    client.clone().oneshot(call(None)).await?;
    client.clone().oneshot(call(None)).await?;
    client
        .clone()
        .oneshot(call(Some("caller-chosen-key-1")))
        .await?;
    assert_eq!(stock.deductions.load(SeqCst), 3);
    let keys = stock.keys.lock().unwrap().clone();
    assert_ne!(keys[0], keys[1]);
    assert_eq!(keys[2], "\"caller-chosen-key-1\"");
    let stats = client.stats();
    assert_eq!((stats.keys_derived, stats.keys_generated), (0, 2));

    // Inside a run, a named step gets the run's key for that name, whatever came before.
    let scope = idem_core::Scope::parse("tenant-a", "/orders", "order-intent-0002")?;
    let run = Run::new(&scope, None, idem_core::run::RunStart::Fresh);
    let want = run.key_for("POST /stock/reserve", "reserve");
    let reply = run
        .attach(async {
            let mut req = Request::post(format!("http://{stock_addr}/stock/reserve"))
                .body(Full::new(Bytes::from_static(b"sku=book-42")))
                .unwrap();
            req.extensions_mut().insert(StepName::new("reserve"));
            client.clone().oneshot(req).await
        })
        .await?;
    assert_eq!(reply.status(), StatusCode::CREATED);
    let last = stock.keys.lock().unwrap().last().cloned().unwrap();
    assert_eq!(last, format!("\"{want}\""));
    Ok(())
}
