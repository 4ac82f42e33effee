//! D7 in one process: step names are checked, a finished operation replays without running a
//! step, a failed step rolls back and the retry resumes after the committed ones, another
//! request under the key of an unfinished operation is a conflict, and the sweeper removes an
//! expired operation with its recovery points.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use idem_core::{Code, Status};
use idem_dedup::OutcomeKind;
use idem_postgres::{sqlx_status, LocalCache, PgEngine};

use crate::d7_kill::LEASE;
use crate::d7_shop::{op_engine, shop_tables};
use crate::support::{pool, TestDb};
use crate::{fp, is_conflict, scope};

async fn count(db: &TestDb, table: &str) -> i64 {
    sqlx::query_scalar(&format!("SELECT count(*) FROM \"{}\".{table}", db.schema))
        .fetch_one(&db.pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn d7_empty_or_duplicate_step_names_get_a_clear_error() {
    let db = TestDb::new("d7names").await;
    let engine = op_engine(&db, LEASE).await;
    let empty = engine
        .operation(&scope("d7-names", 1), fp(1), "r", |op| async move {
            op.local("", |_tx| async { Ok(1_i64) }).await?;
            Ok(String::new())
        })
        .await
        .unwrap_err();
    assert_eq!(empty.code(), Code::Internal);
    assert!(empty.to_string().contains("needs a name"), "{empty}");

    let twice = engine
        .operation(&scope("d7-names", 2), fp(2), "r", |op| async move {
            op.local("reserve", |_tx| async { Ok(1_i64) }).await?;
            op.foreign("reserve", |_key| async { Ok(2_i64) }).await?;
            Ok(String::new())
        })
        .await
        .unwrap_err();
    assert!(
        twice.to_string().contains("\"reserve\" is used twice"),
        "{twice}"
    );
    let long = "x".repeat(129);
    let too_long = engine
        .operation(&scope("d7-names", 3), fp(3), "r", move |op| async move {
            op.foreign(&long, |_key| async { Ok(()) }).await?;
            Ok(String::new())
        })
        .await
        .unwrap_err();
    assert!(
        too_long.to_string().contains("at most 128 bytes"),
        "{too_long}"
    );
    // The first step of the refused run committed; nothing else did.
    assert_eq!(count(&db, "steps").await, 1);
    db.drop_schema().await;
}

#[tokio::test]
async fn d7_failed_step_rolls_back_and_the_retry_resumes_after_committed_steps() {
    let db = TestDb::new("d7resume").await;
    shop_tables(&db).await;
    let engine = op_engine(&db, LEASE).await;
    let reserves = Arc::new(AtomicU32::new(0));
    let keys = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let attempt = |fail: bool| {
        let (s, reserves, keys) = (db.schema.clone(), reserves.clone(), keys.clone());
        move |op: idem_postgres::Operation| async move {
            let s2 = s.clone();
            let id: i64 = op
                .local("reserve", |tx| async move {
                    reserves.fetch_add(1, Ordering::SeqCst);
                    let mut conn = tx.lock().await?;
                    sqlx::query_scalar(&format!(
                        "INSERT INTO \"{s}\".reservations (intent) VALUES ('i') RETURNING id"
                    ))
                    .fetch_one(&mut *conn)
                    .await
                    .map_err(sqlx_status)
                })
                .await?;
            op.local("confirm", |tx| async move {
                let mut conn = tx.lock().await?;
                sqlx::query(&format!(
                    "INSERT INTO \"{s2}\".confirmations (intent, reservation, charge) VALUES ('i', $1, 'c')"
                ))
                .bind(id)
                .execute(&mut *conn)
                .await
                .map_err(sqlx_status)?;
                if fail {
                    return Err(Status::new(Code::Unavailable, "confirm failed"));
                }
                Ok(())
            })
            .await?;
            let charge: String = op
                .foreign("charge", |key| {
                    keys.lock().push(key.clone());
                    async move { Ok(key.as_str().to_owned()) }
                })
                .await?;
            Ok(format!("{id} {charge}"))
        }
    };
    let err = engine
        .operation(&scope("d7-resume", 1), fp(1), "r", attempt(true))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("confirm failed"), "{err}");
    assert_eq!(
        count(&db, "confirmations").await,
        0,
        "the failed step's writes rolled back"
    );
    assert_eq!(count(&db, "reservations").await, 1);

    let out = engine
        .operation(&scope("d7-resume", 1), fp(1), "r", attempt(false))
        .await
        .unwrap();
    assert_eq!(out.kind(), OutcomeKind::Executed);
    assert_eq!(
        reserves.load(Ordering::SeqCst),
        1,
        "the committed step did not run again"
    );
    assert_eq!(count(&db, "reservations").await, 1);
    assert_eq!(count(&db, "confirmations").await, 1);
    assert_eq!(count(&db, "steps").await, 3);
    let keys = keys.lock().clone();
    assert_eq!(keys.len(), 1);
    assert!(out.value().ends_with(keys[0].as_str()));

    // Another request under the key of an unfinished operation: a conflict.
    let _ = engine
        .operation(&scope("d7-resume", 2), fp(2), "r", attempt(true))
        .await
        .unwrap_err();
    let other = engine
        .operation(&scope("d7-resume", 2), fp(3), "r", attempt(false))
        .await
        .unwrap_err();
    assert!(is_conflict(&other), "{other}");
    db.drop_schema().await;
}

#[tokio::test]
async fn d7_finished_operation_replays_and_expires_with_its_steps() {
    let db = TestDb::new("d7expire").await;
    let engine = PgEngine::<String>::builder(pool(&db.url, 4).await)
        .schema(&db.schema)
        .apply_schema(false)
        .ttl(Duration::from_millis(300))
        .local(LocalCache::new().shards(2))
        .no_sweeper()
        .build()
        .await
        .unwrap();
    let runs = Arc::new(AtomicU32::new(0));
    let handler = |runs: Arc<AtomicU32>| {
        move |op: idem_postgres::Operation| async move {
            let n: u32 = op
                .local("count", |_tx| async move {
                    Ok(runs.fetch_add(1, Ordering::SeqCst) + 1)
                })
                .await?;
            Ok(format!("run {n}"))
        }
    };
    let first = engine
        .operation(&scope("d7-expire", 1), fp(1), "r", handler(runs.clone()))
        .await
        .unwrap();
    let again = engine
        .operation(&scope("d7-expire", 1), fp(1), "r", handler(runs.clone()))
        .await
        .unwrap();
    assert_eq!(again.kind(), OutcomeKind::Replayed);
    assert_eq!(again.value(), first.value());
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_eq!(
        (count(&db, "operations").await, count(&db, "steps").await),
        (1, 1)
    );

    // Past the TTL the sweeper removes the record, the operation and its recovery points.
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(engine.sweep_now().await.unwrap(), 2);
    assert_eq!(count(&db, "operations").await, 0);
    assert_eq!(count(&db, "steps").await, 0);
    assert_eq!(db.records().await, 0);
    db.drop_schema().await;
}
