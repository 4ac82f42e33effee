//! T1, T1a, T2 over HTTP: the shop on axum behind the idem layer, called with hyper's client
//! over TCP.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use idem_dedup::{Engine, InFlightPolicy};
use idem_shop::{http as shop_http, Shop};
use idem_tower::IdemLayer;

type HttpClient = Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>;

struct Reply {
    status: StatusCode,
    headers: http::HeaderMap,
    body: String,
}

fn client() -> HttpClient {
    Client::builder(TokioExecutor::new()).build_http()
}

async fn post(
    c: &HttpClient,
    addr: SocketAddr,
    keys: &[&str],
    tenant: Option<&str>,
    body: &str,
) -> Reply {
    let mut b = Request::post(format!("http://{addr}/orders"))
        .header("content-type", "application/x-www-form-urlencoded");
    for k in keys {
        b = b.header("Idempotency-Key", *k);
    }
    if let Some(t) = tenant {
        b = b.header("authorization", format!("Bearer {t}"));
    }
    let resp = c
        .request(b.body(Full::new(Bytes::from(body.to_owned()))).unwrap())
        .await
        .unwrap();
    let (parts, body) = resp.into_parts();
    let body = body.collect().await.unwrap().to_bytes();
    Reply {
        status: parts.status,
        headers: parts.headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    }
}

fn assert_problem(r: &Reply, status: u16, needle: &str) {
    assert_eq!(r.status.as_u16(), status, "{}", r.body);
    assert_eq!(r.headers["content-type"], "application/problem+json");
    assert!(r.body.contains(needle), "{} lacks {needle}", r.body);
    assert!(
        r.body.contains(&format!("\"status\":{status}")),
        "{}",
        r.body
    );
}

const BODY: &str = "intent_id=i-1&sku=book-42&quantity=1";

#[tokio::test]
async fn t1_http_write_runs_once_and_replays_with_marks() {
    let shop = Shop::new();
    let engine = Engine::builder().build().unwrap();
    let addr = shop_http::serve(shop.clone(), engine).await.unwrap();
    let c = client();
    // sf-string and bare token name the same key (T2).
    let first = post(&c, addr, &["\"order-key-0001\""], Some("t-1"), BODY).await;
    let again = post(&c, addr, &["order-key-0001"], Some("t-1"), BODY).await;
    assert_eq!(first.status, StatusCode::CREATED);
    assert_eq!(again.status, StatusCode::CREATED);
    assert_eq!(first.body, again.body);
    assert!(first.headers.get("idempotent-replayed").is_none());
    assert_eq!(again.headers["idempotent-replayed"], "true");
    assert!(again.headers.contains_key("idempotent-expires-at"));
    assert_eq!(shop.orders_for("i-1").len(), 1);
}

#[tokio::test]
async fn t2_http_error_table() {
    let shop = Shop::new();
    let engine = Engine::builder().build().unwrap();
    let addr = shop_http::serve(shop.clone(), engine).await.unwrap();
    let c = client();

    assert_problem(
        &post(&c, addr, &["order-key-0001"], None, BODY).await,
        401,
        "authenticated tenant",
    );
    assert_problem(
        &post(&c, addr, &[], Some("t-1"), BODY).await,
        400,
        "missing-idempotency-key",
    );
    assert_problem(
        &post(&c, addr, &["bad key!"], Some("t-1"), BODY).await,
        400,
        "8-64 characters of A-Z a-z 0-9 _ -",
    );
    assert_problem(
        &post(&c, addr, &["\"unterminated"], Some("t-1"), BODY).await,
        400,
        "quoted string",
    );
    assert_problem(
        &post(
            &c,
            addr,
            &["order-key-0001", "order-key-0002"],
            Some("t-1"),
            BODY,
        )
        .await,
        400,
        "more than once",
    );
    assert_eq!(
        post(&c, addr, &["order-key-0003"], Some("t-1"), BODY)
            .await
            .status,
        201
    );
    let other = post(
        &c,
        addr,
        &["order-key-0003"],
        Some("t-1"),
        "intent_id=i-1&sku=book-42&quantity=2",
    )
    .await;
    assert_problem(&other, 422, "idempotency-conflict");
    assert_eq!(shop.orders_total(), 1);

    // Reads pass through.
    let resp = c
        .request(
            Request::get(format!("http://{addr}/books/book-42"))
                .body(Full::default())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
}

#[tokio::test]
async fn t2_http_in_flight_is_409_and_full_is_429_with_retry_after() {
    let shop = Shop::with_work(Duration::from_millis(400));
    let engine = Engine::builder()
        .in_flight_policy(InFlightPolicy::Reject)
        .max_entries(1)
        .retry_after(Duration::from_millis(1500))
        .build()
        .unwrap();
    let addr = shop_http::serve(shop.clone(), engine.clone())
        .await
        .unwrap();
    let c = client();
    let c1 = c.clone();
    let first =
        tokio::spawn(async move { post(&c1, addr, &["order-key-0001"], Some("t-1"), BODY).await });
    while engine.stats().in_flight == 0 {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let dup = post(&c, addr, &["order-key-0001"], Some("t-1"), BODY).await;
    assert_problem(&dup, 409, "request-in-flight");
    assert_eq!(dup.headers["retry-after"], "2");
    let full = post(&c, addr, &["order-key-0002"], Some("t-1"), BODY).await;
    assert_problem(&full, 429, "engine-full");
    assert_eq!(full.headers["retry-after"], "2");
    assert_eq!(first.await.unwrap().status, 201);
    assert_eq!(shop.orders_total(), 1);
}

#[tokio::test]
async fn t2_http_oversized_body_is_413_without_running() {
    let shop = Shop::new();
    let engine = Engine::builder().build().unwrap();
    let addr = shop_http::serve_with(
        shop.clone(),
        IdemLayer::builder(engine)
            .max_body_bytes(32)
            .build()
            .unwrap(),
    )
    .await
    .unwrap();
    let r = post(
        &client(),
        addr,
        &["order-key-0001"],
        Some("t-1"),
        &"x".repeat(100),
    )
    .await;
    assert_problem(&r, 413, "request-too-large");
    assert_eq!(shop.orders_total(), 0);
}
