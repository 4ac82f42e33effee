//! Instructions per call, idem against the DashMap design, counted by callgrind (issue 4).
//!
//! Throughput on a shared 2-core VM moves by ±20–30% between processes; an instruction count
//! does not. This bench runs one workload of the peers bench for one store on a current-thread
//! runtime, inside a function of its own per store and workload, so callgrind can count just
//! that function:
//!
//! ```text
//! cargo bench --bench instructions --no-run          # prints the binary's path
//! valgrind --tool=callgrind --toggle-collect='instructions::measure_*' \
//!     target/release/deps/instructions-<hash> replay idem 40000
//! ```
//!
//! callgrind's `Collected` divided by the call count is the instructions per call;
//! `callgrind_annotate` splits them by function. Workloads: `replay` (100k completed keys,
//! random hits, each call polled once by hand: a replay never waits in either store) and
//! `unique` (new keys from 256 tasks, the shard actor included: on a current-thread runtime it
//! runs between the callers). A unique key's count includes building the key, as a server
//! does per request. Run without valgrind it only reports that it ran; `cargo bench` runs it
//! so, with a small count.

use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

#[path = "support/common.rs"]
#[allow(dead_code)]
mod common;
#[path = "support/store.rs"]
#[allow(dead_code)]
mod store;

#[path = "peers/dashmap_shared.rs"]
mod dashmap_shared;
#[path = "peers/idem.rs"]
mod idem_store;

use common::{fresh_value, tenant, uuid, Rng, CLIENT_TASKS, METHOD, REPLAY_KEYS};
use dashmap_shared::DashShared;
use idem_store::Idem;
use store::{Store, StoreConfig};

type Rt = tokio::runtime::Runtime;

fn keys<S: Store>(from: u64, n: u64) -> Vec<S::Key> {
    (from..from + n)
        .map(|i| S::key(&tenant(i), METHOD, &uuid(i)))
        .collect()
}

fn build<S: Store>(rt: &Rt) -> Arc<S> {
    let _in = rt.enter();
    Arc::new(S::build(&StoreConfig {
        ttl: Duration::from_secs(3600),
        capacity: 10_000_000,
        shards: None,
    }))
}

/// The replay workload's store: every key completed once, then the keys built again (a
/// request brings its own key; see `driver::prefill`).
fn filled<S: Store>(rt: &Rt) -> (Arc<S>, Vec<S::Key>) {
    let store = build::<S>(rt);
    rt.block_on(async {
        for k in keys::<S>(0, REPLAY_KEYS as u64) {
            std::hint::black_box(store.call(&k, || async { fresh_value() }).await);
        }
        store.settle().await;
    });
    (store, keys::<S>(0, REPLAY_KEYS as u64))
}

fn replay<S: Store>(store: &S, keys: &[S::Key], calls: u64) {
    let mut cx = Context::from_waker(Waker::noop());
    let mut rng = Rng::new(7);
    for _ in 0..calls {
        let key = &keys[rng.below(keys.len())];
        let call = std::pin::pin!(store.call(key, || async { fresh_value() }));
        match call.poll(&mut cx) {
            Poll::Ready(v) => drop(std::hint::black_box(v)),
            Poll::Pending => panic!("{}: a replay waited", S::NAME),
        }
    }
}

/// Makes `calls` rounded up to a multiple of the 256 tasks; returns how many it made.
fn unique<S: Store>(rt: &Rt, store: &Arc<S>, calls: u64) -> u64 {
    let per = calls.div_ceil(CLIENT_TASKS as u64);
    rt.block_on(async {
        let tasks: Vec<_> = (0..CLIENT_TASKS as u64)
            .map(|t| {
                let store = store.clone();
                tokio::spawn(async move {
                    let first = (1 << 40) + t * per;
                    for i in first..first + per {
                        let key = S::key(&tenant(i), METHOD, &uuid(i));
                        std::hint::black_box(store.call(&key, || async { fresh_value() }).await);
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.expect("client task");
        }
    });
    per * CLIENT_TASKS as u64
}

// One function per store and workload, never inlined: callgrind's `--toggle-collect` counts
// exactly what runs inside.

#[inline(never)]
fn measure_replay_idem(store: &Idem, keys: &[<Idem as Store>::Key], calls: u64) {
    replay(store, keys, calls);
}

#[inline(never)]
fn measure_replay_dashmap(store: &DashShared, keys: &[<DashShared as Store>::Key], calls: u64) {
    replay(store, keys, calls);
}

#[inline(never)]
fn measure_unique_idem(rt: &Rt, store: &Arc<Idem>, calls: u64) -> u64 {
    unique(rt, store, calls)
}

#[inline(never)]
fn measure_unique_dashmap(rt: &Rt, store: &Arc<DashShared>, calls: u64) -> u64 {
    unique(rt, store, calls)
}

fn main() {
    // `cargo bench` passes `--bench`; the rest are ours.
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let workload = args.first().map_or("replay", String::as_str);
    let store = args.get(1).map_or("idem", String::as_str);
    let calls: u64 = match args.get(2).map(|n| n.parse()) {
        None => 2_560,
        Some(Ok(n)) if n > 0 => n,
        Some(_) => {
            eprintln!("usage: instructions [replay|unique] [idem|dashmap_shared] [calls > 0]");
            std::process::exit(2);
        }
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("build the tokio runtime");
    let start = Instant::now();
    let made = match (workload, store) {
        ("replay", "idem") => {
            let (s, k) = filled::<Idem>(&rt);
            measure_replay_idem(&s, &k, calls);
            calls
        }
        ("replay", "dashmap_shared") => {
            let (s, k) = filled::<DashShared>(&rt);
            measure_replay_dashmap(&s, &k, calls);
            calls
        }
        ("unique", "idem") => measure_unique_idem(&rt, &build::<Idem>(&rt), calls),
        ("unique", "dashmap_shared") => {
            measure_unique_dashmap(&rt, &build::<DashShared>(&rt), calls)
        }
        _ => {
            eprintln!("usage: instructions [replay|unique] [idem|dashmap_shared] [calls > 0]");
            std::process::exit(2);
        }
    };
    println!(
        "instructions: {workload} / {store}: {made} calls measured; the whole run took {:.2?} (count the instructions with callgrind: see the file's docs)",
        start.elapsed()
    );
}
