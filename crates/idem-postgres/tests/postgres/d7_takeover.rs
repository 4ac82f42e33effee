//! D7 with D8: a run stalled (`SIGSTOP`) after its first step past its lease is taken over by
//! another engine, which resumes after that step and finishes; the stalled run, woken, learns
//! that its lease was lost and records nothing more.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use idem_dedup::OutcomeKind;
use idem_test_support::signal;

use crate::d7_kill::{charge_key, checkout_worker, start_worker, LEASE};
use crate::d7_shop::{op_engine, shop_tables, state_of, ChargeService, Checkout, Ran};
use crate::support::TestDb;
use crate::{fp, scope, wait_for_lines, worker_role};

const TEST: &str =
    "d7_takeover::d7_stalled_run_is_taken_over_after_its_lease_and_the_new_run_resumes";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d7_stalled_run_is_taken_over_after_its_lease_and_the_new_run_resumes() {
    if worker_role().is_some() {
        return checkout_worker("d7-stall").await;
    }
    let db = TestDb::new("d7stall").await;
    shop_tables(&db).await;
    let svc = ChargeService::start().await;
    let (mut child, mut out) = start_worker(TEST, &db, &svc, 1, "reserve", true).await;
    let pid = child.id().expect("the worker's pid");
    signal::stop(pid).await;

    let engine = op_engine(&db, LEASE).await;
    let here = Arc::new(Ran::default());
    let c = Checkout {
        schema: db.schema.clone(),
        charge_addr: svc.addr.clone(),
        crash: None,
        then_go_on: false,
        ran: here.clone(),
    };
    let done = engine
        .operation(&scope("d7-stall", 1), fp(1), "intent-1", move |op| {
            assert!(op.is_resumed() && op.run().is_takeover());
            assert!(op.is_committed("reserve") && !op.is_committed("charge"));
            c.run(op)
        })
        .await
        .expect("the takeover finishes the operation");
    assert_eq!(done.kind(), OutcomeKind::Executed);
    assert_eq!(
        here.reserve.load(Ordering::SeqCst),
        0,
        "the stalled run's reserve is kept"
    );
    assert_eq!(here.charge.load(Ordering::SeqCst), 1);
    assert_eq!(here.confirm.load(Ordering::SeqCst), 1);

    signal::resume(pid).await;
    wait_for_lines(&mut out, "LEASE-LOST", 1).await;
    wait_for_lines(&mut out, "RESULT err FENCED_OUT ", 1).await;
    assert!(child.wait().await.unwrap().success());

    let key = charge_key("d7-stall", 1);
    let want = state_of(&db, &svc, "intent-1", &key, 1).await;
    assert_eq!(
        done.value(),
        &want,
        "one reservation, one charge, one confirmation"
    );
    db.drop_schema().await;
}
