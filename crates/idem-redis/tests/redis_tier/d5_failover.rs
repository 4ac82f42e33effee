//! D5: a Redis Cluster failover under load. 3 masters + 3 replicas (append-only file, `fsync`
//! always, `cluster-node-timeout` 1 s), three engines with their own cluster clients, and a
//! master killed (SIGKILL) mid-load: every engine serves again within seconds of the replica's
//! promotion, and no intent is reported successful with two different values.
//!
//! `IDEM_FAILOVER_KEEP_CLIENT=1` turns the tier's health check off, to see how the Redis client
//! recovers by itself (the figures are printed; the test then only reports).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use idem_core::Status;
use idem_redis::{LocalCache, RedisTier, TieredEngine};
use idem_test_support::redis::{Options, RedisCluster};
use parking_lot::Mutex;
use tokio::time::Instant;

use crate::{fp, scope};

const NODE_TIMEOUT_MS: u32 = 1_000;

async fn cluster_engine(urls: &[String], keep_client: bool) -> TieredEngine<String> {
    let nodes: Vec<&str> = urls.iter().map(String::as_str).collect();
    let tier = RedisTier::builder()
        .command_timeout(Duration::from_secs(3))
        .wait_replicas(1, Duration::from_millis(500))
        .replace_stalled_clients(!keep_client)
        .connect_cluster(&nodes)
        .await
        .expect("connect to the test cluster");
    assert!(!tier.persistence().is_volatile());
    TieredEngine::<String>::builder(tier)
        .lease(Duration::from_secs(30))
        .poll_interval(Duration::from_millis(10), Duration::from_millis(100))
        .local(LocalCache::new().shards(2))
        .build()
        .unwrap()
}

#[derive(Default)]
struct Record {
    effects: Mutex<HashMap<usize, u32>>,
    values: Mutex<HashMap<usize, Vec<String>>>,
    unserved: AtomicUsize,
}

/// One copy of intent `i` on engine `e`, retried as a client would (every 50 ms) until it
/// succeeds or 60 s passed.
async fn client_call(e: TieredEngine<String>, id: usize, i: usize, rec: Arc<Record>) {
    let until = Instant::now() + Duration::from_secs(60);
    while Instant::now() < until {
        let r = rec.clone();
        let out = e
            .execute(&scope("d5-failover", i), fp(i), move |token| async move {
                *r.effects.lock().entry(i).or_default() += 1;
                tokio::time::sleep(Duration::from_millis(2)).await;
                Ok::<_, Status>(format!("intent {i} by engine {id} token {token}"))
            })
            .await;
        match out {
            Ok(o) => {
                rec.values.lock().entry(i).or_default().push(o.into_value());
                return;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
    rec.unserved.fetch_add(1, Ordering::Relaxed);
}

/// How long after `since` engine `e` first serves a round of 24 fresh scopes (spread over every
/// master) with no failure; `None` if not within `limit`.
async fn serves_again(
    e: &TieredEngine<String>,
    id: usize,
    since: Instant,
    limit: Duration,
) -> Option<Duration> {
    let mut round = 0usize;
    while since.elapsed() < limit {
        round += 1;
        let calls = (0..24).map(|k| {
            let s = scope(&format!("d5-probe-{id}-{round}"), k);
            let e = e.clone();
            async move {
                tokio::time::timeout(
                    Duration::from_secs(4),
                    e.execute(&s, fp(k), |_| async { Ok::<_, Status>("probe".into()) }),
                )
                .await
            }
        });
        let all_ok = futures::future::join_all(calls)
            .await
            .into_iter()
            .all(|r| matches!(r, Ok(Ok(_))));
        if all_ok {
            return Some(since.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d5_cluster_failover_every_engine_serves_again_and_no_intent_has_two_values() {
    let _heavy = crate::one_heavy_test_at_a_time().await;
    let keep_client = std::env::var("IDEM_FAILOVER_KEEP_CLIENT").is_ok();
    let opts = Options::aof_always();
    let mut cluster = RedisCluster::start_with(1, opts.clone(), NODE_TIMEOUT_MS).await;
    let urls = cluster.urls();
    let mut engines = Vec::new();
    for _ in 0..3 {
        engines.push(cluster_engine(&urls, keep_client).await);
    }
    let rec = Arc::new(Record::default());
    let intents = 1_200;
    let victim = cluster.master_ports().await[0];

    // 60 waves of 20 intents, 3 copies each (one per engine); the master dies after wave 10;
    // waves 13 on are sent once a replica took over.
    let mut load = tokio::task::JoinSet::new();
    let mut killed_at = None;
    for wave in 0..=12 {
        for i in wave * 20..(wave + 1) * 20 {
            for (id, e) in engines.iter().enumerate() {
                load.spawn(client_call(e.clone(), id, i, rec.clone()));
            }
        }
        if wave == 10 {
            cluster.kill_node(victim);
            killed_at = Some(Instant::now());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    cluster
        .wait_for_failover(victim, Duration::from_secs(30))
        .await;
    let promoted = Instant::now();
    let failover = promoted - killed_at.unwrap();
    // The old master comes back (its append-only file), as a replica of the new one.
    cluster.restart_node(victim, &opts, NODE_TIMEOUT_MS).await;
    for wave in 13..60 {
        for i in wave * 20..(wave + 1) * 20 {
            for (id, e) in engines.iter().enumerate() {
                load.spawn(client_call(e.clone(), id, i, rec.clone()));
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // Every engine serves fresh scopes on every master again, soon after the promotion.
    let limit = Duration::from_secs(30);
    let recovered = futures::future::join_all(
        engines
            .iter()
            .enumerate()
            .map(|(id, e)| serves_again(e, id, promoted, limit)),
    )
    .await;
    while load.join_next().await.is_some() {}

    let values = rec.values.lock();
    let effects = rec.effects.lock();
    let mut two_values = 0;
    for (i, v) in values.iter() {
        if v.iter().any(|x| x != &v[0]) {
            two_values += 1;
            eprintln!("intent {i}: {v:?}");
        }
    }
    let runs: u32 = effects.values().sum();
    let ran_twice = effects.values().filter(|&&n| n > 1).count();
    let reconnects: Vec<u64> = engines.iter().map(|e| e.remote().reconnects()).collect();
    let stats: Vec<_> = engines.iter().map(|e| e.stats()).collect();
    eprintln!(
        "d5 failover (health check {}): promotion {failover:?} after the kill; engines serve \
         again {recovered:?} after it; reconnects {reconnects:?}; {intents} intents, {runs} side \
         effects, {ran_twice} intents ran twice (the other run was fenced out), {two_values} \
         intents with two values, {} calls never served",
        if keep_client { "off" } else { "on" },
        rec.unserved.load(Ordering::Relaxed),
    );
    for (id, s) in stats.iter().enumerate() {
        eprintln!("engine {id}: {s:?}");
    }
    if keep_client {
        return;
    }
    assert!(
        recovered.iter().all(Option::is_some),
        "an engine did not serve again within {limit:?} of the promotion: {recovered:?}"
    );
    assert_eq!(two_values, 0, "intents reported successful with two values");
    assert_eq!(
        rec.unserved.load(Ordering::Relaxed),
        0,
        "calls never served"
    );
    assert_eq!(values.len(), intents);
}
