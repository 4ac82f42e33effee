//! Instructions per call, idem against the DashMap design, counted by callgrind.
//!
//! Throughput on a shared 2-core VM moves by ±20–30% between processes; an instruction count
//! does not. This bench runs one workload of the peers bench for one store on a current-thread
//! runtime, inside a function of its own per store and workload, so callgrind can count just
//! that function:
//!
//! ```text
//! cargo bench -p idem-benches --bench instructions --no-run   # prints the binary's path
//! valgrind --tool=callgrind --toggle-collect='instructions::measure_*' \
//!     target/release/deps/instructions-<hash> replay idem 40000
//! ```
//!
//! callgrind's `Collected` divided by the call count is the instructions per call;
//! `callgrind_annotate` splits them by function. Workloads: `replay` (100k completed keys,
//! random hits, each call polled once by hand: a replay never waits in either store) and
//! `unique` (new keys from 256 tasks, the shard actor included: on a current-thread runtime it
//! runs between the callers). Keys and the replay store are made as the peers bench makes them
//! (`support/driver.rs`), before the counted function. Run without valgrind it only reports
//! that it ran; `cargo bench` runs it so, with a small count.

use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

#[path = "support/common.rs"]
#[allow(dead_code)]
mod common;
#[path = "support/driver.rs"]
#[allow(dead_code)]
mod driver;
#[path = "support/hist.rs"]
#[allow(dead_code)]
mod hist;
#[path = "support/store.rs"]
#[allow(dead_code)]
mod store;

#[path = "peers/dashmap_shared.rs"]
mod dashmap_shared;
#[path = "peers/idem.rs"]
mod idem_store;

use common::{fresh_value, Rng, CLIENT_TASKS};
use dashmap_shared::DashShared;
use idem_store::Idem;
use store::{Store, StoreConfig};

type Rt = tokio::runtime::Runtime;

fn build<S: Store>(rt: &Rt) -> Arc<S> {
    let _in = rt.enter();
    Arc::new(S::build(&StoreConfig {
        ttl: Duration::from_secs(3600),
        capacity: 10_000_000,
        shards: None,
    }))
}

/// The replay workload's store and keys, as the peers bench makes them (`driver::prefill`).
fn filled<S: Store>(rt: &Rt) -> (Arc<S>, Arc<Vec<S::Key>>) {
    let store = build::<S>(rt);
    let keys = rt.block_on(driver::prefill(&store));
    (store, keys)
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

/// New keys, built beforehand as the peers bench builds them (`driver::fresh_keys`), split over
/// the 256 tasks. The caller drops the keys, outside the count, as the peers bench drops them
/// outside its clock.
fn unique<S: Store>(rt: &Rt, store: &Arc<S>, keys: &Arc<Vec<S::Key>>) {
    let per = keys.len() / CLIENT_TASKS;
    rt.block_on(async {
        let tasks: Vec<_> = (0..CLIENT_TASKS)
            .map(|t| {
                let (store, keys) = (store.clone(), keys.clone());
                tokio::spawn(async move {
                    for key in &keys[t * per..(t + 1) * per] {
                        std::hint::black_box(store.call(key, || async { fresh_value() }).await);
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.expect("client task");
        }
    });
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
fn measure_unique_idem(rt: &Rt, store: &Arc<Idem>, keys: &Arc<Vec<<Idem as Store>::Key>>) {
    unique(rt, store, keys);
}

#[inline(never)]
fn measure_unique_dashmap(
    rt: &Rt,
    store: &Arc<DashShared>,
    keys: &Arc<Vec<<DashShared as Store>::Key>>,
) {
    unique(rt, store, keys);
}

fn usage() -> ! {
    eprintln!("usage: instructions [replay|unique] [idem|dashmap_shared] [calls > 0]");
    std::process::exit(2);
}

/// `calls` rounded up to a multiple of the 256 tasks.
fn unique_calls(calls: u64) -> usize {
    calls.div_ceil(CLIENT_TASKS as u64) as usize * CLIENT_TASKS
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
        Some(_) => usage(),
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
        ("unique", "idem") => {
            let keys = Arc::new(driver::fresh_keys::<Idem>(unique_calls(calls)));
            measure_unique_idem(&rt, &build::<Idem>(&rt), &keys);
            keys.len() as u64
        }
        ("unique", "dashmap_shared") => {
            let keys = Arc::new(driver::fresh_keys::<DashShared>(unique_calls(calls)));
            measure_unique_dashmap(&rt, &build::<DashShared>(&rt), &keys);
            keys.len() as u64
        }
        _ => usage(),
    };
    println!(
        "instructions: {workload} / {store}: {made} calls measured; the whole run took {:.2?} (count the instructions with callgrind: see the file's docs)",
        start.elapsed()
    );
}
