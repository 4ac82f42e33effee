//! R3: before each retry, the remaining deadline must cover the wait plus a minimum attempt
//! (50 ms by default); a wait that would overrun the deadline ends the call with the last error.

use std::sync::Mutex;
use std::time::Duration;

use idem_core::{Code, Deadline, Status};
use idem_retry::{Call, FixedRandom, GiveUp, Retrier, RetryPolicy};
use idem_test_support::time::ms;
use tokio::time::Instant;

/// Runs a call that always fails with `error` after `attempt_time`, under a 100 ms deadline.
/// Returns (start offset, remaining deadline) of each attempt, the call's end offset and the
/// retrier.
async fn run(
    policy: RetryPolicy,
    attempt_time: Duration,
    error: Status,
) -> (Vec<(Duration, Duration)>, Duration, Retrier) {
    let start = Instant::now();
    let deadline = Deadline::after(ms(100));
    let retrier = Retrier::new(policy);
    let starts = Mutex::new(Vec::new());
    let r: Result<(), Status> = retrier
        .call(&Call::idempotent().with_deadline(deadline), |attempt| {
            let remaining = attempt.deadline().unwrap().remaining();
            starts.lock().unwrap().push((start.elapsed(), remaining));
            let error = error.clone();
            async move {
                tokio::time::sleep(attempt_time).await;
                Err(error)
            }
        })
        .await;
    assert_eq!(r, Err(error));
    let end = start.elapsed();
    assert!(
        end <= ms(100),
        "the call ended at {end:?}, past its deadline"
    );
    let starts = starts.into_inner().unwrap();
    for (at, remaining) in &starts {
        assert!(
            *remaining >= ms(50),
            "an attempt started at {at:?} with only {remaining:?} left"
        );
    }
    (starts, end, retrier)
}

fn policy(multiplier: f64) -> RetryPolicy {
    RetryPolicy::builder()
        .max_attempts(10)
        .multiplier(multiplier)
        .random_source(FixedRandom::new(0.5))
        .build()
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn r3_deadline_never_starts_attempt_with_less_than_50ms_left() {
    let unavailable = Status::new(Code::Unavailable, "down");

    // x2 backoff, 10 ms attempts: fail at 10, wait 20 (90 >= 20 + 50), attempt at 30, fail at 40;
    // the next wait (40 ms) would leave 20 ms < 50: stop at 40 with the last error, no wait.
    let (starts, end, retrier) = run(policy(2.0), ms(10), unavailable.clone()).await;
    assert_eq!(starts, vec![(ms(0), ms(100)), (ms(30), ms(70))]);
    assert_eq!(end, ms(40));
    let stats = retrier.stats();
    assert_eq!((stats.attempts, stats.retries, stats.deadline), (2, 1, 1));
    assert_eq!(stats.give_ups(GiveUp::Deadline), 1);

    // Constant 20 ms backoff, instant failures: attempts at 0, 20, 40; at 40 only 60 ms is left,
    // less than 20 + 50, so the call ends at 40.
    let (starts, end, retrier) = run(policy(1.0), Duration::ZERO, unavailable.clone()).await;
    assert_eq!(
        starts,
        vec![(ms(0), ms(100)), (ms(20), ms(80)), (ms(40), ms(60))]
    );
    assert_eq!(end, ms(40));
    assert_eq!(retrier.stats().deadline, 1);

    // A server pushback longer than the deadline: no wait at all, the call ends at once.
    let pushback = Status::new(Code::ResourceExhausted, "busy").with_retry_after(ms(200));
    let (starts, end, retrier) = run(policy(2.0), Duration::ZERO, pushback).await;
    assert_eq!(starts, vec![(ms(0), ms(100))]);
    assert_eq!(end, ms(0));
    assert_eq!(retrier.stats().deadline, 1);
}

#[tokio::test(start_paused = true)]
async fn r3_deadline_exceeded_is_retried_only_within_a_deadline() {
    let timed_out = Status::new(Code::DeadlineExceeded, "upstream timeout");

    // With budget left: retried like any retryable failure (20 ms, then 40 ms would overrun).
    let (starts, end, _) = run(policy(2.0), ms(10), timed_out.clone()).await;
    assert_eq!(starts.len(), 2);
    assert_eq!(end, ms(40));

    // Without an overall deadline there is no budget to check: not retried.
    let retrier = Retrier::new(policy(2.0));
    let r: Result<(), Status> = retrier
        .call(&Call::idempotent(), |_| {
            let e = timed_out.clone();
            async move { Err(e) }
        })
        .await;
    assert_eq!(r, Err(timed_out));
    let stats = retrier.stats();
    assert_eq!((stats.attempts, stats.deadline), (1, 1));
}
