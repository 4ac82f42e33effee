//! The workloads, generic over [`Store`]: 256 client tasks on the runtime the bench built once.

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::common::{fresh_value, tenant, uuid, Rng, BURST, CLIENT_TASKS, METHOD, REPLAY_KEYS};
use super::hist::Hist;
use super::store::Store;

/// Replay calls whose action ran (the key was not stored): should stay 0.
pub static REPLAY_MISSES: AtomicU64 = AtomicU64::new(0);

/// A counter for keys never used before in this process.
static NEXT_KEY: AtomicU64 = AtomicU64::new(1 << 40);

/// The key of fresh request `n`.
pub fn key_of<S: Store>(n: u64) -> S::Key {
    S::key(&tenant(n), METHOD, &uuid(n))
}

/// `n` keys never used before.
pub fn fresh_keys<S: Store>(n: usize) -> Vec<S::Key> {
    let first = NEXT_KEY.fetch_add(n as u64, Relaxed);
    (first..first + n as u64).map(key_of::<S>).collect()
}

/// The replay key set: [`REPLAY_KEYS`] keys, each completed once through the store.
///
/// The keys returned are built again from the same strings after the fill, and the fill's own
/// keys are dropped: a request carries a key of its own, so no store may compare against the very
/// allocation it kept (idem's scopes share their bytes, and a store that kept the caller's `Arc`
/// would find the bytes it compares already in cache because hashing just read them).
pub async fn prefill<S: Store>(store: &Arc<S>) -> Arc<Vec<S::Key>> {
    let keys: Arc<Vec<S::Key>> = Arc::new((0..REPLAY_KEYS as u64).map(key_of::<S>).collect());
    let mut tasks = Vec::new();
    for t in 0..CLIENT_TASKS {
        let (store, keys) = (store.clone(), keys.clone());
        tasks.push(tokio::spawn(async move {
            for i in (t..keys.len()).step_by(CLIENT_TASKS) {
                black_box(store.call(&keys[i], || async { fresh_value() }).await);
            }
        }));
    }
    for t in tasks {
        t.await.expect("prefill task");
    }
    store.settle().await;
    drop(keys);
    Arc::new((0..REPLAY_KEYS as u64).map(key_of::<S>).collect())
}

/// What one run of a throughput workload measured.
#[derive(Debug, Default)]
pub struct Run {
    /// Wall time from the first spawn to the last join.
    pub elapsed: Duration,
    /// Per-call latencies, when asked for.
    pub hist: Option<Hist>,
}

async fn join(tasks: Vec<tokio::task::JoinHandle<Option<Hist>>>, start: Instant) -> Run {
    let mut hist: Option<Hist> = None;
    for t in tasks {
        if let Some(h) = t.await.expect("client task") {
            hist.get_or_insert_with(Hist::default).merge(&h);
        }
    }
    Run {
        elapsed: start.elapsed(),
        hist,
    }
}

/// (a) Replay: each of the 256 tasks makes `rounds` calls on random pre-completed keys.
pub async fn replay<S: Store>(
    store: &Arc<S>,
    keys: &Arc<Vec<S::Key>>,
    rounds: u64,
    timed: bool,
) -> Run {
    static SEED: AtomicU64 = AtomicU64::new(1);
    let start = Instant::now();
    let mut tasks = Vec::with_capacity(CLIENT_TASKS);
    for _ in 0..CLIENT_TASKS {
        let (store, keys) = (store.clone(), keys.clone());
        let mut rng = Rng::new(SEED.fetch_add(0x1234_5678_9abc, Relaxed));
        tasks.push(tokio::spawn(async move {
            let mut hist = timed.then(Hist::default);
            for _ in 0..rounds {
                let key = &keys[rng.below(keys.len())];
                let action = || async {
                    REPLAY_MISSES.fetch_add(1, Relaxed);
                    fresh_value()
                };
                if let Some(h) = hist.as_mut() {
                    let t = Instant::now();
                    black_box(store.call(key, action).await);
                    h.record(t.elapsed());
                } else {
                    black_box(store.call(key, action).await);
                }
            }
            hist
        }));
    }
    join(tasks, start).await
}

/// (b) Unique: each of the 256 tasks makes `rounds` calls, every one on a key never used before.
/// The keys are built before the clock starts (the same cost for every store).
pub async fn unique<S: Store>(store: &Arc<S>, rounds: u64, timed: bool) -> Run {
    let per = rounds as usize;
    let keys: Arc<Vec<S::Key>> = Arc::new(fresh_keys::<S>(per * CLIENT_TASKS));
    let start = Instant::now();
    let mut tasks = Vec::with_capacity(CLIENT_TASKS);
    for t in 0..CLIENT_TASKS {
        let (store, keys) = (store.clone(), keys.clone());
        tasks.push(tokio::spawn(async move {
            let mut hist = timed.then(Hist::default);
            for key in &keys[t * per..(t + 1) * per] {
                let action = || async { fresh_value() };
                if let Some(h) = hist.as_mut() {
                    let t = Instant::now();
                    black_box(store.call(key, action).await);
                    h.record(t.elapsed());
                } else {
                    black_box(store.call(key, action).await);
                }
            }
            hist
        }));
    }
    let run = join(tasks, start).await;
    drop(keys); // outside the clock
    run
}

/// What a series of hot-key bursts measured.
#[derive(Debug, Default)]
pub struct Bursts {
    /// Sum of the burst times.
    pub elapsed: Duration,
    /// Each burst's time, first spawn to last join.
    pub times: Vec<Duration>,
    /// Runs of the action, all bursts.
    pub runs: u64,
    /// The most runs in one burst.
    pub max_runs: u64,
    /// Bursts.
    pub bursts: u64,
}

/// (c) Hot key: `bursts` bursts of [`BURST`] concurrent calls on one fresh key each, whose action
/// yields once. Counts the action's runs per burst.
///
/// The bursts are spawned from a task on a worker thread, as a server's accept loop spawns its
/// requests: spawned from the bench's main thread (outside the runtime), every task would go
/// through tokio's injection queue and wake a parked worker, which was half of every store's
/// burst time and measured tokio rather than the store.
pub async fn hot_key<S: Store>(store: &Arc<S>, bursts: u64) -> Bursts {
    let store = store.clone();
    tokio::spawn(async move { hot_key_bursts(&store, bursts).await })
        .await
        .expect("burst driver task")
}

async fn hot_key_bursts<S: Store>(store: &Arc<S>, bursts: u64) -> Bursts {
    let mut out = Bursts {
        times: Vec::with_capacity(bursts as usize),
        ..Bursts::default()
    };
    for _ in 0..bursts {
        let key = Arc::new(fresh_keys::<S>(1).pop().expect("one key"));
        let runs = Arc::new(AtomicU64::new(0));
        let start = Instant::now();
        let mut tasks = Vec::with_capacity(BURST);
        for _ in 0..BURST {
            let (store, key, runs) = (store.clone(), key.clone(), runs.clone());
            tasks.push(tokio::spawn(async move {
                let action = move || async move {
                    runs.fetch_add(1, Relaxed);
                    tokio::task::yield_now().await;
                    fresh_value()
                };
                black_box(store.call(&key, action).await);
            }));
        }
        for t in tasks {
            t.await.expect("burst task");
        }
        let took = start.elapsed();
        let runs = runs.load(Relaxed);
        out.elapsed += took;
        out.times.push(took);
        out.runs += runs;
        out.max_runs = out.max_runs.max(runs);
        out.bursts += 1;
    }
    out
}
