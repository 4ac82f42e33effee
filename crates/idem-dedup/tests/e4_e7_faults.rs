//! Faults: E4 (panic), E5 (caller drop, deadlines), E6 (lease), E7 (full). After each, the shard
//! keeps serving other scopes.

mod common;

use std::time::Duration;

use common::{eventually, fp, gated_leader, joiners, nth_scope, scope, Runs};
use idem_core::{Code, Deadline};
use idem_dedup::{DedupError, Engine, OutcomeKind};
use tokio::sync::oneshot;
use tokio::time::advance;

/// The shard that served `e` still serves new scopes (one shard, so it is the same shard).
async fn still_serves(engine: &Engine<u32>) {
    let s = scope("order-after-fault");
    engine.forget(&s).await.unwrap();
    let out = engine
        .execute(&s, fp("z"), |_| async { Ok(99) })
        .await
        .unwrap();
    assert_eq!((out.kind(), *out.value()), (OutcomeKind::Executed, 99));
}

#[tokio::test]
async fn e4_panicking_action_is_internal_and_the_shard_keeps_serving() {
    let engine = Engine::<u32>::builder().shards(1).build().unwrap();
    let s = scope("order-panic");
    let err = engine
        .execute(&s, fp("a"), |_| async { panic!("boom in action") })
        .await
        .unwrap_err();
    assert_eq!(
        err,
        DedupError::Panicked {
            message: "boom in action".into()
        }
    );
    assert_eq!(err.code(), Code::Internal);
    // A panic is not cached: the next call runs.
    let ok = engine
        .execute(&s, fp("a"), |_| async { Ok(1) })
        .await
        .unwrap();
    assert_eq!(ok.kind(), OutcomeKind::Executed);
    // A panic in the closure that makes the future counts the same.
    let s2 = scope("order-panic-2");
    let err = engine
        .execute(&s2, fp("a"), |_| -> std::future::Ready<Result<u32, _>> {
            panic!("boom in closure")
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Internal);
    eventually("panics counted", || engine.stats().outcomes.panicked == 2).await;
    still_serves(&engine).await;
}

#[tokio::test]
async fn e4_waiters_of_a_panicking_run_get_internal() {
    let engine = Engine::<u32>::builder().shards(1).build().unwrap();
    let s = scope("order-panic-3");
    let (leader, release) = gated_leader(&engine, &s, "a", || panic!("late boom")).await;
    let waiter = joiners(&engine, &s, "a", 1, 1).await.remove(0);
    release.send(()).unwrap();
    assert_eq!(leader.await.unwrap().unwrap_err().code(), Code::Internal);
    assert_eq!(waiter.await.unwrap().unwrap_err().code(), Code::Internal);
    still_serves(&engine).await;
}

#[tokio::test]
async fn e5_run_survives_caller_drop() {
    let engine = Engine::<u32>::builder().shards(1).build().unwrap();
    let s = scope("order-drop");
    let runs = Runs::default();
    let (release, gate) = oneshot::channel::<()>();
    let (started_tx, started) = oneshot::channel::<()>();
    let r = runs.clone();
    let caller = {
        let (engine, s) = (engine.clone(), s.clone());
        tokio::spawn(async move {
            engine
                .execute(&s, fp("a"), move |_| async move {
                    started_tx.send(()).ok();
                    gate.await.ok();
                    r.hit();
                    Ok(5)
                })
                .await
        })
    };
    started.await.unwrap();
    // The client disconnects: its call is dropped mid-run.
    caller.abort();
    assert!(caller.await.unwrap_err().is_cancelled());
    release.send(()).unwrap();
    // The action finished in a task of its own and its result was stored.
    eventually("stored after hand-off", || engine.stats().completed == 1).await;
    assert_eq!(runs.get(), 1);
    let retry = engine
        .execute(&s, fp("a"), |_| async { Ok(6) })
        .await
        .unwrap();
    assert_eq!((retry.kind(), *retry.value()), (OutcomeKind::Replayed, 5));
    still_serves(&engine).await;
}

#[tokio::test(start_paused = true)]
async fn e5_leader_deadline_returns_deadline_exceeded_and_the_run_goes_on() {
    let engine = Engine::<u32>::builder().shards(1).build().unwrap();
    let s = scope("order-deadline-1");
    let runs = Runs::default();
    let r = runs.clone();
    let err = engine
        .execute_with_deadline(
            &s,
            fp("a"),
            Deadline::after(Duration::from_millis(100)),
            move |_| async move {
                tokio::time::sleep(Duration::from_millis(300)).await;
                r.hit();
                Ok(8)
            },
        )
        .await
        .unwrap_err();
    assert_eq!(err, DedupError::DeadlineExceeded);
    assert_eq!(err.code(), Code::DeadlineExceeded);
    assert_eq!(runs.get(), 0);
    advance(Duration::from_millis(250)).await;
    eventually("stored", || engine.stats().completed == 1).await;
    assert_eq!(runs.get(), 1);
    let retry = engine
        .execute(&s, fp("a"), |_| async { Ok(0) })
        .await
        .unwrap();
    assert_eq!((retry.kind(), *retry.value()), (OutcomeKind::Replayed, 8));
    assert_eq!(engine.stats().outcomes.deadline_exceeded, 1);
}

#[tokio::test(start_paused = true)]
async fn e5_waiter_deadline_does_not_disturb_the_run() {
    let engine = Engine::<u32>::builder().shards(1).build().unwrap();
    let s = scope("order-deadline-2");
    let leader = {
        let (engine, s) = (engine.clone(), s.clone());
        tokio::spawn(async move {
            engine
                .execute(&s, fp("a"), |_| async {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    Ok(3)
                })
                .await
        })
    };
    eventually("in flight", || engine.stats().in_flight == 1).await;
    let err = engine
        .execute_with_deadline(
            &s,
            fp("a"),
            Deadline::after(Duration::from_millis(200)),
            |_| async { Ok(0) },
        )
        .await
        .unwrap_err();
    assert_eq!(err, DedupError::DeadlineExceeded);
    let l = leader.await.unwrap().unwrap();
    assert_eq!((l.kind(), *l.value()), (OutcomeKind::Executed, 3));
}

#[tokio::test(start_paused = true)]
async fn e6_hung_action_is_cancelled_at_its_lease() {
    let engine = Engine::<u32>::builder()
        .shards(1)
        .in_flight_timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let s = scope("order-hung");
    let (dropped_tx, dropped) = oneshot::channel::<()>();
    struct OnDrop(Option<oneshot::Sender<()>>);
    impl Drop for OnDrop {
        fn drop(&mut self) {
            self.0.take().map(|t| t.send(()));
        }
    }
    let leader = {
        let (engine, s) = (engine.clone(), s.clone());
        tokio::spawn(async move {
            engine
                .execute(&s, fp("a"), |_| async move {
                    let _guard = OnDrop(Some(dropped_tx));
                    std::future::pending::<()>().await;
                    Ok(1)
                })
                .await
        })
    };
    eventually("in flight", || engine.stats().in_flight == 1).await;
    let waiter = {
        let (engine, s) = (engine.clone(), s.clone());
        tokio::spawn(async move { engine.execute(&s, fp("a"), |_| async { Ok(2) }).await })
    };
    eventually("joined", || engine.stats().outcomes.joined == 1).await;
    let lease = DedupError::LeaseExpired {
        after: Duration::from_secs(5),
    };
    assert_eq!(waiter.await.unwrap().unwrap_err(), lease);
    assert_eq!(leader.await.unwrap().unwrap_err(), lease);
    assert_eq!(lease.code(), Code::Unavailable);
    dropped
        .await
        .expect("the hung action was cancelled (dropped)");
    assert_eq!(engine.stats().in_flight, 0);
    // The scope is free again.
    let out = engine
        .execute(&s, fp("a"), |_| async { Ok(3) })
        .await
        .unwrap();
    assert_eq!((out.kind(), *out.value()), (OutcomeKind::Executed, 3));
    still_serves(&engine).await;
}

#[tokio::test(start_paused = true)]
async fn e6_lease_also_bounds_a_handed_off_run() {
    let engine = Engine::<u32>::builder()
        .shards(1)
        .in_flight_timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let s = scope("order-hung-2");
    let caller = {
        let (engine, s) = (engine.clone(), s.clone());
        tokio::spawn(async move {
            engine
                .execute(&s, fp("a"), |_| std::future::pending::<Result<u32, _>>())
                .await
        })
    };
    eventually("in flight", || engine.stats().in_flight == 1).await;
    caller.abort();
    let _ = caller.await;
    advance(Duration::from_secs(2)).await;
    eventually("lease freed the scope", || engine.stats().in_flight == 0).await;
    assert_eq!(engine.stats().outcomes.lease_expired, 1);
}

#[tokio::test(start_paused = true)]
async fn e7_full_engine_refuses_new_scopes_never_evicts_and_replays_work() {
    let engine = Engine::<u32>::builder()
        .shards(2)
        .max_entries(10)
        .ttl(Duration::from_secs(60))
        .retry_after(Duration::from_millis(500))
        .build()
        .unwrap();
    for i in 0..10 {
        let _ = engine
            .execute(&nth_scope(i), fp("a"), move |_| async move { Ok(i as u32) })
            .await
            .unwrap();
    }
    let runs = Runs::default();
    let r = runs.clone();
    let err = engine
        .execute(&nth_scope(10), fp("a"), move |_| async move {
            r.hit();
            Ok(0)
        })
        .await
        .unwrap_err();
    assert_eq!(
        err,
        DedupError::Overloaded {
            retry_after: Duration::from_millis(500)
        }
    );
    assert_eq!(err.code(), Code::ResourceExhausted);
    assert_eq!(runs.get(), 0);
    // Nothing was evicted: every stored result still replays.
    for i in 0..10 {
        let out = engine
            .execute(&nth_scope(i), fp("a"), |_| async { Ok(1000) })
            .await
            .unwrap();
        assert_eq!(
            (out.kind(), *out.value()),
            (OutcomeKind::Replayed, i as u32)
        );
    }
    assert_eq!(engine.stats().entries(), 10);
    // After expiry there is room again.
    advance(Duration::from_secs(60)).await;
    eventually("expired", || engine.stats().entries() == 0).await;
    let out = engine
        .execute(&nth_scope(10), fp("a"), |_| async { Ok(10) })
        .await
        .unwrap();
    assert_eq!(out.kind(), OutcomeKind::Executed);
}

/// E7: the room a failed run frees (its entry is not stored, E3) is there for the very next
/// new scope on its shard. The shard counts its removals out of the engine-wide count in one
/// update per turn, and before every reservation, so a full engine does not refuse for room it
/// has just freed.
#[tokio::test]
async fn e7_room_freed_by_a_failed_run_is_reused_at_once() {
    let engine = Engine::<u32>::builder()
        .shards(1)
        .max_entries(1)
        .build()
        .unwrap();
    for i in 0..20 {
        let err = engine
            .execute(&nth_scope(i), fp("a"), |_| async {
                Err(idem_core::Status::new(Code::Unavailable, "down"))
            })
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::Unavailable, "call {i}: {err}");
    }
    let out = engine
        .execute(&nth_scope(20), fp("a"), |_| async { Ok(20) })
        .await
        .unwrap();
    assert_eq!((out.kind(), *out.value()), (OutcomeKind::Executed, 20));
    // Now full: the next new scope is refused, and the stored one still replays.
    let err = engine
        .execute(&nth_scope(21), fp("a"), |_| async { Ok(21) })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted);
    assert_eq!(engine.stats().entries(), 1);
}

#[tokio::test]
async fn e5_leader_dropped_before_it_starts_frees_the_scope() {
    // A caller dropped while its Begin is queued must not leave the scope in flight.
    let engine = Engine::<u32>::builder().shards(1).build().unwrap();
    let s = scope("order-early-drop");
    for _ in 0..50 {
        let fut = engine.execute(&s, fp("a"), |_| async { Ok(1) });
        // Poll once (sends Begin), then drop.
        let mut fut = Box::pin(fut);
        let _ = futures::poll!(fut.as_mut());
        drop(fut);
    }
    let out = engine
        .execute(&s, fp("a"), |_| async { Ok(2) })
        .await
        .unwrap();
    assert_eq!(*out.value(), 2, "no abandoned entry blocked the scope");
    eventually("nothing in flight", || engine.stats().in_flight == 0).await;
}

/// E5/E6: a run that ends 1 ms before its lease is stored and replayed after the lease time has
/// passed — not swept as expired, which would let the retry that follows run the side effect a
/// second time. (The shard also applies queued reports before each sweep, for the case where the
/// lease timer and the report are ready at the same poll; a single-threaded test cannot force that
/// order, so this one pins the outcome, not the race.)
#[tokio::test(start_paused = true)]
async fn e6_a_run_that_ended_just_before_its_lease_is_stored_not_expired() {
    let engine = Engine::<u32>::builder()
        .shards(1)
        .in_flight_timeout(Duration::from_millis(100))
        .build()
        .unwrap();
    let s = scope("order-lease-edge");
    let runs = Runs::default();
    let r = runs.clone();
    let first = engine
        .execute(&s, fp("a"), move |_| async move {
            r.hit();
            tokio::time::sleep(Duration::from_millis(99)).await;
            Ok(7)
        })
        .await
        .unwrap();
    assert_eq!(first.kind(), OutcomeKind::Executed);
    // Pass the lease right after the leader's report.
    advance(Duration::from_millis(5)).await;
    let r = runs.clone();
    let again = engine
        .execute(&s, fp("a"), move |_| async move {
            r.hit();
            Ok(8)
        })
        .await
        .unwrap();
    assert_eq!((again.kind(), *again.value()), (OutcomeKind::Replayed, 7));
    assert_eq!(runs.get(), 1);
    assert_eq!(engine.stats().outcomes.lease_expired, 0);
}

/// Issue 16, item 6 (E6): a leader whose run outlived its lease and was swept gets the lease
/// error, not its value: nothing was stored, and the retry that follows runs the action again
/// and is the only call to answer with a value. (The leader here is slow to start its action:
/// the shard's lease counts from when it chose the leader, and runs out before the leader's task
/// is polled again; the action then completes at once, before its own timer could fire.)
#[tokio::test(start_paused = true)]
async fn e6_a_leader_whose_run_was_swept_at_its_lease_gets_the_lease_error() {
    let lease = Duration::from_secs(5);
    let engine = Engine::<u32>::builder()
        .shards(1)
        .in_flight_timeout(lease)
        .build()
        .unwrap();
    let s = scope("order-swept-leader");
    let runs = Runs::default();
    let r = runs.clone();
    let mut leader = Box::pin(engine.execute(&s, fp("a"), move |_| async move {
        r.hit();
        Ok(1)
    }));
    // Sends `Begin`; the shard chooses this call to lead.
    assert!(futures::poll!(leader.as_mut()).is_pending());
    eventually("chosen to lead", || engine.stats().in_flight == 1).await;
    advance(lease + Duration::from_millis(1)).await;
    eventually("swept at its lease", || {
        engine.stats().outcomes.lease_expired == 1
    })
    .await;
    assert_eq!(
        leader.await.unwrap_err(),
        DedupError::LeaseExpired { after: lease }
    );
    assert_eq!(runs.get(), 1);
    let retry = engine
        .execute(&s, fp("a"), |_| async { Ok(2) })
        .await
        .unwrap();
    assert_eq!((retry.kind(), *retry.value()), (OutcomeKind::Executed, 2));
    let replay = engine
        .execute(&s, fp("a"), |_| async { Ok(3) })
        .await
        .unwrap();
    assert_eq!((replay.kind(), *replay.value()), (OutcomeKind::Replayed, 2));
}

/// E6 with a cached failure: the swept leader gets the lease error, not a failure that nobody
/// else will see replayed.
#[tokio::test(start_paused = true)]
async fn e6_a_swept_leader_with_a_cacheable_failure_gets_the_lease_error() {
    let lease = Duration::from_secs(5);
    let engine = Engine::<u32>::builder()
        .shards(1)
        .in_flight_timeout(lease)
        .cache_failures(
            idem_core::CodeSet::EMPTY.with(Code::FailedPrecondition),
            Duration::from_secs(60),
        )
        .build()
        .unwrap();
    let s = scope("order-swept-leader-2");
    let mut leader = Box::pin(engine.execute(&s, fp("a"), |_| async {
        Err(idem_core::Status::new(
            Code::FailedPrecondition,
            "out of stock",
        ))
    }));
    assert!(futures::poll!(leader.as_mut()).is_pending());
    eventually("chosen to lead", || engine.stats().in_flight == 1).await;
    advance(lease + Duration::from_millis(1)).await;
    eventually("swept at its lease", || {
        engine.stats().outcomes.lease_expired == 1
    })
    .await;
    assert_eq!(
        leader.await.unwrap_err(),
        DedupError::LeaseExpired { after: lease }
    );
    assert_eq!(engine.lookup(&s).await.unwrap(), None, "nothing stored");
}
