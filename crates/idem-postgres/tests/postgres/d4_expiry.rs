//! D4 / Z3: rows past their TTL are deleted by the sweeper (tokio's timer, bounded batches), and
//! the table does not grow under a flood of unique keys once results expire.

use std::time::Duration;

use idem_core::Status;
use idem_postgres::{
    ClaimOutcome, LocalCache, OwnerId, PgEngine, PgTier, RemoteTier, TieredEngine,
};
use idem_test_support::time::eventually;

use crate::support::{pool, TestDb};
use crate::{fp, place_order, scope};

const ROUNDS: usize = 3;
const PER_ROUND: usize = 300;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d4_sweeper_deletes_expired_rows_and_the_table_stays_bounded_under_a_unique_key_flood() {
    let db = TestDb::new("d4sweep").await;
    let ttl = Duration::from_millis(300);
    let engine = PgEngine::<String>::builder(pool(&db.url, 6).await)
        .schema(&db.schema)
        .apply_schema(false)
        .query_timeout(Duration::from_secs(5))
        .ttl(ttl)
        .sweep_every(Duration::from_millis(100))
        .sweep_batch(50) // several batches per tick
        .build()
        .await
        .unwrap();
    let insert = db.insert_order();
    let mut peak = 0;
    for round in 0..ROUNDS {
        let mut tasks = tokio::task::JoinSet::new();
        for i in 0..PER_ROUND {
            let (engine, insert) = (engine.clone(), insert.clone());
            let n = round * PER_ROUND + i;
            tasks.spawn(async move {
                engine
                    .execute(
                        &scope("d4-sweep", n),
                        fp(n),
                        place_order(insert, n, "flood".into()),
                    )
                    .await
            });
            if i % 16 == 15 {
                while tasks.len() > 16 {
                    let r = tasks.join_next().await.unwrap().unwrap();
                    let _ = r.unwrap_or_else(|e| panic!("a flood call failed: {e}"));
                }
            }
        }
        while let Some(r) = tasks.join_next().await {
            let _ = r
                .unwrap()
                .unwrap_or_else(|e| panic!("a flood call failed: {e}"));
        }
        peak = peak.max(db.records().await);
        // Once the round's results expire, the sweeper empties the table: no growth.
        eventually(
            Duration::from_secs(20),
            "the sweeper deleted the expired rows",
            || async { db.records().await == 0 },
        )
        .await;
    }
    assert!(
        peak > 0 && peak <= PER_ROUND as i64,
        "rows at a round's end: {peak}"
    );
    assert_eq!(
        db.orders().await.len(),
        ROUNDS * PER_ROUND,
        "one order per intent"
    );
    // An expired scope runs again (its record is gone), here with a new order.
    let again = engine
        .execute(
            &scope("d4-sweep", 0),
            fp(0),
            place_order(insert, 0, "again".into()),
        )
        .await
        .unwrap();
    assert_eq!(again.kind(), idem_dedup::OutcomeKind::Executed);
    db.drop_schema().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d4_sweep_now_deletes_expired_remote_tier_records_and_lapsed_claims() {
    let db = TestDb::new("d4sweeptier").await;
    let tier = PgTier::builder(pool(&db.url, 3).await)
        .schema(&db.schema)
        .apply_schema(false)
        .no_sweeper()
        .build()
        .await
        .unwrap();
    let engine = |ttl: Duration| {
        TieredEngine::<String>::builder(tier.clone())
            .ttl(ttl)
            .build()
            .unwrap()
    };
    let (short, long) = (
        engine(Duration::from_millis(50)),
        engine(Duration::from_secs(3600)),
    );
    for i in 0..120 {
        let e = if i % 2 == 0 { &short } else { &long };
        let _ = e
            .execute(&scope("d4-sweep-tier", i), fp(i), |_| async {
                Ok::<_, Status>("v".to_string())
            })
            .await
            .unwrap();
    }
    // Ten claims that nobody completes, with a short lease.
    for i in 1_000..1_010 {
        let c = tier
            .claim(
                &scope("d4-sweep-tier", i),
                fp(i),
                Duration::from_millis(50),
                OwnerId::random(),
            )
            .await
            .unwrap();
        assert!(matches!(c, ClaimOutcome::Claimed { .. }));
    }
    assert_eq!(db.records().await, 130);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        tier.sweep_now().await.unwrap(),
        70,
        "the expired results and the lapsed claims, not the live results"
    );
    assert_eq!(db.records().await, 60);
    assert_eq!(tier.sweep_now().await.unwrap(), 0);
    db.drop_schema().await;
}

/// E2 / D4: a run tells its callers when its record leaves the table (`ttl` from its commit),
/// not when this instance's shorter-lived copy does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d4_e2_a_run_expires_with_its_table_record_not_the_local_copy() {
    let db = TestDb::new("d4exp").await;
    let hour = Duration::from_secs(3600);
    let engine = PgEngine::<String>::builder(pool(&db.url, 3).await)
        .schema(&db.schema)
        .apply_schema(false)
        .ttl(hour)
        .local(LocalCache::new().ttl(Duration::from_secs(10)))
        .build()
        .await
        .unwrap();
    let before = tokio::time::Instant::now();
    let out = engine
        .execute(
            &scope("d4-exp", 1),
            fp(1),
            place_order(db.insert_order(), 1, "exp".into()),
        )
        .await
        .unwrap();
    let after = tokio::time::Instant::now();
    assert_eq!(out.kind(), idem_dedup::OutcomeKind::Executed);
    assert!(
        out.expires_at() >= before + hour && out.expires_at() <= after + hour,
        "the record lives an hour from its commit, not the local copy's 10 s"
    );
}
