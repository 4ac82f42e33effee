//! D3 / D4 / Z4: PostgreSQL restarted mid-load (its own cluster, stopped with `-m immediate`):
//! calls fail closed with UNAVAILABLE, no action runs without a claim, the same engines serve
//! again once it is back; in transactional mode no intent is lost or doubled.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use idem_core::{Code, Reason, Status};
use idem_postgres::{LocalCache, PgEngine, PgTier, TieredEngine};
use idem_test_support::postgres::PgCluster;
use idem_test_support::time::eventually;

use crate::support::{lazy_pool, TestDb};
use crate::{fp, place_order, scope};

const INTENTS: usize = 400;
const CLIENTS: usize = 8;

async fn engine_on(url: &str, schema: &str) -> PgEngine<String> {
    PgEngine::<String>::builder(lazy_pool(url, 6))
        .schema(schema)
        .query_timeout(Duration::from_secs(2))
        .apply_schema(false)
        .build()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d4_postgres_restarted_mid_load_transactional_fails_closed_no_intent_lost_or_doubled() {
    let mut pg = PgCluster::start();
    let db = TestDb::on(&pg.url(), "idem_restart").await;
    let engines = [
        engine_on(&pg.url(), &db.schema).await,
        engine_on(&pg.url(), &db.schema).await,
    ];
    let insert = db.insert_order();
    let done = Arc::new(AtomicU32::new(0));
    let unavailable = Arc::new(AtomicU32::new(0));
    let mut clients = tokio::task::JoinSet::new();
    for k in 0..CLIENTS {
        let engine = engines[k % 2].clone();
        let (insert, done, unavailable) = (insert.clone(), done.clone(), unavailable.clone());
        clients.spawn(async move {
            let mut values = Vec::new();
            for i in (k..INTENTS).step_by(CLIENTS) {
                // A client retries with the same key until it gets an answer (R2, S3).
                let value = loop {
                    let by = format!("client{k}");
                    match engine
                        .execute(
                            &scope("d4-restart", i),
                            fp(i),
                            place_order(insert.clone(), i, by),
                        )
                        .await
                    {
                        Ok(out) => break out.into_value(),
                        Err(e) => {
                            assert_eq!(e.code(), Code::Unavailable, "intent {i}: {e}");
                            unavailable.fetch_add(1, Ordering::Relaxed);
                            tokio::time::sleep(Duration::from_millis(50)).await;
                        }
                    }
                };
                done.fetch_add(1, Ordering::Relaxed);
                values.push((i, value));
            }
            values
        });
    }
    // Restart in the middle of the load.
    let d = done.clone();
    eventually(
        Duration::from_secs(60),
        "a third of the intents done",
        || {
            let d = d.clone();
            async move { d.load(Ordering::Relaxed) as usize >= INTENTS / 3 }
        },
    )
    .await;
    pg.stop();
    let at_stop = done.load(Ordering::Relaxed);
    // While it is down: fail closed, and the action never runs.
    let ran = Arc::new(AtomicBool::new(false));
    let r = ran.clone();
    let e = engines[0]
        .execute(&scope("d4-restart-down", 0), fp(0), move |_tx| async move {
            r.store(true, Ordering::SeqCst);
            Ok::<_, Status>("must not run".to_string())
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::Unavailable, "{e}");
    assert_eq!(e.reason(), Some(Reason::UPSTREAM_UNAVAILABLE));
    assert!(
        !ran.load(Ordering::SeqCst),
        "no action without a transaction"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    pg.start_again();

    let mut values: HashMap<usize, String> = HashMap::new();
    while let Some(r) = clients.join_next().await {
        for (i, v) in r.expect("client") {
            assert!(values.insert(i, v).is_none());
        }
    }
    assert_eq!(values.len(), INTENTS);
    // The test's own pool holds connections from before the restart: read with a new one.
    let db = TestDb::on(&pg.url(), &db.schema).await;
    let orders = db.orders().await;
    assert_eq!(
        orders.len(),
        INTENTS,
        "orders == intents: none lost, none doubled"
    );
    let mut per_intent: HashMap<&str, u32> = HashMap::new();
    for (intent, _) in &orders {
        *per_intent.entry(intent).or_default() += 1;
    }
    assert!(per_intent.values().all(|&n| n == 1));
    for (i, v) in &values {
        let (_, by) = orders
            .iter()
            .find(|(intent, _)| *intent == format!("intent-{i}"))
            .unwrap();
        assert!(
            v.contains(&format!("-by-{by}-")),
            "intent {i}: {v} names the committed run"
        );
    }
    let failed = unavailable.load(Ordering::Relaxed);
    assert!(failed > 0, "calls during the outage failed closed");
    eprintln!(
        "d4_restart (transactional): {INTENTS} intents, restart after {at_stop} done, {failed} \
         UNAVAILABLE answers retried, {} orders",
        orders.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d4_postgres_restarted_remote_tier_fails_closed_then_resumes() {
    let mut pg = PgCluster::start();
    let db = TestDb::on(&pg.url(), "idem_restart_tier").await;
    let engine = |tier: PgTier| {
        TieredEngine::<String>::builder(tier)
            .lease(Duration::from_secs(5))
            .local(LocalCache::new().shards(2))
            .build()
            .unwrap()
    };
    let url = pg.url();
    let tier = || async {
        PgTier::builder(lazy_pool(&url, 6))
            .schema(&db.schema)
            .query_timeout(Duration::from_secs(2))
            .apply_schema(false)
            .build()
            .await
            .unwrap()
    };
    let a = engine(tier().await);
    let b = engine(tier().await);
    let runs = Arc::new(AtomicU32::new(0));
    let call = |e: &TieredEngine<String>, i: usize| {
        let (e, runs) = (e.clone(), runs.clone());
        async move {
            e.execute(&scope("d4-restart-tier", i), fp(i), move |t| async move {
                assert!(t.is_fenced(), "an action ran without a claim");
                runs.fetch_add(1, Ordering::SeqCst);
                Ok::<_, Status>(format!("v{i}"))
            })
            .await
        }
    };
    for i in 0..50 {
        let _ = call(if i % 2 == 0 { &a } else { &b }, i).await.unwrap();
    }
    assert_eq!(runs.load(Ordering::SeqCst), 50);

    pg.stop();
    let before = runs.load(Ordering::SeqCst);
    for i in 100..120 {
        let e = call(if i % 2 == 0 { &a } else { &b }, i).await.unwrap_err();
        assert_eq!(e.code(), Code::Unavailable, "{e}");
        assert_eq!(e.reason(), Some(Reason::UPSTREAM_UNAVAILABLE));
    }
    assert_eq!(
        runs.load(Ordering::SeqCst),
        before,
        "nothing ran while it was down"
    );
    assert!(a.stats().unavailable + b.stats().unavailable >= 20);

    pg.start_again();
    let (a2, b2) = (a.clone(), b.clone());
    let c = &call;
    eventually(
        Duration::from_secs(30),
        "service resumes after the restart",
        || {
            let (a2, b2) = (a2.clone(), b2.clone());
            async move { c(&a2, 1_000).await.is_ok() && c(&b2, 1_001).await.is_ok() }
        },
    )
    .await;
    let before = runs.load(Ordering::SeqCst);
    for i in 100..120 {
        let x = call(if i % 2 == 0 { &b } else { &a }, i).await.unwrap();
        let y = call(if i % 2 == 0 { &a } else { &b }, i).await.unwrap();
        assert_eq!(x.value(), y.value());
    }
    assert_eq!(
        runs.load(Ordering::SeqCst),
        before + 20,
        "each retried intent ran once"
    );
    // What was recorded before the restart is still there (committed = durable): a new
    // instance, with nothing in its local engine, replays it.
    let fresh = engine(tier().await);
    for i in 0..50 {
        let out = call(&fresh, i).await.unwrap();
        assert_eq!(out.value(), &format!("v{i}"));
        assert_eq!(out.source(), idem_postgres::Source::OtherInstance);
    }
    assert_eq!(runs.load(Ordering::SeqCst), before + 20);
}
