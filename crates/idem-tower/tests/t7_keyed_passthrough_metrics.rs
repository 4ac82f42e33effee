//! T7, E9, E15: the keyed requests the server layer lets through as reads — declared reads, and
//! HTTP's safe methods — are counted by protocol and rule (with a `# HELP` description) and
//! logged at `DEBUG` without the key. Real tonic and hyper clients over TCP. This file is a test
//! binary of its own (its own process), so it installs a global recorder; it has one test.

use std::collections::BTreeMap;

use bytes::Bytes;
use http::StatusCode;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use idem_dedup::Engine;
use idem_shop::faults::StatusFaults;
use idem_shop::pb::shop_client::ShopClient;
use idem_shop::pb::{CreateOrderRequest, GetBookRequest};
use idem_shop::{grpc, http as shop_http, Shop, CREATE_ORDER};
use idem_test_support::capture;
use idem_tower::metrics::KEYED_PASSTHROUGH_TOTAL;
use idem_tower::{IdemLayer, Reads};
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use metrics_util::MetricKind;
use tracing::Level;

const KEY: &str = "lookup-0c4f2a9e-0001";

#[tokio::test]
async fn t7_keyed_requests_passed_through_as_reads_are_counted_and_logged() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder
        .install()
        .expect("no other recorder in this process");
    let (captured, _guard) = capture::capture();

    // gRPC: GetBook declared a read, CreateOrder listed as a write.
    let engine = Engine::builder().build().unwrap();
    let server = grpc::serve_with(Shop::new(), engine, StatusFaults::default(), |e| {
        IdemLayer::builder(e.clone())
            .writes(idem_tower::Writes::paths([CREATE_ORDER]))
            .reads(Reads::paths(["/shop.v1.Shop/GetBook"]))
            .build()
            .unwrap()
    })
    .await
    .unwrap();
    let mut client = ShopClient::connect(format!("http://{}", server.addr))
        .await
        .unwrap();
    for _ in 0..2 {
        // No tenant needed: it is a read, and it passes.
        let mut req = tonic::Request::new(GetBookRequest {
            sku: "book-42".into(),
        });
        req.metadata_mut()
            .insert("x-idempotency-key", KEY.parse().unwrap());
        let book = client.get_book(req).await.unwrap();
        assert!(book.metadata().get("idempotent-replayed").is_none());
    }
    // A listed write with a key is deduplicated, and not counted here.
    let mut req = tonic::Request::new(CreateOrderRequest {
        intent_id: "intent-1".into(),
        sku: "book-42".into(),
        quantity: 1,
    });
    req.metadata_mut()
        .insert("x-idempotency-key", KEY.parse().unwrap());
    req.metadata_mut()
        .insert("authorization", "Bearer t-1".parse().unwrap());
    client.create_order(req).await.unwrap();

    // HTTP: a keyed GET (a safe method) passes.
    let addr = shop_http::serve(Shop::new(), Engine::builder().build().unwrap())
        .await
        .unwrap();
    let http = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let req = http::Request::get(format!("http://{addr}/books/book-42"))
        .header("idempotency-key", KEY)
        .body(Full::new(Bytes::new()))
        .unwrap();
    let resp = http.request(req).await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let _ = resp.into_body().collect().await.unwrap();

    // The counter, by protocol and rule, described.
    let mut counts = BTreeMap::new();
    let mut described = false;
    for (ck, _unit, desc, value) in snapshotter.snapshot().into_vec() {
        let (kind, key) = ck.into_parts();
        if kind != MetricKind::Counter || key.name() != KEYED_PASSTHROUGH_TOTAL {
            continue;
        }
        described |= desc.is_some_and(|d| d.contains("passed through as reads"));
        let label = |n: &str| {
            key.labels()
                .find(|l| l.key() == n)
                .map(|l| l.value().to_owned())
                .unwrap()
        };
        let DebugValue::Counter(n) = value else {
            panic!("a counter")
        };
        counts.insert((label("protocol"), label("rule")), n);
    }
    let want: BTreeMap<_, _> = [(("grpc", "reads"), 2), (("http", "safe_method"), 1)]
        .into_iter()
        .map(|((p, r), n)| ((p.to_owned(), r.to_owned()), n))
        .collect();
    assert_eq!(counts, want);
    assert!(described, "the counter has a # HELP description");

    // One DEBUG event each, saying what passed and why; the key is never logged.
    let events: Vec<_> = captured
        .events()
        .into_iter()
        .filter(|e| {
            e.field("message")
                .is_some_and(|m| m.contains("passed through as a read"))
        })
        .collect();
    assert_eq!(events.len(), 3, "{events:#?}");
    for e in &events {
        assert_eq!((e.level, e.target.as_str()), (Level::DEBUG, "idem_tower"));
    }
    let seen: Vec<_> = events
        .iter()
        .map(|e| {
            (
                e.field("protocol").unwrap().to_owned(),
                e.field("method").unwrap().to_owned(),
                e.field("path").unwrap().to_owned(),
                e.field("rule").unwrap().to_owned(),
            )
        })
        .collect();
    let grpc_read = (
        "grpc".to_owned(),
        "POST".to_owned(),
        "/shop.v1.Shop/GetBook".to_owned(),
        "reads".to_owned(),
    );
    let http_read = (
        "http".to_owned(),
        "GET".to_owned(),
        "/books/book-42".to_owned(),
        "safe_method".to_owned(),
    );
    assert_eq!(seen, [grpc_read.clone(), grpc_read, http_read]);
    assert!(
        !captured.all_text().contains(KEY),
        "the key is never logged"
    );
}
