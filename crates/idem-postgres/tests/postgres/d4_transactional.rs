//! D4 b: the side effect and its record commit together or not at all; failures and panics roll
//! both back; the schema applies idempotently; lookup and forget (E13).

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use idem_core::{Code, Status};
use idem_dedup::{EntryState, OutcomeKind};
use idem_postgres::sqlx_status;

use crate::support::{pool, unique_schema, TestDb};
use crate::{fp, place_order, scope};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d4_failed_action_rolls_back_its_side_effect_and_the_next_call_runs_once() {
    let db = TestDb::new("d4fail").await;
    let engine = db.engine(3).await;
    let insert = db.insert_order();
    let s = scope("d4-fail", 1);

    // The action writes its order, then fails: the order is rolled back, nothing is stored.
    let order = place_order(insert.clone(), 1, "failed".into());
    let e = engine
        .execute(&s, fp(1), move |tx| async move {
            order(tx).await?;
            Err::<String, _>(Status::new(Code::Unavailable, "payment provider down"))
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::Unavailable);
    assert_eq!(
        db.orders().await.len(),
        0,
        "the failed run's order was rolled back"
    );
    assert_eq!(db.records().await, 0, "no record of a failure");

    // A panic after the write: rolled back too (E4).
    let order = place_order(insert.clone(), 1, "panicked".into());
    let e = engine
        .execute(&s, fp(1), move |tx| async move {
            order(tx).await?;
            panic!("the action panicked after its write");
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::Internal, "{e}");
    assert_eq!(
        db.orders().await.len(),
        0,
        "the panicked run's order was rolled back"
    );

    // The next call runs once; its retry replays.
    let runs = Arc::new(AtomicU32::new(0));
    for _ in 0..3 {
        let (runs, order) = (runs.clone(), place_order(insert.clone(), 1, "ok".into()));
        let _ = engine
            .execute_in_transaction(&s, fp(1), move |tx, token| async move {
                assert!(token.is_fenced());
                assert_eq!(token, tx.token());
                runs.fetch_add(1, Ordering::SeqCst);
                order(tx).await
            })
            .await
            .unwrap();
    }
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_eq!(db.orders().await, vec![("intent-1".into(), "ok".into())]);
    db.drop_schema().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d4_transaction_handle_is_closed_after_the_run_and_nested_begin_is_a_savepoint() {
    let db = TestDb::new("d4handle").await;
    let engine = db.engine(3).await;
    let insert = db.insert_order();
    let kept = Arc::new(parking_lot::Mutex::new(None));
    let k = kept.clone();
    let _ = engine
        .execute(&scope("d4-handle", 1), fp(1), move |tx| async move {
            {
                let mut conn = tx.lock().await?;
                // A nested transaction inside the run is a savepoint: rolling it back keeps the
                // run's transaction.
                let mut inner = sqlx::Connection::begin(&mut *conn)
                    .await
                    .map_err(sqlx_status)?;
                sqlx::query(&insert)
                    .bind("intent-1")
                    .bind("savepoint")
                    .bind(0i64)
                    .execute(&mut *inner)
                    .await
                    .map_err(sqlx_status)?;
                inner.rollback().await.map_err(sqlx_status)?;
                sqlx::query(&insert)
                    .bind("intent-1")
                    .bind("run")
                    .bind(0i64)
                    .execute(&mut *conn)
                    .await
                    .map_err(sqlx_status)?;
            }
            *k.lock() = Some(tx);
            Ok("done".to_string())
        })
        .await
        .unwrap();
    let tx = kept.lock().take().unwrap();
    assert!(
        tx.lock().await.is_err(),
        "the handle is closed once the run committed"
    );
    assert_eq!(db.orders().await, vec![("intent-1".into(), "run".into())]);
    db.drop_schema().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d4_migrate_is_idempotent_and_safe_from_many_instances_at_once() {
    let url = crate::support::url();
    let p = pool(&url, 6).await;
    let schema = unique_schema("d4migrate");
    let runs: Vec<_> = (0..4)
        .map(|_| {
            let (p, schema) = (p.clone(), schema.clone());
            tokio::spawn(async move { idem_postgres::migrate(&p, &schema).await })
        })
        .collect();
    for r in runs {
        r.await.unwrap().expect("concurrent migrate");
    }
    idem_postgres::migrate(&p, &schema).await.expect("again");
    let version: i32 = sqlx::query_scalar(&format!(
        "SELECT max(version) FROM \"{schema}\".schema_version"
    ))
    .fetch_one(&p)
    .await
    .unwrap();
    assert_eq!(version, idem_postgres::SCHEMA_VERSION);
    let e = idem_postgres::migrate(&p, "Bad-Name").await.unwrap_err();
    assert!(e.to_string().contains("schema name"), "{e}");
    let _ = sqlx::raw_sql(&format!("DROP SCHEMA \"{schema}\" CASCADE"))
        .execute(&p)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e13_lookup_and_forget_reach_the_table() {
    let db = TestDb::new("e13lookup").await;
    let (a, b) = (db.engine(2).await, db.engine(2).await);
    let insert = db.insert_order();
    let s = scope("e13-lookup", 1);
    assert!(b.lookup(&s).await.unwrap().is_none());
    let _ = a
        .execute(&s, fp(1), place_order(insert.clone(), 1, "A".into()))
        .await
        .unwrap();
    // B holds nothing locally: it reads the table.
    let info = b.lookup(&s).await.unwrap().expect("the record");
    assert_eq!(info.state, EntryState::Completed);
    assert!(info.expires_in.is_some());
    assert!(b.forget(&s).await.unwrap());
    assert!(b.lookup(&s).await.unwrap().is_none());
    // A still holds its local copy; B runs again (the record is gone).
    let out = b
        .execute(&s, fp(1), place_order(insert, 1, "B".into()))
        .await
        .unwrap();
    assert_eq!(out.kind(), OutcomeKind::Executed);
    assert_eq!(db.orders().await.len(), 2);
    db.drop_schema().await;
}
