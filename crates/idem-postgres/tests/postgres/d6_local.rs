//! D6, D4 b, E15: the transactional engine's local engine, configured as the tiered engine's
//! is (`LocalCache`, same defaults): a record another engine committed becomes a replay here
//! with the local copy's expiry and costs no query after that; the engine's name labels its
//! local engine and follows the engine rule.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use idem_core::Status;
use idem_dedup::{OutcomeKind, Source};
use idem_postgres::{PgEngine, SetupError};
use idem_test_support::capture::capture;
use tokio::time::Instant;

use crate::support::{lazy_pool, pool, url, TestDb};
use crate::{fp, place_order, scope};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d6_a_record_another_engine_committed_is_replayed_here_with_the_local_copys_expiry() {
    let db = TestDb::new("d6seed").await;
    let (a, b) = (db.engine(3).await, db.engine(3).await);
    let s = scope("d6-seed", 1);
    let ran = a
        .execute(&s, fp(1), place_order(db.insert_order(), 1, "a".into()))
        .await
        .unwrap();
    assert_eq!(ran.kind(), OutcomeKind::Executed);

    let runs = Arc::new(AtomicU32::new(0));
    let on_b = |runs: Arc<AtomicU32>| {
        move |_tx| async move {
            runs.fetch_add(1, Ordering::SeqCst);
            Ok::<_, Status>("b ran".to_owned())
        }
    };
    let before = Instant::now();
    let there = b.execute(&s, fp(1), on_b(runs.clone())).await.unwrap();
    let after = Instant::now();
    assert_eq!(
        (there.kind(), there.source(), there.value()),
        (OutcomeKind::Replayed, Source::Local, ran.value())
    );
    // The default copy's TTL, shared with the tiered engine: 5 minutes.
    let copy = Duration::from_secs(300);
    assert!(
        there.expires_at() >= before + copy && there.expires_at() <= after + copy,
        "the record read from the table is kept here for the local copy's 5 minutes"
    );

    // Held here now: replayed with the same expiry and without a query.
    let queries = b.queries_sent();
    let again = b.execute(&s, fp(1), on_b(runs.clone())).await.unwrap();
    assert_eq!(
        (again.kind(), again.value(), again.expires_at()),
        (OutcomeKind::Replayed, ran.value(), there.expires_at())
    );
    assert_eq!(b.queries_sent(), queries);
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    assert_eq!(db.orders().await.len(), 1);
    db.drop_schema().await;
}

#[tokio::test]
async fn e15_a_pg_engines_name_labels_its_local_engine_and_follows_the_engine_rule() {
    let db = TestDb::new("e15name").await;
    let engine = PgEngine::<String>::builder(pool(&db.url, 2).await)
        .schema(&db.schema)
        .apply_schema(false)
        .name("orders-pg")
        .build()
        .await
        .unwrap();
    let (c, guard) = capture();
    let _ = engine
        .execute(&scope("e15-name", 1), fp(1), |_tx| async {
            Ok::<_, Status>("v".to_owned())
        })
        .await
        .unwrap();
    drop(guard);
    let spans = c.spans_named("idem_dedup.execute");
    assert_eq!(spans.len(), 1, "{spans:#?}");
    assert_eq!(spans[0].field("engine"), Some("orders-pg"));

    // Refused before any connection is made (a pool that would connect lazily, never used).
    let err = PgEngine::<String>::builder(lazy_pool(&url(), 1))
        .name("no spaces")
        .build()
        .await
        .unwrap_err();
    assert!(matches!(err, SetupError::Invalid(_)), "{err:?}");
    assert!(err.to_string().contains("name must be"), "{err}");
    db.drop_schema().await;
}
