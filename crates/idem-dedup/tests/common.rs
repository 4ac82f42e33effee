//! Helpers shared by the engine tests (included with `mod common;`).
#![allow(dead_code)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use idem_core::{Fingerprint, Scope};

pub(crate) fn scope(key: &str) -> Scope {
    Scope::parse("tenant-0042", "/shop.v1.Shop/CreateOrder", key).unwrap()
}

pub(crate) fn nth_scope(i: u64) -> Scope {
    scope(&format!("order-{i:08}"))
}

pub(crate) fn fp(body: &str) -> Fingerprint {
    Fingerprint::of(body.as_bytes())
}

/// Counts executions of an action.
#[derive(Clone, Default)]
pub(crate) struct Runs(Arc<AtomicU64>);

impl Runs {
    pub(crate) fn hit(&self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
    pub(crate) fn get(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

/// Waits (yielding, bounded by a generous guard) until `cond` holds. Completions reach the shards
/// just after the leader's call returns, so counters settle a moment later.
pub(crate) async fn eventually(what: &str, cond: impl Fn() -> bool) {
    let guard = tokio::time::Instant::now();
    while !cond() {
        assert!(
            guard.elapsed() < std::time::Duration::from_secs(30),
            "never happened: {what}"
        );
        tokio::task::yield_now().await;
    }
}

/// A spawned `execute` call.
pub(crate) type Call<V> =
    tokio::task::JoinHandle<Result<idem_dedup::Outcome<V>, idem_dedup::DedupError>>;

/// Spawns a call for (`s`, `body`) whose action (if it leads) returns `value` at once.
pub(crate) fn spawn_call<V: Clone + Send + Sync + 'static>(
    engine: &idem_dedup::Engine<V>,
    s: &Scope,
    body: &'static str,
    value: V,
) -> Call<V> {
    let (engine, s) = (engine.clone(), s.clone());
    tokio::spawn(async move {
        engine
            .execute(&s, fp(body), move |_| async move { Ok(value) })
            .await
    })
}

/// Spawns a leader whose action waits for the returned sender, then returns `finish()` (which may
/// fail or panic); returns once its run is in flight, so later calls join it.
pub(crate) async fn gated_leader<V, F>(
    engine: &idem_dedup::Engine<V>,
    s: &Scope,
    body: &'static str,
    finish: F,
) -> (Call<V>, tokio::sync::oneshot::Sender<()>)
where
    V: Clone + Send + Sync + 'static,
    F: FnOnce() -> Result<V, idem_core::Status> + Send + 'static,
{
    let (release, gate) = tokio::sync::oneshot::channel::<()>();
    let executed = engine.stats().outcomes.executed;
    let (e, s) = (engine.clone(), s.clone());
    let call = tokio::spawn(async move {
        e.execute(&s, fp(body), move |_| async move {
            gate.await.ok();
            finish()
        })
        .await
    });
    eventually("leader in flight", || {
        engine.stats().outcomes.executed > executed
    })
    .await;
    (call, release)
}

/// Spawns `n` calls that join the run in flight for (`s`, `body`); returns once all have joined.
pub(crate) async fn joiners<V: Clone + Send + Sync + 'static>(
    engine: &idem_dedup::Engine<V>,
    s: &Scope,
    body: &'static str,
    n: u64,
    value: V,
) -> Vec<Call<V>> {
    let joined = engine.stats().outcomes.joined;
    let calls = (0..n)
        .map(|_| spawn_call(engine, s, body, value.clone()))
        .collect();
    eventually("joined", || engine.stats().outcomes.joined == joined + n).await;
    calls
}
