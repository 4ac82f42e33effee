//! What every bench shares: the request shape, keys, values, the quick switch, output paths.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// The value every store keeps: a fresh 64-byte `Arc<[u8]>` per run.
pub type Val = Arc<[u8]>;

/// The gRPC method of every request.
pub const METHOD: &str = "/shop.v1.Shop/CreateOrder";
/// Tenants the requests are spread over (`tenant-0000` .. `tenant-0099`).
pub const TENANTS: u64 = 100;
/// Concurrent client tasks in the throughput workloads.
pub const CLIENT_TASKS: usize = 256;
/// Pre-completed keys of the replay workload.
pub const REPLAY_KEYS: usize = 100_000;
/// Concurrent calls per hot-key burst.
pub const BURST: usize = 1_000;

/// A fresh 64-byte value, as an action would build it.
pub fn fresh_value() -> Val {
    Arc::from(&[0x5a_u8; 64][..])
}

/// `IDEM_BENCH_QUICK=1`: short measurements, fewer samples, smaller memory N.
pub fn quick() -> bool {
    std::env::var("IDEM_BENCH_QUICK").is_ok_and(|v| !v.is_empty() && v != "0")
}

/// Criterion settings: quick mode measures briefly; the full mode long enough for stable medians.
pub fn criterion(quick: bool) -> criterion::Criterion {
    let c = criterion::Criterion::default().without_plots();
    let c = if quick {
        c.warm_up_time(Duration::from_millis(300))
            .measurement_time(Duration::from_millis(1_000))
            .sample_size(10)
            .nresamples(10_000)
    } else {
        c.warm_up_time(Duration::from_secs(2))
            .measurement_time(Duration::from_secs(5))
            .sample_size(20)
    };
    c.configure_from_args()
}

/// SplitMix64: a small, fast, seedable generator for key picks.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        mix(self.0)
    }
    /// A number in `0..n`.
    pub fn below(&mut self, n: usize) -> usize {
        ((self.next_u64() as u128 * n as u128) >> 64) as usize
    }
}

/// The SplitMix64 finaliser: a bijection on `u64`, so distinct inputs give distinct outputs.
pub fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The tenant of request `n`, like `tenant-0042`.
pub fn tenant(n: u64) -> String {
    format!("tenant-{:04}", mix(n ^ 0x7e4a) % TENANTS)
}

/// A 36-character, version-4-shaped UUID, distinct for every `n` within a process.
pub fn uuid(n: u64) -> String {
    let salt = process_salt();
    let lo = mix(n ^ salt); // a bijection of n: never repeats
    let hi = mix(salt.rotate_left(17) ^ n.rotate_left(32));
    format!(
        "{:08x}-{:04x}-4{:03x}-{:x}{:03x}-{:012x}",
        (hi >> 32) as u32,
        (hi >> 16) as u16,
        hi & 0xfff,
        8 | (lo >> 62),
        (lo >> 48) & 0xfff,
        lo & 0xffff_ffff_ffff
    )
}

fn process_salt() -> u64 {
    use std::hash::BuildHasher;
    use std::sync::OnceLock;
    static SALT: OnceLock<u64> = OnceLock::new();
    *SALT.get_or_init(|| std::hash::RandomState::new().hash_one(std::process::id()))
}

/// Where the bench writes its outputs: `$CARGO_TARGET_DIR/idem-bench`, else the target folder
/// that holds this bench binary, else `target/idem-bench`.
pub fn out_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .or_else(|| {
            // <target>/<profile>/deps/<bench>-<hash>
            let exe = std::env::current_exe().ok()?;
            exe.ancestors().nth(3).map(PathBuf::from)
        })
        .unwrap_or_else(|| PathBuf::from("target"));
    let dir = target.join("idem-bench");
    std::fs::create_dir_all(&dir).expect("create the output folder");
    dir
}

/// The machine, for the report: logical CPUs and the CPU model.
pub fn machine() -> (usize, String) {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into());
    (cpus, model)
}

/// A tokio multi-thread runtime with `threads` workers, built once per bench.
pub fn runtime(threads: usize) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()
        .expect("build the tokio runtime")
}

/// The median of some numbers (the mean of the middle two for an even count).
pub fn median(mut xs: Vec<f64>) -> f64 {
    if xs.is_empty() {
        return f64::NAN;
    }
    xs.sort_by(f64::total_cmp);
    let n = xs.len();
    if n % 2 == 1 {
        xs[n / 2]
    } else {
        (xs[n / 2 - 1] + xs[n / 2]) / 2.0
    }
}

/// Formats ops/s with a thousands separator.
pub fn fmt_ops(x: f64) -> String {
    let s = format!("{:.0}", x);
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}
