//! The Redis tier against real Redis servers started by the tests (D1–D3).
//!
//! Every test starts its own `redis-server` (or a cluster) on free loopback ports and kills it at
//! the end; see idem-test-support's `redis` module.

mod d1_conflict;
mod d1_two_engines;
mod d1_two_processes;
mod d2_fencing;
mod d3_cluster;
mod d3_unavailable;
mod d5_connect;
mod d5_failover;
mod d5_faults;
mod d5_options;
mod d8_renewal;
mod e15_help;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use idem_core::Status;
use idem_redis::{LocalCache, RedisTier, TieredEngine};
pub use idem_test_support::intents::{fp, scope};

/// Tests that load the machine (thousands of calls, a cluster, restarts) or check timings take
/// this in turn, so no two of them share the two cores of a CI machine and no time limit is
/// passed for lack of CPU; the others run beside them.
pub async fn one_heavy_test_at_a_time() -> tokio::sync::MutexGuard<'static, ()> {
    static HEAVY: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    HEAVY.lock().await
}

/// A tier for tests. The time limit is generous: debug builds of several tests share two cores.
/// The test servers keep nothing across a restart unless a test asks: opted in.
pub async fn tier(url: &str) -> RedisTier {
    RedisTier::builder()
        .command_timeout(Duration::from_secs(3))
        .allow_volatile(true)
        .connect(url)
        .await
        .expect("connect to the test redis")
}

/// An engine on `tier` with small local shards.
pub fn engine(tier: RedisTier) -> TieredEngine<String> {
    TieredEngine::<String>::builder(tier)
        .local(LocalCache::new().shards(2))
        .build()
        .expect("engine")
}

/// Sends `copies` concurrent copies of each of `intents` intents, spread over `engines`, and
/// checks that every intent's side effect ran exactly once and every copy got the same value.
/// Returns the number of side effects.
pub async fn exactly_once_workload(
    engines: &[TieredEngine<String>],
    run: &str,
    intents: usize,
    copies: usize,
) -> u32 {
    let effects: Arc<Vec<AtomicU32>> = Arc::new((0..intents).map(|_| AtomicU32::new(0)).collect());
    let mut tasks = tokio::task::JoinSet::new();
    for c in 0..copies {
        for i in 0..intents {
            let engine = engines[(i + c) % engines.len()].clone();
            let effects = effects.clone();
            let scope = scope(run, i);
            tasks.spawn(async move {
                let out = engine
                    .execute(&scope, fp(i), move |token| async move {
                        effects[i].fetch_add(1, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis((i % 4) as u64)).await;
                        Ok::<_, Status>(format!("intent {i} token {token}"))
                    })
                    .await;
                (i, out)
            });
        }
    }
    let mut values: Vec<Option<String>> = vec![None; intents];
    while let Some(joined) = tasks.join_next().await {
        let (i, out) = joined.expect("task");
        let out = out.unwrap_or_else(|e| panic!("intent {i} failed: {e}"));
        match &values[i] {
            None => values[i] = Some(out.into_value()),
            Some(v) => assert_eq!(v, out.value(), "intent {i}: copies got different values"),
        }
    }
    let mut total = 0;
    for (i, e) in effects.iter().enumerate() {
        let n = e.load(Ordering::SeqCst);
        assert_eq!(n, 1, "intent {i}: side effect ran {n} times");
        total += n;
    }
    total
}
