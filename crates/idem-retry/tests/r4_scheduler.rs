//! R4: every wait goes through a Scheduler; nothing blocks the thread.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use idem_core::{Code, IdempotencyKey};
use idem_retry::{Call, FixedRandom, Retrier, RetryPolicy, VirtualScheduler};
use idem_test_support::time::ms;

fn policy(max_attempts: u32, u: f64) -> RetryPolicy {
    RetryPolicy::builder()
        .max_attempts(max_attempts)
        .random_source(FixedRandom::new(u))
        .build()
        .unwrap()
}

#[tokio::test]
async fn r4_virtual_scheduler_runs_a_retry_sequence_instantly() {
    let clock = VirtualScheduler::instant();
    let retrier = Retrier::new(policy(5, 0.0)).with_scheduler(clock.clone());
    let call = Call::keyed(IdempotencyKey::derive("order-7", "CreateOrder"));
    let r: Result<(), Code> = retrier
        .call(&call, |_| async { Err(Code::Unavailable) })
        .await;
    assert_eq!(r, Err(Code::Unavailable));
    // Lowest jitter draw: 0.8 x (20, 40, 80, 160).
    assert_eq!(clock.requested(), vec![ms(16), ms(32), ms(64), ms(128)]);
    assert_eq!(clock.elapsed(), ms(240));
    assert_eq!(clock.pending(), 0);
    let stats = retrier.stats();
    assert_eq!((stats.attempts, stats.retries, stats.exhausted), (5, 4, 1));
}

#[tokio::test]
async fn r4_virtual_scheduler_on_demand_completes_when_released() {
    let clock = VirtualScheduler::on_demand();
    let retrier = Retrier::new(policy(3, 0.5)).with_scheduler(clock.clone());
    let attempts = Arc::new(AtomicU32::new(0));
    let seen = attempts.clone();
    let task = tokio::spawn(async move {
        retrier
            .call(&Call::idempotent(), |a| {
                seen.store(a.number(), Ordering::SeqCst);
                async move {
                    if a.number() < 3 {
                        Err(Code::Unavailable)
                    } else {
                        Ok(a.number())
                    }
                }
            })
            .await
    });
    for (wait, next_attempt) in [(ms(20), 2), (ms(40), 3)] {
        while clock.pending() == 0 {
            tokio::task::yield_now().await;
        }
        // The retrier is parked on the wait: no attempt is made until it is released.
        let before = attempts.load(Ordering::SeqCst);
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert_eq!(attempts.load(Ordering::SeqCst), before);
        assert_eq!(clock.release_next(), Some(wait));
        while attempts.load(Ordering::SeqCst) != next_attempt {
            tokio::task::yield_now().await;
        }
    }
    assert_eq!(task.await.unwrap(), Ok(3));
    assert_eq!(clock.requested(), vec![ms(20), ms(40)]);
    assert_eq!(clock.release_next(), None);
}

/// On a single-threaded runtime a blocking sleep would freeze every task; the retrier's waits are
/// futures, so a ticker task keeps running while the retrier waits.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn r4_other_tasks_progress_while_retrier_waits() {
    let ticks = Arc::new(AtomicU32::new(0));
    let t = ticks.clone();
    let ticker = tokio::spawn(async move {
        loop {
            tokio::time::sleep(ms(7)).await;
            t.fetch_add(1, Ordering::SeqCst);
        }
    });

    let seen_at_attempt = Arc::new(Mutex::new(Vec::new()));
    let seen = seen_at_attempt.clone();
    let retrier = Retrier::new(policy(3, 0.5)); // tokio's timer: waits of 20 ms, then 40 ms
                                                // Spawned: the retrier's future is Send.
    let call = tokio::spawn(async move {
        retrier
            .call(&Call::idempotent(), |_| {
                seen.lock().unwrap().push(ticks.load(Ordering::SeqCst));
                async { Err::<(), _>(Code::Unavailable) }
            })
            .await
    });
    assert_eq!(call.await.unwrap(), Err(Code::Unavailable));
    ticker.abort();
    // Attempts at t = 0, 20, 60 ms; the ticker ticked at 7, 14 (before 20) and 21..56 (before 60).
    assert_eq!(*seen_at_attempt.lock().unwrap(), vec![0, 2, 8]);
}
