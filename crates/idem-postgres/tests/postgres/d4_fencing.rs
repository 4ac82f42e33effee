//! D1 / D4: a holder stalled past its lease is fenced out. Remote-tier mode: a waiting instance
//! claims with a higher token, and the stalled holder's late completion is refused. Transactional
//! mode: the server ends the stalled holder's idle transaction, the waiter runs, and the stalled
//! holder's commit fails: one order.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use idem_core::{Code, Fingerprint, Status};
use idem_dedup::OutcomeKind;
use idem_postgres::{sqlx_status, PgEngine};
use idem_test_support::fencing::{assert_fenced_out, take_over, StalledHolder};
use idem_test_support::time::eventually;

use crate::scope;
use crate::support::{pool, TestDb};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d4_remote_tier_holder_stalled_past_its_lease_is_fenced_out() {
    let db = TestDb::new("d4fence").await;
    let lease = Duration::from_millis(400);
    let (a, b, c) = (
        db.tiered(2, lease).await,
        db.tiered(2, lease).await,
        db.tiered(2, lease).await,
    );
    let s = scope("d4-fence", 1);
    let fp = Fingerprint::of(b"qty=1");

    // A claims, then stalls for 1.5 s: past its lease.
    let stalled = StalledHolder::spawn(&a, &s, fp, Duration::from_millis(1_500));
    eventually(Duration::from_secs(10), "A claimed", || {
        let t = stalled.token();
        async move { t != 0 }
    })
    .await;

    // B and C wait; when the lease lapses one of them claims and runs, the other joins it.
    let new = take_over(&b, &c, &s, fp).await;
    let [ob, oc] = &new.outcomes;
    assert_eq!(new.runs, 1, "exactly one waiter ran");
    assert_eq!(ob.value(), "from the new holder");
    assert_eq!(oc.value(), "from the new holder");

    // A wakes and completes late: fenced out, nothing overwritten, its caller learns it; then
    // everyone, A included, gets the new holder's result.
    assert_fenced_out(stalled, &new, [&a, &b, &c], &s, fp).await;
    db.drop_schema().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d4_transactional_holder_stalled_past_its_lease_is_ended_by_the_server() {
    let db = TestDb::new("d4txfence").await;
    let engine = || async {
        PgEngine::<String>::builder(pool(&db.url, 3).await)
            .schema(&db.schema)
            .apply_schema(false)
            .query_timeout(Duration::from_secs(5))
            .lease(Duration::from_millis(500))
            .build()
            .await
            .unwrap()
    };
    let (a, b) = (engine().await, engine().await);
    let s = scope("d4-txfence", 1);
    let fp = Fingerprint::of(b"qty=1");
    let insert = db.insert_order();

    let inserted = Arc::new(AtomicU32::new(0));
    let (a2, s2, ins, flag) = (a.clone(), s.clone(), insert.clone(), inserted.clone());
    let stalled = tokio::spawn(async move {
        a2.execute(&s2, fp, move |tx| async move {
            {
                let mut conn = tx.lock().await?;
                sqlx::query(&ins)
                    .bind("intent-1")
                    .bind("A")
                    .bind(tx.token().get() as i64)
                    .execute(&mut *conn)
                    .await
                    .map_err(sqlx_status)?;
            }
            flag.store(1, Ordering::SeqCst);
            // Idle in transaction past the lease: the server ends the session.
            tokio::time::sleep(Duration::from_millis(1_500)).await;
            Ok::<_, Status>("from A".to_string())
        })
        .await
    });
    eventually(Duration::from_secs(10), "A inserted its order", || {
        let f = inserted.clone();
        async move { f.load(Ordering::SeqCst) == 1 }
    })
    .await;
    // B waits on the scope's lock; A's session ends at its lease, B runs.
    let out_b = b
        .execute(&s, fp, crate::place_order(insert.clone(), 1, "B".into()))
        .await
        .unwrap();
    assert_eq!(out_b.kind(), OutcomeKind::Executed);
    let late = stalled.await.unwrap().unwrap_err();
    assert_eq!(late.code(), Code::Unavailable, "A's commit fails: {late}");
    let orders = db.orders().await;
    assert_eq!(
        orders,
        vec![("intent-1".to_string(), "B".to_string())],
        "one order, B's"
    );
    // A's retry replays B's result.
    let again = a
        .execute(&s, fp, crate::place_order(insert, 1, "A".into()))
        .await
        .unwrap();
    assert_eq!(again.kind(), OutcomeKind::Replayed);
    assert_eq!(again.value(), out_b.value());
    assert_eq!(db.orders().await.len(), 1);
    db.drop_schema().await;
}
