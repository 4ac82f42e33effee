//! D7: an operation whose run was killed after its charge, and whose client gave up, is finished
//! by a completer, exactly once with two completers (two engines) running at the same time.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use idem_dedup::OutcomeKind;
use idem_postgres::{Completer, CompleterReport, SetupError};

use crate::d7_kill::LEASE;
use crate::d7_kill::{charge_key, checkout_worker, start_worker};
use crate::d7_shop::{op_engine, shop_tables, state_of, ChargeService, Checkout, Ran};
use crate::support::TestDb;
use crate::{fp, scope, worker_role};

const TEST: &str = "d7_completer::d7_two_completers_finish_an_abandoned_operation_exactly_once";
const METHOD: &str = "/shop.v1.Shop/CreateOrder";
/// The completers' own lease: long, so that a renewal delayed on a loaded machine never lets the
/// other completer take a live run over (that would be fencing doing its job, counted as a
/// failure, not the race this test is about). The killed worker's claim keeps the short `LEASE`.
const COMPLETER_LEASE: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d7_two_completers_finish_an_abandoned_operation_exactly_once() {
    if worker_role().is_some() {
        return checkout_worker("d7-complete").await;
    }
    let db = TestDb::new("d7complete").await;
    shop_tables(&db).await;
    let svc = ChargeService::start().await;
    let (mut child, _out) = start_worker(TEST, &db, &svc, 1, "charge", false).await;
    child.start_kill().expect("kill -9 the worker");
    child.wait().await.unwrap();

    let ran = Arc::new(Ran::default());
    let mut completers = Vec::new();
    for _ in 0..2 {
        let c = Checkout {
            schema: db.schema.clone(),
            charge_addr: svc.addr.clone(),
            crash: None,
            then_go_on: false,
            ran: ran.clone(),
        };
        let completer = Completer::builder(op_engine(&db, COMPLETER_LEASE).await)
            .handler(METHOD, move |op| c.clone().run(op))
            .grace(Duration::from_millis(200))
            .build()
            .expect("completer");
        completers.push(completer);
    }
    // Both pass at once, again and again, until the operation is finished.
    let mut total = CompleterReport::default();
    for _ in 0..200 {
        let (a, b) = tokio::join!(completers[0].run_once(), completers[1].run_once());
        for r in [a.unwrap(), b.unwrap()] {
            total.finished += r.finished;
            total.skipped += r.skipped;
            total.failed += r.failed;
        }
        if total.finished > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(total.finished, 1, "one completer finished it: {total:?}");
    assert_eq!(total.failed, 0, "{total:?}");
    assert_eq!(
        ran.handler.load(Ordering::SeqCst),
        1,
        "the handler ran once"
    );
    assert_eq!(
        ran.reserve.load(Ordering::SeqCst),
        0,
        "the killed run's reserve is kept"
    );
    assert_eq!(
        ran.charge.load(Ordering::SeqCst),
        0,
        "its recorded charge is not called again"
    );
    assert_eq!(ran.confirm.load(Ordering::SeqCst), 1);
    // Nothing left to finish.
    for c in &completers {
        assert_eq!(c.run_once().await.unwrap(), CompleterReport::default());
    }

    // The client comes back: the completer's result, replayed.
    let key = charge_key("d7-complete", 1);
    let want = state_of(&db, &svc, "intent-1", &key, 1).await;
    let engine = op_engine(&db, LEASE).await;
    let c = Checkout {
        schema: db.schema.clone(),
        charge_addr: svc.addr.clone(),
        crash: None,
        then_go_on: false,
        ran: ran.clone(),
    };
    let out = engine
        .operation(&scope("d7-complete", 1), fp(1), "intent-1", move |op| {
            c.run(op)
        })
        .await
        .unwrap();
    assert_eq!(out.kind(), OutcomeKind::Replayed);
    assert_eq!(out.value(), &want);
    assert_eq!(ran.handler.load(Ordering::SeqCst), 1);
    db.drop_schema().await;
}

#[tokio::test]
async fn d7_completer_refuses_settings_it_cannot_honour() {
    let db = TestDb::new("d7cbad").await;
    let engine = op_engine(&db, LEASE).await;
    let none = Completer::builder(engine.clone()).build().unwrap_err();
    assert!(none.to_string().contains("at least one handler"), "{none}");
    let twice = Completer::builder(engine.clone())
        .handler(METHOD, |_op| async { Ok(String::new()) })
        .handler(METHOD, |_op| async { Ok(String::new()) })
        .build()
        .unwrap_err();
    assert!(twice.to_string().contains("only one handler"), "{twice}");
    let zero = Completer::builder(engine)
        .handler(METHOD, |_op| async { Ok(String::new()) })
        .grace(Duration::ZERO)
        .build()
        .unwrap_err();
    assert!(
        matches!(zero, SetupError::Invalid(_)) && zero.to_string().contains("greater than zero")
    );
    db.drop_schema().await;
}
