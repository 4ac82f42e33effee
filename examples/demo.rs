//! The idem demo: effectively-once order creation through injected faults.
//!
//! Starts the gRPC shop behind the idem layer on a free loopback port, puts a fault-injecting
//! proxy in front of it (connections dropped before the request is sent and after it is sent but
//! before the answer, answers slowed past the attempt timeout) and a fault layer in the server
//! (UNAVAILABLE, RESOURCE_EXHAUSTED with pushback) — 20% of requests fail, 4% of each kind — and
//! runs many concurrent clients that create orders through the client retry layer. It prints
//! progress, then a table, and exits non-zero if any intent was created twice or any intent
//! reported successful was not created exactly once.
//!
//! Run: `cargo run --release --example demo`

use idem_shop::chaos::{self, ChaosConfig};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let mut cfg = ChaosConfig::twenty_percent(200, 10, 0x1DE5);
    cfg.progress = true;
    eprintln!(
        "idem demo: {} clients x {} orders each through a fault-injecting proxy (20% faults) on 127.0.0.1",
        cfg.clients, cfg.intents_per_client
    );
    let report = chaos::run(cfg).await?;
    println!("{}", report.table());
    let violations = report.violations();
    if violations.is_empty() {
        println!(
            "OK: every intent reported successful was created exactly once; none was created twice."
        );
        Ok(())
    } else {
        for v in violations.iter().take(20) {
            eprintln!("VIOLATION {v}");
        }
        eprintln!("{} violations", violations.len());
        std::process::exit(1);
    }
}
