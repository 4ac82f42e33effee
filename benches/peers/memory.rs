//! (d) Memory: heap and resident bytes per completed entry, one store per process. The bench
//! re-runs its own binary with `IDEM_BENCH_MEMORY=<store>:<entries>`; the child switches the
//! counting allocator on, fills the store, and prints one `IDEM_MEMORY {json}` line.

use std::hint::black_box;
use std::process::Command;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use super::alloc::{rss_bytes, LIVE, ON};
use super::common::{fresh_value, runtime};
use super::driver::key_of;
use super::store::{Store, StoreConfig};

/// The environment variable that selects the child's store and entry count.
pub const ENV: &str = "IDEM_BENCH_MEMORY";

/// One store's measure.
#[derive(Debug, Clone)]
pub struct Measure {
    /// Counted heap bytes per completed entry.
    pub heap: f64,
    /// Resident-set growth per completed entry.
    pub rss: f64,
}

/// In the child: fills `S` with `n` completed entries and prints the measure.
pub fn child<S: Store>(n: usize) {
    ON.store(true, Relaxed);
    let rt = runtime(2);
    let (heap, rss) = rt.block_on(async move {
        let rss0 = rss_bytes();
        let live0 = LIVE.load(Relaxed);
        let store = Arc::new(S::build(&StoreConfig {
            ttl: Duration::from_secs(3600),
            capacity: n + 1024,
            shards: None,
        }));
        let tasks = 16;
        let mut handles = Vec::new();
        for t in 0..tasks {
            let store = store.clone();
            handles.push(tokio::spawn(async move {
                for i in (t..n).step_by(tasks) {
                    // The caller's key is dropped after the call, as a server's request is.
                    let key = key_of::<S>(i as u64);
                    black_box(store.call(&key, || async { fresh_value() }).await);
                }
            }));
        }
        for h in handles {
            h.await.expect("fill task");
        }
        store.settle().await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        store.settle().await;
        let heap = (LIVE.load(Relaxed) - live0) as f64 / n as f64;
        let rss = rss_bytes().saturating_sub(rss0) as f64 / n as f64;
        black_box(&store);
        (heap, rss)
    });
    println!("IDEM_MEMORY {{\"heap\": {heap:.1}, \"rss\": {rss:.1}}}");
    rt.shutdown_background();
}

/// In the parent: runs the child for `store` and reads its measure.
pub fn measure(store: &str, n: usize) -> Result<Measure, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let out = Command::new(exe)
        .env(ENV, format!("{store}:{n}"))
        .output()
        .map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!(
            "{store}: child failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("IDEM_MEMORY "))
        .ok_or_else(|| format!("{store}: no IDEM_MEMORY line in {text:?}"))?;
    let v: serde_json::Value = serde_json::from_str(line).map_err(|e| e.to_string())?;
    Ok(Measure {
        heap: v["heap"].as_f64().unwrap_or(f64::NAN),
        rss: v["rss"].as_f64().unwrap_or(f64::NAN),
    })
}
