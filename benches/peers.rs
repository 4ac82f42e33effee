//! idem against the stores users pick instead, on identical workloads in one run (issues 4 and
//! 17, BENCHMARKS.md): (a) replay, (b) unique, (c) hot key, (d) memory, plus the floors; replay,
//! unique and hot key also paired with the DashMap design (interleaved in one run).
//!
//! `cargo bench -p idem-benches --bench peers`; `IDEM_BENCH_QUICK=1` for a run of about two
//! minutes. Writes `target/idem-bench/summary.json` (under `$CARGO_TARGET_DIR` when set) and prints
//! it as a table.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, Throughput};
use serde_json::{json, Map, Value};

#[path = "support/alloc.rs"]
mod alloc;
#[path = "support/common.rs"]
mod common;
#[path = "support/driver.rs"]
mod driver;
#[path = "support/hist.rs"]
mod hist;
#[path = "support/store.rs"]
mod store;

#[path = "peers/dashmap_shared.rs"]
mod dashmap_shared;
#[path = "peers/idem.rs"]
mod idem_store;
#[path = "peers/memory.rs"]
mod memory;
#[path = "peers/moka.rs"]
mod moka_store;
#[path = "peers/mpsc_floor.rs"]
mod mpsc_floor;
#[path = "peers/mutex_floor.rs"]
mod mutex_floor;
#[path = "peers/singleflight.rs"]
mod singleflight;

use common::{fmt_ops, median, Val, BURST, CLIENT_TASKS};
use dashmap_shared::DashShared;
use driver::{Bursts, Run};
use idem_store::Idem;
use moka_store::Moka;
use mpsc_floor::MpscFloor;
use mutex_floor::MutexFloor;
use singleflight::Singleflight;
use store::{Store, StoreConfig};

#[global_allocator]
static GLOBAL: alloc::Counting = alloc::Counting;

/// Per workload, per store: the summary fields, in run order.
type Results = BTreeMap<&'static str, Vec<(&'static str, Map<String, Value>)>>;

struct Ctx {
    quick: bool,
    rt: tokio::runtime::Runtime,
    results: Results,
    /// Hot-key bursts with more than one run: (store, most runs in a burst).
    violations: Vec<(&'static str, u64)>,
}

impl Ctx {
    /// Drops a store inside the runtime, then lets its background work end (idem's actors
    /// draining their tables, moka's housekeeper, the DashMap design's sweeper, results of the
    /// 1 s TTL still expiring) before the next store is measured, so no store pays for another's
    /// teardown.
    fn retire(&self, drop_store: impl std::future::Future<Output = ()>, settle: Duration) {
        self.rt.block_on(async {
            drop_store.await;
            tokio::time::sleep(settle).await;
        });
    }

    fn samples(&self) -> usize {
        if self.quick {
            10
        } else {
            20
        }
    }
    /// Calls per client task in the latency sample run.
    fn latency_rounds(&self) -> u64 {
        if self.quick {
            400
        } else {
            4_000
        }
    }
    fn put(&mut self, workload: &'static str, store: &'static str, fields: Map<String, Value>) {
        self.results
            .entry(workload)
            .or_default()
            .push((store, fields));
    }
}

#[path = "peers/hot_key.rs"]
mod hot_key;
#[path = "peers/report.rs"]
mod report;
#[path = "peers/throughput.rs"]
mod throughput;

use hot_key::{hot_key, hot_key_paired};
use report::{add_ratios, print_table, print_targets};
use throughput::{replay, replay_paired, unique, unique_paired};

fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// `IDEM_BENCH_ONLY=replay,unique,hot_key,memory` runs only the named workloads (for profiling);
/// unset, all run.
fn wanted(workload: &str) -> bool {
    std::env::var("IDEM_BENCH_ONLY")
        .map_or(true, |only| only.split(',').any(|w| w.trim() == workload))
}

fn memory_child(spec: &str) {
    let (name, n) = spec
        .split_once(':')
        .expect("IDEM_BENCH_MEMORY=<store>:<entries>");
    let n: usize = n.parse().expect("entry count");
    match name {
        Idem::NAME => memory::child::<Idem>(n),
        Moka::NAME => memory::child::<Moka>(n),
        DashShared::NAME => memory::child::<DashShared>(n),
        MutexFloor::NAME => memory::child::<MutexFloor>(n),
        other => panic!("no memory workload for store {other}"),
    }
}

fn main() {
    if let Ok(spec) = std::env::var(memory::ENV) {
        memory_child(&spec);
        return;
    }
    let quick = common::quick();
    let (cpus, model) = common::machine();
    let memory_n = if quick { 200_000 } else { 1_000_000 };
    println!(
        "idem peers bench: {} mode; {cpus} CPUs ({model}); 2 worker threads, {CLIENT_TASKS} client tasks; \
         memory at {} entries{}",
        if quick { "QUICK" } else { "full" },
        fmt_ops(memory_n as f64),
        if quick {
            " (quick mode: short measurements, 10 samples, 200k-entry memory workload)"
        } else {
            ""
        }
    );
    let mut c = common::criterion(quick);
    let mut ctx = Ctx {
        quick,
        rt: common::runtime(2),
        results: Results::new(),
        violations: Vec::new(),
    };

    if wanted("replay") {
        let mut g = c.benchmark_group("replay");
        g.throughput(Throughput::Elements(CLIENT_TASKS as u64));
        replay::<Idem>(&mut ctx, &mut g);
        replay::<Moka>(&mut ctx, &mut g);
        replay::<DashShared>(&mut ctx, &mut g);
        replay::<MutexFloor>(&mut ctx, &mut g);
        replay::<MpscFloor>(&mut ctx, &mut g);
        g.finish();
        replay_paired(&mut ctx);
        let misses = driver::REPLAY_MISSES.load(Relaxed);
        if misses > 0 {
            println!("note: {misses} replay calls ran their action (the key was not stored)");
        }
    }

    if wanted("unique") {
        let mut g = c.benchmark_group("unique");
        g.throughput(Throughput::Elements(CLIENT_TASKS as u64));
        unique::<Idem>(&mut ctx, &mut g);
        unique::<Moka>(&mut ctx, &mut g);
        unique::<DashShared>(&mut ctx, &mut g);
        unique::<MutexFloor>(&mut ctx, &mut g);
        unique::<MpscFloor>(&mut ctx, &mut g);
        g.finish();
        unique_paired(&mut ctx);
    }

    if wanted("hot_key") {
        let mut g = c.benchmark_group("hot_key");
        g.throughput(Throughput::Elements(BURST as u64));
        hot_key::<Idem>(&mut ctx, &mut g);
        hot_key::<Moka>(&mut ctx, &mut g);
        hot_key::<DashShared>(&mut ctx, &mut g);
        hot_key::<Singleflight>(&mut ctx, &mut g);
        g.finish();
        hot_key_paired(&mut ctx);
    }

    let memory_stores = if wanted("memory") {
        &[Idem::NAME, Moka::NAME, DashShared::NAME, MutexFloor::NAME][..]
    } else {
        &[]
    };
    for &name in memory_stores {
        match memory::measure(name, memory_n) {
            Ok(m) => {
                let mut f = Map::new();
                f.insert("bytes_per_entry".into(), json!(round1(m.heap)));
                f.insert("rss_bytes_per_entry".into(), json!(round1(m.rss)));
                f.insert("entries".into(), json!(memory_n));
                ctx.put("memory", name, f);
            }
            Err(e) => println!("memory workload failed: {e}"),
        }
    }

    add_ratios(&mut ctx.results);
    let workloads: Map<String, Value> = ctx
        .results
        .iter()
        .map(|(w, rows)| {
            let stores: Map<String, Value> = rows
                .iter()
                .map(|(s, m)| (s.to_string(), Value::Object(m.clone())))
                .collect();
            (w.to_string(), Value::Object(stores))
        })
        .collect();
    let summary = json!({
        "workloads": workloads,
        "meta": {
            "quick": quick,
            "cpus": cpus,
            "cpu_model": model,
            "worker_threads": 2,
            "client_tasks": CLIENT_TASKS,
            "replay_keys": common::REPLAY_KEYS,
            "burst": BURST,
            "memory_entries": memory_n,
            "value_bytes": std::mem::size_of::<[u8; 64]>(),
            "value_type": std::any::type_name::<Val>(),
        }
    });
    let path = common::out_dir().join("summary.json");
    std::fs::write(
        &path,
        serde_json::to_string_pretty(&summary).expect("json") + "\n",
    )
    .expect("write summary.json");
    print_table(&ctx.results);
    print_targets(&ctx.results);
    println!();
    println!("summary: {}", path.display());

    if !ctx.violations.is_empty() {
        for (s, runs) in &ctx.violations {
            eprintln!(
                "HOT KEY CHECK FAILED: {s} ran the action {runs} times in one burst (must be 1)"
            );
        }
        std::process::exit(1);
    }
}
