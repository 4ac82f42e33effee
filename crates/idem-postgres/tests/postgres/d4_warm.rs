//! D4 b: the warm transaction a committed run leaves for the next claim (issue 25). sqlx knows
//! it (a nested `begin()` is a savepoint, a failed action rolls everything back), and one whose
//! session ended (a restart, a dropped connection) is replaced by a fresh one: the run runs once.

use idem_core::{Code, Status};
use idem_postgres::{sqlx_status, PgEngine};
use idem_test_support::postgres::PgCluster;

use crate::support::{lazy_pool, TestDb};
use crate::{fp, place_order, scope};

/// A run that commits a savepoint's row (RELEASE SAVEPOINT), then fails: nothing may stay.
async fn nested_then_fail(engine: &PgEngine<String>, insert: String, i: usize) {
    let out = engine
        .execute(&scope("d4-warm", i), fp(i), move |tx| async move {
            let mut conn = tx.lock().await?;
            let mut inner = sqlx::Connection::begin(&mut *conn)
                .await
                .map_err(sqlx_status)?;
            sqlx::query(&insert)
                .bind(format!("intent-{i}"))
                .bind("savepoint")
                .bind(0i64)
                .execute(&mut *inner)
                .await
                .map_err(sqlx_status)?;
            // A savepoint's release: a COMMIT if sqlx did not know of the transaction.
            inner.commit().await.map_err(sqlx_status)?;
            Err::<String, _>(Status::new(
                Code::Internal,
                "the action fails after its nested commit",
            ))
        })
        .await;
    assert!(out.is_err(), "the action failed: {out:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d4_warm_transaction_keeps_nested_begin_a_savepoint_and_rolls_back_a_failed_action() {
    let db = TestDb::new("d4warm").await;
    let engine = db.engine(3).await;
    let insert = db.insert_order();
    let mut on_warm = 0;
    for i in 0..10 {
        // A committed run leaves a warm transaction; the failing run right after claims in it
        // (two statements of idem's: tx_claim and its ROLLBACK, no BEGIN), unless the machine
        // stalled past the warm transaction's idle limit: then it ran on a fresh one, try again.
        let _ = engine
            .execute(
                &scope("d4-warm-ok", i),
                fp(i),
                place_order(insert.clone(), i, "ok".into()),
            )
            .await
            .unwrap();
        let before = engine.queries_sent();
        nested_then_fail(&engine, insert.clone(), 100 + i).await;
        if engine.queries_sent() - before == 2 {
            on_warm += 1;
            break;
        }
    }
    assert_eq!(on_warm, 1, "a run claimed in a warm transaction");
    let orders = db.orders().await;
    assert!(
        orders.iter().all(|(_, by)| by == "ok"),
        "a failed action's savepoint row was committed: {orders:?}"
    );
    db.drop_schema().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d4_warm_transaction_whose_connection_died_is_replaced_and_the_run_runs_once() {
    // A cluster of the test's own: the test ends every session that idles in a transaction.
    let pg = PgCluster::start();
    let db = TestDb::on(&pg.url(), "idem_warm").await;
    let engine = PgEngine::<String>::builder(lazy_pool(&pg.url(), 4))
        .schema(&db.schema)
        .apply_schema(false)
        .build()
        .await
        .unwrap();
    let insert = db.insert_order();
    let mut replaced = 0;
    for i in 0..10 {
        let _ = engine
            .execute(
                &scope("d4-warm-dead", 2 * i),
                fp(2 * i),
                place_order(insert.clone(), 2 * i, "a".into()),
            )
            .await
            .unwrap();
        // The warm transaction's session ends, as in a server restart or a dropped connection.
        sqlx::query(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE state = 'idle in transaction' AND pid <> pg_backend_pid()",
        )
        .execute(&db.pool)
        .await
        .unwrap();
        let before = engine.queries_sent();
        let out = engine
            .execute(
                &scope("d4-warm-dead", 2 * i + 1),
                fp(2 * i + 1),
                place_order(insert.clone(), 2 * i + 1, "b".into()),
            )
            .await
            .expect("the run after its warm transaction died succeeds on a fresh one");
        assert!(out
            .into_value()
            .starts_with(&format!("intent-{}-by-b", 2 * i + 1)));
        // The claim on the dead transaction and its ROLLBACK, then BEGIN, tx_claim, record:
        // unless the warm transaction had passed its idle limit already (a stalled machine).
        if engine.queries_sent() - before == 5 {
            replaced += 1;
            break;
        }
    }
    assert_eq!(replaced, 1, "a run met a dead warm transaction");
    let orders = db.orders().await;
    let runs = |by: &str| orders.iter().filter(|(_, b)| b == by).count();
    assert_eq!(runs("a"), runs("b"), "every intent ran once: {orders:?}");
    assert_eq!(orders.len(), 2 * runs("a"));
}
