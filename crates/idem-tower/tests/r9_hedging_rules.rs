//! R9, R10: the client layer's hedging rules against a scripted gRPC server on tokio's paused
//! clock: a fatal status from either copy ends the call, a pushback stops further copies, hedges
//! are drawn from the retry budget, an adaptive delay fires at its percentile and needs its
//! minimum of samples, and every copy carries the key and its attempt number.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Request, Response};
use http_body_util::Full;
use idem_core::Code;
use idem_retry::{GiveUp, HedgeDelay, HedgingPolicy, LatencyTracker, RetryBudget, RetryPolicy};
use idem_tower::{BoxError, CallFailed, CallReport, ReplayBody, RetryLayer, Writes};
use tokio::time::Instant;
use tower::{Layer, ServiceExt};

const WRITE: &str = "/shop.v1.Shop/CreateOrder";
const READ: &str = "/shop.v1.Shop/GetBook";

/// What the scripted server does with one request: answer after `ms` with `code`, and the
/// `grpc-retry-pushback-ms` value if any.
#[derive(Clone, Copy)]
struct Answer {
    ms: u64,
    code: i32,
    pushback: Option<&'static str>,
}

const fn answer(ms: u64, code: i32) -> Answer {
    Answer {
        ms,
        code,
        pushback: None,
    }
}

/// Every request the server saw: its headers, and when it came (since the test began).
type Seen = Arc<Mutex<Vec<(HeaderMap, Duration)>>>;

/// A gRPC server answering its `n`-th request (from 0) by `script(n)`.
fn server(
    script: impl Fn(usize) -> Answer + Send + Sync + 'static,
    seen: Seen,
) -> impl tower::Service<
    Request<Full<Bytes>>,
    Response = Response<ReplayBody>,
    Error = BoxError,
    Future = impl Send,
> + Clone
       + Send
       + Sync
       + 'static {
    let script = Arc::new(script);
    let began = Instant::now();
    tower::service_fn(move |req: Request<Full<Bytes>>| {
        let n = {
            let mut v = seen.lock().unwrap();
            v.push((req.headers().clone(), began.elapsed()));
            v.len() - 1
        };
        let a = script(n);
        async move {
            tokio::time::sleep(Duration::from_millis(a.ms)).await;
            let mut trailers = HeaderMap::new();
            trailers.insert("grpc-status", a.code.to_string().parse().unwrap());
            if let Some(p) = a.pushback {
                trailers.insert("grpc-retry-pushback-ms", p.parse().unwrap());
            }
            let body = Bytes::from(format!("answer-{n}"));
            let mut r = Response::new(ReplayBody::new(body, Some(trailers)));
            r.headers_mut()
                .insert("content-type", "application/grpc".parse().unwrap());
            Ok::<_, BoxError>(r)
        }
    })
}

fn request(path: &str) -> Request<Full<Bytes>> {
    Request::post(format!("http://shop{path}"))
        .header("content-type", "application/grpc")
        .body(Full::new(Bytes::from_static(b"\0\0\0\0\x03abc")))
        .unwrap()
}

fn hedging(copies: u32, delay_ms: u64) -> HedgingPolicy {
    HedgingPolicy::builder()
        .max_attempts(copies)
        .delay(HedgeDelay::Fixed(Duration::from_millis(delay_ms)))
        .build()
        .unwrap()
}

fn layer(h: HedgingPolicy, budget: RetryBudget) -> RetryLayer {
    RetryLayer::builder()
        .hedging(h)
        .budget(budget)
        .writes(Writes::paths([WRITE]))
        .build()
        .unwrap()
}

fn open_budget() -> RetryBudget {
    RetryBudget::builder().ratio(1.0).build().unwrap()
}

fn failed(err: BoxError) -> Box<CallFailed> {
    err.downcast::<CallFailed>().expect("a CallFailed")
}

#[tokio::test(start_paused = true)]
async fn r9_fatal_status_from_either_copy_ends_the_call() {
    // The hedge fails with INVALID_ARGUMENT while the first copy is stuck.
    let seen = Seen::default();
    let l = layer(hedging(3, 30), open_budget());
    let svc = l.layer(server(
        |n| {
            if n == 0 {
                answer(30_000, 0)
            } else {
                answer(0, 3)
            }
        },
        seen.clone(),
    ));
    let began = Instant::now();
    let f = failed(svc.oneshot(request(WRITE)).await.unwrap_err());
    assert_eq!(
        (f.code(), f.reason(), f.attempts()),
        (Code::InvalidArgument, GiveUp::NotRetryable, 2)
    );
    assert!(
        began.elapsed() < Duration::from_secs(30),
        "the stuck copy was not waited for"
    );
    assert_eq!(
        seen.lock().unwrap().len(),
        2,
        "no third copy after a fatal status"
    );

    // The first copy fails with PERMISSION_DENIED while the hedge is stuck.
    let seen = Seen::default();
    let svc = l.layer(server(
        |n| {
            if n == 0 {
                answer(50, 7)
            } else {
                answer(30_000, 0)
            }
        },
        seen.clone(),
    ));
    let f = failed(svc.oneshot(request(READ)).await.unwrap_err());
    assert_eq!((f.code(), f.attempts()), (Code::PermissionDenied, 2));
    assert_eq!(seen.lock().unwrap().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn r9_pushback_stops_hedging() {
    // The first copy answers OK at 100 ms; the second (at 30 ms) fails UNAVAILABLE at once.
    let script = |pushback: Option<&'static str>| {
        move |n: usize| match n {
            0 => answer(100, 0),
            1 => Answer {
                ms: 0,
                code: 14,
                pushback,
            },
            _ => answer(0, 0),
        }
    };
    // Without pushback the non-fatal failure sends the third copy at once, which wins.
    let seen = Seen::default();
    let l = layer(hedging(3, 30), open_budget());
    let r = l
        .layer(server(script(None), seen.clone()))
        .oneshot(request(WRITE))
        .await
        .unwrap();
    assert_eq!(r.extensions().get::<CallReport>().unwrap().attempts, 3);
    assert_eq!(seen.lock().unwrap().len(), 3);

    // A pushback that forbids retries: no third copy; the first copy's answer is taken.
    let seen = Seen::default();
    let l = layer(hedging(3, 30), open_budget());
    let r = l
        .layer(server(script(Some("xxx")), seen.clone()))
        .oneshot(request(WRITE))
        .await
        .unwrap();
    assert_eq!(r.extensions().get::<CallReport>().unwrap().attempts, 2);
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2, "the pushback stopped the hedging");
    assert_eq!(l.stats().retrier.hedges, 1);

    // Every copy: the same key, its attempt number (R6).
    let key = &seen[0].0["x-idempotency-key"];
    assert_eq!(&seen[1].0["x-idempotency-key"], key);
    assert!(seen[0].0.get("grpc-previous-rpc-attempts").is_none());
    assert_eq!(seen[1].0["grpc-previous-rpc-attempts"], "1");
    assert_eq!(
        seen[1].1,
        Duration::from_millis(30),
        "the hedge went out at its delay"
    );
}

#[tokio::test(start_paused = true)]
async fn r9_hedges_are_drawn_from_the_budget() {
    let script = |n: usize| if n == 0 { answer(200, 0) } else { answer(0, 0) };
    // A budget that grants nothing: the slow copy is the only one.
    let seen = Seen::default();
    let none = RetryBudget::builder()
        .ratio(0.0)
        .min_per_sec(0)
        .build()
        .unwrap();
    let l = layer(hedging(2, 30), none.clone());
    let r = l
        .layer(server(script, seen.clone()))
        .oneshot(request(WRITE))
        .await
        .unwrap();
    assert_eq!(r.extensions().get::<CallReport>().unwrap().attempts, 1);
    assert_eq!(seen.lock().unwrap().len(), 1);
    assert_eq!((none.refused(), l.stats().retrier.hedges), (1, 0));

    // A budget that grants it: the hedge is a withdrawal.
    let seen = Seen::default();
    let open = open_budget();
    let l = layer(hedging(2, 30), open.clone());
    let r = l
        .layer(server(script, seen.clone()))
        .oneshot(request(WRITE))
        .await
        .unwrap();
    assert_eq!(r.extensions().get::<CallReport>().unwrap().attempts, 2);
    assert_eq!(open.snapshot().retries, 1);
    assert_eq!(l.stats().retrier.hedges, 1);
}

#[tokio::test(start_paused = true)]
async fn r9_adaptive_delay_fires_at_the_configured_percentile() {
    let tracker = LatencyTracker::builder().min_samples(100).build().unwrap();
    let policy = HedgingPolicy::builder()
        .delay(HedgeDelay::Percentile(0.9))
        .build()
        .unwrap();
    let l = RetryLayer::builder()
        .hedging(policy)
        .latencies(tracker.clone())
        .budget(open_budget())
        .build()
        .unwrap();
    // Too few samples: a slow read is not hedged.
    let seen = Seen::default();
    let svc = l.layer(server(|_| answer(500, 0), seen.clone()));
    svc.oneshot(request(READ)).await.unwrap();
    assert_eq!(seen.lock().unwrap().len(), 1);
    assert_eq!(tracker.samples(READ), 1);

    // Scripted latencies: 99 more reads answering in 1..=99 ms.
    let seen = Seen::default();
    let svc = l.layer(server(|n| answer(n as u64 + 1, 0), seen.clone()));
    for _ in 0..99 {
        svc.clone().oneshot(request(READ)).await.unwrap();
    }
    // 100 samples: 1..=99 ms and 500 ms. Their p90 is 90 ms (the histogram reads it at most
    // 1/32 high).
    let seen = Seen::default();
    let svc = l.layer(server(
        |n| {
            if n == 0 {
                answer(10_000, 0)
            } else {
                answer(0, 0)
            }
        },
        seen.clone(),
    ));
    let r = svc.oneshot(request(READ)).await.unwrap();
    assert_eq!(r.extensions().get::<CallReport>().unwrap().attempts, 2);
    let at = seen.lock().unwrap()[1].1;
    assert!(
        at >= Duration::from_millis(90) && at <= Duration::from_micros(90_000 + 90_000 / 32),
        "the hedge went out at {at:?}, not at p90"
    );
    assert_eq!(l.stats().retrier.hedges, 1);
}

#[tokio::test(start_paused = true)]
async fn r10_no_attempt_starts_with_less_time_left_than_observed_latency() {
    // Attempts take 300 ms; the call has 400 ms. After 100 such samples, a retry after a fast
    // failure at 150 ms (250 ms left, less than the observed p50) is not started; with the
    // fixed 50 ms minimum it would be. (100 calls of 300 ms take 30 s: a window of 60 s keeps
    // them all.)
    let tracker = LatencyTracker::builder()
        .min_samples(100)
        .window(Duration::from_secs(60))
        .build()
        .unwrap();
    let policy = RetryPolicy::builder()
        .observed_min_attempt(0.5)
        .build()
        .unwrap();
    let l = RetryLayer::builder()
        .policy(policy)
        .latencies(tracker.clone())
        .budget(open_budget())
        .call_timeout(Duration::from_millis(400))
        .build()
        .unwrap();
    let svc = l.layer(server(|_| answer(300, 0), Seen::default()));
    for _ in 0..100 {
        svc.clone().oneshot(request(READ)).await.unwrap();
    }
    let seen = Seen::default();
    let svc = l.layer(server(
        |n| {
            if n == 0 {
                answer(150, 14)
            } else {
                answer(300, 0)
            }
        },
        seen.clone(),
    ));
    let f = failed(svc.oneshot(request(READ)).await.unwrap_err());
    assert_eq!((f.reason(), f.attempts()), (GiveUp::Deadline, 1));
    assert_eq!(seen.lock().unwrap().len(), 1);

    // The same call under the fixed minimum: the retry starts, and cannot finish in time.
    let fixed = RetryLayer::builder()
        .budget(open_budget())
        .call_timeout(Duration::from_millis(400))
        .build()
        .unwrap();
    let seen = Seen::default();
    let svc = fixed.layer(server(
        |n| {
            if n == 0 {
                answer(150, 14)
            } else {
                answer(300, 0)
            }
        },
        seen.clone(),
    ));
    let f = failed(svc.oneshot(request(READ)).await.unwrap_err());
    assert_eq!(f.code(), Code::DeadlineExceeded);
    assert_eq!(
        seen.lock().unwrap().len(),
        2,
        "a retry that could not finish was started"
    );
}
