//! E9: the server layer counts the writes it answers itself, by reason and HTTP status, with a
//! `# HELP` description. This file is a test binary of its own (its own process), so it installs
//! a global recorder; it has one test.

use std::convert::Infallible;

use bytes::Bytes;
use http::{Method, Request, Response};
use http_body_util::{BodyExt, Full};
use idem_dedup::Engine;
use idem_tower::metrics::REFUSED_TOTAL;
use idem_tower::{IdemLayer, RequestBody, StoredResponse, Tenant};
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use metrics_util::MetricKind;
use tower::{Layer, ServiceExt};

#[tokio::test]
async fn e9_layer_refusals_are_counted_by_reason_and_status_with_help() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder
        .install()
        .expect("no other recorder in this process");

    let handler = tower::service_fn(|_req: Request<RequestBody<Full<Bytes>>>| async {
        Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"ok"))))
    });
    let svc = IdemLayer::builder(Engine::<StoredResponse>::builder().build().unwrap())
        .max_body_bytes(8)
        .build()
        .unwrap()
        .layer(handler);
    let send = |key: Option<&str>, tenant: bool, body: &'static [u8]| {
        let mut b = Request::builder().method(Method::POST).uri("/orders");
        if let Some(k) = key {
            b = b.header("idempotency-key", k);
        }
        let mut req = b.body(Full::new(Bytes::from_static(body))).unwrap();
        if tenant {
            req.extensions_mut().insert(Tenant::new("tenant-1"));
        }
        let svc = svc.clone();
        async move {
            let resp = svc.oneshot(req).await.unwrap();
            let status = resp.status().as_u16();
            let _ = resp.into_body().collect().await;
            status
        }
    };
    assert_eq!(send(Some("key-0000-0001"), false, b"{}").await, 401);
    assert_eq!(send(None, true, b"{}").await, 400);
    assert_eq!(send(Some("bad"), true, b"{}").await, 400);
    assert_eq!(
        send(Some("key-0000-0001"), true, b"far too large").await,
        413
    );
    assert_eq!(send(Some("key-0000-0001"), true, b"{}").await, 200);
    assert_eq!(send(Some("key-0000-0001"), true, b"{\"x\":1}").await, 422);

    let mut counts = std::collections::BTreeMap::new();
    let mut described = false;
    for (ck, _unit, desc, value) in snapshotter.snapshot().into_vec() {
        let (kind, key) = ck.into_parts();
        if kind != MetricKind::Counter || key.name() != REFUSED_TOTAL {
            continue;
        }
        described |= desc.is_some_and(|d| d.contains("Writes the idem server layer answered"));
        let label = |n: &str| {
            key.labels()
                .find(|l| l.key() == n)
                .map(|l| l.value().to_owned())
                .unwrap()
        };
        let DebugValue::Counter(n) = value else {
            panic!("a counter")
        };
        counts.insert((label("reason"), label("status")), n);
    }
    let want: std::collections::BTreeMap<_, _> = [
        (("IDEMPOTENCY_CONFLICT", "422"), 1),
        (("INVALID_IDEMPOTENCY_KEY", "400"), 1),
        (("MISSING_IDEMPOTENCY_KEY", "400"), 1),
        (("MISSING_TENANT", "401"), 1),
        (("REQUEST_TOO_LARGE", "413"), 1),
    ]
    .into_iter()
    .map(|((r, s), n)| ((r.to_owned(), s.to_owned()), n))
    .collect();
    assert_eq!(counts, want);
    assert!(described, "the counter has a # HELP description");
}
