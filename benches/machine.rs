//! What one memory access and one clock read cost on this machine (issue 4: the targets' floor).
//!
//! A replay, in any store, is a chain of loads that each need the one before: the request key's
//! bytes (to hash them), the table's control bytes, the slot, the entry (idem's box; the DashMap
//! design's key bytes), the value's reference count. When those lines are not in a near cache,
//! each link costs one full memory latency, and no instruction saving shortens the chain. This bench measures that latency, so the peers bench's
//! p50 figures can be read against it:
//!
//! ```text
//! cargo bench -p idem-benches --bench machine
//! ```
//!
//! - **Dependent-load latency**: a random cycle through one 64-byte line per node of an array of
//!   1, 4, 16, 64 and 256 MiB, each load's address read from the load before (a pointer chase:
//!   the processor cannot overlap the misses, as it cannot in a replay's chain).
//! - **`Instant::now()`**: every store reads the clock once per replay to check the expiry.
//!
//! It prints a table and writes nothing. `IDEM_BENCH_QUICK=1` runs fewer steps.

use std::hint::black_box;
use std::time::Instant;

#[path = "support/common.rs"]
#[allow(dead_code)]
mod common;

use common::Rng;

/// One node per cache line: the chase reads `next[i * LINE]` for line `i`.
const LINE: usize = 64 / std::mem::size_of::<usize>();

/// A random cyclic order of `lines` lines (a seeded Fisher–Yates shuffle: the same walk on every
/// run), stored as each line's successor.
fn chase_array(lines: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..lines).collect();
    let mut rng = Rng::new(0x6964_656d);
    for i in (1..lines).rev() {
        order.swap(i, rng.below(i + 1));
    }
    let mut next = vec![0usize; lines * LINE];
    for k in 0..lines {
        next[order[k] * LINE] = order[(k + 1) % lines] * LINE;
    }
    next
}

/// Nanoseconds per dependent load over an array of `mib` MiB.
fn dependent_load_ns(mib: usize, steps: u64) -> f64 {
    let next = chase_array(mib * 1024 * 1024 / 64);
    // One lap first, so the pages are mapped and the first touches are not counted.
    let mut p = 0;
    for _ in 0..next.len() / LINE {
        p = next[p];
    }
    let start = Instant::now();
    for _ in 0..steps {
        p = next[p];
    }
    let ns = start.elapsed().as_nanos() as f64 / steps as f64;
    black_box(p);
    ns
}

/// Nanoseconds per `Instant::now()`.
fn clock_read_ns(reads: u64) -> f64 {
    let start = Instant::now();
    for _ in 0..reads {
        black_box(Instant::now());
    }
    start.elapsed().as_nanos() as f64 / reads as f64
}

fn main() {
    let quick = common::quick();
    // `cargo bench` passes `--bench`; `cargo test --benches` does not and wants a quick check.
    let bench = std::env::args().any(|a| a == "--bench");
    let steps: u64 = match (bench, quick) {
        (false, _) => 10_000,
        (true, true) => 1_000_000,
        (true, false) => 5_000_000,
    };
    let (cpus, model) = common::machine();
    println!("idem machine bench: {cpus} CPUs ({model}); {steps} steps per size\n");
    println!("| array | ns per dependent load |");
    println!("|---:|---:|");
    for mib in [1, 4, 16, 64, 256] {
        println!("| {mib} MiB | {:.1} |", dependent_load_ns(mib, steps));
    }
    println!("\n`Instant::now()`: {:.1} ns", clock_read_ns(steps));
}
