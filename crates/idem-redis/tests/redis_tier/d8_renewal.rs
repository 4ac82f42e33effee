//! D8: holders renew their lease while the action runs, on Redis' clock. An action of five
//! leases runs once while another instance waits for it; `kill -9` of a holder process is taken
//! over by the survivor; a holder process stopped (`SIGSTOP`) past its lease learns at its next
//! renewal that it lost the claim, and its completion is fenced out; renewals per lease are
//! bounded. The holders that must die or stop are worker processes: this test binary, re-run.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use idem_core::run::Run;
use idem_core::{Code, Reason, Status};
use idem_dedup::remote::RecordState;
use idem_dedup::LocalCache;
use idem_dedup::OutcomeKind;
use idem_redis::{RedisTier, RemoteTier, Source, TieredEngine};
use idem_test_support::redis::{raw, RedisServer};
use idem_test_support::signal;
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout};
use tokio::time::Instant;

use crate::{fp, scope, tier};

const KILL_TEST: &str =
    "d8_renewal::d8_kill_9_of_a_renewing_holder_is_taken_over_and_the_survivors_result_is_stored";
const STOP_TEST: &str =
    "d8_renewal::d8_a_holder_stopped_past_its_lease_finds_its_lease_lost_and_is_fenced_out";

fn engine_with_lease(t: RedisTier, lease: Duration) -> TieredEngine<String> {
    TieredEngine::<String>::builder(t)
        .lease(lease)
        .max_wait(Duration::from_secs(60))
        .poll_interval(Duration::from_millis(10), Duration::from_millis(100))
        .local(LocalCache::new().shards(2))
        .build()
        .expect("engine")
}

/// A holder process: this test binary, re-run with only `test` and `IDEM_D8_WORKER` set.
struct Worker {
    child: Child,
    out: Lines<BufReader<ChildStdout>>,
}

impl Worker {
    fn start(test: &str, redis: &RedisServer, lease: Duration) -> Self {
        let exe = std::env::current_exe().expect("test binary path");
        let mut child = tokio::process::Command::new(exe)
            .args([test, "--exact", "--nocapture", "--test-threads=1"])
            .env("IDEM_D8_WORKER", "holder")
            .env("IDEM_D8_URL", redis.url())
            .env("IDEM_D8_LEASE_MS", lease.as_millis().to_string())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("start the holder process");
        let out = BufReader::new(child.stdout.take().expect("piped stdout")).lines();
        Worker { child, out }
    }

    /// The rest of the next line holding `marker`, from the marker on (libtest prints "test
    /// name ... " before a test's own output).
    async fn line(&mut self, marker: &str) -> String {
        loop {
            let line = tokio::time::timeout(Duration::from_secs(60), self.out.next_line())
                .await
                .unwrap_or_else(|_| panic!("no `{marker}` from the holder within 60 s"))
                .expect("read the holder's output")
                .unwrap_or_else(|| panic!("the holder ended before `{marker}`"));
            if let Some(at) = line.find(marker) {
                return line[at + marker.len()..].trim().to_owned();
            }
        }
    }

    fn pid(&self) -> u32 {
        self.child.id().expect("the holder runs")
    }
}

/// The worker side: the engine of a holder process, on the URL and lease its parent gave.
async fn holder_engine() -> TieredEngine<String> {
    let url = std::env::var("IDEM_D8_URL").unwrap();
    let lease: u64 = std::env::var("IDEM_D8_LEASE_MS").unwrap().parse().unwrap();
    engine_with_lease(tier(&url).await, Duration::from_millis(lease))
}

/// `cmdstat_evalsha` calls: the scripts Redis ran (claim, renew, complete, ...).
async fn scripts_run(redis: &RedisServer) -> u64 {
    let info = raw(redis.port(), "INFO commandstats").await.expect("INFO");
    info.lines()
        .find_map(|l| l.strip_prefix("cmdstat_evalsha:calls="))
        .and_then(|rest| rest.split(',').next()?.parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d8_an_action_of_five_leases_runs_once_while_another_instance_waits_for_it() {
    let _heavy = crate::one_heavy_test_at_a_time().await;
    let redis = RedisServer::start().await;
    let lease = Duration::from_millis(600);
    let a = engine_with_lease(tier(&redis.url()).await, lease);
    let b = engine_with_lease(tier(&redis.url()).await, lease);
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
                Ok::<_, Status>(format!("order-1001 (token {token}, lost={lost})"))
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
        &format!("order-1001 (token {token}, lost=false)")
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
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d8_kill_9_of_a_renewing_holder_is_taken_over_and_the_survivors_result_is_stored() {
    if std::env::var("IDEM_D8_WORKER").is_ok() {
        let e = holder_engine().await;
        let _ = e
            .execute(&scope("d8-kill", 1), fp(1), |token| async move {
                println!("HOLDING {token}");
                std::future::pending::<()>().await;
                Ok::<_, Status>("from the killed holder".to_string())
            })
            .await;
        return;
    }
    let _heavy = crate::one_heavy_test_at_a_time().await;
    let redis = RedisServer::start().await;
    let lease = Duration::from_secs(1);
    let mut holder = Worker::start(KILL_TEST, &redis, lease);
    let held: u64 = holder.line("HOLDING ").await.parse().unwrap();

    let b = engine_with_lease(tier(&redis.url()).await, lease);
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
    let record = b.remote().lookup(&s).await.unwrap().expect("a record");
    assert_eq!(
        record.state,
        RecordState::InFlight {
            holder: idem_redis::FencingToken::new(held)
        }
    );
    assert_eq!(
        runs.load(Ordering::SeqCst),
        0,
        "a live holder is not taken over"
    );

    let killed = Instant::now();
    holder.child.start_kill().expect("kill -9 the holder");
    holder.child.wait().await.expect("reap the holder");
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
    let c = engine_with_lease(tier(&redis.url()).await, lease);
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
    eprintln!("d8 kill -9 (Redis): taken over {took:?} after the kill, lease {lease:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d8_a_holder_stopped_past_its_lease_finds_its_lease_lost_and_is_fenced_out() {
    if std::env::var("IDEM_D8_WORKER").is_ok() {
        let e = holder_engine().await;
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
    let _heavy = crate::one_heavy_test_at_a_time().await;
    let redis = RedisServer::start().await;
    let lease = Duration::from_millis(500);
    let mut holder = Worker::start(STOP_TEST, &redis, lease);
    let held: u64 = holder.line("HOLDING ").await.parse().unwrap();

    // The holder stops: its renewals with it. Past its lease, another instance takes over.
    signal::stop(holder.pid()).await;
    let b = engine_with_lease(tier(&redis.url()).await, lease);
    let s = scope("d8-stop", 1);
    let out = b
        .execute(&s, fp(1), |token| async move {
            let takeover = Run::current().expect("inside a run").is_takeover();
            Ok::<_, Status>(format!(
                "from the new holder (token {token}, takeover={takeover})"
            ))
        })
        .await
        .unwrap();
    assert_eq!(out.kind(), OutcomeKind::Executed);
    let token = out.fencing_token().unwrap().get();
    assert!(
        token > held,
        "the new token {token} > the stopped holder's {held}"
    );
    assert!(out.value().ends_with("takeover=true)"), "{}", out.value());

    // Resumed, the stopped holder's next renewal finds the claim lost: its Run says so, and its
    // completion is fenced out.
    signal::resume(holder.pid()).await;
    assert_eq!(holder.line("LOST ").await, "true");
    assert_eq!(
        holder.line("DONE ").await,
        "fenced_out=true lease_lost=1",
        "the holder's completion was refused"
    );
    assert!(holder.child.wait().await.unwrap().success());
    // The new holder's result stands.
    let again = b
        .execute(&s, fp(1), |_| async {
            Ok::<_, Status>("must not run".into())
        })
        .await
        .unwrap();
    assert_eq!(again.value(), out.value());
    let c = engine_with_lease(tier(&redis.url()).await, lease);
    let there = c
        .execute(&s, fp(1), |_| async {
            Ok::<_, Status>("must not run".into())
        })
        .await
        .unwrap();
    assert_eq!(there.value(), out.value());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d8_renewals_per_lease_are_bounded() {
    let _heavy = crate::one_heavy_test_at_a_time().await;
    let redis = RedisServer::start().await;
    let lease = Duration::from_millis(600);
    let a = engine_with_lease(tier(&redis.url()).await, lease);
    let (sent_before, run_before) = (a.remote().commands_sent(), scripts_run(&redis).await);
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
    let sent = a.remote().commands_sent() - sent_before;
    let run = scripts_run(&redis).await - run_before;
    // One claim, one completion, the renewals: nothing else, on either side of the wire.
    assert_eq!(sent, 2 + renewals, "{st:?}");
    assert_eq!(run, sent, "scripts Redis ran");
    // Each renewal begins at least a third of the lease after the one before (and the first
    // a third after the claim): at most three per lease of the run.
    let every = lease / 3;
    let bound = (elapsed.as_secs_f64() / every.as_secs_f64()).floor() as u64;
    assert!(renewals > 0, "{st:?}");
    assert!(
        renewals <= bound,
        "{renewals} renewals in {elapsed:?}: more than one per {every:?}"
    );
    eprintln!("d8 (Redis): {renewals} renewals in {elapsed:?} with a {lease:?} lease");
}

/// The renew script on its own: it extends its own claim on Redis' clock, takes a lapsed claim
/// again while nobody else claimed, and refuses once another claim exists or the scope is
/// completed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d8_the_renew_script_is_fenced_like_a_completion() {
    use idem_redis::{ClaimOutcome, Commit, OwnerId};
    let redis = RedisServer::start().await;
    let t = tier(&redis.url()).await;
    let (a, b) = (OwnerId::random(), OwnerId::random());
    let short = Duration::from_millis(100);
    let minute = Duration::from_secs(60);
    let claim_as = |s: idem_core::Scope, owner: OwnerId, lease: Duration| {
        let t = t.clone();
        async move {
            match t.claim(&s, fp(1), lease, owner).await.unwrap() {
                ClaimOutcome::Claimed { token, .. } => Some(token),
                _ => None,
            }
        }
    };
    let left = |s: idem_core::Scope| {
        let t = t.clone();
        async move { t.lookup(&s).await.unwrap().and_then(|r| r.expires_in) }
    };

    // Renewed: the lease left jumps from 100 ms to about a minute.
    let s = scope("d8-script", 1);
    let token = claim_as(s.clone(), a, short).await.unwrap();
    let claim = idem_dedup::remote::Claim {
        scope: &s,
        fingerprint: fp(1),
        token,
        owner: a,
    };
    assert_eq!(t.renew(claim, minute).await.unwrap(), Commit::Committed);
    assert!(left(s.clone()).await.unwrap() > Duration::from_secs(50));

    // Lapsed, nobody claimed: taken again, and the scope is held for others.
    t.renew(claim, short).await.unwrap();
    tokio::time::sleep(short * 3).await;
    assert!(t.lookup(&s).await.unwrap().is_none(), "the lease lapsed");
    assert_eq!(t.renew(claim, minute).await.unwrap(), Commit::Committed);
    assert_eq!(
        t.lookup(&s).await.unwrap().unwrap().state,
        RecordState::InFlight { holder: token }
    );
    assert_eq!(
        claim_as(s.clone(), b, minute).await,
        None,
        "held for others"
    );

    // Lapsed and claimed by another: fenced out, and the other claim is untouched.
    let s2 = scope("d8-script", 2);
    let old = claim_as(s2.clone(), a, short).await.unwrap();
    tokio::time::sleep(short * 3).await;
    let new = claim_as(s2.clone(), b, minute).await.unwrap();
    let stale = idem_dedup::remote::Claim {
        scope: &s2,
        fingerprint: fp(1),
        token: old,
        owner: a,
    };
    assert_eq!(t.renew(stale, minute).await.unwrap(), Commit::FencedOut);
    assert_eq!(
        t.lookup(&s2).await.unwrap().unwrap().state,
        RecordState::InFlight { holder: new }
    );

    // Completed: never renewed, its TTL untouched.
    let ttl = Duration::from_secs(3600);
    assert_eq!(
        t.complete(claim, b"done".to_vec(), ttl).await.unwrap(),
        Commit::Committed
    );
    assert_eq!(t.renew(claim, short).await.unwrap(), Commit::FencedOut);
    let done = t.lookup(&s).await.unwrap().unwrap();
    assert_eq!(done.state, RecordState::Completed);
    assert!(done.expires_in.unwrap() > minute);
}
