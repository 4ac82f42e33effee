//! K7: an action runs as the current `Run` of its scope, under every deduplicator, so the
//! clients it calls derive downstream keys from the inbound intent.

mod common;
mod tier;

use common::{fp, scope};
use idem_core::run::{self, Run};
use idem_core::Status;
use idem_dedup::remote::RemoteTier;
use idem_dedup::tiered::TieredEngine;
use idem_dedup::{Deduplicator, Engine, OutcomeKind};
use tier::MemTier;

/// What the action saw of its run: (scope, token, takeover, the key of its first stock call).
type Seen = (idem_core::Scope, Option<u64>, bool, String);

fn seen() -> Result<Seen, Status> {
    let run = Run::current().expect("the action runs inside a run");
    let key = run::outbound_key("/stock.v1.Stock/Deduct", None);
    Ok((
        run.scope().clone(),
        run.fencing_token(),
        run.is_takeover(),
        key.as_str().to_owned(),
    ))
}

#[tokio::test]
async fn k7_the_engines_action_runs_as_the_current_run() {
    let engine = Engine::<Seen>::builder().build().unwrap();
    let s = scope("k7-engine-0001");
    let out = engine
        .execute(&s, fp("a"), |_| async { seen() })
        .await
        .unwrap();
    let (scope_seen, token, takeover, key) = out.value().clone();
    assert_eq!(scope_seen, s);
    assert_eq!((token, takeover), (None, false));
    let want = Run::new(&s, None, run::RunStart::Fresh).next_key("/stock.v1.Stock/Deduct");
    assert_eq!(key, want.as_str());
    // Through the Deduplicator interface too, and nothing is current outside the action.
    let other = scope("k7-engine-0002");
    let out = Deduplicator::execute(&engine, &other, fp("a"), |()| async { seen() })
        .await
        .unwrap();
    assert_eq!(out.value().0, other);
    assert!(Run::current().is_none());
}

#[tokio::test]
async fn k7_a_run_handed_to_a_task_stays_the_current_run() {
    let engine = Engine::<Seen>::builder().build().unwrap();
    let s = scope("k7-engine-0003");
    let (go_tx, go_rx) = tokio::sync::oneshot::channel::<()>();
    let leader = {
        let (engine, s) = (engine.clone(), s.clone());
        tokio::spawn(async move {
            engine
                .execute(&s, fp("a"), move |_| async move {
                    let _ = go_rx.await;
                    seen()
                })
                .await
        })
    };
    common::eventually("the run in flight", || engine.stats().in_flight == 1).await;
    leader.abort(); // the caller goes; the engine hands the run to a task (E5)
    let _ = leader.await;
    go_tx.send(()).unwrap();
    let out = engine
        .execute(&s, fp("a"), |_| async { seen() })
        .await
        .unwrap();
    assert!(matches!(
        out.kind(),
        OutcomeKind::Joined | OutcomeKind::Replayed
    ));
    assert_eq!(out.value().0, s, "the handed-off run still knew its scope");
}

#[tokio::test]
async fn k7_a_tiered_run_carries_its_claims_token_and_the_same_keys_on_every_instance() {
    let record = MemTier::default();
    let a = TieredEngine::<String, _>::builder(record.clone())
        .build()
        .unwrap();
    let b = TieredEngine::<String, _>::builder(record.clone())
        .build()
        .unwrap();
    let s = scope("k7-tiered-0001");
    let action = |token: idem_dedup::remote::FencingToken| async move {
        let (_, seen_token, _, key) = seen()?;
        assert_eq!(seen_token, Some(token.get()));
        Ok::<_, Status>(key)
    };
    let on_a = a.execute(&s, fp("a"), action).await.unwrap();
    assert_eq!(on_a.kind(), OutcomeKind::Executed);
    // Another instance running the same intent afresh (the record forgotten, as after a crash
    // that lost it) sends the same downstream key.
    record.forget(&s).await.unwrap();
    let on_b = b.execute(&s, fp("a"), action).await.unwrap();
    assert_eq!(on_b.kind(), OutcomeKind::Executed);
    assert_eq!(on_a.value(), on_b.value());
}
