//! D4 / performance: what a call costs in statements. A replay of a locally held result: none.
//! A cross-instance replay: one statement in remote-tier mode; in transactional mode the claim
//! inside BEGIN ... ROLLBACK. A unique intent in transactional mode: BEGIN, claim, the action's
//! own statements, the record with the COMMIT (one query string).

use std::time::Duration;

use idem_core::Status;
use idem_dedup::OutcomeKind;
use idem_postgres::Source;

use crate::support::TestDb;
use crate::{fp, place_order, scope};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d4_remote_tier_local_replay_costs_no_query_cross_instance_replay_one() {
    let db = TestDb::new("d4qtier").await;
    let lease = Duration::from_secs(10);
    let (a, b) = (db.tiered(2, lease).await, db.tiered(2, lease).await);
    let s = scope("d4-queries", 1);
    let run = |_| async { Ok::<_, Status>("order-1".to_string()) };
    let _ = a.execute(&s, fp(1), run).await.unwrap();
    let before = a.remote().queries_sent();
    for _ in 0..100 {
        let out = a.execute(&s, fp(1), run).await.unwrap();
        assert_eq!(out.kind(), OutcomeKind::Replayed);
    }
    assert_eq!(
        a.remote().queries_sent() - before,
        0,
        "local replays: no query"
    );
    let before = b.remote().queries_sent();
    let out = b.execute(&s, fp(1), run).await.unwrap();
    assert_eq!(
        (out.kind(), out.source()),
        (OutcomeKind::Replayed, Source::OtherInstance)
    );
    assert_eq!(
        b.remote().queries_sent() - before,
        1,
        "a cross-instance replay: one query"
    );
    db.drop_schema().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d4_transactional_local_replay_costs_no_query_cross_instance_replay_one_claim() {
    let db = TestDb::new("d4qtx").await;
    let (a, b) = (db.engine(2).await, db.engine(2).await);
    let insert = db.insert_order();
    let s = scope("d4-queries", 1);

    let before = a.queries_sent();
    let _ = a
        .execute(&s, fp(1), place_order(insert.clone(), 1, "A".into()))
        .await
        .unwrap();
    // BEGIN, tx_claim, (the action's INSERT is the user's), the record with COMMIT (and the
    // BEGIN of the warm transaction the next run claims in: no ROLLBACK, no BEGIN of its own).
    assert_eq!(
        a.queries_sent() - before,
        3,
        "a unique intent: 3 statements of idem's"
    );

    let before = a.queries_sent();
    for _ in 0..100 {
        let out = a
            .execute(&s, fp(1), place_order(insert.clone(), 1, "A".into()))
            .await
            .unwrap();
        assert_eq!(out.kind(), OutcomeKind::Replayed);
    }
    assert_eq!(a.queries_sent() - before, 0, "local replays: no query");

    let before = b.queries_sent();
    let out = b
        .execute(&s, fp(1), place_order(insert, 1, "B".into()))
        .await
        .unwrap();
    assert_eq!(out.kind(), OutcomeKind::Replayed);
    // BEGIN, tx_claim (one query that returns the record), and the ROLLBACK sqlx queues on
    // the connection (sent with its next use, not waited for).
    assert_eq!(
        b.queries_sent() - before,
        3,
        "a cross-instance replay: BEGIN, one claim query, ROLLBACK"
    );
    assert_eq!(db.orders().await.len(), 1);
    db.drop_schema().await;
}
