//! D6, D4: `Engine::seed` stores a result obtained elsewhere (a record another instance
//! committed) as a completed entry: it is replayed and runs nothing, it replaces nothing the
//! engine holds, it takes room as a new run does, and it expires at the engine's TTL.

mod common;

use std::time::Duration;

use common::{eventually, fp, gated_leader, scope, Runs};
use idem_core::{Code, Status};
use idem_dedup::{DedupError, Engine, EntryState, InFlightPolicy, OutcomeKind, Source};
use tokio::time::Instant;

#[tokio::test]
async fn d6_a_seeded_result_is_replayed_and_runs_nothing() {
    let engine = Engine::<String>::builder().shards(1).build().unwrap();
    let s = scope("order-seed-0001");
    let before = Instant::now();
    let seeded = engine
        .seed(&s, fp("a"), "order-1001".to_owned())
        .await
        .unwrap();
    let after = Instant::now();
    let ttl = Duration::from_secs(24 * 3600);
    assert_eq!(
        (seeded.kind(), seeded.source(), seeded.value().as_str()),
        (OutcomeKind::Replayed, Source::Local, "order-1001")
    );
    assert!(seeded.expires_at() >= before + ttl && seeded.expires_at() <= after + ttl);

    let runs = Runs::default();
    for _ in 0..3 {
        let r = runs.clone();
        let again = engine
            .execute(&s, fp("a"), move |_| async move {
                r.hit();
                Ok::<_, Status>("order-1002".to_owned())
            })
            .await
            .unwrap();
        assert_eq!(
            (again.kind(), again.value().as_str()),
            (OutcomeKind::Replayed, "order-1001")
        );
        assert_eq!(again.expires_at(), seeded.expires_at());
    }
    assert_eq!(runs.get(), 0);
    let o = engine.stats().outcomes;
    assert_eq!((o.executed, o.replayed), (0, 4));
    assert_eq!(engine.stats().completed, 1);
    let info = engine.lookup(&s).await.unwrap().unwrap();
    assert_eq!(info.state, EntryState::Completed);
}

#[tokio::test]
async fn d6_a_seed_replaces_nothing_the_engine_holds() {
    let engine = Engine::<String>::builder().shards(1).build().unwrap();
    let s = scope("order-seed-0002");
    let ran = engine
        .execute(&s, fp("a"), |_| async {
            Ok::<_, Status>("order-1001".to_owned())
        })
        .await
        .unwrap();
    assert_eq!(ran.kind(), OutcomeKind::Executed);

    // The stored result is the answer, not the seed's value, and keeps its expiry.
    let seeded = engine
        .seed(&s, fp("a"), "order-9999".to_owned())
        .await
        .unwrap();
    assert_eq!(
        (seeded.kind(), seeded.value().as_str()),
        (OutcomeKind::Replayed, "order-1001")
    );
    assert_eq!(seeded.expires_at(), ran.expires_at());

    // Another request under the same key is a conflict, as for a call.
    let conflict = engine
        .seed(&s, fp("b"), "order-9999".to_owned())
        .await
        .unwrap_err();
    assert_eq!(conflict, DedupError::Conflict);
    assert_eq!(engine.stats().completed, 1);
}

#[tokio::test]
async fn d6_a_seed_joins_a_run_in_flight_or_is_refused_under_reject() {
    let engine = Engine::<String>::builder().shards(1).build().unwrap();
    let s = scope("order-seed-0003");
    let (leader, release) = gated_leader(&engine, &s, "a", || Ok("order-1001".to_owned())).await;
    let seed = {
        let (engine, s) = (engine.clone(), s.clone());
        tokio::spawn(async move { engine.seed(&s, fp("a"), "order-9999".to_owned()).await })
    };
    eventually("the seed waits for the run", || {
        engine.stats().outcomes.joined == 1
    })
    .await;
    release.send(()).unwrap();
    let led = leader.await.unwrap().unwrap();
    let joined = seed.await.unwrap().unwrap();
    assert_eq!(led.kind(), OutcomeKind::Executed);
    assert_eq!(
        (joined.kind(), joined.value().as_str()),
        (OutcomeKind::Joined, "order-1001")
    );

    let reject = Engine::<String>::builder()
        .shards(1)
        .in_flight_policy(InFlightPolicy::Reject)
        .build()
        .unwrap();
    let (leader, release) = gated_leader(&reject, &s, "a", || Ok("order-1001".to_owned())).await;
    let err = reject
        .seed(&s, fp("a"), "order-9999".to_owned())
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Aborted);
    release.send(()).unwrap();
    assert_eq!(leader.await.unwrap().unwrap().kind(), OutcomeKind::Executed);
}

#[tokio::test]
async fn e7_a_seed_takes_room_as_a_new_run_does() {
    let engine = Engine::<String>::builder()
        .shards(1)
        .max_entries(1)
        .build()
        .unwrap();
    let one = engine
        .seed(&scope("order-seed-0004"), fp("a"), "one".to_owned())
        .await
        .unwrap();
    assert_eq!(one.kind(), OutcomeKind::Replayed);
    let full = engine
        .seed(&scope("order-seed-0005"), fp("a"), "two".to_owned())
        .await
        .unwrap_err();
    assert!(matches!(full, DedupError::Overloaded { .. }), "{full:?}");
    let call = engine
        .execute(&scope("order-seed-0006"), fp("a"), |_| async {
            Ok::<_, Status>("three".to_owned())
        })
        .await
        .unwrap_err();
    assert!(matches!(call, DedupError::Overloaded { .. }), "{call:?}");
    assert_eq!(engine.stats().entries(), 1);
}

#[tokio::test(start_paused = true)]
async fn e2_a_seeded_result_expires_at_the_engines_ttl() {
    let ttl = Duration::from_secs(60);
    let engine = Engine::<String>::builder()
        .shards(1)
        .ttl(ttl)
        .build()
        .unwrap();
    let s = scope("order-seed-0007");
    let seeded = engine
        .seed(&s, fp("a"), "order-1001".to_owned())
        .await
        .unwrap();
    assert_eq!(seeded.expires_at(), Instant::now() + ttl);
    tokio::time::advance(ttl - Duration::from_millis(1)).await;
    assert!(engine.lookup(&s).await.unwrap().is_some());
    tokio::time::advance(Duration::from_millis(1)).await;
    let runs = Runs::default();
    let r = runs.clone();
    let out = engine
        .execute(&s, fp("a"), move |_| async move {
            r.hit();
            Ok::<_, Status>("order-1002".to_owned())
        })
        .await
        .unwrap();
    assert_eq!(
        (out.kind(), out.value().as_str()),
        (OutcomeKind::Executed, "order-1002")
    );
    assert_eq!(runs.get(), 1);
}
