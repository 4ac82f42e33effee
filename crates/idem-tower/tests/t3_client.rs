//! T3, R6, S2: the client layer against a scripted server that fails in each way in turn —
//! transport error, UNAVAILABLE, RESOURCE_EXHAUSTED with pushback, an answer slower than the
//! attempt timeout — on tokio's paused clock; and what a caller is told when the layer gives up
//! (`CallFailed`: why, after how many attempts, with which key).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Request, Response};
use http_body_util::{BodyExt, Full};
use idem_core::{Code, Reason};
use idem_retry::{Failure, FixedRandom, GiveUp, RetryBudget, RetryPolicy};
use idem_tower::wire::parse_grpc_timeout;
use idem_tower::{
    AttemptTimedOut, BoxError, CallFailed, CallReport, ConfigError, MissingKey, ReplayBody,
    RetryLayer, Writes,
};
use parking_lot_free::Log;
use tower::{Layer, ServiceExt};

mod parking_lot_free {
    use http::HeaderMap;
    use std::sync::Mutex;
    /// Headers of every attempt the scripted server saw.
    #[derive(Default)]
    pub(crate) struct Log(Mutex<Vec<HeaderMap>>);
    impl Log {
        pub(crate) fn push(&self, h: HeaderMap) -> usize {
            let mut v = self.0.lock().unwrap();
            v.push(h);
            v.len()
        }
        pub(crate) fn all(&self) -> Vec<HeaderMap> {
            self.0.lock().unwrap().clone()
        }
    }
}

#[derive(Clone, Copy)]
enum Step {
    Reset,
    Grpc(i32, Option<u64>),
    Slow,
    Ok,
    Http(u16, Option<u64>),
}

fn grpc_response(code: i32, pushback_ms: Option<u64>) -> Response<ReplayBody> {
    let mut r = Response::new(ReplayBody::empty());
    let h = r.headers_mut();
    h.insert("content-type", "application/grpc".parse().unwrap());
    h.insert("grpc-status", code.to_string().parse().unwrap());
    if let Some(ms) = pushback_ms {
        h.insert("grpc-retry-pushback-ms", ms.to_string().parse().unwrap());
    }
    r
}

fn scripted(
    steps: Vec<Step>,
    log: Arc<Log>,
) -> impl tower::Service<
    Request<Full<Bytes>>,
    Response = Response<ReplayBody>,
    Error = BoxError,
    Future = impl Send,
> + Clone
       + Send
       + Sync
       + 'static {
    let steps = Arc::new(steps);
    tower::service_fn(move |req: Request<Full<Bytes>>| {
        let n = log.push(req.headers().clone());
        let step = steps[(n - 1).min(steps.len() - 1)];
        async move {
            match step {
                Step::Reset => Err::<_, BoxError>(Box::new(std::io::Error::from(
                    std::io::ErrorKind::ConnectionReset,
                ))),
                Step::Grpc(code, pushback) => Ok(grpc_response(code, pushback)),
                Step::Slow => {
                    tokio::time::sleep(Duration::from_secs(30)).await;
                    Ok(grpc_response(0, None))
                }
                Step::Ok => {
                    let mut trailers = HeaderMap::new();
                    trailers.insert("grpc-status", "0".parse().unwrap());
                    let mut r = Response::new(ReplayBody::new(
                        Bytes::from_static(b"\0\0\0\0\x02ok"),
                        Some(trailers),
                    ));
                    r.headers_mut()
                        .insert("content-type", "application/grpc".parse().unwrap());
                    Ok(r)
                }
                Step::Http(status, retry_after) => {
                    let mut r = Response::new(ReplayBody::new(Bytes::from_static(b"{}"), None));
                    *r.status_mut() = http::StatusCode::from_u16(status).unwrap();
                    if let Some(s) = retry_after {
                        r.headers_mut()
                            .insert("retry-after", s.to_string().parse().unwrap());
                    }
                    Ok(r)
                }
            }
        }
    })
}

fn layer(max_attempts: u32) -> RetryLayer {
    RetryLayer::builder()
        .policy(
            RetryPolicy::builder()
                .max_attempts(max_attempts)
                .random_source(FixedRandom::new(0.5))
                .build()
                .unwrap(),
        )
        .budget(RetryBudget::builder().ratio(1.0).build().unwrap())
        .writes(Writes::paths(["/shop.v1.Shop/CreateOrder"]))
        .call_timeout(Duration::from_secs(5))
        .attempt_timeout(Duration::from_millis(200))
        .build()
        .unwrap()
}

/// The `CallFailed` a give-up's error downcasts to.
fn call_failed(err: BoxError) -> Box<CallFailed> {
    match err.downcast::<CallFailed>() {
        Ok(failed) => failed,
        Err(other) => panic!("not a CallFailed: {other}"),
    }
}

fn grpc_request(path: &str) -> Request<Full<Bytes>> {
    Request::post(format!("http://shop{path}"))
        .header("content-type", "application/grpc")
        .body(Full::new(Bytes::from_static(b"\0\0\0\0\x03abc")))
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn t3_client_retries_every_failure_kind_with_one_key_r6() {
    let log = Arc::new(Log::default());
    let steps = vec![
        Step::Reset,
        Step::Grpc(14, None),
        Step::Grpc(8, Some(7)),
        Step::Slow,
        Step::Ok,
    ];
    let layer = layer(6);
    let svc = layer.layer(scripted(steps, log.clone()));
    let resp = svc
        .oneshot(grpc_request("/shop.v1.Shop/CreateOrder"))
        .await
        .unwrap();
    let report = resp.extensions().get::<CallReport>().cloned().unwrap();
    let (_, body) = resp.into_parts();
    let collected = body.collect().await.unwrap();
    assert_eq!(collected.trailers().unwrap()["grpc-status"], "0");
    assert_eq!(report.attempts, 5);

    let seen = log.all();
    assert_eq!(seen.len(), 5);
    let key = report.key.unwrap();
    for (i, h) in seen.iter().enumerate() {
        assert_eq!(
            h["x-idempotency-key"],
            key.as_str(),
            "attempt {} has the same key",
            i + 1
        );
        let budget = parse_grpc_timeout(h["grpc-timeout"].to_str().unwrap()).unwrap();
        assert!(
            budget <= Duration::from_millis(200),
            "attempt {}: {budget:?}",
            i + 1
        );
        match i {
            0 => assert!(h.get("grpc-previous-rpc-attempts").is_none()),
            _ => assert_eq!(h["grpc-previous-rpc-attempts"], i.to_string().as_str()),
        }
    }
    let stats = layer.stats();
    assert_eq!(stats.keys_generated, 1);
    assert_eq!(stats.retrier.attempts, 5);
    for (f, n) in [
        (Failure::Transport, 1),
        (Failure::Unavailable, 1),
        (Failure::ResourceExhausted, 1),
        (Failure::Timeout, 1),
        (Failure::Other, 0),
    ] {
        assert_eq!(stats.retries(f), n, "{f:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn t3_client_keeps_the_callers_key() {
    let log = Arc::new(Log::default());
    let svc = layer(3).layer(scripted(vec![Step::Grpc(14, None), Step::Ok], log.clone()));
    let mut req = grpc_request("/shop.v1.Shop/CreateOrder");
    req.headers_mut()
        .insert("x-idempotency-key", "intent-0042-create".parse().unwrap());
    svc.oneshot(req).await.unwrap();
    let seen = log.all();
    assert_eq!(seen.len(), 2);
    assert!(seen
        .iter()
        .all(|h| h["x-idempotency-key"] == "intent-0042-create"));
}

#[tokio::test(start_paused = true)]
async fn t3_client_never_retries_a_write_without_key_s2() {
    let log = Arc::new(Log::default());
    let layer = RetryLayer::builder()
        .writes(Writes::paths(["/shop.v1.Shop/CreateOrder"]))
        .missing_key(MissingKey::SendOnce)
        .build()
        .unwrap();
    let svc = layer.layer(scripted(vec![Step::Grpc(14, None), Step::Ok], log.clone()));
    let err = svc
        .oneshot(grpc_request("/shop.v1.Shop/CreateOrder"))
        .await
        .unwrap_err();
    let failed = call_failed(err);
    assert_eq!(
        (failed.reason(), failed.attempts()),
        (GiveUp::NotRetryable, 1)
    );
    assert_eq!(failed.key(), None);
    assert_eq!(failed.response().unwrap().headers()["grpc-status"], "14");
    assert_eq!(log.all().len(), 1);
    assert!(log.all()[0].get("x-idempotency-key").is_none());

    // A transport error on it is returned as the error, after one attempt.
    let log = Arc::new(Log::default());
    let svc = layer.layer(scripted(vec![Step::Reset, Step::Ok], log.clone()));
    let failed = call_failed(
        svc.oneshot(grpc_request("/shop.v1.Shop/CreateOrder"))
            .await
            .unwrap_err(),
    );
    assert_eq!(
        (failed.reason(), failed.attempts()),
        (GiveUp::NotRetryable, 1)
    );
    assert_eq!(log.all().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn t3_client_permanent_failure_is_returned_at_once() {
    let log = Arc::new(Log::default());
    let svc = layer(5).layer(scripted(vec![Step::Grpc(3, None), Step::Ok], log.clone()));
    let failed = call_failed(
        svc.oneshot(grpc_request("/shop.v1.Shop/CreateOrder"))
            .await
            .unwrap_err(),
    );
    assert_eq!(
        (failed.reason(), failed.attempts()),
        (GiveUp::NotRetryable, 1)
    );
    assert_eq!(failed.code(), Code::InvalidArgument);
    assert_eq!(failed.response().unwrap().headers()["grpc-status"], "3");
    assert_eq!(log.all().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn t3_client_reads_get_no_key_and_are_retried() {
    let log = Arc::new(Log::default());
    let svc = layer(3).layer(scripted(vec![Step::Grpc(14, None), Step::Ok], log.clone()));
    svc.oneshot(grpc_request("/shop.v1.Shop/GetBook"))
        .await
        .unwrap();
    let seen = log.all();
    assert_eq!(seen.len(), 2);
    assert!(seen.iter().all(|h| h.get("x-idempotency-key").is_none()));
}

#[tokio::test(start_paused = true)]
async fn t3_client_last_attempt_timing_out_is_deadline_exceeded() {
    let log = Arc::new(Log::default());
    let svc = layer(2).layer(scripted(vec![Step::Slow], log.clone()));
    let err = svc
        .oneshot(grpc_request("/shop.v1.Shop/CreateOrder"))
        .await
        .unwrap_err();
    // What a tonic client makes of it: DEADLINE_EXCEEDED, with the give-up as its source.
    let status = tonic::Status::from_error(err);
    assert_eq!(status.code(), tonic::Code::DeadlineExceeded);
    let failed = std::error::Error::source(&status)
        .and_then(|e| e.downcast_ref::<CallFailed>())
        .unwrap();
    assert_eq!((failed.reason(), failed.attempts()), (GiveUp::Attempts, 2));
    assert_eq!(failed.code(), Code::DeadlineExceeded);
    assert!(failed.response().is_none());
    assert_eq!(log.all().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn t3_client_http_statuses_and_retry_after() {
    let log = Arc::new(Log::default());
    let layer = RetryLayer::builder()
        .policy(RetryPolicy::builder().max_attempts(4).build().unwrap())
        .build()
        .unwrap(); // HTTP POST is a write by default
    let svc = layer.layer(scripted(
        vec![
            Step::Http(503, None),
            Step::Http(429, Some(1)),
            Step::Http(201, None),
        ],
        log.clone(),
    ));
    let start = tokio::time::Instant::now();
    let req = Request::post("http://shop/orders")
        .body(Full::new(Bytes::from_static(b"sku=book-42")))
        .unwrap();
    let resp = svc.oneshot(req).await.unwrap();
    assert_eq!(resp.status(), 201);
    // The 429's Retry-After (1 s) replaced the backoff: virtual time, no wall clock.
    assert!(start.elapsed() >= Duration::from_secs(1));
    let seen = log.all();
    assert_eq!(seen.len(), 3);
    let key = seen[0]["idempotency-key"].to_str().unwrap().to_owned();
    assert!(
        key.starts_with('"') && key.ends_with('"'),
        "sent as an sf-string: {key}"
    );
    assert!(seen.iter().all(|h| h["idempotency-key"] == key.as_str()));
    assert_eq!(layer.stats().retries(Failure::Unavailable), 1);
    assert_eq!(layer.stats().retries(Failure::ResourceExhausted), 1);
}

#[tokio::test(start_paused = true)]
async fn t3_give_up_error_says_why_and_after_how_many_attempts() {
    // Every attempt UNAVAILABLE: no attempts left after 3.
    let log = Arc::new(Log::default());
    let svc = layer(3).layer(scripted(vec![Step::Grpc(14, None)], log.clone()));
    let failed = call_failed(
        svc.oneshot(grpc_request("/shop.v1.Shop/CreateOrder"))
            .await
            .unwrap_err(),
    );
    assert_eq!((failed.reason(), failed.attempts()), (GiveUp::Attempts, 3));
    assert_eq!(failed.code(), Code::Unavailable);
    let key = failed.key().expect("a generated key").clone();
    assert!(log
        .all()
        .iter()
        .all(|h| h["x-idempotency-key"] == key.as_str()));
    assert_eq!(failed.report().attempts, 3);
    assert_eq!(
        failed.to_string(),
        "gave up after 3 attempts (no attempts were left): UNAVAILABLE: "
    );
    let response = failed.into_response().unwrap();
    assert_eq!(response.headers()["grpc-status"], "14");
    assert!(response.extensions().get::<CallReport>().is_none());

    // The budget refuses every retry: one attempt.
    let spent = RetryLayer::builder()
        .budget(
            RetryBudget::builder()
                .ratio(0.0)
                .min_per_sec(0)
                .build()
                .unwrap(),
        )
        .build()
        .unwrap();
    let svc = spent.layer(scripted(vec![Step::Grpc(14, None)], Arc::default()));
    let failed = call_failed(
        svc.oneshot(grpc_request("/shop.v1.Shop/GetBook"))
            .await
            .unwrap_err(),
    );
    assert_eq!((failed.reason(), failed.attempts()), (GiveUp::Budget, 1));
    assert_eq!(failed.key(), None, "a read carries no key");

    // The deadline (100 ms) leaves no room for the second backoff (40 ms) plus a 50 ms attempt.
    let short = RetryLayer::builder()
        .policy(
            RetryPolicy::builder()
                .max_attempts(5)
                .random_source(FixedRandom::new(0.5))
                .build()
                .unwrap(),
        )
        .call_timeout(Duration::from_millis(100))
        .build()
        .unwrap();
    let svc = short.layer(scripted(vec![Step::Grpc(14, None)], Arc::default()));
    let failed = call_failed(
        svc.oneshot(grpc_request("/shop.v1.Shop/GetBook"))
            .await
            .unwrap_err(),
    );
    assert_eq!((failed.reason(), failed.attempts()), (GiveUp::Deadline, 2));

    // Transport errors to the end: an unknown outcome (S3). On gRPC the source is the
    // UNAVAILABLE status a tonic caller is to see, and the last transport error is its source.
    let svc = layer(2).layer(scripted(vec![Step::Reset], Arc::default()));
    let failed = call_failed(
        svc.oneshot(grpc_request("/shop.v1.Shop/CreateOrder"))
            .await
            .unwrap_err(),
    );
    assert_eq!((failed.reason(), failed.attempts()), (GiveUp::Attempts, 2));
    assert_eq!(failed.status().reason(), Some(&Reason::UNKNOWN_OUTCOME));
    let grpc = std::error::Error::source(&*failed)
        .and_then(|e| e.downcast_ref::<tonic::Status>())
        .unwrap();
    assert_eq!(grpc.code(), tonic::Code::Unavailable);
    assert_eq!(
        grpc.metadata().get("idem-reason").unwrap(),
        "UNKNOWN_OUTCOME"
    );
    let io = std::error::Error::source(grpc)
        .and_then(|e| e.downcast_ref::<std::io::Error>())
        .unwrap();
    assert_eq!(io.kind(), std::io::ErrorKind::ConnectionReset);

    // HTTP: the problem response stays readable; a timeout's source is AttemptTimedOut.
    let svc = layer(2).layer(scripted(vec![Step::Http(503, None)], Arc::default()));
    let req = Request::post("http://shop/orders")
        .body(Full::new(Bytes::from_static(b"sku=book-42")))
        .unwrap();
    let failed = call_failed(svc.oneshot(req).await.unwrap_err());
    assert_eq!((failed.reason(), failed.attempts()), (GiveUp::Attempts, 2));
    assert_eq!(failed.into_response().unwrap().status(), 503);
    let svc = layer(1).layer(scripted(vec![Step::Slow], Arc::default()));
    let req = Request::get("http://shop/orders/7")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let failed = call_failed(svc.oneshot(req).await.unwrap_err());
    assert_eq!((failed.reason(), failed.attempts()), (GiveUp::Attempts, 1));
    let timed_out = std::error::Error::source(&*failed)
        .and_then(|e| e.downcast_ref::<AttemptTimedOut>())
        .unwrap();
    assert_eq!(timed_out.after, Duration::from_millis(200));
}

#[tokio::test(start_paused = true)]
async fn t3_tonic_client_reads_the_give_up_from_the_status_source() {
    use idem_shop::pb::shop_client::ShopClient;
    use idem_shop::pb::CreateOrderRequest;

    // A gRPC server that always answers UNAVAILABLE (trailers-only), with a reason.
    let calls = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let seen = calls.clone();
    let server = tower::service_fn(move |_req: Request<tonic::body::Body>| {
        seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        async move {
            let mut r = grpc_response(14, None);
            r.headers_mut()
                .insert("grpc-message", "stock%20service%20down".parse().unwrap());
            r.headers_mut()
                .insert("idem-reason", "UPSTREAM_UNAVAILABLE".parse().unwrap());
            Ok::<_, BoxError>(r)
        }
    });
    let mut client = ShopClient::new(layer(3).layer(server));
    let status = client
        .create_order(CreateOrderRequest {
            intent_id: "checkout-7".into(),
            sku: "book-42".into(),
            quantity: 1,
        })
        .await
        .unwrap_err();
    // The server's own status, as tonic would have read it without the layer...
    assert_eq!(status.code(), tonic::Code::Unavailable);
    assert_eq!(status.message(), "stock service down");
    assert_eq!(
        status.metadata().get("idem-reason").unwrap(),
        "UPSTREAM_UNAVAILABLE"
    );
    // ...and the layer's give-up as its source.
    let failed = std::error::Error::source(&status)
        .and_then(|e| e.downcast_ref::<CallFailed>())
        .expect("the CallFailed is the status's source");
    assert_eq!((failed.reason(), failed.attempts()), (GiveUp::Attempts, 3));
    assert!(failed.key().is_some());
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 3);
}

/// T3: the client layer's builder checks what it takes: a zero call or attempt timeout leaves no
/// time for any attempt and is refused, naming the rule; the defaults and real timeouts pass.
#[test]
fn t3_client_layer_refuses_zero_timeouts() {
    assert_eq!(
        RetryLayer::builder()
            .call_timeout(Duration::ZERO)
            .build()
            .unwrap_err(),
        ConfigError::Invalid("call_timeout must be greater than zero (no attempt could be made)")
    );
    let e = RetryLayer::builder()
        .attempt_timeout(Duration::ZERO)
        .build()
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "invalid layer setting: attempt_timeout must be greater than zero (no attempt could get an answer)"
    );
    assert!(RetryLayer::builder().build().is_ok());
    assert!(RetryLayer::builder()
        .call_timeout(Duration::from_millis(1))
        .attempt_timeout(Duration::from_secs(60))
        .build()
        .is_ok());
}
