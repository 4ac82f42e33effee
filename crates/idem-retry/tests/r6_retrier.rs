//! R6 (same key, attempt numbers), R2 pushback and refresh, S2/S3 through the retrier.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use idem_core::Deadline;
use idem_core::{Code, IdempotencyKey, Reason, Status};
use idem_retry::{
    Call, FixedRandom, GiveUp, Retrier, RetryBudget, RetryError, RetryPolicy, VirtualScheduler,
};
use idem_test_support::time::ms;

fn retrier(max_attempts: u32) -> (Retrier<VirtualScheduler>, VirtualScheduler) {
    let clock = VirtualScheduler::instant();
    let policy = RetryPolicy::builder()
        .max_attempts(max_attempts)
        .random_source(FixedRandom::new(0.5))
        .build()
        .unwrap();
    (Retrier::new(policy).with_scheduler(clock.clone()), clock)
}

fn unavailable() -> Status {
    Status::new(Code::Unavailable, "down")
}

#[tokio::test]
async fn r6_same_key_every_attempt() {
    let (retrier, _) = retrier(4);
    let key = IdempotencyKey::generate();
    let seen = Mutex::new(Vec::new());
    let r: Result<(), Status> = retrier
        .call(&Call::keyed(key.clone()), |a| {
            seen.lock().unwrap().push(a.key().cloned());
            async { Err(unavailable()) }
        })
        .await;
    assert_eq!(r, Err(unavailable()));
    assert_eq!(seen.into_inner().unwrap(), vec![Some(key); 4]);
}

#[tokio::test]
async fn r6_attempt_counter_increments() {
    let (retrier, _) = retrier(3);
    let seen = Mutex::new(Vec::new());
    let r = retrier
        .call(&Call::idempotent(), |a| {
            seen.lock()
                .unwrap()
                .push((a.number(), a.previous_attempts(), a.is_retry()));
            async move {
                if a.number() < 3 {
                    Err(unavailable())
                } else {
                    Ok(a.number())
                }
            }
        })
        .await;
    assert_eq!(r, Ok(3));
    assert_eq!(
        seen.into_inner().unwrap(),
        vec![(1, 0, false), (2, 1, true), (3, 2, true)]
    );
    let stats = retrier.stats();
    assert_eq!((stats.calls, stats.attempts, stats.retries), (1, 3, 2));
}

#[tokio::test]
async fn r2_pushback_overrides_backoff() {
    let (retrier, clock) = retrier(4);
    let hints = [Some(ms(300)), Some(ms(7)), None, None];
    let r: Result<(), Status> = retrier
        .call(&Call::idempotent(), |a| {
            let hint = hints[a.number() as usize - 1];
            async move {
                let s = Status::new(Code::ResourceExhausted, "busy");
                Err(match hint {
                    Some(d) => s.with_retry_after(d),
                    None => s,
                })
            }
        })
        .await;
    assert!(r.is_err());
    // Server hints replace the 20 ms / 40 ms backoff; without a hint the backoff applies, and it
    // starts again at the base delay after a pushback (gRPC A6, R8): 20 ms, not 80 ms.
    assert_eq!(clock.requested(), vec![ms(300), ms(7), ms(20)]);
}

#[tokio::test]
async fn s2_non_idempotent_call_without_key_is_never_retried() {
    let (retrier, clock) = retrier(3);
    let runs = AtomicU32::new(0);
    let r: Result<(), Status> = retrier
        .call(&Call::non_idempotent(), |_| {
            runs.fetch_add(1, Ordering::SeqCst);
            async { Err(unavailable()) }
        })
        .await;
    assert_eq!(r, Err(unavailable()));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert!(clock.requested().is_empty());
    assert_eq!(retrier.stats().give_ups(GiveUp::NotRetryable), 1);
}

#[tokio::test]
async fn s3_unknown_outcome_retried_with_the_same_key() {
    let (retrier, _) = retrier(3);
    let key = IdempotencyKey::derive("order-9", "CreateOrder");
    let lost = Status::new(Code::Unknown, "connection lost after send")
        .with_reason(Reason::UNKNOWN_OUTCOME);
    let keys = Mutex::new(Vec::new());
    let r = retrier
        .call(&Call::keyed(key.clone()), |a| {
            keys.lock().unwrap().push(a.key().cloned());
            let lost = lost.clone();
            async move {
                if a.number() == 1 {
                    Err(lost)
                } else {
                    Ok("stored result")
                }
            }
        })
        .await;
    assert_eq!(r, Ok("stored result"));
    assert_eq!(
        keys.into_inner().unwrap(),
        vec![Some(key.clone()), Some(key)]
    );

    // The same failure on a call without a key stops at once.
    let r: Result<(), Status> = retrier
        .call(&Call::non_idempotent(), |_| {
            let lost = lost.clone();
            async move { Err(lost) }
        })
        .await;
    assert_eq!(r.unwrap_err().reason(), Some(&Reason::UNKNOWN_OUTCOME));
}

#[tokio::test]
async fn r2_aborted_only_through_refresh_step() {
    let conflict =
        || Status::new(Code::Aborted, "version moved").with_reason(Reason::STOCK_CONFLICT);
    let (retrier, _) = retrier(3);
    let call = Call::keyed(IdempotencyKey::derive("deduct-1", "DeductStock"));

    // Without a refresh step: never resent unchanged.
    let runs = AtomicU32::new(0);
    let r: Result<(), Status> = retrier
        .call(&call, |_| {
            runs.fetch_add(1, Ordering::SeqCst);
            async { Err(conflict()) }
        })
        .await;
    assert_eq!(r, Err(conflict()));
    assert_eq!(runs.load(Ordering::SeqCst), 1);

    // With one: each retry sends the refreshed version.
    let server_version = Arc::new(AtomicU32::new(5));
    let client_version = Arc::new(AtomicU32::new(3));
    let sent = Mutex::new(Vec::new());
    let refreshes = AtomicU32::new(0);
    let r = retrier
        .call_with_refresh(
            &call,
            |_| {
                let v = client_version.load(Ordering::SeqCst);
                sent.lock().unwrap().push(v);
                let server = server_version.clone();
                async move {
                    if server.load(Ordering::SeqCst) == v {
                        Ok(v)
                    } else {
                        Err(conflict())
                    }
                }
            },
            |_e: &Status| {
                refreshes.fetch_add(1, Ordering::SeqCst);
                let (server, client) = (server_version.clone(), client_version.clone());
                async move {
                    client.store(server.load(Ordering::SeqCst), Ordering::SeqCst);
                    Ok(())
                }
            },
        )
        .await;
    assert_eq!(r, Ok(5));
    assert_eq!(sent.into_inner().unwrap(), vec![3, 5]);
    assert_eq!(refreshes.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn r6_call_reporting_carries_the_give_up_reason_and_attempt_count() {
    let fail = |_| async { Err::<(), _>(unavailable()) };

    // Every attempt failed.
    let (r3, _) = retrier(3);
    let err = r3.call_reporting(&Call::idempotent(), fail).await;
    assert_eq!(
        err,
        Err(RetryError::new(GiveUp::Attempts, 3, unavailable()))
    );
    let err = err.unwrap_err();
    assert_eq!(
        err.to_string(),
        "gave up after 3 attempts (no attempts were left): UNAVAILABLE: down"
    );
    assert_eq!(err.into_error(), unavailable());

    // Not retryable: a write without a key (S2), after its one attempt.
    let err = r3
        .call_reporting(&Call::non_idempotent(), fail)
        .await
        .unwrap_err();
    assert_eq!((err.reason(), err.attempts()), (GiveUp::NotRetryable, 1));

    // The deadline leaves no room for the second attempt's wait plus a minimum attempt.
    let call = Call::idempotent().with_deadline(Deadline::after(ms(60)));
    let err = r3.call_reporting(&call, fail).await.unwrap_err();
    assert_eq!((err.reason(), err.attempts()), (GiveUp::Deadline, 1));

    // The budget refuses every retry.
    let (r3, _) = retrier(3);
    let spent = r3.with_budget(
        RetryBudget::builder()
            .ratio(0.0)
            .min_per_sec(0)
            .build()
            .unwrap(),
    );
    let err = spent
        .call_reporting(&Call::idempotent(), fail)
        .await
        .unwrap_err();
    assert_eq!((err.reason(), err.attempts()), (GiveUp::Budget, 1));
    let stats = spent.stats();
    assert_eq!((stats.budget, stats.attempts), (1, 1));
}
