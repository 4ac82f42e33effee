//! D8 on the PostgreSQL tier: holders renew their lease while the action runs (the schema's
//! `renew` function, on the server's clock). An action of five leases runs once while another
//! instance waits for it; `kill -9` of a holder process is taken over by the survivor; a holder
//! process stopped (`SIGSTOP`) past its lease learns at its next renewal that it lost the claim,
//! and its completion is fenced out; renewals per lease are bounded, counted in statements.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use idem_core::run::Run;
use idem_core::{Code, Reason, Status};
use idem_dedup::remote::RecordState;
use idem_dedup::OutcomeKind;
use idem_postgres::{FencingToken, RemoteTier, Source};
use idem_test_support::signal;
use tokio::io::BufReader;
use tokio::process::ChildStdout;
use tokio::time::Instant;

use crate::support::TestDb;
use crate::{fp, from_marker, lines, scope, worker, worker_role};

const KILL_TEST: &str =
    "d8_renewal::d8_kill_9_of_a_renewing_holder_is_taken_over_and_the_survivors_result_is_stored";
const STOP_TEST: &str =
    "d8_renewal::d8_a_holder_stopped_past_its_lease_finds_its_lease_lost_and_is_fenced_out";

/// The rest of the worker's next line holding `marker`, from the marker on.
async fn next_line(out: &mut tokio::io::Lines<BufReader<ChildStdout>>, marker: &str) -> String {
    loop {
        let line = tokio::time::timeout(Duration::from_secs(60), out.next_line())
            .await
            .unwrap_or_else(|_| panic!("no `{marker}` from the worker within 60 s"))
            .expect("read the worker's output")
            .unwrap_or_else(|| panic!("the worker ended before `{marker}`"));
        if let Some(rest) = from_marker(&line, marker) {
            return rest[marker.len()..].trim().to_owned();
        }
    }
}

/// The worker side: its schema, and the lease its parent gave.
async fn worker_db() -> (TestDb, Duration) {
    let schema = std::env::var("IDEM_PG_SCHEMA").unwrap();
    let lease: u64 = std::env::var("IDEM_D8_LEASE_MS").unwrap().parse().unwrap();
    let db = TestDb::on(&crate::support::url(), &schema).await;
    (db, Duration::from_millis(lease))
}

fn worker_env(db: &TestDb, lease: Duration) -> [(&'static str, String); 2] {
    [
        ("IDEM_PG_SCHEMA", db.schema.clone()),
        ("IDEM_D8_LEASE_MS", lease.as_millis().to_string()),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d8_an_action_of_five_leases_runs_once_while_another_instance_waits_for_it() {
    let db = TestDb::new("d8five").await;
    let lease = Duration::from_millis(600);
    let (a, b) = (db.tiered(2, lease).await, db.tiered(2, lease).await);
    let s = scope("d8-five-leases", 1);
    let runs = Arc::new(AtomicU32::new(0));

    let (started_tx, started) = tokio::sync::oneshot::channel::<u64>();
    let holder = {
        let (a, s, runs) = (a.clone(), s.clone(), runs.clone());
        tokio::spawn(async move {
            a.execute(&s, fp(1), move |token| async move {
                runs.fetch_add(1, Ordering::SeqCst);
                let _ = started_tx.send(token.get());
                tokio::time::sleep(lease * 5).await;
                let lost = Run::current().expect("inside a run").is_lease_lost();
                Ok::<_, Status>(format!("refund-1001 (token {token}, lost={lost})"))
            })
            .await
        })
    };
    let token = started.await.unwrap();
    // Another instance asks while the action runs: it waits through the holder's renewals.
    let r = runs.clone();
    let joined = b
        .execute(&s, fp(1), move |_| async move {
            r.fetch_add(1, Ordering::SeqCst);
            Ok::<_, Status>("a second run".into())
        })
        .await
        .unwrap();
    let first = holder.await.unwrap().unwrap();

    assert_eq!(runs.load(Ordering::SeqCst), 1, "one run in all");
    assert_eq!(first.kind(), OutcomeKind::Executed);
    assert!(first.is_recorded());
    assert_eq!(
        first.value(),
        &format!("refund-1001 (token {token}, lost=false)")
    );
    assert_eq!(
        (joined.kind(), joined.source()),
        (OutcomeKind::Joined, Source::OtherInstance)
    );
    assert_eq!(joined.value(), first.value());
    let (sa, sb) = (a.stats(), b.stats());
    assert!(sa.renewed > 0, "{sa:?}");
    assert_eq!(
        (sa.lease_lost, sa.fenced_out, sa.executed),
        (0, 0, 1),
        "{sa:?}"
    );
    assert_eq!((sb.executed, sb.remote_joined), (0, 1), "{sb:?}");
    db.drop_schema().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d8_kill_9_of_a_renewing_holder_is_taken_over_and_the_survivors_result_is_stored() {
    if worker_role().is_some() {
        let (db, lease) = worker_db().await;
        let e = db.tiered(2, lease).await;
        let _ = e
            .execute(&scope("d8-kill", 1), fp(1), |token| async move {
                println!("HOLDING {token}");
                std::future::pending::<()>().await;
                Ok::<_, Status>("from the killed holder".to_string())
            })
            .await;
        return;
    }
    let db = TestDb::new("d8kill").await;
    let lease = Duration::from_secs(1);
    let mut child = worker(KILL_TEST, "holder", &worker_env(&db, lease))
        .spawn()
        .expect("start the holder process");
    let mut out = lines(&mut child);
    let held: u64 = next_line(&mut out, "HOLDING ").await.parse().unwrap();

    let b = db.tiered(3, lease).await;
    let s = scope("d8-kill", 1);
    let runs = Arc::new(AtomicU32::new(0));
    let survivor = {
        let (b, s, runs) = (b.clone(), s.clone(), runs.clone());
        tokio::spawn(async move {
            b.execute(&s, fp(1), move |token| async move {
                runs.fetch_add(1, Ordering::SeqCst);
                let takeover = Run::current().expect("inside a run").is_takeover();
                Ok::<_, Status>(format!(
                    "from the survivor (token {token}, takeover={takeover})"
                ))
            })
            .await
        })
    };
    // Three leases on, the live holder still holds its claim: its renewals kept it.
    tokio::time::sleep(lease * 3).await;
    let record = b.remote().lookup(&s).await.unwrap().expect("a live record");
    assert_eq!(
        record.state,
        RecordState::InFlight {
            holder: FencingToken::new(held)
        }
    );
    assert_eq!(
        runs.load(Ordering::SeqCst),
        0,
        "a live holder is not taken over"
    );

    let killed = Instant::now();
    child.start_kill().expect("kill -9 the holder");
    child.wait().await.expect("reap the holder");
    let out = survivor.await.unwrap().expect("the survivor's call");
    let took = killed.elapsed();

    assert_eq!(runs.load(Ordering::SeqCst), 1, "the survivor ran once");
    assert_eq!(
        (out.kind(), out.source()),
        (OutcomeKind::Executed, Source::ThisInstance)
    );
    let token = out.fencing_token().unwrap().get();
    assert!(
        token > held,
        "the takeover's token {token} > the holder's {held}"
    );
    assert_eq!(
        out.value(),
        &format!("from the survivor (token {token}, takeover=true)")
    );
    assert!(out.is_recorded());
    // The survivor's result is the stored one: a fresh instance replays it.
    let c = db.tiered(2, lease).await;
    let again = c
        .execute(&s, fp(1), |_| async {
            Ok::<_, Status>("must not run".into())
        })
        .await
        .unwrap();
    assert_eq!(
        (again.kind(), again.source()),
        (OutcomeKind::Replayed, Source::OtherInstance)
    );
    assert_eq!(again.value(), out.value());
    eprintln!("d8 kill -9 (PostgreSQL): taken over {took:?} after the kill, lease {lease:?}");
    db.drop_schema().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d8_a_holder_stopped_past_its_lease_finds_its_lease_lost_and_is_fenced_out() {
    if worker_role().is_some() {
        let (db, lease) = worker_db().await;
        let e = db.tiered(2, lease).await;
        let late = e
            .execute(&scope("d8-stop", 1), fp(1), |token| async move {
                println!("HOLDING {token}");
                let run = Run::current().expect("inside a run");
                run.lease_lost().await;
                println!("LOST {}", run.is_lease_lost());
                Ok::<_, Status>("from the stopped holder".to_string())
            })
            .await;
        let fenced = matches!(&late, Err(e) if e.code() == Code::Aborted
            && e.reason() == Some(Reason::FENCED_OUT));
        println!(
            "DONE fenced_out={fenced} lease_lost={}",
            e.stats().lease_lost
        );
        return;
    }
    let db = TestDb::new("d8stop").await;
    let lease = Duration::from_millis(500);
    let mut child = worker(STOP_TEST, "holder", &worker_env(&db, lease))
        .spawn()
        .expect("start the holder process");
    let mut out = lines(&mut child);
    let held: u64 = next_line(&mut out, "HOLDING ").await.parse().unwrap();
    let pid = child.id().expect("the holder runs");

    // The holder stops: its renewals with it. Past its lease, another instance takes over.
    signal::stop(pid).await;
    let b = db.tiered(2, lease).await;
    let s = scope("d8-stop", 1);
    let new = b
        .execute(&s, fp(1), |token| async move {
            let takeover = Run::current().expect("inside a run").is_takeover();
            Ok::<_, Status>(format!(
                "from the new holder (token {token}, takeover={takeover})"
            ))
        })
        .await
        .unwrap();
    assert_eq!(new.kind(), OutcomeKind::Executed);
    let token = new.fencing_token().unwrap().get();
    assert!(
        token > held,
        "the new token {token} > the stopped holder's {held}"
    );
    assert!(new.value().ends_with("takeover=true)"), "{}", new.value());

    // Resumed, the stopped holder's next renewal finds the claim lost: its Run says so, and its
    // completion is fenced out.
    signal::resume(pid).await;
    assert_eq!(next_line(&mut out, "LOST ").await, "true");
    assert_eq!(
        next_line(&mut out, "DONE ").await,
        "fenced_out=true lease_lost=1",
        "the holder's completion was refused"
    );
    assert!(child.wait().await.unwrap().success());
    // The new holder's result stands, on every instance.
    let c = db.tiered(2, lease).await;
    for e in [&b, &c] {
        let again = e
            .execute(&s, fp(1), |_| async {
                Ok::<_, Status>("must not run".into())
            })
            .await
            .unwrap();
        assert_eq!(again.value(), new.value());
    }
    db.drop_schema().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d8_renewals_per_lease_are_bounded() {
    let db = TestDb::new("d8bound").await;
    let lease = Duration::from_millis(600);
    let a = db.tiered(2, lease).await;
    let before = a.remote().queries_sent();
    let started = Instant::now();
    let out = a
        .execute(&scope("d8-bounded", 1), fp(1), move |_| async move {
            tokio::time::sleep(lease * 5).await;
            Ok::<_, Status>("five leases".to_string())
        })
        .await
        .unwrap();
    let elapsed = started.elapsed();
    assert!(out.is_recorded());
    let st = a.stats();
    let renewals = st.renewed + st.renew_failed;
    // One claim, one completion, the renewals (one statement each): nothing else.
    assert_eq!(a.remote().queries_sent() - before, 2 + renewals, "{st:?}");
    // Each renewal begins at least a third of the lease after the one before (and the first
    // a third after the claim): at most three per lease of the run.
    let every = lease / 3;
    let bound = (elapsed.as_secs_f64() / every.as_secs_f64()).floor() as u64;
    assert!(renewals > 0, "{st:?}");
    assert!(
        renewals <= bound,
        "{renewals} renewals in {elapsed:?}: more than one per {every:?}"
    );
    eprintln!("d8 (PostgreSQL): {renewals} renewals in {elapsed:?} with a {lease:?} lease");
    db.drop_schema().await;
}

/// The `renew` function on its own: it extends the in-flight row of its token, on the server's
/// clock, and refuses every other row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d8_the_renew_function_extends_only_its_own_in_flight_claim() {
    let db = TestDb::new("d8fn").await;
    let tier = db.tier(2).await;
    let s = scope("d8-renew-fn", 1);
    let owner = idem_postgres::OwnerId::random();
    let lease = Duration::from_secs(2);
    let idem_postgres::ClaimOutcome::Claimed { token, .. } =
        tier.claim(&s, fp(1), lease, owner).await.unwrap()
    else {
        panic!("claimed")
    };
    let claim = idem_dedup::remote::Claim {
        scope: &s,
        fingerprint: fp(1),
        token,
        owner,
    };
    let left = |tier: idem_postgres::PgTier| {
        let s = s.clone();
        async move { tier.lookup(&s).await.unwrap().unwrap().expires_in.unwrap() }
    };
    // A renewal for a minute: the lease left jumps from about 2 s to about 60 s.
    let minute = Duration::from_secs(60);
    assert!(left(tier.clone()).await <= lease);
    assert_eq!(
        tier.renew(claim, minute).await.unwrap(),
        idem_postgres::Commit::Committed
    );
    assert!(left(tier.clone()).await > lease);
    // Another token is refused, and changes nothing.
    let stale = idem_dedup::remote::Claim {
        token: FencingToken::new(token.get() - 1),
        ..claim
    };
    assert_eq!(
        tier.renew(stale, lease).await.unwrap(),
        idem_postgres::Commit::FencedOut
    );
    assert!(left(tier.clone()).await > lease);
    // Once completed, the record is never renewed (nor its TTL touched).
    let ttl = Duration::from_secs(3600);
    tier.complete(claim, b"done".to_vec(), ttl).await.unwrap();
    assert_eq!(
        tier.renew(claim, minute).await.unwrap(),
        idem_postgres::Commit::FencedOut
    );
    let after = tier.lookup(&s).await.unwrap().unwrap();
    assert_eq!(after.state, RecordState::Completed);
    assert!(after.expires_in.unwrap() > minute, "the TTL stands");
    // Released or forgotten: nothing to renew.
    let s2 = scope("d8-renew-fn", 2);
    let idem_postgres::ClaimOutcome::Claimed { token, .. } =
        tier.claim(&s2, fp(2), lease, owner).await.unwrap()
    else {
        panic!("claimed")
    };
    let claim2 = idem_dedup::remote::Claim {
        scope: &s2,
        fingerprint: fp(2),
        token,
        owner,
    };
    tier.release(claim2).await.unwrap();
    assert_eq!(
        tier.renew(claim2, lease).await.unwrap(),
        idem_postgres::Commit::FencedOut
    );
    assert!(tier.lookup(&s2).await.unwrap().is_none());
    db.drop_schema().await;
}
