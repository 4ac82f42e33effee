//! D5: the Redis tier's own faults, each on a real redis-server the test kills, restarts or
//! pauses: data loss on a restart without persistence, a restart with `appendfsync always`, a
//! lease shorter than the action, an orphaned claim after a reply timeout, a failed release.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use idem_core::{Code, Status};
use idem_dedup::OutcomeKind;
use idem_redis::{LocalCache, RedisTier, RemoteTier, Source, TieredEngine};
use idem_test_support::redis::{Options, RedisServer};
use parking_lot::Mutex;

use crate::{fp, scope, tier};

fn engine_with_lease(t: RedisTier, lease: Duration) -> TieredEngine<String> {
    TieredEngine::<String>::builder(t)
        .lease(lease)
        .poll_interval(Duration::from_millis(10), Duration::from_millis(100))
        .local(LocalCache::new().shards(2))
        .build()
        .expect("engine")
}

/// Every token handed to an action, per intent, in the order the actions started; and the side
/// effects per intent.
#[derive(Clone, Default)]
struct Ledger {
    tokens: Arc<Mutex<HashMap<usize, Vec<u64>>>>,
    effects: Arc<Mutex<HashMap<usize, u32>>>,
}

impl Ledger {
    fn total(&self) -> usize {
        self.tokens.lock().values().map(Vec::len).sum()
    }
}

/// One call for intent `i` on `e`, retried (on the same engine, as a sticky client would) until
/// it succeeds or `attempts` run out. Returns the value, if any.
async fn call_until_ok(
    e: TieredEngine<String>,
    run: &'static str,
    i: usize,
    ledger: Ledger,
    attempts: usize,
) -> Option<String> {
    for _ in 0..attempts {
        let l = ledger.clone();
        let out = e
            .execute(&scope(run, i), fp(i), move |token| async move {
                l.tokens.lock().entry(i).or_default().push(token.get());
                *l.effects.lock().entry(i).or_default() += 1;
                tokio::time::sleep(Duration::from_millis(10)).await;
                Ok::<_, Status>(format!("intent {i} token {token}"))
            })
            .await;
        match out {
            Ok(o) => return Some(o.into_value()),
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
    None
}

/// Sends `intents` intents, two copies each on two of the engines, kills Redis (SIGKILL) once
/// `kill_after` actions have started, restarts it, then sends every intent again on every engine.
/// Returns the values the callers got, per intent.
async fn restart_mid_load(
    redis: &mut RedisServer,
    engines: &[TieredEngine<String>],
    run: &'static str,
    intents: usize,
    kill_after: usize,
    ledger: &Ledger,
) -> HashMap<usize, Vec<String>> {
    let mut first = tokio::task::JoinSet::new();
    for i in 0..intents {
        for c in 0..2 {
            let e = engines[(i + c) % engines.len()].clone();
            let l = ledger.clone();
            first.spawn(async move { (i, call_until_ok(e, run, i, l, 200).await) });
        }
        if i % 20 == 19 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    while ledger.total() < kill_after {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    redis.kill();
    tokio::time::sleep(Duration::from_millis(100)).await;
    redis.restart().await;
    let mut values: HashMap<usize, Vec<String>> = HashMap::new();
    while let Some(r) = first.join_next().await {
        let (i, v) = r.expect("task");
        values
            .entry(i)
            .or_default()
            .push(v.unwrap_or_else(|| panic!("intent {i}: no success after the restart")));
    }
    // Every intent again, on every engine.
    let mut again = tokio::task::JoinSet::new();
    for i in 0..intents {
        for e in engines {
            let (e, l) = (e.clone(), ledger.clone());
            again.spawn(async move { (i, call_until_ok(e, run, i, l, 200).await) });
        }
    }
    while let Some(r) = again.join_next().await {
        let (i, v) = r.expect("task");
        values
            .entry(i)
            .or_default()
            .push(v.unwrap_or_else(|| panic!("intent {i}: no success after the restart")));
    }
    values
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d5_redis_restart_without_persistence_never_repeats_a_token() {
    let _heavy = crate::one_heavy_test_at_a_time().await;
    let mut redis = RedisServer::start().await;
    let mut engines = Vec::new();
    for _ in 0..3 {
        engines.push(engine_with_lease(
            tier(&redis.url()).await,
            Duration::from_secs(30),
        ));
    }
    let ledger = Ledger::default();
    let intents = 300;
    restart_mid_load(&mut redis, &engines, "d5-volatile", intents, 150, &ledger).await;

    let tokens = ledger.tokens.lock();
    let mut reran = 0;
    for (i, seen) in tokens.iter() {
        for pair in seen.windows(2) {
            assert!(
                pair[0] < pair[1],
                "intent {i}: tokens {seen:?} repeat or go back after Redis lost its data"
            );
        }
        if seen.len() > 1 {
            reran += 1;
        }
    }
    let effects: u32 = ledger.effects.lock().values().sum();
    eprintln!(
        "d5 restart without persistence: {intents} intents, {effects} side effects, {reran} \
         intents ran again (their records were lost), 0 tokens repeated"
    );
    // The restart lost records of completed intents: other engines ran them again, each time
    // with a higher token. (That such intents run again is what a volatile Redis costs.)
    assert!(
        reran > 0,
        "the restart lost no record: the test did not exercise it"
    );
    assert_eq!(tokens.len(), intents);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d5_redis_restart_with_aof_always_runs_no_intent_twice() {
    let _heavy = crate::one_heavy_test_at_a_time().await;
    let mut redis = RedisServer::start_with(Options::aof_always()).await;
    let mut engines = Vec::new();
    for _ in 0..3 {
        let t = RedisTier::builder()
            .command_timeout(Duration::from_secs(3))
            .connect(&redis.url())
            .await
            .expect("an AOF redis is accepted without opting in");
        assert_eq!(t.persistence(), idem_redis::Persistence::AofAlways);
        // The lease covers the restart: a claim whose holder lost its reply stays held.
        engines.push(engine_with_lease(t, Duration::from_secs(60)));
    }
    let ledger = Ledger::default();
    let intents = 300;
    let values = restart_mid_load(&mut redis, &engines, "d5-aof", intents, 150, &ledger).await;

    let effects = ledger.effects.lock();
    for i in 0..intents {
        assert_eq!(
            effects.get(&i).copied(),
            Some(1),
            "intent {i}: side effects with appendfsync always"
        );
        let v = &values[&i];
        assert!(v.iter().all(|x| x == &v[0]), "intent {i}: values {v:?}");
    }
    let s: Vec<_> = engines.iter().map(|e| e.stats()).collect();
    let sum = |f: fn(&idem_redis::TierStats) -> u64| s.iter().map(f).sum::<u64>();
    eprintln!(
        "d5 restart with appendfsync always: {intents} intents, {} side effects, 0 duplicates; \
         unavailable {}, unrecorded {}, recorded late {}, record lost {}, reclaimed {}",
        effects.values().sum::<u32>(),
        sum(|s| s.unavailable),
        sum(|s| s.unrecorded),
        sum(|s| s.recorded_late),
        sum(|s| s.record_lost),
        sum(|s| s.reclaimed),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d5_lease_shorter_than_action_is_still_recorded() {
    let _heavy = crate::one_heavy_test_at_a_time().await;
    let redis = RedisServer::start().await;
    let lease = Duration::from_millis(300);
    // Without renewal, as before leases were renewed: the holder's lease really lapses.
    let a = TieredEngine::<String>::builder(tier(&redis.url()).await)
        .lease(lease)
        .without_renewal()
        .poll_interval(Duration::from_millis(10), Duration::from_millis(100))
        .local(LocalCache::new().shards(2))
        .build()
        .expect("engine");
    let b = engine_with_lease(tier(&redis.url()).await, lease);
    let runs = Arc::new(AtomicU32::new(0));
    let s = scope("d5-b5", 1);

    let r = runs.clone();
    let first = a
        .execute(&s, fp(1), move |token| async move {
            r.fetch_add(1, Ordering::SeqCst);
            // Three leases long; nobody else claims meanwhile.
            tokio::time::sleep(Duration::from_millis(900)).await;
            Ok::<_, Status>(format!("order-1001 ({token})"))
        })
        .await
        .expect("a lapsed lease that nobody took over still completes");
    assert_eq!(first.kind(), OutcomeKind::Executed);
    assert!(first.is_recorded(), "the result was stored");
    assert_eq!(a.stats().fenced_out, 0);

    // Another instance gets the stored result; so does every retry.
    for e in [&b, &a, &b] {
        let r = runs.clone();
        let again = e
            .execute(&s, fp(1), move |_| async move {
                r.fetch_add(1, Ordering::SeqCst);
                Ok::<_, Status>("must not run".into())
            })
            .await
            .unwrap();
        assert_eq!(again.value(), first.value());
        assert_eq!(again.kind(), OutcomeKind::Replayed);
    }
    assert_eq!(b.stats().remote_replayed, 1);
    assert_eq!(runs.load(Ordering::SeqCst), 1, "one run in all");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d5_orphaned_claim_after_reply_timeout_is_taken_back() {
    let _heavy = crate::one_heavy_test_at_a_time().await;
    let redis = RedisServer::start().await;
    let lease = Duration::from_secs(120);
    let a = engine_with_lease(tier(&redis.url()).await, lease);
    let s = scope("d5-orphan", 1);
    let runs = Arc::new(AtomicU32::new(0));
    let call = |e: &TieredEngine<String>| {
        let (e, s, r) = (e.clone(), s.clone(), runs.clone());
        async move {
            e.execute(&s, fp(1), move |token| async move {
                r.fetch_add(1, Ordering::SeqCst);
                Ok::<_, Status>(format!("order-1001 ({token})"))
            })
            .await
        }
    };

    // Redis holds every command for 4.5 s: the claim's reply does not come within the 3 s
    // limit, but Redis runs the claim afterwards: an orphan held by this engine's owner.
    redis.pause(4_500).await;
    let lost = call(&a).await.unwrap_err();
    assert_eq!(lost.code(), Code::Unavailable, "{lost}");
    assert_eq!(runs.load(Ordering::SeqCst), 0);

    // The retry takes the orphan back at once instead of waiting out the 120 s lease.
    let retry = tokio::time::timeout(Duration::from_secs(30), call(&a))
        .await
        .expect("the retry did not wait out its own orphan's lease")
        .unwrap();
    assert_eq!(retry.kind(), OutcomeKind::Executed);
    assert_eq!(retry.source(), Source::ThisInstance);
    let st = a.stats();
    assert_eq!(st.reclaimed, 1, "{st:?}");
    assert_eq!((st.remote_joined, st.wait_timeouts), (0, 0), "{st:?}");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d5_failed_release_is_retried_and_counted() {
    let _heavy = crate::one_heavy_test_at_a_time().await;
    // An append-only file, so the claim outlives the restart and only a release can free it.
    let mut redis = RedisServer::start_with(Options::aof_always()).await;
    let lease = Duration::from_secs(60);
    let connect = |url: String| async move {
        RedisTier::builder()
            .command_timeout(Duration::from_secs(3))
            .connect(&url)
            .await
            .expect("connect")
    };
    let a = engine_with_lease(connect(redis.url()).await, lease);
    let b = engine_with_lease(connect(redis.url()).await, lease);
    let s = scope("d5-release", 1);

    let (started_tx, started) = tokio::sync::oneshot::channel::<()>();
    let (proceed, go) = tokio::sync::oneshot::channel::<()>();
    let (a2, s2) = (a.clone(), s.clone());
    let failing = tokio::spawn(async move {
        a2.execute(&s2, fp(1), move |_| async move {
            let _ = started_tx.send(());
            let _ = go.await;
            Err::<String, _>(Status::new(Code::Internal, "payment provider said no"))
        })
        .await
    });
    started.await.unwrap();
    // Redis goes down while the action runs: its release after the failure cannot reach it.
    redis.kill();
    proceed.send(()).unwrap();
    let err = failing.await.unwrap().unwrap_err();
    assert_eq!(err.code(), Code::Internal, "{err}");
    let st = a.stats();
    assert_eq!((st.failed, st.release_failed), (1, 1), "{st:?}");

    // Redis comes back with the claim (from its append-only file); the release is retried in
    // the background and frees the scope long before the 60 s lease would.
    redis.restart().await;
    let probe = b.remote().clone();
    let freed = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            if let Ok(None) = probe.lookup(&s).await {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(freed.is_ok(), "the failed release was not retried");

    // Another instance runs the intent at once.
    let out = tokio::time::timeout(
        Duration::from_secs(20),
        b.execute(&s, fp(1), |t| async move {
            Ok::<_, Status>(format!("ran on B with {t}"))
        }),
    )
    .await
    .expect("another instance waited for a released claim")
    .unwrap();
    assert_eq!(out.kind(), OutcomeKind::Executed);
    assert_eq!(b.stats().remote_joined, 0);
}
