//! E15: every call through the client layer is a `tracing` span (protocol, method, path, and
//! when it ends its attempts, outcome and code) holding the retrier's span; the key it sends is
//! never logged; its metrics are described. On tokio's paused clock, against a scripted server.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use idem_retry::GiveUp;
use idem_test_support::capture;
use idem_tower::{BoxError, CallFailed, ReplayBody, RetryLayer};
use tower::{Layer, ServiceExt};
use tracing::Level;

/// A gRPC server that answers UNAVAILABLE `fails` times, then OK; it keeps the keys it saw.
fn grpc_server(
    fails: u32,
    keys: Arc<Mutex<Vec<String>>>,
) -> impl tower::Service<
    Request<Full<Bytes>>,
    Response = Response<ReplayBody>,
    Error = BoxError,
    Future = impl Send,
> + Clone
       + Send
       + Sync {
    let seen = Arc::new(AtomicU32::new(0));
    tower::service_fn(move |req: Request<Full<Bytes>>| {
        let n = seen.fetch_add(1, Ordering::SeqCst);
        if let Some(k) = req.headers().get("x-idempotency-key") {
            keys.lock().unwrap().push(k.to_str().unwrap().to_owned());
        }
        async move {
            let mut r = Response::new(ReplayBody::empty());
            let h = r.headers_mut();
            h.insert("content-type", "application/grpc".parse().unwrap());
            let status = if n < fails { "14" } else { "0" };
            h.insert("grpc-status", status.parse().unwrap());
            Ok::<_, BoxError>(r)
        }
    })
}

fn request() -> Request<Full<Bytes>> {
    Request::post("http://shop/shop.v1.Shop/CreateOrder")
        .header("content-type", "application/grpc")
        .body(Full::new(Bytes::new()))
        .unwrap()
}

fn layer() -> RetryLayer {
    RetryLayer::builder()
        .writes(idem_tower::Writes::paths(["/shop.v1.Shop/CreateOrder"]))
        .build()
        .unwrap()
}

/// E15: a keyed write that succeeds on its third attempt is one `idem_tower.client` span
/// (grpc, POST, the method's path, 3 attempts, ok, OK) holding the retrier's `idem_retry.call`
/// span; the key the layer made and sent three times appears nowhere in the trace.
#[tokio::test(start_paused = true)]
async fn e15_a_client_call_is_a_span_with_path_attempts_and_outcome() {
    let (c, _guard) = capture::capture();
    let keys = Arc::default();
    let client = layer().layer(grpc_server(2, Arc::clone(&keys)));
    client.oneshot(request()).await.unwrap();

    let spans = c.spans_named("idem_tower.client");
    assert_eq!(spans.len(), 1);
    let span = &spans[0];
    assert_eq!(
        (span.target.as_str(), span.level),
        ("idem_tower", Level::DEBUG)
    );
    assert_eq!(span.field("protocol"), Some("grpc"));
    assert_eq!(span.field("method"), Some("POST"));
    assert_eq!(span.field("path"), Some("/shop.v1.Shop/CreateOrder"));
    assert_eq!(span.field("attempts"), Some("3"));
    assert_eq!(span.field("outcome"), Some("ok"));
    assert_eq!(span.field("code"), Some("OK"));
    let retrier = c.spans_named("idem_retry.call");
    assert_eq!(retrier.len(), 1);
    assert_eq!(retrier[0].parent, Some(span.id));
    assert_eq!(retrier[0].field("kind"), Some("keyed"));
    assert_eq!(c.events_named("idem_retry.retry").len(), 2);

    let keys = keys.lock().unwrap().clone();
    assert_eq!(keys.len(), 3);
    let text = c.all_text();
    assert!(!text.contains(&keys[0]), "the key leaked:\n{text}");
}

/// E15: a call the layer gives up on records why, after how many attempts, and the last code.
#[tokio::test(start_paused = true)]
async fn e15_a_client_give_up_is_recorded_on_its_span() {
    let (c, _guard) = capture::capture();
    let client = layer().layer(grpc_server(u32::MAX, Arc::default()));
    let err = client.oneshot(request()).await.unwrap_err();
    let failed = err.downcast_ref::<CallFailed>().unwrap();
    assert_eq!(failed.reason(), GiveUp::Attempts);
    let spans = c.spans_named("idem_tower.client");
    assert_eq!(spans.len(), 1);
    assert_eq!(spans[0].field("attempts"), Some("3"));
    assert_eq!(spans[0].field("outcome"), Some("attempts"));
    assert_eq!(spans[0].field("code"), Some("UNAVAILABLE"));
    assert!(
        c.events().iter().all(|e| e.level > Level::INFO),
        "{:#?}",
        c.events()
    );
}

/// E15: building the layer describes its metrics and the retrier's (Prometheus `# HELP`).
#[test]
fn e15_every_client_metric_is_described() {
    use metrics_util::debugging::DebuggingRecorder;
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::with_local_recorder(&recorder, || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap();
        let client = layer().layer(grpc_server(1, Arc::default()));
        rt.block_on(client.oneshot(request())).unwrap();
    });
    let mut described = std::collections::HashSet::new();
    for (ck, _, desc, _) in snapshotter.snapshot().into_vec() {
        let name = ck.key().name().to_owned();
        assert!(desc.is_some(), "{name} is not described");
        described.insert(name);
    }
    for name in [
        idem_tower::metrics::RETRIES_TOTAL,
        idem_tower::metrics::KEYS_GENERATED_TOTAL,
        idem_retry::metrics::ATTEMPTS,
        idem_retry::metrics::RETRIES,
    ] {
        assert!(
            described.contains(name),
            "{name} was not reported: {described:?}"
        );
    }
}
