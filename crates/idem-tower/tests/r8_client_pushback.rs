//! R8, T6 (client side): the client layer reads a failed gRPC response's pushback as gRPC A6
//! says — `grpc-retry-pushback-ms` that is negative, malformed or repeated means do not retry, a
//! valid one sets the next delay exactly and the backoff after it restarts at the base delay — and
//! counts a `google.rpc.RetryInfo` in `grpc-status-details-bin` (real bytes made by tonic-types)
//! as pushback too; the header wins when both are there. On tokio's paused clock.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Request, Response};
use http_body_util::Full;
use idem_retry::{FixedRandom, GiveUp, RetryBudget, RetryPolicy};
use idem_test_support::time::ms;
use idem_tower::{BoxError, CallFailed, ReplayBody, RetryLayer};
use tokio::time::Instant;
use tonic_types::{ErrorDetails, StatusExt};
use tower::{Layer, ServiceExt};

/// One scripted answer: a trailers-only gRPC failure with these headers, or success.
#[derive(Clone)]
enum Reply {
    Fail(HeaderMap),
    Ok,
}

/// UNAVAILABLE with the given extra headers (name, value); a name may repeat.
fn unavailable(extra: &[(&'static str, &str)]) -> Reply {
    let mut h = HeaderMap::new();
    h.insert("grpc-status", HeaderValue::from_static("14"));
    for (name, value) in extra {
        h.append(*name, HeaderValue::from_str(value).unwrap());
    }
    Reply::Fail(h)
}

/// UNAVAILABLE as tonic-types encodes a status whose details hold a RetryInfo of `delay`, plus the
/// extra headers.
fn with_retry_info(delay: Option<Duration>, extra: &[(&'static str, &str)]) -> Reply {
    let status = tonic::Status::with_error_details(
        tonic::Code::Unavailable,
        "busy",
        ErrorDetails::with_retry_info(delay),
    );
    let mut h = HeaderMap::new();
    status.add_header(&mut h).unwrap();
    assert!(h.contains_key("grpc-status-details-bin"));
    for (name, value) in extra {
        h.append(*name, HeaderValue::from_str(value).unwrap());
    }
    Reply::Fail(h)
}

/// When each attempt reached the scripted server (virtual time).
type Arrivals = Arc<Mutex<Vec<Instant>>>;

fn scripted(
    replies: Vec<Reply>,
    arrivals: Arrivals,
) -> impl tower::Service<
    Request<Full<Bytes>>,
    Response = Response<ReplayBody>,
    Error = BoxError,
    Future = impl Send,
> + Clone
       + Send
       + Sync
       + 'static {
    let replies = Arc::new(replies);
    tower::service_fn(move |_req: Request<Full<Bytes>>| {
        let n = {
            let mut a = arrivals.lock().unwrap();
            a.push(Instant::now());
            a.len()
        };
        let reply = replies[(n - 1).min(replies.len() - 1)].clone();
        async move {
            let mut r = Response::new(ReplayBody::empty());
            r.headers_mut()
                .insert("content-type", HeaderValue::from_static("application/grpc"));
            match reply {
                Reply::Fail(h) => r.headers_mut().extend(h),
                Reply::Ok => {
                    let mut trailers = HeaderMap::new();
                    trailers.insert("grpc-status", HeaderValue::from_static("0"));
                    *r.body_mut() = ReplayBody::new(Bytes::new(), Some(trailers));
                }
            }
            Ok::<_, BoxError>(r)
        }
    })
}

/// 5 attempts, no jitter (20, 40, 80 ms backoff), a budget that never refuses, a 30 s deadline.
fn layer() -> RetryLayer {
    RetryLayer::builder()
        .policy(
            RetryPolicy::builder()
                .max_attempts(5)
                .random_source(FixedRandom::new(0.5))
                .build()
                .unwrap(),
        )
        .budget(RetryBudget::builder().ratio(1.0).build().unwrap())
        .call_timeout(Duration::from_secs(30))
        .build()
        .unwrap()
}

fn read() -> Request<Full<Bytes>> {
    Request::post("http://shop/shop.v1.Shop/GetBook")
        .header("content-type", "application/grpc")
        .body(Full::new(Bytes::from_static(b"\0\0\0\0\0")))
        .unwrap()
}

/// Runs one call; returns its outcome and the waits between the attempts.
async fn run(replies: Vec<Reply>) -> (Result<(), Box<CallFailed>>, Vec<Duration>) {
    let arrivals = Arrivals::default();
    let svc = layer().layer(scripted(replies, arrivals.clone()));
    let outcome = match svc.oneshot(read()).await {
        Ok(_) => Ok(()),
        Err(e) => Err(e.downcast::<CallFailed>().expect("a CallFailed")),
    };
    let at = arrivals.lock().unwrap().clone();
    (outcome, at.windows(2).map(|w| w[1] - w[0]).collect())
}

#[tokio::test(start_paused = true)]
async fn r8_malformed_negative_or_repeated_pushback_means_do_not_retry() {
    let cases: [(&str, &[(&'static str, &str)]); 6] = [
        ("negative", &[("grpc-retry-pushback-ms", "-1")]),
        ("not a number", &[("grpc-retry-pushback-ms", "xxx")]),
        ("empty", &[("grpc-retry-pushback-ms", "")]),
        ("a fraction", &[("grpc-retry-pushback-ms", "1.5")]),
        (
            "repeated",
            &[
                ("grpc-retry-pushback-ms", "100"),
                ("grpc-retry-pushback-ms", "200"),
            ],
        ),
        ("two in one", &[("grpc-retry-pushback-ms", "100, 200")]),
    ];
    for (what, headers) in cases {
        let (outcome, waits) = run(vec![unavailable(headers), Reply::Ok]).await;
        let failed = outcome.expect_err(what);
        assert_eq!(
            (failed.reason(), failed.attempts()),
            (GiveUp::Pushback, 1),
            "{what}: one attempt, then the server's word"
        );
        assert!(waits.is_empty(), "{what}");
        assert_eq!(failed.code(), idem_core::Code::Unavailable, "{what}");
        assert!(
            failed.to_string().contains("the server asked not to retry"),
            "{what}: {failed}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn r8_valid_pushback_sets_the_next_delay_and_the_backoff_restarts() {
    let pushback = unavailable(&[("grpc-retry-pushback-ms", "1000")]);
    let plain = unavailable(&[]);
    let (outcome, waits) = run(vec![
        pushback,
        plain.clone(),
        plain.clone(),
        plain,
        Reply::Ok,
    ])
    .await;
    assert!(outcome.is_ok());
    // Exactly 1000 ms, then the backoff from the base delay again (it used to go on: 40, 80, 160).
    assert_eq!(waits, vec![ms(1000), ms(20), ms(40), ms(80)]);

    // Zero is valid but never an immediate retry (R2): the backoff applies.
    let (outcome, waits) = run(vec![
        unavailable(&[("grpc-retry-pushback-ms", "0")]),
        Reply::Ok,
    ])
    .await;
    assert!(outcome.is_ok());
    assert_eq!(waits, vec![ms(20)]);
}

#[tokio::test(start_paused = true)]
async fn r8_pushback_past_the_deadline_ends_the_call() {
    // 60 s asked, 30 s left: a wait that would overrun the deadline means stop (R3).
    let (outcome, waits) = run(vec![
        unavailable(&[("grpc-retry-pushback-ms", "60000")]),
        Reply::Ok,
    ])
    .await;
    let failed = outcome.unwrap_err();
    assert_eq!((failed.reason(), failed.attempts()), (GiveUp::Deadline, 1));
    assert!(waits.is_empty());
    assert_eq!(failed.status().retry_after(), Some(ms(60_000)));
}

#[tokio::test(start_paused = true)]
async fn t6_retry_info_in_status_details_counts_as_pushback() {
    let (outcome, waits) = run(vec![
        with_retry_info(Some(ms(750)), &[]),
        unavailable(&[]),
        Reply::Ok,
    ])
    .await;
    assert!(outcome.is_ok());
    // RetryInfo's 750 ms exactly, then the base delay.
    assert_eq!(waits, vec![ms(750), ms(20)]);

    // A RetryInfo without a delay is no pushback: the backoff applies.
    let (outcome, waits) = run(vec![with_retry_info(None, &[]), Reply::Ok]).await;
    assert!(outcome.is_ok());
    assert_eq!(waits, vec![ms(20)]);
}

#[tokio::test(start_paused = true)]
async fn t6_pushback_header_wins_over_retry_info() {
    let (outcome, waits) = run(vec![
        with_retry_info(Some(ms(750)), &[("grpc-retry-pushback-ms", "300")]),
        Reply::Ok,
    ])
    .await;
    assert!(outcome.is_ok());
    assert_eq!(waits, vec![ms(300)]);

    // A header that forbids the retry wins too.
    let (outcome, _) = run(vec![
        with_retry_info(Some(ms(750)), &[("grpc-retry-pushback-ms", "-1")]),
        Reply::Ok,
    ])
    .await;
    let failed = outcome.unwrap_err();
    assert_eq!((failed.reason(), failed.attempts()), (GiveUp::Pushback, 1));
}

#[tokio::test(start_paused = true)]
async fn t6_status_details_that_are_not_base64_are_ignored_not_a_panic() {
    // tonic's Status::from_header_map panics on this; the layer must not.
    let garbage = unavailable(&[("grpc-status-details-bin", "%%% not base64 %%%")]);
    let (outcome, waits) = run(vec![garbage.clone(), Reply::Ok]).await;
    assert!(outcome.is_ok());
    assert_eq!(waits, vec![ms(20)]);

    // Given up on, its tonic status is still the server's code, without the details.
    let (outcome, _) = run(vec![garbage]).await;
    let failed = outcome.unwrap_err();
    assert_eq!((failed.reason(), failed.attempts()), (GiveUp::Attempts, 5));
    let status = tonic::Status::from_error(failed);
    assert_eq!(status.code(), tonic::Code::Unavailable);
    assert!(status.details().is_empty());
}

#[tokio::test(start_paused = true)]
async fn t6_given_up_status_keeps_the_servers_retry_info() {
    // Budget refuses: the tonic status a caller sees still carries the server's RetryInfo.
    let layer = RetryLayer::builder()
        .budget(
            RetryBudget::builder()
                .ratio(0.0)
                .min_per_sec(0)
                .build()
                .unwrap(),
        )
        .build()
        .unwrap();
    let svc = layer.layer(scripted(
        vec![with_retry_info(Some(ms(750)), &[])],
        Arrivals::default(),
    ));
    let status = tonic::Status::from_error(svc.oneshot(read()).await.unwrap_err());
    assert_eq!(status.code(), tonic::Code::Unavailable);
    assert_eq!(status.message(), "busy");
    assert_eq!(
        status.get_details_retry_info().unwrap().retry_delay,
        Some(ms(750))
    );
    let failed = std::error::Error::source(&status)
        .and_then(|e| e.downcast_ref::<CallFailed>())
        .unwrap();
    assert_eq!((failed.reason(), failed.attempts()), (GiveUp::Budget, 1));
    assert_eq!(failed.status().retry_after(), Some(ms(750)));
}
