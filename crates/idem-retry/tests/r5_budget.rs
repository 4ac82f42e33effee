//! R5: a sliding-window retry budget caps retries at ~10% of requests under load, and still
//! lets a quiet client retry (per-second floor). Driven by tokio's paused clock: a simulated minute
//! takes well under a second of wall time.

use std::time::Duration;

use idem_core::Code;
use idem_retry::{Call, GiveUp, Retrier, RetryBudget, RetryPolicy};
use idem_test_support::time::ms;

/// Starts one always-failing call every `every`, for `total` calls, then waits for them all.
async fn drive(retrier: &Retrier, every: Duration, total: u32) {
    let mut tasks = tokio::task::JoinSet::new();
    let mut tick = tokio::time::interval(every);
    for _ in 0..total {
        tick.tick().await;
        let r = retrier.clone();
        tasks.spawn(async move {
            r.call(&Call::idempotent(), |_| async {
                Err::<(), _>(Code::Unavailable)
            })
            .await
        });
    }
    while let Some(done) = tasks.join_next().await {
        assert_eq!(done.unwrap(), Err(Code::Unavailable));
    }
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn r5_budget_settles_at_10_percent_of_requests_at_1000_rps() {
    let retrier = Retrier::new(RetryPolicy::default()); // 3 attempts: each call wants 2 retries
    let budget = retrier.budget().clone(); // defaults: 10%, floor 10/s, 10 s window

    // One simulated minute at 1,000 requests/s, every call failing; sampled every 10 s.
    let mut tasks = tokio::task::JoinSet::new();
    let mut tick = tokio::time::interval(ms(1));
    let mut last = retrier.stats();
    for i in 1..=60_000u32 {
        tick.tick().await;
        let r = retrier.clone();
        tasks.spawn(async move {
            r.call(&Call::idempotent(), |_| async {
                Err::<(), _>(Code::Unavailable)
            })
            .await
        });
        if i % 10_000 == 0 {
            let now = retrier.stats();
            let (calls, retries) = (now.calls - last.calls, now.retries - last.retries);
            println!(
                "r5 load: seconds {:>2}-{:>2}: {calls} requests, {retries} retries = {:.2}%",
                i / 1000 - 10,
                i / 1000,
                100.0 * retries as f64 / calls as f64
            );
            last = now;
        }
    }
    while let Some(done) = tasks.join_next().await {
        assert_eq!(done.unwrap(), Err(Code::Unavailable));
    }
    let stats = retrier.stats();
    let ratio = stats.retries as f64 / stats.calls as f64;
    println!(
        "r5 load: minute total: {} requests, {} retries = {:.2}% (budget refused {}, {} attempts)",
        stats.calls,
        stats.retries,
        100.0 * ratio,
        budget.refused(),
        stats.attempts
    );
    assert_eq!(stats.calls, 60_000);
    assert_eq!(stats.attempts, stats.calls + stats.retries);
    assert!(
        (0.08..=0.12).contains(&ratio),
        "retries were {:.2}% of requests, want 10% ± 2 points",
        100.0 * ratio
    );
    // Every call failed; those that were refused a retry are counted as budget give-ups.
    assert_eq!(stats.budget, budget.refused());
    assert_eq!(stats.budget + stats.exhausted, stats.calls);
    assert!(stats.give_ups(GiveUp::Budget) > 50_000);
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn r5_quiet_client_still_gets_its_floor() {
    // One failing call per second for a minute: 10% of 10 requests in the window is one retry,
    // but the floor (10 retries/s) lets every call make both of its retries.
    let retrier = Retrier::new(RetryPolicy::default());
    drive(&retrier, Duration::from_secs(1), 60).await;
    let stats = retrier.stats();
    println!(
        "r5 quiet: {} requests, {} retries, budget refused {}",
        stats.calls,
        stats.retries,
        retrier.budget().refused()
    );
    assert_eq!((stats.calls, stats.retries, stats.attempts), (60, 120, 180));
    assert_eq!(retrier.budget().refused(), 0);
    assert_eq!(stats.exhausted, 60);

    // Without the floor the same client could barely retry at all.
    let no_floor = RetryBudget::builder().min_per_sec(0).build().unwrap();
    let strict = Retrier::new(RetryPolicy::default()).with_budget(no_floor);
    drive(&strict, Duration::from_secs(1), 60).await;
    let stats = strict.stats();
    println!(
        "r5 quiet, no floor: {} requests, {} retries, budget refused {}",
        stats.calls,
        stats.retries,
        strict.budget().refused()
    );
    assert!(stats.retries <= 6, "{} retries", stats.retries);
    assert_eq!(stats.budget, 60); // every call ended on a refusal
    assert_eq!(strict.budget().refused(), 60);
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn r5_floor_is_retries_per_second_not_per_window() {
    // The defaults: 10%, a floor of 10 retries/s, a 10 s window. A quiet client (one request)
    // may burst 10 retries, not 10/s × 10 s = 100.
    let budget = RetryBudget::new();
    budget.deposit();
    let burst = |n: usize| (0..n).filter(|_| budget.try_withdraw()).count();
    assert_eq!(burst(200), 10);
    // Then 10 per second, refilled continuously: 1 s gives 10, 250 ms gives 2.5, 50 ms 0.5 more.
    tokio::time::advance(Duration::from_secs(1)).await;
    assert_eq!(burst(200), 10);
    tokio::time::advance(ms(250)).await;
    assert_eq!(burst(200), 2);
    tokio::time::advance(ms(50)).await;
    assert_eq!(burst(200), 1);
    // The bucket holds at most 10 tokens, however long the client stayed quiet.
    tokio::time::advance(Duration::from_secs(3600)).await;
    assert_eq!(burst(200), 10);

    // The window's length does not scale the floor (it used to: 10/s × 60 s = 600).
    let long = RetryBudget::builder()
        .window(Duration::from_secs(60))
        .build()
        .unwrap();
    assert_eq!((0..1000).filter(|_| long.try_withdraw()).count(), 10);
    assert_eq!(long.refused(), 990);
}

/// Runs `total` calls, one every `every`, whose first attempt fails for 2 calls in 5 (40%; the 4th and 5th of every 5) and
/// whose retries succeed; returns the retrier's stats once all have ended.
async fn forty_percent(retrier: &Retrier, every: Duration, total: u32) -> idem_retry::RetryStats {
    let mut tasks = tokio::task::JoinSet::new();
    let mut tick = tokio::time::interval(every);
    for i in 0..total {
        tick.tick().await;
        let r = retrier.clone();
        tasks.spawn(async move {
            r.call(&Call::idempotent(), move |attempt| async move {
                if attempt.number() == 1 && i % 5 >= 3 {
                    Err(Code::Unavailable)
                } else {
                    Ok(())
                }
            })
            .await
        });
    }
    while tasks.join_next().await.is_some() {}
    retrier.stats()
}

/// The arithmetic of `RetryBudget`'s "Sizing the budget" section: 3,000 calls in 3 s, 1,200 of
/// them failing their first attempt. The default budget grants 10% of the requests, 300
/// retries; the other 900 failing calls give up with "the retry budget was spent", by design.
/// A budget sized for the failure rate (ratio 0.4 × (3 − 1) = 0.8) retries every one.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn r5_at_40_percent_failures_the_default_budget_retries_10_percent_of_requests() {
    let retrier = Retrier::new(RetryPolicy::default());
    let stats = forty_percent(&retrier, ms(1), 3_000).await;
    println!("r5 40% failures, default budget: {stats:?}");
    assert_eq!(stats.calls, 3_000);
    assert_eq!(stats.retries, 300, "10% of the requests");
    assert_eq!(stats.give_ups(GiveUp::Budget), 900);

    let sized = RetryBudget::builder().ratio(0.4 * 2.0).build().unwrap();
    let retrier = Retrier::new(RetryPolicy::default()).with_budget(sized);
    let stats = forty_percent(&retrier, ms(1), 3_000).await;
    println!("r5 40% failures, sized budget: {stats:?}");
    assert_eq!(stats.retries, 1_200, "every failure retried");
    assert_eq!(stats.give_ups(GiveUp::Budget), 0);
}
