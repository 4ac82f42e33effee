//! R8: server pushback as gRPC A6 says. A valid pushback sets the next wait exactly and the
//! backoff after it starts again at the base delay; a pushback that forbids the retry (negative,
//! malformed or repeated, as the transport layer reads it) ends the call with `GiveUp::Pushback`.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use idem_core::{Code, Status};
use idem_retry::{
    classify, Call, Classify, Decision, FixedRandom, GiveUp, NotRetryable, Retrier, RetryPolicy,
    VirtualScheduler,
};
use idem_test_support::time::ms;

fn setup(max_attempts: u32) -> (Retrier<VirtualScheduler>, VirtualScheduler) {
    let clock = VirtualScheduler::instant();
    let policy = RetryPolicy::builder()
        .max_attempts(max_attempts)
        .random_source(FixedRandom::new(0.5)) // no jitter: 20, 40, 80, ... ms
        .build()
        .unwrap();
    (Retrier::new(policy).with_scheduler(clock.clone()), clock)
}

/// Fails every attempt with UNAVAILABLE, with the pushback `hints[n - 1]` on attempt `n`.
async fn fail_with(retrier: &Retrier<VirtualScheduler>, hints: &[Option<Duration>]) {
    let r: Result<(), Status> = retrier
        .call(&Call::idempotent(), |a| {
            let hint = hints.get(a.number() as usize - 1).copied().flatten();
            async move {
                let s = Status::new(Code::Unavailable, "busy");
                Err(match hint {
                    Some(d) => s.with_retry_after(d),
                    None => s,
                })
            }
        })
        .await;
    assert!(r.is_err());
}

#[tokio::test]
async fn r8_backoff_restarts_at_the_base_delay_after_a_pushback() {
    // A 1000 ms pushback, then plain failures: 20 ms, 40 ms, 80 ms again (was 40, 80, 160).
    let (retrier, clock) = setup(5);
    fail_with(&retrier, &[Some(ms(1000))]).await;
    assert_eq!(clock.requested(), vec![ms(1000), ms(20), ms(40), ms(80)]);

    // Backoff, backoff, pushback, backoff: the count restarts at the pushback.
    let (retrier, clock) = setup(5);
    fail_with(&retrier, &[None, None, Some(ms(300))]).await;
    assert_eq!(clock.requested(), vec![ms(20), ms(40), ms(300), ms(20)]);
}

#[tokio::test]
async fn r8_valid_pushback_sets_the_next_delay_exactly() {
    // With the default (random) jitter and a 1 s cap: the pushback is neither jittered nor capped.
    let clock = VirtualScheduler::instant();
    let retrier = Retrier::new(RetryPolicy::builder().max_attempts(3).build().unwrap())
        .with_scheduler(clock.clone());
    let r: Result<(), Status> = retrier
        .call(&Call::idempotent(), |_| async {
            Err(Status::new(Code::ResourceExhausted, "slow down").with_retry_after(ms(1234)))
        })
        .await;
    assert!(r.is_err());
    assert_eq!(clock.requested(), vec![ms(1234), ms(1234)]);
}

/// An error whose server forbade the retry, as a gRPC `grpc-retry-pushback-ms: -1` reads.
#[derive(Debug)]
struct Forbidden(Code);

impl Classify for Forbidden {
    fn code(&self) -> Code {
        self.0
    }
    fn forbids_retry(&self) -> bool {
        true
    }
}

#[test]
fn r8_forbidden_retry_classifies_as_never_pushback() {
    let read = Call::idempotent();
    for code in [
        Code::Unavailable,
        Code::ResourceExhausted,
        Code::DeadlineExceeded,
        Code::Aborted,
    ] {
        assert_eq!(
            classify(&Forbidden(code), &read),
            Decision::Never(NotRetryable::Pushback),
            "{code:?}"
        );
    }
    // A code that is never retried, or a call that may not be, keeps its own reason.
    assert_eq!(
        classify(&Forbidden(Code::InvalidArgument), &read),
        Decision::Never(NotRetryable::Permanent)
    );
    assert_eq!(
        classify(&Forbidden(Code::Unavailable), &Call::non_idempotent()),
        Decision::Never(NotRetryable::Unsafe)
    );
    assert_eq!(
        Decision::Never(NotRetryable::Pushback).as_str(),
        "never:pushback"
    );
}

#[tokio::test]
async fn r8_forbidden_retry_ends_the_call_with_give_up_pushback() {
    let (retrier, clock) = setup(5);
    let runs = AtomicU32::new(0);
    let err = retrier
        .call_reporting(&Call::idempotent(), |_| {
            runs.fetch_add(1, Ordering::SeqCst);
            async { Err::<(), _>(Forbidden(Code::Unavailable)) }
        })
        .await
        .unwrap_err();
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert!(clock.requested().is_empty(), "no wait, no retry");
    assert_eq!((err.reason(), err.attempts()), (GiveUp::Pushback, 1));
    let stats = retrier.stats();
    assert_eq!(stats.give_ups(GiveUp::Pushback), 1);
    assert_eq!(stats.pushback, 1);
    assert_eq!(stats.not_retryable, 0);
}
