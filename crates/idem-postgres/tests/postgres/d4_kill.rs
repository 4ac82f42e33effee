//! D4 / Z4: `kill -9` of a holder process. Transactional mode: its orders and its records vanish
//! with its transactions, the waiting retries run once, orders == intents. Remote-tier mode: the
//! holder's lease lapses and exactly one waiter runs.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use idem_core::Status;
use idem_dedup::OutcomeKind;

use crate::support::TestDb;
use crate::{fp, lines, place_order, scope, wait_for_lines, worker, worker_role};

/// Intents the killed holder holds open.
const HELD: usize = 10;
/// Intents sent only after the kill.
const MORE: usize = 40;
const TX_TEST: &str =
    "d4_kill::d4_kill_9_holder_mid_transaction_order_and_record_vanish_retry_runs_once";
const TIER_TEST: &str = "d4_kill::d4_kill_9_remote_tier_holder_lease_lapses_and_one_waiter_runs";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d4_kill_9_holder_mid_transaction_order_and_record_vanish_retry_runs_once() {
    if worker_role().is_some() {
        return tx_holder_process().await;
    }
    let db = TestDb::new("d4kill").await;
    let mut child = worker(TX_TEST, "holder", &[("IDEM_PG_SCHEMA", db.schema.clone())])
        .spawn()
        .expect("start the holder process");
    let mut out = lines(&mut child);
    // Every held intent has its order inserted, inside a transaction that never ends.
    wait_for_lines(&mut out, "HOLDING ", HELD).await;
    assert_eq!(
        db.orders().await.len(),
        0,
        "uncommitted orders are invisible"
    );
    assert_eq!(db.records().await, 0, "uncommitted records are invisible");

    // The retries arrive while the holder still holds: they wait for its transactions.
    let engine = db.engine(8).await;
    let insert = db.insert_order();
    let mut retries = tokio::task::JoinSet::new();
    for i in 0..HELD {
        let (engine, insert) = (engine.clone(), insert.clone());
        retries.spawn(async move {
            engine
                .execute(
                    &scope("d4-kill", i),
                    fp(i),
                    place_order(insert, i, "retry".into()),
                )
                .await
        });
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        db.orders().await.len(),
        0,
        "the retries wait for the holder"
    );
    child.start_kill().expect("kill -9 the holder");
    let status = child.wait().await.expect("reap the holder");
    assert!(!status.success(), "the holder was killed");

    while let Some(r) = retries.join_next().await {
        let out = r.unwrap().expect("a retry after the kill");
        assert_eq!(
            out.kind(),
            OutcomeKind::Executed,
            "the retry ran the action itself"
        );
        assert!(out.value().contains("-by-retry-"), "{}", out.value());
    }
    for i in HELD..HELD + MORE {
        let out = engine
            .execute(
                &scope("d4-kill", i),
                fp(i),
                place_order(insert.clone(), i, "retry".into()),
            )
            .await
            .unwrap();
        assert_eq!(out.kind(), OutcomeKind::Executed);
    }
    let orders = db.orders().await;
    assert_eq!(orders.len(), HELD + MORE, "orders == intents");
    assert!(
        orders.iter().all(|(_, by)| by == "retry"),
        "no order of the killed holder survived: {orders:?}"
    );
    let mut intents: Vec<_> = orders.iter().map(|(i, _)| i.clone()).collect();
    intents.sort();
    intents.dedup();
    assert_eq!(intents.len(), HELD + MORE, "one order per intent");
    assert_eq!(db.records().await as usize, HELD + MORE);
    // Replays: nothing runs again.
    for i in 0..HELD + MORE {
        let out = engine
            .execute(
                &scope("d4-kill", i),
                fp(i),
                place_order(insert.clone(), i, "again".into()),
            )
            .await
            .unwrap();
        assert_eq!(out.kind(), OutcomeKind::Replayed);
    }
    assert_eq!(db.orders().await.len(), HELD + MORE);
    eprintln!(
        "d4_kill_9 (transactional): {HELD} held intents killed, {} orders, all by the retries",
        orders.len()
    );
    db.drop_schema().await;
}

/// Holds HELD intents in open transactions (their orders inserted), then waits to be killed.
async fn tx_holder_process() {
    let schema = std::env::var("IDEM_PG_SCHEMA").unwrap();
    let db = TestDb::on(&crate::support::url(), &schema).await;
    let engine = db.engine(HELD as u32 + 1).await;
    let insert = db.insert_order();
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..HELD {
        let (engine, insert) = (engine.clone(), insert.clone());
        tasks.spawn(async move {
            let order = place_order(insert, i, "holder".into());
            engine
                .execute(&scope("d4-kill", i), fp(i), move |tx| async move {
                    let value = order(tx).await?;
                    println!("HOLDING {i}");
                    std::future::pending::<()>().await;
                    Ok(value)
                })
                .await
        });
    }
    while tasks.join_next().await.is_some() {}
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d4_kill_9_remote_tier_holder_lease_lapses_and_one_waiter_runs() {
    let lease = Duration::from_millis(800);
    if worker_role().is_some() {
        let schema = std::env::var("IDEM_PG_SCHEMA").unwrap();
        let db = TestDb::on(&crate::support::url(), &schema).await;
        let engine = db.tiered(2, lease).await;
        let _ = engine
            .execute(&scope("d4-kill-tier", 1), fp(1), |token| async move {
                println!("HOLDING {token}");
                std::future::pending::<()>().await;
                Ok::<_, Status>("from the killed holder".to_string())
            })
            .await;
        return;
    }
    let db = TestDb::new("d4killtier").await;
    let mut child = worker(
        TIER_TEST,
        "holder",
        &[("IDEM_PG_SCHEMA", db.schema.clone())],
    )
    .spawn()
    .expect("start the holder process");
    let mut out = lines(&mut child);
    wait_for_lines(&mut out, "HOLDING ", 1).await;

    let runs = Arc::new(AtomicU32::new(0));
    let waiters: Vec<_> = [db.tiered(3, lease).await, db.tiered(3, lease).await]
        .into_iter()
        .map(|e| {
            let runs = runs.clone();
            tokio::spawn(async move {
                e.execute(&scope("d4-kill-tier", 1), fp(1), move |token| async move {
                    assert!(token.is_fenced());
                    runs.fetch_add(1, Ordering::SeqCst);
                    Ok::<_, Status>(format!("from a waiter, token {token}"))
                })
                .await
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(100)).await;
    child.start_kill().expect("kill -9 the holder");
    child.wait().await.expect("reap the holder");
    let mut values = Vec::new();
    for w in waiters {
        let out = w.await.unwrap().expect("a waiter after the lease lapsed");
        values.push(out.into_value());
    }
    assert_eq!(runs.load(Ordering::SeqCst), 1, "exactly one waiter ran");
    assert_eq!(values[0], values[1], "both waiters got the one run's value");
    assert!(values[0].starts_with("from a waiter"));
    db.drop_schema().await;
}
