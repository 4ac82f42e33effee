//! E16 in the server layer: responses over `max_stored_bytes` are streamed on to the caller that
//! ran them, never buffered whole, and a compact record replaces them, so a duplicate never runs
//! the handler a second time.

use std::convert::Infallible;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use http::{Request, Response, StatusCode};
use http_body::Frame;
use http_body_util::{BodyExt, Full, StreamBody};
use idem_dedup::Engine;
use idem_tower::{IdemLayer, RequestBody, StoredResponse, Tenant};
use tower::{Layer, ServiceExt};

fn post(key: &str) -> Request<Full<Bytes>> {
    let mut req = Request::post("/exports")
        .header("idempotency-key", key)
        .body(Full::new(Bytes::from_static(b"{}")))
        .unwrap();
    req.extensions_mut().insert(Tenant::new("tenant-1"));
    req
}

fn layer(max_stored: usize) -> IdemLayer {
    IdemLayer::builder(Engine::<StoredResponse>::builder().build().unwrap())
        .max_stored_bytes(max_stored)
        .build()
        .unwrap()
}

#[tokio::test]
async fn e16_a_response_over_the_cap_reaches_its_caller_and_duplicates_get_a_compact_record() {
    let runs = Arc::new(AtomicU32::new(0));
    let r = runs.clone();
    let handler = tower::service_fn(move |_req: Request<RequestBody<Full<Bytes>>>| {
        r.fetch_add(1, Ordering::SeqCst);
        async move {
            let resp = Response::builder()
                .status(StatusCode::CREATED)
                .header("location", "/exports/77")
                .body(Full::new(Bytes::from(vec![b'x'; 10_000])))
                .unwrap();
            Ok::<_, Infallible>(resp)
        }
    });
    let svc = layer(1024).layer(handler);
    let first = svc.clone().oneshot(post("export-key-0001")).await.unwrap();
    assert_eq!(first.status(), 201);
    let body = first.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(
        body.len(),
        10_000,
        "the caller that ran it gets the whole response"
    );

    let again = svc.clone().oneshot(post("export-key-0001")).await.unwrap();
    assert_eq!(again.status(), 409);
    assert_eq!(again.headers()["idem-reason"], "RESPONSE_NOT_STORED");
    assert_eq!(again.headers()["idempotent-replayed"], "true");
    assert_eq!(again.headers()["location"], "/exports/77");
    let text = again.into_body().collect().await.unwrap().to_bytes();
    let text = String::from_utf8_lossy(&text);
    assert!(
        text.contains("already ran") && text.contains("201"),
        "{text}"
    );
    assert_eq!(
        runs.load(Ordering::SeqCst),
        1,
        "the handler never runs twice"
    );
}

#[tokio::test]
async fn e16_a_streaming_response_it_will_not_store_is_passed_on_not_buffered() {
    let (release_tx, release_rx) = tokio::sync::oneshot::channel::<()>();
    let release = Arc::new(parking_lot::Mutex::new(Some(release_rx)));
    let handler = tower::service_fn(move |_req: Request<RequestBody<Full<Bytes>>>| {
        let release = release.lock().take();
        async move {
            // 4 KiB now, the rest only after the test has seen the first bytes.
            let head = futures::stream::once(async {
                Ok::<_, Infallible>(Frame::data(Bytes::from(vec![b'a'; 4096])))
            });
            let tail = futures::stream::once(async move {
                if let Some(r) = release {
                    let _ = r.await;
                }
                Ok::<_, Infallible>(Frame::data(Bytes::from_static(b"end")))
            });
            Ok::<_, Infallible>(Response::new(StreamBody::new(head.chain(tail).boxed())))
        }
    });
    let svc = layer(1024).layer(handler);
    // If the layer buffered the whole body, this would wait for the tail forever.
    let resp = tokio::time::timeout(
        Duration::from_secs(10),
        svc.oneshot(post("stream-key-0001")),
    )
    .await
    .expect("the response starts before the handler finished its body")
    .unwrap();
    let mut body = std::pin::pin!(resp.into_body());
    let first = body
        .as_mut()
        .frame()
        .await
        .unwrap()
        .unwrap()
        .into_data()
        .unwrap();
    assert_eq!(first.len(), 4096);
    release_tx.send(()).unwrap();
    let rest = body.as_mut().collect().await.unwrap().to_bytes();
    assert_eq!(rest, "end");
}

#[tokio::test]
async fn e16_a_large_failure_is_passed_on_and_not_stored() {
    let runs = Arc::new(AtomicU32::new(0));
    let r = runs.clone();
    let handler = tower::service_fn(move |_req: Request<RequestBody<Full<Bytes>>>| {
        r.fetch_add(1, Ordering::SeqCst);
        async move {
            let resp = Response::builder()
                .status(StatusCode::SERVICE_UNAVAILABLE)
                .body(Full::new(Bytes::from(vec![b'e'; 5000])))
                .unwrap();
            Ok::<_, Infallible>(resp)
        }
    });
    let svc = layer(1024).layer(handler);
    for _ in 0..2 {
        let resp = svc.clone().oneshot(post("fail-key-00001")).await.unwrap();
        assert_eq!(resp.status(), 503);
        assert_eq!(
            resp.into_body().collect().await.unwrap().to_bytes().len(),
            5000
        );
    }
    assert_eq!(
        runs.load(Ordering::SeqCst),
        2,
        "a retryable failure runs again"
    );
}
