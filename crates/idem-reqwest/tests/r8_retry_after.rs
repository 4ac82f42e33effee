//! R8, R2: a server's `Retry-After` on a failed answer is obeyed as pushback, in both of its
//! forms, exactly (no jitter, no cap), and the backoff after it starts again at the base delay;
//! a value that is neither form is no pushback. The waits go through a virtual clock, which
//! records each one and makes none, so nothing here depends on real time passing.

mod support;

use std::time::{Duration, SystemTime};

use idem_reqwest::CallReport;
use idem_retry::GiveUp;
use support::{builder, client, ms, secs, Reply, Server};

/// R8: `Retry-After: N` sets the next wait to exactly N seconds; the backoff after it is the
/// base delay again (20 ms), then doubles.
#[tokio::test]
async fn r8_retry_after_seconds_sets_the_next_wait_exactly() {
    let server = Server::start(vec![
        Reply::with(503, "retry-after", "3"),
        Reply::status(503),
        Reply::status(503),
        Reply::ok(),
    ])
    .await;
    let (b, clock) = builder(4);
    let response = client(b.build().unwrap())
        .post(server.url("/v1/charges"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(CallReport::of(&response).unwrap().attempts, 4);
    assert_eq!(clock.requested(), vec![secs(3), ms(20), ms(40)]);
    let keys = server.keys();
    assert!(keys.iter().all(|k| k.is_some() && *k == keys[0]));
}

/// R2, R8: a 429 with an HTTP-date waits until that date, read against the system clock.
#[tokio::test]
async fn r8_retry_after_http_date_waits_until_then() {
    let at = SystemTime::now() + Duration::from_secs(30);
    let server = Server::start(vec![
        Reply::with(429, "retry-after", httpdate::fmt_http_date(at)),
        Reply::ok(),
    ])
    .await;
    let (b, clock) = builder(3);
    let response = client(b.call_timeout(secs(60)).build().unwrap())
        .post(server.url("/v1/charges"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let waits = clock.requested();
    assert_eq!(waits.len(), 1);
    // The date has whole seconds and some time passed since it was made: a wait of 28 s to 30 s,
    // far from the 20 ms the backoff would have chosen.
    assert!(
        (secs(28)..=secs(30)).contains(&waits[0]),
        "waited {:?}",
        waits[0]
    );
}

/// R8: a date in the past, a zero, or a value that is neither form is no pushback: the policy's
/// backoff applies, never a retry at once.
#[tokio::test]
async fn r8_retry_after_zero_past_or_malformed_falls_back_to_backoff() {
    for value in [
        "0".to_owned(),
        "-1".to_owned(),
        "soon".to_owned(),
        "1.5".to_owned(),
        httpdate::fmt_http_date(SystemTime::now() - Duration::from_secs(60)),
    ] {
        let server =
            Server::start(vec![Reply::with(503, "retry-after", &*value), Reply::ok()]).await;
        let (b, clock) = builder(3);
        let response = client(b.build().unwrap())
            .get(server.url("/v1/charges/ch_42"))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "{value}");
        assert_eq!(clock.requested(), vec![ms(20)], "{value}");
    }
}

/// R8: a pushback longer than the time left ends the call rather than waiting past the deadline.
#[tokio::test]
async fn r8_retry_after_past_the_deadline_ends_the_call() {
    let server = Server::start(vec![Reply::with(429, "retry-after", "120"), Reply::ok()]).await;
    let (b, clock) = builder(3);
    let response = client(b.call_timeout(secs(10)).build().unwrap())
        .post(server.url("/v1/charges"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 429);
    let report = CallReport::of(&response).cloned().unwrap();
    assert_eq!(
        (report.attempts, report.gave_up),
        (1, Some(GiveUp::Deadline))
    );
    assert!(clock.requested().is_empty());
}

/// R2: a pushback on a write the middleware must not retry (no key, send once) changes nothing.
#[tokio::test]
async fn r8_retry_after_never_makes_an_unkeyed_write_retryable() {
    let server = Server::start(vec![Reply::with(503, "retry-after", "1"), Reply::ok()]).await;
    let (b, clock) = builder(3);
    let response = client(
        b.missing_key(idem_reqwest::MissingKey::SendOnce)
            .build()
            .unwrap(),
    )
    .post(server.url("/v1/charges"))
    .send()
    .await
    .unwrap();
    assert_eq!(response.status(), 503);
    assert_eq!(
        CallReport::of(&response).unwrap().gave_up,
        Some(GiveUp::NotRetryable)
    );
    assert!(clock.requested().is_empty());
    assert_eq!(server.seen().len(), 1);
}
