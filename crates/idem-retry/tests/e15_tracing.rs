//! E15: every retried call is a `tracing` span with its kind, attempts and outcome; each retry
//! and each give-up is a `DEBUG` event, a spent budget included (never a warning); the key is
//! never logged. A capturing subscriber (idem-test-support's `capture`) records them.

use std::time::Duration;

use idem_core::{Code, IdempotencyKey, Status};
use idem_retry::{Call, GiveUp, Retrier, RetryBudget, RetryPolicy, VirtualScheduler};
use idem_test_support::capture::capture;
use tracing::Level;

fn retrier(attempts: u32) -> Retrier<VirtualScheduler> {
    let policy = RetryPolicy::builder()
        .max_attempts(attempts)
        .build()
        .unwrap();
    Retrier::new(policy).with_scheduler(VirtualScheduler::instant())
}

/// E15: a call that succeeds on its third attempt is one `idem_retry.call` span (kind keyed,
/// 3 attempts, outcome ok) holding two `idem_retry.retry` events; the key appears nowhere.
#[tokio::test]
async fn e15_a_retried_call_is_a_span_with_its_attempts_and_outcome() {
    let (c, _guard) = capture();
    let key = IdempotencyKey::derive("order-1001", "CreateOrder");
    let call = Call::keyed(key.clone());
    let r = retrier(3)
        .call(&call, |attempt| async move {
            if attempt.number() < 3 {
                Err(Status::new(Code::Unavailable, "busy")
                    .with_retry_after(Duration::from_millis(7)))
            } else {
                Ok(attempt.number())
            }
        })
        .await;
    assert_eq!(r, Ok(3));
    let spans = c.spans_named("idem_retry.call");
    assert_eq!(spans.len(), 1);
    let span = &spans[0];
    assert_eq!(
        (span.target.as_str(), span.level),
        ("idem_retry", Level::DEBUG)
    );
    assert_eq!(span.field("kind"), Some("keyed"));
    assert_eq!(span.field("attempts"), Some("3"));
    assert_eq!(span.field("outcome"), Some("ok"));
    let retries = c.events_named("idem_retry.retry");
    assert_eq!(retries.len(), 2);
    for (e, attempt) in retries.iter().zip(["2", "3"]) {
        assert_eq!(e.level, Level::DEBUG);
        assert_eq!(e.parent, Some(span.id));
        assert_eq!(e.field("attempt"), Some(attempt));
        assert_eq!(e.field("delay_ms"), Some("7"));
        assert_eq!(e.field("pushback"), Some("true"));
        assert_eq!(e.field("code"), Some("UNAVAILABLE"));
    }
    assert!(c.events_named("idem_retry.give_up").is_empty());
    assert!(!c.all_text().contains(key.as_str()), "{}", c.all_text());
}

/// E15: a call given up on records why on its span and in a `DEBUG` give-up event, for every
/// reason; a spent retry budget is no warning.
#[tokio::test]
async fn e15_a_give_up_is_a_debug_event_even_for_a_spent_budget() {
    let (c, _guard) = capture();
    let down = |_| async { Err::<(), _>(Status::new(Code::Unavailable, "down")) };

    let err = retrier(2)
        .call_reporting(&Call::idempotent(), down)
        .await
        .unwrap_err();
    assert_eq!(err.reason(), GiveUp::Attempts);

    let empty = RetryBudget::builder()
        .ratio(0.0)
        .min_per_sec(0)
        .build()
        .unwrap();
    let err = retrier(3)
        .with_budget(empty)
        .call_reporting(&Call::idempotent(), down)
        .await
        .unwrap_err();
    assert_eq!(err.reason(), GiveUp::Budget);

    let err = retrier(3)
        .call_reporting(&Call::non_idempotent(), down)
        .await
        .unwrap_err();
    assert_eq!(err.reason(), GiveUp::NotRetryable);

    let spans = c.spans_named("idem_retry.call");
    let ends: Vec<_> = spans
        .iter()
        .map(|s| {
            (
                s.field("kind").unwrap(),
                s.field("attempts").unwrap(),
                s.field("outcome").unwrap(),
            )
        })
        .collect();
    assert_eq!(
        ends,
        [
            ("idempotent", "2", "attempts"),
            ("idempotent", "1", "budget"),
            ("neither", "1", "not_retryable"),
        ]
    );
    let give_ups = c.events_named("idem_retry.give_up");
    assert_eq!(give_ups.len(), 3);
    for (e, (span, reason)) in
        give_ups
            .iter()
            .zip(spans.iter().zip(["attempts", "budget", "not_retryable"]))
    {
        assert_eq!(e.level, Level::DEBUG);
        assert_eq!(e.parent, Some(span.id));
        assert_eq!(e.field("reason"), Some(reason));
        assert_eq!(e.field("code"), Some("UNAVAILABLE"));
    }
    assert!(
        c.events().iter().all(|e| e.level > Level::INFO),
        "nothing above DEBUG: {:#?}",
        c.events()
    );
}

/// E15: building a retrier describes its metrics (Prometheus `# HELP`) to the recorder.
#[test]
fn e15_every_retry_metric_is_described() {
    use metrics_util::debugging::DebuggingRecorder;
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::with_local_recorder(&recorder, || {
        let retrier = retrier(2);
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let down = |_| async { Err::<(), _>(Code::Unavailable) };
        let r = rt.block_on(retrier.call(&Call::idempotent(), down));
        assert_eq!(r, Err(Code::Unavailable));
    });
    let mut described = std::collections::HashSet::new();
    for (ck, _, desc, _) in snapshotter.snapshot().into_vec() {
        let name = ck.key().name().to_owned();
        assert!(desc.is_some(), "{name} is not described");
        described.insert(name);
    }
    use idem_retry::metrics::{ATTEMPTS, GIVE_UPS, RETRIES};
    for name in [ATTEMPTS, RETRIES, GIVE_UPS] {
        assert!(described.contains(name), "{name} was not reported");
    }
}
