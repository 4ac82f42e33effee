//! T3, R6, S2, S3, R3, R5: the middleware in front of a real reqwest client, against a scripted
//! HTTP/1 server on a loopback port that fails each way in turn: one key per call on every
//! attempt, what is retried and what is not, and what the caller gets back.

mod support;

use std::time::Duration;

use idem_core::{Code, Deadline, Reason};
use idem_reqwest::{
    AttemptTimedOut, CallFailed, CallReport, ConfigError, KeySource, MissingKey, RetryMiddleware,
    Writes,
};
use idem_retry::{Failure, GiveUp, RetryBudget};
use reqwest::Method;
use support::{builder, client, ms, sf, Reply, Server};

/// T3, R6: a write without a key gets one, made once, and every attempt carries it through a
/// lost answer, a 503, a 429 and an attempt that times out; the success carries the report.
#[tokio::test]
async fn t3_write_retried_through_every_failure_kind_with_one_key_r6() {
    let server = Server::start(vec![
        Reply::Drop,
        Reply::status(503),
        Reply::status(429),
        Reply::Slow(Duration::from_secs(5)),
        Reply::Status(201, vec![]),
    ])
    .await;
    let (b, _clock) = builder(6);
    let mw = b.attempt_timeout(ms(300)).build().unwrap();
    let response = client(mw.clone())
        .post(server.url("/v1/charges"))
        .body(r#"{"amount":1200}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201);
    let report = CallReport::of(&response).cloned().unwrap();
    assert_eq!(report.attempts, 5);
    assert_eq!(report.gave_up, None);
    assert_eq!(report.key_source, Some(KeySource::Random));
    let key = report.key.unwrap();

    let seen = server.seen();
    assert_eq!(seen.len(), 5);
    for (i, s) in seen.iter().enumerate() {
        assert_eq!(s.key(), Some(sf(&key)), "attempt {} carries the key", i + 1);
        assert_eq!(
            (s.method.as_str(), s.path.as_str()),
            ("POST", "/v1/charges")
        );
        assert_eq!(&s.body[..], br#"{"amount":1200}"#, "attempt {}", i + 1);
    }
    let stats = mw.stats();
    assert_eq!(stats.keys_generated, 1);
    assert_eq!(stats.keys_derived, 0);
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

/// T3: a key the caller set is kept, as a bare token or as an sf-string, and re-sent as an
/// sf-string on every attempt; no key is made.
#[tokio::test]
async fn t3_the_callers_key_is_kept() {
    for given in ["order-1001-charge", "\"order-1001-charge\""] {
        let server = Server::start(vec![Reply::status(503), Reply::ok()]).await;
        let (b, _) = builder(3);
        let mw = b.build().unwrap();
        let response = client(mw.clone())
            .post(server.url("/v1/charges"))
            .header("Idempotency-Key", given)
            .send()
            .await
            .unwrap();
        let report = CallReport::of(&response).cloned().unwrap();
        assert_eq!(report.key.as_ref().unwrap().as_str(), "order-1001-charge");
        assert_eq!(report.key_source, Some(KeySource::Caller));
        assert_eq!(
            server.keys(),
            vec![Some("\"order-1001-charge\"".to_owned()); 2],
            "{given}"
        );
        assert_eq!((mw.stats().keys_generated, mw.stats().keys_derived), (0, 0));
    }
}

/// S2: a write without a key under `MissingKey::SendOnce` is sent once, without a key, and never
/// retried, through a 503 or a lost answer (S3: it may have run).
#[tokio::test]
async fn s2_unkeyed_write_under_send_once_is_sent_once() {
    let server = Server::start(vec![Reply::status(503)]).await;
    let (b, clock) = builder(3);
    let c = client(b.missing_key(MissingKey::SendOnce).build().unwrap());
    let response = c.post(server.url("/v1/charges")).send().await.unwrap();
    assert_eq!(response.status(), 503);
    let report = CallReport::of(&response).cloned().unwrap();
    assert_eq!(
        (report.attempts, report.key, report.gave_up),
        (1, None, Some(GiveUp::NotRetryable))
    );
    assert_eq!(server.keys(), vec![None]);
    assert!(clock.requested().is_empty());

    let lost = Server::start(vec![Reply::Drop, Reply::ok()]).await;
    let err = c.post(lost.url("/v1/charges")).send().await.unwrap_err();
    let failed = CallFailed::of(&err).unwrap();
    assert_eq!(
        (failed.reason(), failed.attempts()),
        (GiveUp::NotRetryable, 1)
    );
    assert_eq!(failed.code(), Code::Unavailable);
    assert_eq!(failed.status().reason(), Some(&Reason::UNKNOWN_OUTCOME));
    assert!(failed.reqwest_error().is_some());
    assert_eq!(lost.seen().len(), 1);
}

/// S2: a write whose key the server would refuse is left as it is and sent once; the middleware
/// never replaces the caller's key with one of its own.
#[tokio::test]
async fn s2_write_with_a_malformed_key_is_sent_once_unchanged() {
    for bad in ["short", "\"unterminated-key-0001", "has space in it"] {
        let server = Server::start(vec![Reply::status(503)]).await;
        let (b, _) = builder(3);
        let mw = b.build().unwrap();
        let response = client(mw.clone())
            .post(server.url("/v1/charges"))
            .header("Idempotency-Key", bad)
            .send()
            .await
            .unwrap();
        let report = CallReport::of(&response).cloned().unwrap();
        assert_eq!((report.attempts, report.key), (1, None), "{bad}");
        assert_eq!(server.keys(), vec![Some(bad.to_owned())]);
        assert_eq!(mw.stats().keys_generated, 0);
    }
    // Two key headers: refused by the server's rules too, so sent once.
    let server = Server::start(vec![Reply::status(503)]).await;
    let (b, _) = builder(3);
    let response = client(b.build().unwrap())
        .post(server.url("/v1/charges"))
        .header("Idempotency-Key", "order-1001-charge")
        .header("Idempotency-Key", "order-1001-again")
        .send()
        .await
        .unwrap();
    assert_eq!(CallReport::of(&response).unwrap().attempts, 1);
    assert_eq!(server.seen().len(), 1);
}

/// T3: a read (GET) gets no key and is retried freely, through a lost answer too.
#[tokio::test]
async fn t3_get_is_retried_freely_without_a_key() {
    let server = Server::start(vec![Reply::status(503), Reply::Drop, Reply::ok()]).await;
    let (b, clock) = builder(3);
    let mw = b.missing_key(MissingKey::SendOnce).build().unwrap();
    let response = client(mw.clone())
        .get(server.url("/v1/charges/ch_42"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let report = CallReport::of(&response).cloned().unwrap();
    assert_eq!((report.attempts, report.key), (3, None));
    assert_eq!(server.keys(), vec![None, None, None]);
    assert_eq!(clock.requested(), vec![ms(20), ms(40)]);
    assert_eq!(response.text().await.unwrap(), "done");
}

/// T3: which requests are writes is configurable; PUT is a read by default.
#[tokio::test]
async fn t3_writes_are_configurable() {
    let server = Server::start(vec![Reply::ok()]).await;
    let (b, _) = builder(3);
    let c = client(b.build().unwrap());
    c.put(server.url("/v1/carts/7")).send().await.unwrap();
    let (b, _) = builder(3);
    let c = client(
        b.writes(Writes::methods([Method::POST, Method::PUT]))
            .build()
            .unwrap(),
    );
    c.put(server.url("/v1/carts/7")).send().await.unwrap();
    let keys = server.keys();
    assert_eq!(keys[0], None);
    assert!(keys[1].is_some());
}

/// T3: a permanent failure (422, a key reused with another payload) is answered at once, and the
/// caller reads the server's problem document from the response it gets back.
#[tokio::test]
async fn t3_permanent_status_is_returned_at_once_with_its_body() {
    let server = Server::start(vec![Reply::status(422)]).await;
    let (b, clock) = builder(3);
    let response = client(b.build().unwrap())
        .post(server.url("/v1/charges"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 422);
    let report = CallReport::of(&response).cloned().unwrap();
    assert_eq!(
        (report.attempts, report.gave_up),
        (1, Some(GiveUp::NotRetryable))
    );
    assert_eq!(
        response.headers()["content-type"],
        "application/problem+json"
    );
    assert!(response.text().await.unwrap().contains("\"status\":422"));
    assert!(clock.requested().is_empty());
}

/// T3: 409 is a conflict and not retried, unless the server says the same key is still running
/// (`idem-reason: REQUEST_IN_FLIGHT`): then the retry with the same key gets the stored answer.
#[tokio::test]
async fn t3_in_flight_conflict_is_retried_plain_conflict_is_not() {
    let server = Server::start(vec![
        Reply::with(409, "idem-reason", "REQUEST_IN_FLIGHT"),
        Reply::ok(),
    ])
    .await;
    let (b, _) = builder(3);
    let c = client(b.build().unwrap());
    let response = c.post(server.url("/v1/charges")).send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(CallReport::of(&response).unwrap().attempts, 2);
    let keys = server.keys();
    assert_eq!(keys[0], keys[1]);

    let conflict = Server::start(vec![Reply::status(409)]).await;
    let response = c.post(conflict.url("/v1/charges")).send().await.unwrap();
    assert_eq!(response.status(), 409);
    assert_eq!(CallReport::of(&response).unwrap().attempts, 1);
}

/// T3: attempts that all fail give up on the last one, which the caller gets back, with why.
#[tokio::test]
async fn t3_last_failed_response_is_returned_with_the_give_up() {
    let server = Server::start(vec![Reply::status(503)]).await;
    let (b, clock) = builder(3);
    let response = client(b.build().unwrap())
        .post(server.url("/v1/charges"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 503);
    let report = CallReport::of(&response).cloned().unwrap();
    assert_eq!(
        (report.attempts, report.gave_up),
        (3, Some(GiveUp::Attempts))
    );
    let key = report.key.unwrap();
    assert_eq!(server.keys(), vec![Some(sf(&key)); 3]);
    assert_eq!(clock.requested(), vec![ms(20), ms(40)]);
}

/// T3: a body that cannot be cloned (a stream) is sent once, with its key, and not retried.
#[tokio::test]
async fn t3_stream_body_is_sent_once() {
    let server = Server::start(vec![Reply::status(503), Reply::ok()]).await;
    let (b, _) = builder(3);
    let stream = reqwest::Body::wrap(http_body_util::Full::new(bytes::Bytes::from_static(
        b"streamed",
    )));
    let response = client(b.build().unwrap())
        .post(server.url("/v1/uploads"))
        .body(stream)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 503);
    let report = CallReport::of(&response).cloned().unwrap();
    assert_eq!(
        (report.attempts, report.gave_up),
        (1, Some(GiveUp::NotRetryable))
    );
    let seen = server.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(&seen[0].body[..], b"streamed");
    assert_eq!(seen[0].key(), Some(sf(report.key.as_ref().unwrap())));
}

/// R5: a spent budget stops the retries: the first failure is the answer.
#[tokio::test]
async fn r5_spent_budget_means_no_retry() {
    let server = Server::start(vec![Reply::status(503), Reply::ok()]).await;
    let (b, clock) = builder(3);
    // No share and no floor: this budget allows no retry at all. Shared by two middlewares.
    let budget = RetryBudget::builder()
        .ratio(0.0)
        .min_per_sec(0)
        .build()
        .unwrap();
    let first = client(b.budget(budget.clone()).build().unwrap());
    let response = first.post(server.url("/v1/charges")).send().await.unwrap();
    assert_eq!(response.status(), 503);
    let report = CallReport::of(&response).cloned().unwrap();
    assert_eq!((report.attempts, report.gave_up), (1, Some(GiveUp::Budget)));
    assert!(clock.requested().is_empty());

    let (b, _) = builder(3);
    let second = client(b.budget(budget).build().unwrap());
    let response = second
        .get(server.url("/v1/charges/ch_1"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200); // the server's second answer: no retry was made
    assert_eq!(server.seen().len(), 2);
}

/// R3: the deadline stops retries: a pushback that would run past it ends the call, whether the
/// deadline is the middleware's call timeout or a `Deadline` the caller passed in.
#[tokio::test]
async fn r3_deadline_stops_retries() {
    let server = Server::start(vec![Reply::with(503, "retry-after", "1"), Reply::ok()]).await;
    let (b, clock) = builder(3);
    let c = client(b.call_timeout(ms(500)).build().unwrap());
    let response = c.post(server.url("/v1/charges")).send().await.unwrap();
    assert_eq!(response.status(), 503);
    let report = CallReport::of(&response).cloned().unwrap();
    assert_eq!(
        (report.attempts, report.gave_up),
        (1, Some(GiveUp::Deadline))
    );
    assert!(clock.requested().is_empty());

    // The caller's own deadline, in the request's extensions, wins over the call timeout.
    let server = Server::start(vec![Reply::with(503, "retry-after", "1"), Reply::ok()]).await;
    let (b, clock) = builder(3);
    let c = client(b.call_timeout(Duration::from_secs(60)).build().unwrap());
    let response = c
        .post(server.url("/v1/charges"))
        .with_extension(Deadline::after(ms(500)))
        .send()
        .await
        .unwrap();
    let report = CallReport::of(&response).cloned().unwrap();
    assert_eq!(
        (report.attempts, report.gave_up),
        (1, Some(GiveUp::Deadline))
    );
    assert!(clock.requested().is_empty());
    assert_eq!(server.seen().len(), 1);
}

/// R3: an attempt that outlives the call's deadline is cut off at it; no time is left for
/// another, and the error says so.
#[tokio::test]
async fn r3_slow_answer_is_cut_off_at_the_deadline() {
    let server = Server::start(vec![Reply::Slow(Duration::from_secs(30))]).await;
    let (b, _) = builder(3);
    let c = client(b.call_timeout(ms(300)).build().unwrap());
    let err = c.post(server.url("/v1/charges")).send().await.unwrap_err();
    let failed = CallFailed::of(&err).unwrap();
    assert_eq!((failed.reason(), failed.attempts()), (GiveUp::Deadline, 1));
    assert_eq!(failed.code(), Code::DeadlineExceeded);
    assert!(failed.key().is_some());
    let source = std::error::Error::source(failed).unwrap();
    assert!(
        source.downcast_ref::<AttemptTimedOut>().is_some(),
        "{source}"
    );
    assert!(failed.to_string().starts_with("gave up after 1 attempt ("));
}

/// T3: the middleware's builder checks what it takes: a zero call or attempt timeout leaves no
/// time for any attempt and is refused, naming the rule; the defaults and real timeouts pass.
#[test]
fn t3_middleware_refuses_zero_timeouts() {
    assert_eq!(
        RetryMiddleware::builder()
            .call_timeout(Duration::ZERO)
            .build()
            .unwrap_err(),
        ConfigError::Invalid("call_timeout must be greater than zero (no attempt could be made)")
    );
    let e = RetryMiddleware::builder()
        .attempt_timeout(Duration::ZERO)
        .build()
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "invalid middleware setting: attempt_timeout must be greater than zero (no attempt could get an answer)"
    );
    assert!(RetryMiddleware::builder().build().is_ok());
    assert!(RetryMiddleware::builder()
        .call_timeout(ms(1))
        .attempt_timeout(Duration::from_secs(60))
        .build()
        .is_ok());
}
