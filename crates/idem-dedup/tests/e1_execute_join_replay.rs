//! E1 (execute / join / replay), K4 (conflict), E11 (shared values), E14 (in-flight policy).

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{eventually, fp, gated_leader, joiners, nth_scope, scope, Runs};
use idem_core::Code;
use idem_dedup::{DedupError, Engine, InFlightPolicy, OutcomeKind};

#[tokio::test]
async fn e1_first_call_executes_later_calls_replay() {
    let engine = Engine::<u32>::builder().shards(2).build().unwrap();
    let runs = Runs::default();
    let s = scope("order-0001");
    let r = runs.clone();
    let first = engine
        .execute(&s, fp("a"), move |_| async move {
            r.hit();
            Ok(7)
        })
        .await
        .unwrap();
    assert_eq!(first.kind(), OutcomeKind::Executed);
    assert_eq!(*first.value(), 7);
    for _ in 0..3 {
        let r = runs.clone();
        let again = engine
            .execute(&s, fp("a"), move |_| async move {
                r.hit();
                Ok(8)
            })
            .await
            .unwrap();
        assert_eq!(again.kind(), OutcomeKind::Replayed);
        assert!(again.is_duplicate());
        assert_eq!(again.into_value(), 7);
    }
    assert_eq!(runs.get(), 1);
    eventually("counters settle", || engine.stats().outcomes.replayed == 3).await;
    let st = engine.stats();
    assert_eq!(st.outcomes.executed, 1);
    assert_eq!(st.outcomes.replayed, 3);
    assert_eq!(st.completed, 1);
    assert_eq!(st.in_flight, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e1_ten_thousand_concurrent_calls_on_one_scope_run_once() {
    let engine = Engine::<Arc<str>>::builder().build().unwrap();
    let runs = Runs::default();
    let s = scope("order-hot-key");
    let mut tasks = Vec::new();
    for _ in 0..10_000 {
        let (engine, runs, s) = (engine.clone(), runs.clone(), s.clone());
        tasks.push(tokio::spawn(async move {
            engine
                .execute(&s, fp("same"), move |_| async move {
                    runs.hit();
                    tokio::task::yield_now().await;
                    Ok(Arc::from("order-77"))
                })
                .await
        }));
    }
    let mut kinds = [0u32; 3];
    for t in tasks {
        let out = t.await.unwrap().unwrap();
        assert_eq!(&**out.value(), "order-77");
        kinds[out.kind() as usize] += 1;
    }
    assert_eq!(runs.get(), 1, "the action ran exactly once");
    assert_eq!(kinds[OutcomeKind::Executed as usize], 1);
    assert_eq!(
        kinds[OutcomeKind::Joined as usize] + kinds[OutcomeKind::Replayed as usize],
        9_999
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e1_ten_thousand_distinct_scopes_run_ten_thousand_times() {
    let engine = Engine::<u64>::builder().build().unwrap();
    let runs = Runs::default();
    let mut tasks = Vec::new();
    for i in 0..10_000u64 {
        let (engine, runs) = (engine.clone(), runs.clone());
        tasks.push(tokio::spawn(async move {
            engine
                .execute(&nth_scope(i), fp("x"), move |_| async move {
                    runs.hit();
                    Ok(i)
                })
                .await
        }));
    }
    for (i, t) in tasks.into_iter().enumerate() {
        let out = t.await.unwrap().unwrap();
        assert_eq!(out.kind(), OutcomeKind::Executed);
        assert_eq!(*out.value(), i as u64);
    }
    assert_eq!(runs.get(), 10_000);
    eventually("all completions stored", || {
        engine.stats().completed == 10_000
    })
    .await;
    let st = engine.stats();
    assert_eq!(st.completed, 10_000);
    assert_eq!(st.outcomes.executed, 10_000);
    assert_eq!(st.shards.iter().map(|s| s.completed).sum::<u64>(), 10_000);
}

#[tokio::test]
async fn e1_joined_callers_share_the_leaders_result() {
    let engine = Engine::<u32>::builder().build().unwrap();
    let s = scope("order-0002");
    let (leader, release) = gated_leader(&engine, &s, "a", || Ok(42)).await;
    let joiner = joiners(&engine, &s, "a", 1, 0).await.remove(0);
    release.send(()).unwrap();
    let l = leader.await.unwrap().unwrap();
    let j = joiner.await.unwrap().unwrap();
    assert_eq!((l.kind(), *l.value()), (OutcomeKind::Executed, 42));
    assert_eq!((j.kind(), *j.value()), (OutcomeKind::Joined, 42));
}

#[tokio::test]
async fn k4_same_scope_other_fingerprint_conflicts_when_completed() {
    let engine = Engine::<u32>::builder().build().unwrap();
    let runs = Runs::default();
    let s = scope("order-0003");
    let _ = engine
        .execute(&s, fp("qty=1"), |_| async { Ok(1) })
        .await
        .unwrap();
    let r = runs.clone();
    let err = engine
        .execute(&s, fp("qty=2"), move |_| async move {
            r.hit();
            Ok(2)
        })
        .await
        .unwrap_err();
    assert_eq!(err, DedupError::Conflict);
    assert_eq!(err.code(), Code::FailedPrecondition);
    assert_eq!(runs.get(), 0, "the conflicting action must not run");
    eventually("conflict counted", || {
        engine.stats().outcomes.conflicts == 1
    })
    .await;
}

#[tokio::test]
async fn k4_same_scope_other_fingerprint_conflicts_while_in_flight() {
    let engine = Engine::<u32>::builder().build().unwrap();
    let s = scope("order-0004");
    let (leader, release) = gated_leader(&engine, &s, "qty=1", || Ok(1)).await;
    let runs = Runs::default();
    let r = runs.clone();
    let err = engine
        .execute(&s, fp("qty=2"), move |_| async move {
            r.hit();
            Ok(2)
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);
    assert_eq!(runs.get(), 0);
    release.send(()).unwrap();
    assert_eq!(*leader.await.unwrap().unwrap().value(), 1);
}

#[tokio::test]
async fn e11_values_are_shared_not_copied() {
    let engine = Engine::<Arc<Vec<u8>>>::builder().build().unwrap();
    let s = scope("order-0005");
    let big = Arc::new(vec![7u8; 1 << 20]);
    let b = big.clone();
    let first = engine
        .execute(&s, fp("a"), move |_| async move { Ok(b) })
        .await
        .unwrap();
    let replay = engine
        .execute(&s, fp("a"), |_| async { Ok(Arc::new(Vec::new())) })
        .await
        .unwrap();
    assert!(Arc::ptr_eq(first.value(), &big));
    assert!(
        Arc::ptr_eq(replay.value(), &big),
        "replay shares the stored Arc"
    );
}

#[tokio::test]
async fn e14_reject_policy_answers_aborted_at_once() {
    let engine = Engine::<u32>::builder()
        .in_flight_policy(InFlightPolicy::Reject)
        .retry_after(Duration::from_millis(250))
        .build()
        .unwrap();
    let s = scope("order-0006");
    let (leader, release) = gated_leader(&engine, &s, "a", || Ok(5)).await;
    let err = engine
        .execute(&s, fp("a"), |_| async { Ok(6) })
        .await
        .unwrap_err();
    assert_eq!(
        err,
        DedupError::InFlight {
            retry_after: Duration::from_millis(250)
        }
    );
    assert_eq!(err.code(), Code::Aborted);
    assert_eq!(err.retry_after(), Some(Duration::from_millis(250)));
    release.send(()).unwrap();
    assert_eq!(*leader.await.unwrap().unwrap().value(), 5);
    // After completion, Reject still replays.
    let again = engine
        .execute(&s, fp("a"), |_| async { Ok(6) })
        .await
        .unwrap();
    assert_eq!((again.kind(), *again.value()), (OutcomeKind::Replayed, 5));
    eventually("reject counted", || {
        engine.stats().outcomes.rejected_in_flight == 1
    })
    .await;
}

#[tokio::test]
async fn e14_wait_is_the_default_policy() {
    let engine = Engine::<u32>::builder().build().unwrap();
    let s = scope("order-0007");
    let (a, b) = tokio::join!(
        engine.execute(&s, fp("a"), |_| async {
            tokio::task::yield_now().await;
            Ok(1)
        }),
        engine.execute(&s, fp("a"), |_| async { Ok(2) }),
    );
    assert_eq!(*a.unwrap().value(), 1);
    let b = b.unwrap();
    assert_eq!((b.kind(), *b.value()), (OutcomeKind::Joined, 1));
}

/// E1/K3/K4 with scopes too long to sit inline in an entry (they keep the caller's shared bytes)
/// beside short ones: each runs once, joins, replays and conflicts exactly as a short one does,
/// and scopes that differ only past the inline limit stay apart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e1_long_scopes_run_once_replay_and_conflict_like_short_ones() {
    let engine = Engine::<usize>::builder().shards(2).build().unwrap();
    let method = format!("/{}/CreateOrder", "very.long.package.name".repeat(8));
    let key = |i: usize| format!("{i:0>64}");
    let long: Vec<_> = (0..64)
        .map(|i| idem_core::Scope::parse("tenant-with-a-long-name", &method, &key(i)).unwrap())
        .collect();
    let short: Vec<_> = (0..64).map(|i| nth_scope(i as u64)).collect();
    let runs = Runs::default();
    let calls = long.iter().chain(&short).enumerate().flat_map(|(i, s)| {
        let engine = &engine;
        let runs = runs.clone();
        (0..4).map(move |_| {
            let r = runs.clone();
            async move {
                engine
                    .execute(s, fp("body"), move |_| async move {
                        r.hit();
                        tokio::task::yield_now().await;
                        Ok(i)
                    })
                    .await
                    .map(|o| (i, *o.value()))
            }
        })
    });
    let results = futures::future::join_all(calls).await;
    assert_eq!(runs.get(), 128, "one run per scope");
    for r in results {
        let (i, v) = r.unwrap();
        assert_eq!(i, v, "every caller got its own scope's value");
    }
    for (i, s) in long.iter().chain(&short).enumerate() {
        let again = engine.execute(s, fp("body"), |_| async { Ok(usize::MAX) });
        let again = again.await.unwrap();
        assert_eq!((again.kind(), *again.value()), (OutcomeKind::Replayed, i));
        let other = engine.execute(s, fp("other body"), |_| async { Ok(0) });
        assert!(matches!(other.await, Err(DedupError::Conflict)));
    }
    assert_eq!(runs.get(), 128);
}
