//! D1 with batched calls: claims and completions that share one script call still run each
//! intent once, a call that fails inside a batch fails alone, and `max_batch(1)` sends every
//! claim and completion as a script of its own.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use idem_core::{Code, Hex, Status};
use idem_redis::{RedisTier, TieredEngine};
use idem_test_support::redis::{raw, RedisServer};

use crate::{engine, exactly_once_workload, fp, scope};

async fn tier_with(url: &str, max_batch: usize) -> RedisTier {
    RedisTier::builder()
        .command_timeout(Duration::from_secs(10))
        .allow_volatile(true)
        .max_batch(max_batch)
        .connect(url)
        .await
        .expect("connect to the test redis")
}

/// `n` unique intents at once on `engine`; each must run once. Returns the Redis calls made.
async fn unique_burst(engine: &TieredEngine<String>, run: &str, n: usize) -> u64 {
    let before = engine.remote().commands_sent();
    let effects: Arc<Vec<AtomicU32>> = Arc::new((0..n).map(|_| AtomicU32::new(0)).collect());
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..n {
        let (engine, effects, s) = (engine.clone(), effects.clone(), scope(run, i));
        tasks.spawn(async move {
            engine
                .execute(&s, fp(i), move |_| async move {
                    effects[i].fetch_add(1, Ordering::SeqCst);
                    Ok::<_, Status>(format!("intent {i}"))
                })
                .await
                .unwrap_or_else(|e| panic!("intent {i} failed: {e}"))
        });
    }
    while let Some(out) = tasks.join_next().await {
        assert!(out.expect("task").is_recorded());
    }
    for (i, e) in effects.iter().enumerate() {
        assert_eq!(e.load(Ordering::SeqCst), 1, "intent {i}");
    }
    engine.remote().commands_sent() - before
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d1_batched_claims_and_completions_run_every_intent_once_in_fewer_calls() {
    let _heavy = crate::one_heavy_test_at_a_time().await;
    let redis = RedisServer::start().await;
    let a = engine(tier_with(&redis.url(), 64).await);
    let b = engine(tier_with(&redis.url(), 64).await);
    let intents = 1_000;
    let effects = exactly_once_workload(&[a.clone(), b.clone()], "d1-batched", intents, 4).await;
    assert_eq!(effects as usize, intents);
    // Every intent needs a claim and a completion on the instance that ran it (and a claim on the
    // other): far fewer Redis calls than that means the calls shared script calls.
    let calls = a.remote().commands_sent() + b.remote().commands_sent();
    assert!(
        calls < 2 * intents as u64,
        "{calls} Redis calls for {intents} intents: the calls were not batched"
    );
    let (sa, sb) = (a.stats(), b.stats());
    assert_eq!(sa.executed + sb.executed, intents as u64);
    assert_eq!(
        sa.unavailable + sb.unavailable + sa.fenced_out + sb.fenced_out,
        0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d1_max_batch_one_sends_each_claim_and_completion_alone() {
    let _heavy = crate::one_heavy_test_at_a_time().await;
    let redis = RedisServer::start().await;
    let alone = engine(tier_with(&redis.url(), 1).await);
    let batched = engine(tier_with(&redis.url(), 64).await);
    let n = 300;
    assert_eq!(unique_burst(&alone, "d1-alone", n).await, 2 * n as u64);
    let calls = unique_burst(&batched, "d1-together", n).await;
    assert!(calls < 2 * n as u64, "{calls} calls for {n} intents");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d1_a_call_that_fails_inside_a_batch_fails_alone() {
    let _heavy = crate::one_heavy_test_at_a_time().await;
    let redis = RedisServer::start().await;
    let e = engine(tier_with(&redis.url(), 64).await);
    // Something else wrote a plain string where the poisoned scope's record lives.
    let poisoned = scope("d1-poisoned", 0);
    let record = format!("idem:{{{}}}", Hex(&poisoned.digest()[..16]));
    raw(redis.port(), &format!("SET {record} not-a-record"))
        .await
        .expect("SET");
    let n = 200;
    let ran = Arc::new(AtomicU32::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..=n {
        let (e, ran) = (e.clone(), ran.clone());
        let s = if i == n {
            poisoned.clone()
        } else {
            scope("d1-beside", i)
        };
        tasks.spawn(async move {
            let out = e
                .execute(&s, fp(i), move |_| async move {
                    ran.fetch_add(1, Ordering::SeqCst);
                    Ok::<_, Status>(format!("intent {i}"))
                })
                .await;
            (i, out)
        });
    }
    while let Some(joined) = tasks.join_next().await {
        let (i, out) = joined.expect("task");
        if i == n {
            let err = out.expect_err("the poisoned scope's claim cannot run");
            assert_eq!(err.code(), Code::Unavailable, "{err}");
            assert!(err.to_status().message().contains("WRONGTYPE"), "{err}");
        } else {
            assert!(out.unwrap_or_else(|e| panic!("{i}: {e}")).is_recorded());
        }
    }
    // Every other intent ran once; the poisoned one never ran.
    assert_eq!(ran.load(Ordering::SeqCst), n as u32);
    let calls = e.remote().commands_sent();
    assert!(calls < 2 * n as u64, "{calls} calls: no batch formed");
}
