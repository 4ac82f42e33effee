//! E7 across shards: the room an entry frees is there for every shard's next new scope by the
//! time anyone has been told it is gone (issue 16).
//!
//! The engine-wide count is shared by the shards; each shard counts its own removals out of it.
//! These tests run on two worker threads, so the next call's shard can take it up while the
//! shard that freed the room is still finishing its turn.

mod common;

use std::time::Duration;

use common::{eventually, fp, gated_leader, joiners, nth_scope, Runs};
use idem_core::{Code, Status};
use idem_dedup::{Engine, OutcomeKind};
use tokio::time::advance;

/// Four shards sharing one slot.
fn one_slot_on_four_shards() -> Engine<u32> {
    Engine::<u32>::builder()
        .shards(4)
        .max_entries(1)
        .build()
        .unwrap()
}

/// Issue 16, item 5: sequential calls that each fail, on four shards with room for one entry.
/// Each failure frees the only slot before its caller has the error, so every new scope runs;
/// none is refused as full (RESOURCE_EXHAUSTED) for room the previous call had just freed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e7_a_failed_run_frees_its_slot_for_every_shard_before_its_caller_returns() {
    let engine = one_slot_on_four_shards();
    let runs = Runs::default();
    for i in 0..400 {
        let r = runs.clone();
        let err = engine
            .execute(&nth_scope(i), fp("a"), move |_| async move {
                r.hit();
                Err::<u32, _>(Status::new(Code::Unavailable, "payment service down"))
            })
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::Unavailable, "call {i}: {err}");
    }
    assert_eq!(runs.get(), 400, "every new scope ran");
    assert_eq!(engine.stats().outcomes.overloaded, 0);
}

/// E4 + E7: the same for runs that panic, in the action or in the closure that makes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e7_a_panicked_run_frees_its_slot_for_every_shard_before_its_caller_returns() {
    let engine = one_slot_on_four_shards();
    for i in 0..40 {
        let err = if i % 2 == 0 {
            engine
                .execute(&nth_scope(i), fp("a"), |_| async {
                    panic!("e7 test panic")
                })
                .await
        } else {
            engine
                .execute(&nth_scope(i), fp("a"), |_| -> std::future::Ready<_> {
                    panic!("e7 test panic in closure")
                })
                .await
        }
        .unwrap_err();
        assert_eq!(err.code(), Code::Internal, "call {i}: {err}");
    }
    assert_eq!(engine.stats().outcomes.overloaded, 0);
}

/// E7: a waiter of a failed run is answered after the run's slot is free: its own next call, for
/// a new scope on any shard, runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e7_joiners_of_a_failed_run_find_its_slot_free() {
    let engine = one_slot_on_four_shards();
    for i in 0..100 {
        let s = nth_scope(2 * i);
        let (leader, release) = gated_leader(&engine, &s, "a", || {
            Err(Status::new(Code::Unavailable, "down"))
        })
        .await;
        let waiter = joiners(&engine, &s, "a", 1, 0).await.remove(0);
        release.send(()).unwrap();
        let err = waiter.await.unwrap().unwrap_err();
        assert_eq!(err.code(), Code::Unavailable);
        let next = engine
            .execute(&nth_scope(2 * i + 1), fp("a"), |_| async {
                Err::<u32, _>(Status::new(Code::NotFound, "no such sku"))
            })
            .await
            .unwrap_err();
        assert_eq!(next.code(), Code::NotFound, "round {i}: {next}");
        assert_eq!(leader.await.unwrap().unwrap_err().code(), Code::Unavailable);
    }
    assert_eq!(engine.stats().outcomes.overloaded, 0);
}

/// E3 + E7: `forget` returns after the slot of what it removed is free for every shard.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e7_a_forgotten_result_frees_its_slot_before_forget_returns() {
    let engine = one_slot_on_four_shards();
    for i in 0..200 {
        let s = nth_scope(i);
        let out = engine
            .execute(&s, fp("a"), move |_| async move { Ok(i as u32) })
            .await
            .unwrap();
        assert_eq!(out.kind(), OutcomeKind::Executed, "call {i}");
        assert!(engine.forget(&s).await.unwrap());
    }
    assert_eq!(engine.stats().outcomes.overloaded, 0);
}

/// Moves the paused clock on without letting the runtime turn: `advance` moves the clock, then
/// yields so the timers fire; polled once and dropped, it stops before the yield. The next call
/// then reaches its shard before that shard's timer has swept what expired.
async fn advance_before_timers_fire(d: Duration) {
    let mut adv = std::pin::pin!(advance(d));
    let _ = futures::poll!(adv.as_mut());
}

/// E2 + E7: a full shard does not refuse a new scope for room that a result of its own, already
/// past its expiry, still takes because the shard's timer has not swept it yet.
#[tokio::test(start_paused = true)]
async fn e7_an_expired_result_on_the_same_shard_never_keeps_its_slot() {
    let ttl = Duration::from_secs(60);
    let engine = Engine::<u32>::builder()
        .shards(1)
        .max_entries(1)
        .ttl(ttl)
        .build()
        .unwrap();
    for i in 0..5 {
        let out = engine
            .execute(&nth_scope(i), fp("a"), move |_| async move { Ok(i as u32) })
            .await
            .unwrap();
        assert_eq!(out.kind(), OutcomeKind::Executed, "call {i}");
        advance_before_timers_fire(ttl).await;
    }
    assert_eq!(engine.stats().outcomes.overloaded, 0);
}

/// E13 + E7: a look-up that reports an expired result gone has freed its slot, for a new scope
/// on any shard, before its timer would have swept it.
#[tokio::test(start_paused = true)]
async fn e7_a_look_up_that_finds_a_result_expired_frees_its_slot() {
    let ttl = Duration::from_secs(60);
    let engine = Engine::<u32>::builder()
        .shards(4)
        .max_entries(1)
        .ttl(ttl)
        .build()
        .unwrap();
    for i in 0..8 {
        let s = nth_scope(i);
        let out = engine
            .execute(&s, fp("a"), move |_| async move { Ok(i as u32) })
            .await
            .unwrap();
        assert_eq!(out.kind(), OutcomeKind::Executed, "call {i}");
        advance_before_timers_fire(ttl).await;
        assert_eq!(engine.lookup(&s).await.unwrap(), None, "expired");
    }
    assert_eq!(engine.stats().outcomes.overloaded, 0);
    eventually("all expired", || engine.stats().entries() == 0).await;
}
