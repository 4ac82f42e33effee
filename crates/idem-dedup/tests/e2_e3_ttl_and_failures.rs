//! E2 (TTL on the timer wheel), E3 (failures not cached; cached by code; forget), E13 (look-up).

mod common;

use std::time::Duration;

use common::{eventually, fp, gated_leader, joiners, scope, Runs};
use idem_core::{Code, CodeSet, Status};
use idem_dedup::{ConfigError, DedupError, Engine, EntryState, OutcomeKind};
use tokio::time::advance;

const TTL: Duration = Duration::from_secs(24 * 3600);

#[tokio::test(start_paused = true)]
async fn e2_result_is_gone_at_exactly_completion_plus_ttl() {
    let engine = Engine::<u32>::builder().shards(1).build().unwrap();
    let s = scope("order-ttl-1");
    let _ = engine
        .execute(&s, fp("a"), |_| async { Ok(1) })
        .await
        .unwrap();
    // Just before the TTL: replayed.
    advance(TTL - Duration::from_millis(1)).await;
    let r = engine
        .execute(&s, fp("a"), |_| async { Ok(2) })
        .await
        .unwrap();
    assert_eq!((r.kind(), *r.value()), (OutcomeKind::Replayed, 1));
    // At exactly completion + TTL: gone, runs again.
    advance(Duration::from_millis(1)).await;
    let r = engine
        .execute(&s, fp("a"), |_| async { Ok(2) })
        .await
        .unwrap();
    assert_eq!((r.kind(), *r.value()), (OutcomeKind::Executed, 2));
}

/// E2 (issue 17): a stored result's timer names it by its exact expiry, not by the run. A result
/// stored again after a forget expires at its own completion + TTL: the first result's timer,
/// due earlier, leaves it alone. Stored again at the same instant, both expire together.
#[tokio::test(start_paused = true)]
async fn e2_a_result_stored_again_after_a_forget_expires_at_its_own_ttl() {
    let ttl = Duration::from_secs(60);
    let engine = Engine::<u32>::builder().shards(1).ttl(ttl).build().unwrap();
    let call = |s, v| {
        let engine = &engine;
        async move {
            let r = engine
                .execute(s, fp("a"), move |_| async move { Ok(v) })
                .await;
            let r = r.unwrap();
            (r.kind(), *r.value())
        }
    };
    let later = scope("order-ttl-again-1");
    call(&later, 1).await;
    advance(Duration::from_secs(10)).await;
    assert!(engine.forget(&later).await.unwrap());
    assert_eq!(call(&later, 2).await, (OutcomeKind::Executed, 2));
    // Past the first result's expiry: its timer fires and finds nothing of its own.
    advance(ttl - Duration::from_secs(5)).await;
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    assert_eq!(engine.stats().outcomes.expired, 0);
    assert_eq!(call(&later, 3).await, (OutcomeKind::Replayed, 2));
    // At its own expiry it goes, without a read.
    advance(Duration::from_secs(5)).await;
    eventually("expired by the wheel", || engine.stats().completed == 0).await;
    assert_eq!(engine.stats().outcomes.expired, 1);

    let same = scope("order-ttl-again-2");
    call(&same, 1).await;
    assert!(engine.forget(&same).await.unwrap());
    assert_eq!(call(&same, 2).await, (OutcomeKind::Executed, 2));
    advance(ttl - Duration::from_millis(1)).await;
    assert_eq!(call(&same, 3).await, (OutcomeKind::Replayed, 2));
    advance(Duration::from_millis(1)).await;
    eventually("expired by the wheel", || engine.stats().completed == 0).await;
    assert_eq!(engine.stats().outcomes.expired, 2);
    assert_eq!(call(&same, 4).await, (OutcomeKind::Executed, 4));
}

#[tokio::test(start_paused = true)]
async fn e2_expired_results_are_removed_without_any_read() {
    let engine = Engine::<u32>::builder()
        .shards(2)
        .ttl(Duration::from_secs(60))
        .build()
        .unwrap();
    for i in 0..100 {
        let s = common::nth_scope(i);
        let _ = engine
            .execute(&s, fp("a"), |_| async { Ok(1) })
            .await
            .unwrap();
    }
    eventually("stored", || engine.stats().completed == 100).await;
    advance(Duration::from_secs(59)).await;
    tokio::task::yield_now().await;
    assert_eq!(engine.stats().completed, 100);
    advance(Duration::from_secs(2)).await;
    eventually("expired by the wheel", || engine.stats().completed == 0).await;
    assert_eq!(engine.stats().outcomes.expired, 100);
}

#[tokio::test(start_paused = true)]
async fn e2_ttl_counts_from_completion_not_start() {
    let engine = Engine::<u32>::builder()
        .ttl(Duration::from_secs(10))
        .build()
        .unwrap();
    let s = scope("order-ttl-2");
    // The action takes 5 s; the result must live 10 s after it completes.
    let _ = engine
        .execute(&s, fp("a"), |_| async {
            tokio::time::sleep(Duration::from_secs(5)).await;
            Ok(1)
        })
        .await
        .unwrap();
    advance(Duration::from_secs(9)).await;
    let r = engine
        .execute(&s, fp("a"), |_| async { Ok(2) })
        .await
        .unwrap();
    assert_eq!(r.kind(), OutcomeKind::Replayed);
    let info = engine.lookup(&s).await.unwrap().unwrap();
    assert_eq!(info.state, EntryState::Completed);
    assert_eq!(info.age, Duration::from_secs(9));
    assert_eq!(info.expires_in, Some(Duration::from_secs(1)));
    advance(Duration::from_secs(1)).await;
    assert_eq!(engine.lookup(&s).await.unwrap(), None);
}

#[tokio::test]
async fn e3_failure_is_not_cached_and_every_waiter_gets_it() {
    let engine = Engine::<u32>::builder().build().unwrap();
    let s = scope("order-fail-1");
    let runs = Runs::default();
    let r = runs.clone();
    let (leader, release) = gated_leader(&engine, &s, "a", move || {
        r.hit();
        Err(Status::new(Code::Unavailable, "db down"))
    })
    .await;
    let waiters = joiners(&engine, &s, "a", 5, 9).await;
    release.send(()).unwrap();
    let err = leader.await.unwrap().unwrap_err();
    assert!(matches!(
        &err,
        DedupError::Action { status, outcome: OutcomeKind::Executed } if status.message() == "db down"
    ));
    assert_eq!(err.code(), Code::Unavailable);
    for w in waiters {
        let err = w.await.unwrap().unwrap_err();
        assert!(matches!(
            &err,
            DedupError::Action { status, outcome: OutcomeKind::Joined } if status.code() == Code::Unavailable
        ));
    }
    // Not cached: the next call runs again.
    let r = runs.clone();
    let next = engine
        .execute(&s, fp("a"), move |_| async move {
            r.hit();
            Ok(3)
        })
        .await
        .unwrap();
    assert_eq!((next.kind(), *next.value()), (OutcomeKind::Executed, 3));
    assert_eq!(runs.get(), 2);
}

#[tokio::test(start_paused = true)]
async fn e3_e13_failures_cached_by_declared_code_with_their_own_ttl() {
    let engine = Engine::<u32>::builder()
        .cache_failures(
            CodeSet::EMPTY.with(Code::FailedPrecondition),
            Duration::from_secs(30),
        )
        .build()
        .unwrap();
    let permanent = scope("order-fail-2");
    let transient = scope("order-fail-3");
    let runs = Runs::default();
    for _ in 0..3 {
        let r = runs.clone();
        let _ = engine
            .execute(&permanent, fp("a"), move |_| async move {
                r.hit();
                Err(Status::new(Code::FailedPrecondition, "insufficient funds"))
            })
            .await;
    }
    assert_eq!(
        runs.get(),
        1,
        "the permanent failure was cached and replayed"
    );
    let err = engine
        .execute(&permanent, fp("a"), |_| async { Ok(1) })
        .await
        .unwrap_err();
    assert!(matches!(
        err,
        DedupError::Action { ref status, outcome: OutcomeKind::Replayed } if status.message() == "insufficient funds"
    ));
    let info = engine.lookup(&permanent).await.unwrap().unwrap();
    assert_eq!(
        info.state,
        EntryState::CachedFailure(Code::FailedPrecondition)
    );
    assert_eq!(info.expires_in, Some(Duration::from_secs(30)));

    let runs = Runs::default();
    for _ in 0..3 {
        let r = runs.clone();
        let _ = engine
            .execute(&transient, fp("a"), move |_| async move {
                r.hit();
                Err(Status::new(Code::Unavailable, "try later"))
            })
            .await;
    }
    assert_eq!(runs.get(), 3, "UNAVAILABLE is never cached");

    // The cached failure lives for its own TTL.
    advance(Duration::from_secs(30)).await;
    let ok = engine
        .execute(&permanent, fp("a"), |_| async { Ok(7) })
        .await
        .unwrap();
    assert_eq!((ok.kind(), *ok.value()), (OutcomeKind::Executed, 7));
}

#[tokio::test]
async fn e3_e13_forget_removes_a_stored_result() {
    let engine = Engine::<u32>::builder().build().unwrap();
    let s = scope("order-forget");
    let _ = engine
        .execute(&s, fp("a"), |_| async { Ok(1) })
        .await
        .unwrap();
    assert!(engine.forget(&s).await.unwrap());
    assert!(!engine.forget(&s).await.unwrap(), "nothing left to forget");
    assert_eq!(engine.lookup(&s).await.unwrap(), None);
    let r = engine
        .execute(&s, fp("b"), |_| async { Ok(2) })
        .await
        .unwrap();
    assert_eq!((r.kind(), *r.value()), (OutcomeKind::Executed, 2));
    eventually("one stored", || engine.stats().completed == 1).await;
}

#[tokio::test]
async fn e13_forget_in_flight_releases_waiters_and_lookup_shows_state() {
    let engine = Engine::<u32>::builder().build().unwrap();
    let s = scope("order-forget-2");
    let (leader, release) = gated_leader(&engine, &s, "a", || Ok(1)).await;
    let waiter = joiners(&engine, &s, "a", 1, 2).await.remove(0);
    let info = engine.lookup(&s).await.unwrap().unwrap();
    assert_eq!(info.state, EntryState::InFlight { waiters: 1 });
    assert_eq!(info.expires_in, None);
    assert!(engine.forget(&s).await.unwrap());
    assert_eq!(waiter.await.unwrap().unwrap_err(), DedupError::Abandoned);
    release.send(()).unwrap();
    // The run itself finished for its own caller, but its result was not stored.
    assert_eq!(*leader.await.unwrap().unwrap().value(), 1);
    tokio::task::yield_now().await;
    assert_eq!(engine.lookup(&s).await.unwrap(), None);
}

/// E2 with more results due at once than a shard expires per poll (it works in batches so no
/// worker is held for one long poll): every one of them is still removed without any read, and a
/// call after that runs again.
#[tokio::test(start_paused = true)]
async fn e2_a_flood_of_simultaneous_expiries_is_removed_in_batches() {
    const N: u64 = 10_000;
    let engine = Engine::<u64>::builder()
        .shards(1)
        .ttl(Duration::from_secs(60))
        .build()
        .unwrap();
    for i in 0..N {
        let _ = engine
            .execute(
                &common::nth_scope(i),
                fp("a"),
                move |_| async move { Ok(i) },
            )
            .await
            .unwrap();
    }
    eventually("stored", || engine.stats().completed == N).await;
    advance(Duration::from_secs(61)).await;
    eventually("expired by the wheel", || engine.stats().completed == 0).await;
    assert_eq!(engine.stats().outcomes.expired, N);
    let again = engine
        .execute(&common::nth_scope(N - 1), fp("a"), |_| async { Ok(0) })
        .await
        .unwrap();
    assert_eq!(again.kind(), OutcomeKind::Executed);
}

/// E2, E3: an entry's allocation is reused after `forget` (the shard keeps emptied boxes), and
/// the forgotten run's timer is still queued. When it comes up it must not touch the new run of
/// the same scope in the same allocation: the new result lives its own full TTL.
#[tokio::test(start_paused = true)]
async fn e2_a_forgotten_runs_timer_leaves_the_next_run_in_its_reused_entry_alone() {
    let ttl = Duration::from_secs(10);
    let engine = Engine::<u32>::builder().shards(1).ttl(ttl).build().unwrap();
    let s = scope("order-reuse-1");
    let first = engine
        .execute(&s, fp("a"), |_| async { Ok(1) })
        .await
        .unwrap();
    assert_eq!(first.kind(), OutcomeKind::Executed);
    assert!(engine.forget(&s).await.unwrap());
    advance(Duration::from_secs(5)).await;
    let second = engine
        .execute(&s, fp("a"), |_| async { Ok(2) })
        .await
        .unwrap();
    assert_eq!((second.kind(), *second.value()), (OutcomeKind::Executed, 2));
    // Past the first run's expiry (t = 10 s), before the second's (t = 15 s).
    advance(Duration::from_secs(6)).await;
    tokio::task::yield_now().await;
    let r = engine
        .execute(&s, fp("a"), |_| async { Ok(3) })
        .await
        .unwrap();
    assert_eq!((r.kind(), *r.value()), (OutcomeKind::Replayed, 2));
    assert_eq!(engine.stats().outcomes.expired, 0);
    // And the second run's own expiry still removes it.
    advance(Duration::from_secs(4)).await;
    eventually("second run expired", || engine.stats().completed == 0).await;
    assert_eq!(engine.stats().outcomes.expired, 1);
}

/// Issue 16, item 7 (E13): the codes a retry is meant for — UNAVAILABLE, RESOURCE_EXHAUSTED,
/// DEADLINE_EXCEEDED, ABORTED — can never be cached: the retry would get the stored failure
/// back and replay the outage. The builder refuses them (and OK, which is not a failure) with a
/// message that states the rule; permanent codes are accepted.
#[tokio::test]
async fn e13_cache_failures_refuses_retryable_codes_naming_the_rule() {
    let ttl = Duration::from_secs(60);
    let permanent = CodeSet::EMPTY.with(Code::FailedPrecondition);
    for code in [
        Code::Unavailable,
        Code::ResourceExhausted,
        Code::DeadlineExceeded,
        Code::Aborted,
    ] {
        let err = Engine::<u32>::builder()
            .cache_failures(permanent.with(code), ttl)
            .build()
            .unwrap_err();
        let ConfigError::Invalid(rule) = err else {
            panic!("{code}: expected an invalid setting, got {err:?}");
        };
        for word in ["cache_failures", code.as_str(), "retry", "replay"] {
            assert!(rule.contains(word), "{code}: {rule:?} should say {word:?}");
        }
    }
    let err = Engine::<u32>::builder()
        .cache_failures(permanent.with(Code::Ok), ttl)
        .build()
        .unwrap_err();
    assert!(err.to_string().contains("OK"), "{err}");
    for code in [
        Code::Cancelled,
        Code::InvalidArgument,
        Code::NotFound,
        Code::AlreadyExists,
        Code::PermissionDenied,
        Code::FailedPrecondition,
        Code::OutOfRange,
        Code::Unimplemented,
        Code::DataLoss,
        Code::Unauthenticated,
    ] {
        let built = Engine::<u32>::builder()
            .cache_failures(CodeSet::EMPTY.with(code), ttl)
            .build();
        assert!(built.is_ok(), "{code} is permanent and may be cached");
    }
}
