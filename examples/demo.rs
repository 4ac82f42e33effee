//! The idem demo: effectively-once order creation through injected faults.
//!
//! Starts the gRPC shop behind the idem layer on a free loopback port, puts a fault-injecting
//! proxy in front of it (connections dropped before the request is sent and after it is sent but
//! before the answer, answers slowed past the attempt timeout) and a fault layer in the server
//! (UNAVAILABLE, RESOURCE_EXHAUSTED with pushback) — 20% of requests fail, 4% of each kind — and
//! runs many concurrent clients that create orders through the client retry layer. Each order
//! first deducts its stock in a separate stock service (also behind the idem layer) through the
//! client layer, without a key: idem derives it from the order's intent. 4% of the order runs are
//! lost between that deduction and the order (the retry runs the intent again, on any instance),
//! so a drawn key would deduct twice. It prints progress, then a table, and exits non-zero if any
//! intent was created or deducted twice, any intent reported successful was not created and
//! deducted exactly once, or (when no intent gave up) deductions, orders and successful intents
//! differ.
//!
//! ```sh
//! cargo run --release --example demo                      # one server, the embedded engine
//! cargo run --release --example demo -- --instances 2     # two servers sharing one Redis (Z4)
//! cargo run --release --example demo -- --instances 3 --redis redis://127.0.0.1:6379/ --allow-volatile
//! ```
//!
//! With `--instances N` (N ≥ 2) the proxy spreads the clients' connections over N server
//! instances, each with its own tiered engine; all share one Redis and one orders table, so a
//! retry that lands on another instance must replay, not create a second order. Without
//! `--redis`, the demo starts its own `redis-server` (append-only file, fsync on every write) on a
//! free loopback port and stops it at the end. A Redis that keeps nothing on disk is refused
//! (its restart would lose records, so an intent could run twice) unless `--allow-volatile`.

use idem_shop::chaos::{self, ChaosConfig, Instances};
use idem_shop::redis_server::{OwnRedis, Persistence};

fn usage() -> ! {
    eprintln!("usage: demo [--instances N] [--redis URL [--allow-volatile]]");
    std::process::exit(2)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let (mut instances, mut redis, mut allow_volatile) = (1usize, None::<String>, false);
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--instances" => {
                instances = match args.next().and_then(|n| n.parse().ok()) {
                    Some(n) if n >= 1 => n,
                    _ => usage(),
                }
            }
            "--redis" => redis = Some(args.next().unwrap_or_else(|| usage())),
            "--allow-volatile" => allow_volatile = true,
            _ => usage(),
        }
    }
    let mut cfg = ChaosConfig::twenty_percent(200, 10, 0x1DE5);
    cfg.progress = true;
    let mut _own = None;
    if instances > 1 || redis.is_some() {
        let url = match redis {
            Some(url) => url,
            None => {
                let own = OwnRedis::start(Persistence::AofAlways).await?;
                eprintln!("started redis-server at {} (appendfsync always)", own.url());
                let url = own.url();
                _own = Some(own);
                url
            }
        };
        cfg.instances = Instances::Redis {
            url,
            count: instances,
            allow_volatile,
        };
    }
    eprintln!(
        "idem demo: {} clients x {} orders each through a fault-injecting proxy (20% faults; 4% of order runs lost after their stock call) on 127.0.0.1, {}",
        cfg.clients,
        cfg.intents_per_client,
        match &cfg.instances {
            Instances::One => "one server".to_owned(),
            Instances::Redis { count, .. } => format!("{count} server instances sharing one Redis"),
        }
    );
    let report = chaos::run(cfg).await?;
    println!("{}", report.table());
    let violations = report.violations();
    if violations.is_empty() {
        println!(
            "OK: every intent reported successful was created and deducted exactly once; none twice \
             ({} deductions, {} orders, {} successful intents).",
            report.deductions_total(),
            report.orders_created(),
            report.succeeded()
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
