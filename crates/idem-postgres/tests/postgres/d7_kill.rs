//! D7: `kill -9` of a worker process after each step of a checkout in turn (reserve, the charge
//! call before its record, the charge recorded, confirm). The retry on another engine takes the
//! operation over once the killed run's lease lapses and resumes after its last recovery point:
//! committed local steps never run again, the charge is only replayed (same key), and the final
//! state and response are those of a run without faults.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use idem_core::run::{downstream_key, Step};
use idem_dedup::OutcomeKind;
use idem_postgres::operation::STEP_TARGET;

use crate::d7_shop::{
    op_engine, shop_tables, state_of, ChargeService, Checkout, Ran, CRASH_POINTS,
};
use crate::support::TestDb;
use crate::{fp, lines, scope, wait_for_lines, worker, worker_role};

const TEST: &str = "d7_kill::d7_kill_9_after_each_step_resumes_without_repeating_a_committed_step";
pub(crate) const LEASE: Duration = Duration::from_millis(600);

/// The key the checkout of intent `i` charges under, in every run.
pub(crate) fn charge_key(run: &str, i: usize) -> String {
    downstream_key(&scope(run, i).digest(), STEP_TARGET, Step::Named("charge"))
        .as_str()
        .to_owned()
}

/// The worker's side: runs intent `IDEM_D7_INTENT`'s checkout until its crash point.
pub(crate) async fn checkout_worker(run: &str) {
    let schema = std::env::var("IDEM_PG_SCHEMA").unwrap();
    let db = TestDb::on(&crate::support::url(), &schema).await;
    let engine = op_engine(&db, LEASE).await;
    let i: usize = std::env::var("IDEM_D7_INTENT").unwrap().parse().unwrap();
    let checkout = Checkout {
        schema,
        charge_addr: std::env::var("IDEM_D7_CHARGE").unwrap(),
        crash: std::env::var("IDEM_D7_CRASH").ok(),
        then_go_on: std::env::var("IDEM_D7_GO_ON").is_ok(),
        ran: Arc::default(),
    };
    let out = engine
        .operation(&scope(run, i), fp(i), format!("intent-{i}"), move |op| {
            checkout.run(op)
        })
        .await;
    match out {
        Ok(out) => println!("RESULT ok {}", out.value()),
        Err(e) => println!(
            "RESULT err {} {e}",
            e.reason().map(|r| r.to_string()).unwrap_or_default()
        ),
    }
}

/// Starts the worker for intent `i`, stopping at `crash`, and waits for it to get there.
pub(crate) async fn start_worker(
    test: &str,
    db: &TestDb,
    svc: &ChargeService,
    i: usize,
    crash: &str,
    go_on: bool,
) -> (
    tokio::process::Child,
    tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
) {
    let mut env = vec![
        ("IDEM_PG_SCHEMA", db.schema.clone()),
        ("IDEM_D7_INTENT", i.to_string()),
        ("IDEM_D7_CHARGE", svc.addr.clone()),
        ("IDEM_D7_CRASH", crash.to_owned()),
    ];
    if go_on {
        env.push(("IDEM_D7_GO_ON", "1".to_owned()));
    }
    let mut child = worker(test, "checkout", &env)
        .spawn()
        .expect("start the worker");
    let mut out = lines(&mut child);
    wait_for_lines(&mut out, &format!("CRASHPOINT {crash}"), 1).await;
    (child, out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d7_kill_9_after_each_step_resumes_without_repeating_a_committed_step() {
    if worker_role().is_some() {
        return checkout_worker("d7-kill").await;
    }
    let db = TestDb::new("d7kill").await;
    shop_tables(&db).await;
    let svc = ChargeService::start().await;
    let engine = op_engine(&db, LEASE).await;
    let ran = Arc::new(Ran::default());
    let checkout = |ran: &Arc<Ran>| Checkout {
        schema: db.schema.clone(),
        charge_addr: svc.addr.clone(),
        crash: None,
        then_go_on: false,
        ran: ran.clone(),
    };

    // Intent 0: no fault, the reference.
    let c = checkout(&ran);
    let clean = engine
        .operation(&scope("d7-kill", 0), fp(0), "intent-0", move |op| c.run(op))
        .await
        .unwrap();
    assert_eq!(clean.kind(), OutcomeKind::Executed);
    let key0 = charge_key("d7-kill", 0);
    assert_eq!(
        clean.value(),
        &state_of(&db, &svc, "intent-0", &key0, 1).await
    );

    for (n, crash) in CRASH_POINTS.iter().enumerate() {
        let i = n + 1;
        let (mut child, _out) = start_worker(TEST, &db, &svc, i, crash, false).await;
        child.start_kill().expect("kill -9 the worker");
        assert!(
            !child.wait().await.unwrap().success(),
            "the worker was killed"
        );

        // The client's retry, on another engine: waits out the dead run's lease, resumes.
        let here = Arc::new(Ran::default());
        let c = checkout(&here);
        let out = engine
            .operation(
                &scope("d7-kill", i),
                fp(i),
                format!("intent-{i}"),
                move |op| {
                    assert!(
                        op.is_resumed(),
                        "the retry resumes the killed run's operation"
                    );
                    c.run(op)
                },
            )
            .await
            .unwrap_or_else(|e| panic!("the retry after a kill at {crash}: {e}"));
        assert_eq!(out.kind(), OutcomeKind::Executed, "{crash}");

        // What the retry ran itself: only the steps after the last recovery point.
        let (reserve, charge, confirm) = match *crash {
            "reserve" => (0, 1, 1),
            "charge-call" => (0, 1, 1),
            "charge" => (0, 0, 1),
            "confirm" => (0, 0, 0),
            _ => unreachable!(),
        };
        assert_eq!(
            here.reserve.load(Ordering::SeqCst),
            reserve,
            "{crash}: reserve runs"
        );
        assert_eq!(
            here.charge.load(Ordering::SeqCst),
            charge,
            "{crash}: charge calls"
        );
        assert_eq!(
            here.confirm.load(Ordering::SeqCst),
            confirm,
            "{crash}: confirm runs"
        );
        // The charge service saw the key twice only when the killed run called it and died
        // before recording the charge: then the retry's call was a replay.
        let calls = if *crash == "charge-call" { 2 } else { 1 };
        let key = charge_key("d7-kill", i);
        let want = state_of(&db, &svc, &format!("intent-{i}"), &key, calls).await;
        assert_eq!(
            out.value(),
            &want,
            "{crash}: the response a run without faults gives"
        );

        // Replayed from now on, nothing runs.
        let c = checkout(&here);
        let again = engine
            .operation(
                &scope("d7-kill", i),
                fp(i),
                format!("intent-{i}"),
                move |op| c.run(op),
            )
            .await
            .unwrap();
        assert_eq!(again.kind(), OutcomeKind::Replayed);
        assert_eq!(again.value(), out.value());
        assert_eq!(
            here.handler.load(Ordering::SeqCst),
            1,
            "{crash}: the replay ran nothing"
        );
        eprintln!("d7_kill_9 at {crash}: resumed, {calls} charge call(s) under one key");
    }
    assert_eq!(
        svc.charges(),
        CRASH_POINTS.len() + 1,
        "one charge per intent"
    );
    db.drop_schema().await;
}
