//! E8 (shape: mailboxes, nothing blocks), E10 (shutdown), E12 (codes), Z3 (bounded memory), and
//! builder validation.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{eventually, fp, nth_scope, scope, Runs};
use idem_core::Code;
use idem_dedup::{ConfigError, DedupError, Engine, OutcomeKind};
use tokio::sync::oneshot;

#[tokio::test(flavor = "current_thread")]
async fn e8_full_mailbox_makes_callers_wait_not_fail() {
    // One shard with a one-message mailbox: 500 concurrent callers must queue asynchronously.
    let engine = Engine::<u64>::builder()
        .shards(1)
        .mailbox_capacity(1)
        .batch_size(1)
        .build()
        .unwrap();
    let runs = Runs::default();
    let tasks: Vec<_> = (0..500u64)
        .map(|i| {
            let (engine, runs) = (engine.clone(), runs.clone());
            tokio::spawn(async move {
                engine
                    .execute(&nth_scope(i % 100), fp("a"), move |_| async move {
                        runs.hit();
                        Ok(i % 100)
                    })
                    .await
            })
        })
        .collect();
    for (i, t) in tasks.into_iter().enumerate() {
        assert_eq!(*t.await.unwrap().unwrap().value(), i as u64 % 100);
    }
    assert_eq!(runs.get(), 100, "one run per distinct scope");
    assert!(
        engine.stats().outcomes.mailbox_full > 0,
        "the mailbox did fill and callers waited"
    );
    // The shard keeps serving.
    let out = engine
        .execute(&scope("order-after"), fp("a"), |_| async { Ok(1) })
        .await;
    assert_eq!(out.unwrap().kind(), OutcomeKind::Executed);
}

#[tokio::test(flavor = "current_thread")]
async fn e8_current_thread_progress_while_a_slow_action_is_in_flight() {
    // One executor thread. A slow action is in flight (awaiting, not blocking); other scopes and
    // other tasks must still make progress.
    let engine = Engine::<u32>::builder().shards(1).build().unwrap();
    let (release, gate) = oneshot::channel::<()>();
    let slow = {
        let engine = engine.clone();
        tokio::spawn(async move {
            engine
                .execute(&scope("order-slow"), fp("a"), |_| async move {
                    gate.await.ok();
                    Ok(1)
                })
                .await
        })
    };
    eventually("slow run in flight", || engine.stats().in_flight == 1).await;
    for i in 0..1000 {
        let out = engine
            .execute(&nth_scope(i), fp("a"), |_| async { Ok(2) })
            .await
            .unwrap();
        assert_eq!(out.kind(), OutcomeKind::Executed);
    }
    let ticker = tokio::spawn(async { (0..100).sum::<i32>() });
    assert_eq!(ticker.await.unwrap(), 4950);
    assert!(!slow.is_finished());
    release.send(()).unwrap();
    assert_eq!(*slow.await.unwrap().unwrap().value(), 1);
}

#[tokio::test]
async fn e8_shards_default_to_available_parallelism() {
    let engine = Engine::<u32>::builder().build().unwrap();
    let n = std::thread::available_parallelism().unwrap().get();
    assert_eq!(engine.shard_count(), n);
    assert_eq!(engine.stats().shards.len(), n);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e8_scopes_spread_over_shards() {
    let engine = Engine::<u32>::builder().shards(8).build().unwrap();
    for i in 0..4000 {
        let _ = engine
            .execute(&nth_scope(i), fp("a"), |_| async { Ok(1) })
            .await
            .unwrap();
    }
    eventually("all stored", || engine.stats().completed == 4000).await;
    for (i, sh) in engine.stats().shards.iter().enumerate() {
        // 500 expected per shard; a keyed hash keeps each within a wide band.
        assert!(
            (300..=700).contains(&sh.completed),
            "shard {i} holds {}",
            sh.completed
        );
    }
}

#[tokio::test(start_paused = true)]
async fn e10_shutdown_refuses_new_calls_and_lets_runs_finish_within_grace() {
    let engine = Engine::<u32>::builder().shards(2).build().unwrap();
    let runs = Runs::default();
    let r = runs.clone();
    let inflight = {
        let engine = engine.clone();
        tokio::spawn(async move {
            engine
                .execute(&scope("order-sd-1"), fp("a"), move |_| async move {
                    tokio::time::sleep(Duration::from_secs(2)).await;
                    r.hit();
                    Ok(1)
                })
                .await
        })
    };
    eventually("in flight", || engine.stats().in_flight == 1).await;
    let report = {
        let engine = engine.clone();
        tokio::spawn(async move { engine.shutdown(Duration::from_secs(10)).await })
    };
    tokio::task::yield_now().await;
    let err = engine
        .execute(&scope("order-sd-2"), fp("a"), |_| async { Ok(2) })
        .await
        .unwrap_err();
    assert_eq!(err, DedupError::ShuttingDown);
    assert_eq!(err.code(), Code::Unavailable);
    assert_eq!(*inflight.await.unwrap().unwrap().value(), 1);
    assert_eq!(report.await.unwrap().unfinished, 0);
    assert_eq!(runs.get(), 1);
    // After shutdown every operation answers UNAVAILABLE.
    assert_eq!(
        engine.lookup(&scope("order-sd-1")).await.unwrap_err(),
        DedupError::ShuttingDown
    );
}

#[tokio::test(start_paused = true)]
async fn e10_shutdown_past_grace_releases_waiters_with_unavailable() {
    let engine = Engine::<u32>::builder().shards(1).build().unwrap();
    let s = scope("order-sd-3");
    let leader = {
        let (engine, s) = (engine.clone(), s.clone());
        tokio::spawn(async move {
            engine
                .execute(&s, fp("a"), |_| async {
                    tokio::time::sleep(Duration::from_secs(20)).await;
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
    let report = engine.shutdown(Duration::from_secs(1)).await;
    assert_eq!(report.unfinished, 1);
    assert_eq!(waiter.await.unwrap().unwrap_err(), DedupError::ShuttingDown);
    // The action itself was not aborted: its own caller still gets its value.
    assert_eq!(*leader.await.unwrap().unwrap().value(), 1);
    assert_eq!(engine.stats().entries(), 0);
}

#[tokio::test(flavor = "current_thread")]
async fn e10_dropping_the_last_handle_stops_the_actors() {
    let metrics = tokio::runtime::Handle::current().metrics();
    let before = metrics.num_alive_tasks();
    let engine = Engine::<u32>::builder().shards(4).build().unwrap();
    let clone = engine.clone();
    let _ = engine
        .execute(&scope("order-drop-all"), fp("a"), |_| async { Ok(1) })
        .await
        .unwrap();
    assert_eq!(metrics.num_alive_tasks(), before + 4);
    drop(engine);
    tokio::task::yield_now().await;
    assert_eq!(
        metrics.num_alive_tasks(),
        before + 4,
        "a clone keeps them alive"
    );
    drop(clone);
    eventually("actors stopped", || metrics.num_alive_tasks() == before).await;
}

#[test]
fn e12_every_error_maps_to_its_status_code() {
    let cases = [
        (DedupError::Conflict, Code::FailedPrecondition),
        (
            DedupError::Panicked {
                message: "x".into(),
            },
            Code::Internal,
        ),
        (
            DedupError::Overloaded {
                retry_after: Duration::from_secs(1),
            },
            Code::ResourceExhausted,
        ),
        (
            DedupError::InFlight {
                retry_after: Duration::from_secs(1),
            },
            Code::Aborted,
        ),
        (
            DedupError::LeaseExpired {
                after: Duration::from_secs(1),
            },
            Code::Unavailable,
        ),
        (DedupError::Abandoned, Code::Unavailable),
        (DedupError::DeadlineExceeded, Code::DeadlineExceeded),
        (DedupError::ShuttingDown, Code::Unavailable),
        (
            DedupError::Action {
                status: idem_core::Status::new(Code::NotFound, "no such book"),
                outcome: OutcomeKind::Executed,
            },
            Code::NotFound,
        ),
    ];
    for (err, code) in cases {
        assert_eq!(err.code(), code, "{err}");
        let status = err.to_status();
        assert_eq!(status.code(), code);
        assert!(!err.to_string().is_empty());
        if matches!(
            err,
            DedupError::Overloaded { .. } | DedupError::InFlight { .. }
        ) {
            assert_eq!(status.retry_after(), Some(Duration::from_secs(1)));
        }
    }
}

#[tokio::test(start_paused = true)]
async fn z3_flood_of_unique_scopes_stays_bounded_and_drains_to_zero() {
    let max = 2_000;
    let engine = Engine::<Arc<[u8]>>::builder()
        .shards(4)
        .max_entries(max)
        .ttl(Duration::from_secs(5))
        .build()
        .unwrap();
    let mut executed = 0u64;
    let mut refused = 0u64;
    // Five waves of 1,000 new scopes each, one second apart: the TTL keeps about 5,000 alive
    // without a cap; the cap holds it at 2,000.
    for wave in 0..5u64 {
        for i in 0..1_000u64 {
            let s = nth_scope(wave * 1_000 + i);
            match engine
                .execute(&s, fp("a"), |_| async { Ok(Arc::from(&[0u8; 64][..])) })
                .await
            {
                Ok(_) => executed += 1,
                Err(DedupError::Overloaded { .. }) => refused += 1,
                Err(e) => panic!("unexpected {e}"),
            }
            assert!(engine.stats().entries() <= max as u64);
        }
        tokio::time::advance(Duration::from_secs(1)).await;
    }
    assert_eq!(executed, max as u64, "exactly the cap was admitted");
    assert_eq!(refused, 5_000 - max as u64);
    tokio::time::advance(Duration::from_secs(5)).await;
    eventually("all expired", || engine.stats().entries() == 0).await;
    let st = engine.stats();
    assert_eq!((st.in_flight, st.completed), (0, 0));
    // And the engine admits new scopes again.
    let out = engine
        .execute(&nth_scope(99_999), fp("a"), |_| async {
            Ok(Arc::from(&[][..]))
        })
        .await
        .unwrap();
    assert_eq!(out.kind(), OutcomeKind::Executed);
}

#[tokio::test]
async fn builder_rejects_bad_settings_naming_the_rule() {
    let cases: [(idem_dedup::EngineBuilder<u32>, &str); 7] = [
        (Engine::builder().shards(0), "shards"),
        (Engine::builder().ttl(Duration::ZERO), "ttl"),
        (
            Engine::builder().in_flight_timeout(Duration::ZERO),
            "in_flight_timeout",
        ),
        (Engine::builder().max_entries(0), "max_entries"),
        (Engine::builder().mailbox_capacity(0), "mailbox_capacity"),
        (Engine::builder().batch_size(0), "batch_size"),
        (
            Engine::builder().cache_failures(
                idem_core::CodeSet::EMPTY.with(Code::NotFound),
                Duration::ZERO,
            ),
            "cache_failures",
        ),
    ];
    for (b, rule) in cases {
        let err = b.build().unwrap_err();
        assert!(err.to_string().contains(rule), "{err} should name {rule}");
    }
}

#[test]
fn builder_outside_a_runtime_is_an_error_not_a_panic() {
    assert_eq!(
        Engine::<u32>::builder().build().unwrap_err(),
        ConfigError::NoRuntime
    );
}

/// E10 with more entries than a shard drops per poll (it drops them in batches, so no worker is
/// held for one long poll): dropping the last handle still stops the actor, and every entry is gone
/// from the engine-wide count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e10_dropping_the_last_handle_stops_a_full_shard_in_batches() {
    let metrics = tokio::runtime::Handle::current().metrics();
    let before = metrics.num_alive_tasks();
    let engine = Engine::<u64>::builder().shards(1).build().unwrap();
    for i in 0..10_000u64 {
        let _ = engine
            .execute(&nth_scope(i), fp("a"), move |_| async move { Ok(i) })
            .await
            .unwrap();
    }
    eventually("stored", || engine.stats().completed == 10_000).await;
    assert_eq!(metrics.num_alive_tasks(), before + 1);
    drop(engine);
    eventually("actor stopped", || metrics.num_alive_tasks() == before).await;
}

/// A failure (the action's, or a shared store's) reads as its status, once: no "action failed"
/// label over a store's message, and a chain that does not repeat the status's text.
#[test]
fn e12_an_action_error_says_its_status_once() {
    use std::error::Error as _;
    let cause = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "connection refused");
    let status = idem_core::Status::new(
        Code::Unavailable,
        "the idempotency store (PostgreSQL) failed: cannot connect to 127.0.0.1:1",
    )
    .with_source(cause);
    let e = DedupError::Action {
        status,
        outcome: OutcomeKind::Executed,
    };
    assert_eq!(
        e.to_string(),
        "UNAVAILABLE: the idempotency store (PostgreSQL) failed: cannot connect to 127.0.0.1:1"
    );
    assert_eq!(e.source().unwrap().to_string(), "connection refused");
}
