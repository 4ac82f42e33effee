//! D3: Redis killed mid-run: callers get UNAVAILABLE and no action runs without a claim; Redis
//! restarted: service resumes without restarting the engines. Fail-open only by opt-in.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use idem_core::{Code, Reason, Status};
use idem_redis::{OnUnavailable, Source, TieredEngine};
use idem_test_support::redis::RedisServer;

use crate::{engine, fp, scope, tier};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d3_redis_killed_fails_closed_then_resumes_after_restart() {
    let mut redis = RedisServer::start().await;
    let a = engine(tier(&redis.url()).await);
    let b = engine(tier(&redis.url()).await);
    let runs = Arc::new(AtomicU32::new(0));
    let call = |e: &TieredEngine<String>, i: usize| {
        let (e, runs) = (e.clone(), runs.clone());
        async move {
            e.execute(&scope("d3-kill", i), fp(i), move |t| async move {
                assert!(t.is_fenced(), "an action ran without a claim");
                runs.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(20)).await;
                Ok::<_, Status>(format!("v{i}"))
            })
            .await
        }
    };

    // Healthy: 100 intents.
    for i in 0..100 {
        let _ = call(if i % 2 == 0 { &a } else { &b }, i).await.unwrap();
    }
    assert_eq!(runs.load(Ordering::SeqCst), 100);

    // Kill Redis while 200 new intents are being sent.
    let mut batch = tokio::task::JoinSet::new();
    for i in 100..300 {
        let fut = call(if i % 2 == 0 { &a } else { &b }, i);
        batch.spawn(fut);
    }
    tokio::time::sleep(Duration::from_millis(5)).await;
    redis.kill();
    let mut failed = 0;
    let t0 = tokio::time::Instant::now();
    while let Some(r) = batch.join_next().await {
        if let Err(e) = r.unwrap() {
            assert_eq!(e.code(), Code::Unavailable, "{e}");
            failed += 1;
        }
    }
    eprintln!("batch drained after {:?}", t0.elapsed());
    let ran_before_outage_ended = runs.load(Ordering::SeqCst);

    // While it is down: every call is UNAVAILABLE (retryable) and nothing runs.
    for i in 300..340 {
        let e = call(if i % 2 == 0 { &a } else { &b }, i).await.unwrap_err();
        assert_eq!(e.code(), Code::Unavailable);
        assert_eq!(e.reason(), Some(Reason::UPSTREAM_UNAVAILABLE));
    }
    assert_eq!(runs.load(Ordering::SeqCst), ran_before_outage_ended);
    assert!(a.stats().unavailable + b.stats().unavailable >= 40);

    // Restart on the same port (empty): the same engines serve again.
    redis.restart().await;
    let mut ok = false;
    let t0 = tokio::time::Instant::now();
    for _ in 0..100 {
        if call(&a, 1_000).await.is_ok() && call(&b, 1_001).await.is_ok() {
            ok = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(ok, "service did not resume within 5 s of the restart");
    eprintln!("resumed after {:?}", t0.elapsed());
    let before = runs.load(Ordering::SeqCst);
    for i in 300..340 {
        let _ = call(if i % 2 == 0 { &b } else { &a }, i).await.unwrap();
        let _ = call(if i % 2 == 0 { &a } else { &b }, i).await.unwrap();
    }
    assert_eq!(
        runs.load(Ordering::SeqCst),
        before + 40,
        "each retried intent ran once"
    );
    eprintln!("d3: {failed} of 200 calls in flight at the kill failed closed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d3_fail_open_only_by_opt_in_and_counted() {
    let mut redis = RedisServer::start().await;
    let closed = engine(tier(&redis.url()).await);
    let open = TieredEngine::<String>::builder(tier(&redis.url()).await)
        .on_unavailable(OnUnavailable::FailOpen)
        .build()
        .unwrap();
    redis.kill();
    let e = closed
        .execute(&scope("d3-open", 1), fp(1), |_| async {
            Ok::<_, Status>("no".into())
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::Unavailable);
    let r = open
        .execute(&scope("d3-open", 1), fp(1), |t| async move {
            assert!(!t.is_fenced());
            Ok::<_, Status>("ran unfenced".into())
        })
        .await
        .unwrap();
    assert_eq!(r.source(), Source::FailOpen);
    assert_eq!(r.fencing_token(), None);
    assert_eq!(open.stats().fail_open, 1);
    assert_eq!(closed.stats().fail_open, 0);
}
