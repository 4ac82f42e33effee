//! What the user-level benches (`http_shop`, `grpc_shop`) share: their settings from the
//! environment, the re-run of the bench pinned to CPU 0 (the load generator takes CPU 1), the
//! process' CPU time, and the output folder.

use std::path::PathBuf;
use std::process::Command;

/// Set in the pinned re-run, so it does not re-run itself again.
const PINNED_ENV: &str = "IDEM_USER_BENCH_PINNED";
/// The CPU count, handed to the re-run (which `taskset` leaves one).
const CPUS_ENV: &str = "IDEM_USER_BENCH_CPUS";

/// Whether this process is the pinned re-run.
pub fn is_pinned() -> bool {
    std::env::var_os(PINNED_ENV).is_some()
}

pub fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

pub fn quick() -> bool {
    std::env::var("IDEM_BENCH_QUICK").is_ok_and(|v| !v.is_empty() && v != "0")
}

pub fn has(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success() || !o.stdout.is_empty() || !o.stderr.is_empty())
}

/// The machine's CPUs: counted before the re-run under `taskset`, which leaves this process one.
pub fn cpus() -> usize {
    std::env::var(CPUS_ENV)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// `$CARGO_TARGET_DIR/idem-bench`, else the target folder holding this binary (as the peers bench).
pub fn out_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .or_else(|| {
            let exe = std::env::current_exe().ok()?;
            exe.ancestors().nth(3).map(PathBuf::from)
        })
        .unwrap_or_else(|| PathBuf::from("target"));
    let dir = target.join("idem-bench");
    std::fs::create_dir_all(&dir).expect("create the output folder");
    dir
}

/// This process' CPU time so far: the sum of its threads' time on a CPU, in ns.
pub fn cpu_ns() -> u64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    tasks
        .filter_map(Result::ok)
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

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

pub fn r3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// Ratios rounded to two decimals, for printing the pairs beside their median (the deployment
/// bench; the others that include this file do not print pairs).
#[allow(dead_code)]
pub fn two_places(ratios: &[f64]) -> Vec<f64> {
    ratios.iter().map(|r| (r * 100.0).round() / 100.0).collect()
}

/// Re-runs this bench under `taskset -c 0` when it can; `Some(exit code)` when it did.
pub fn pin_self() -> Option<i32> {
    if std::env::var_os(PINNED_ENV).is_some() || cpus() < 2 || !has("taskset") {
        return None;
    }
    let exe = std::env::current_exe().ok()?;
    let status = Command::new("taskset")
        .args(["-c", "0"])
        .arg(exe)
        .args(std::env::args_os().skip(1))
        .env(PINNED_ENV, "1")
        .env(CPUS_ENV, cpus().to_string())
        .status()
        .ok()?;
    Some(status.code().unwrap_or(1))
}
