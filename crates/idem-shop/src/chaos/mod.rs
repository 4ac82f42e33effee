//! The chaos run shared by the demo and the Z1 test: a gRPC shop behind the idem layer, a
//! fault-injecting proxy in front of it, many concurrent clients creating orders through the
//! client layer, and an exact per-intent check of what happened. Each order deducts its stock
//! first in a separate stock service (also behind the idem layer), through the client layer and
//! without a key; a share of the order runs are lost between that deduction and the order, so
//! the retry runs the intent again and must replay the deduction, not take the stock twice.
//!
//! | file | what |
//! |---|---|
//! | `mod.rs` | the settings, the stock service and the instances of a run |
//! | `drive.rs` | the clients, the proxy and the servers of one run, and its report |
//! | `report.rs` | what a run did, and every broken promise in it |
//! | `table.rs` | the final table |

use std::time::Duration;

use idem_dedup::Engine;
use idem_redis::{RedisTier, TieredEngine};
use idem_tower::{RetryLayer, StoredResponse, Writes};
use tonic::transport::Endpoint;

use crate::faults::StatusFaults;
use crate::proxy::ProxyFaults;
use crate::stock::StockLink;
use crate::{grpc, metrics, Shop, WRITES};

mod drive;
mod report;
mod table;

pub use report::{ChaosReport, IntentResult};

/// Where the server side of a chaos run deduplicates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Instances {
    /// One server with the embedded engine.
    One,
    /// `count` server instances behind the proxy (round robin per connection), each with its own
    /// tiered engine, all sharing the Redis at `url` and one shop (one orders table).
    Redis {
        /// The shared Redis.
        url: String,
        /// Server instances.
        count: usize,
        /// Accept a Redis without an append-only file (a warning instead of the refusal).
        allow_volatile: bool,
    },
}

/// How a chaos run is set up.
#[derive(Debug, Clone)]
pub struct ChaosConfig {
    /// One embedded engine, or several instances sharing a Redis.
    pub instances: Instances,
    /// Concurrent clients, each with its own connection through the proxy.
    pub clients: usize,
    /// Intents each client creates, one after another.
    pub intents_per_client: usize,
    /// Connection faults (drop before / after send, slow answers).
    pub proxy: ProxyFaults,
    /// Server faults (`UNAVAILABLE`, `RESOURCE_EXHAUSTED` with pushback).
    pub status: StatusFaults,
    /// The share of order runs lost right after their stock deduction, before their order.
    pub lost_after_stock: f64,
    /// Time each order takes to create.
    pub work: Duration,
    /// The client layer's per-attempt timeout (slow answers exceed it).
    pub attempt_timeout: Duration,
    /// Attempts per call, first included.
    pub max_attempts: u32,
    /// Print progress to stderr while running.
    pub progress: bool,
}

impl ChaosConfig {
    /// `clients` × `intents` with 20% faults of every kind, 4% each.
    pub fn twenty_percent(clients: usize, intents: usize, seed: u64) -> Self {
        ChaosConfig {
            instances: Instances::One,
            clients,
            intents_per_client: intents,
            proxy: ProxyFaults {
                drop_before_send: 0.04,
                drop_after_send: 0.04,
                slow: 0.04,
                // Past the attempt timeout, so a slow answer is a timeout.
                slow_by: Duration::from_millis(1200),
                seed,
            },
            status: StatusFaults {
                unavailable: 0.04,
                resource_exhausted: 0.04,
                pushback: Duration::from_millis(25),
                seed: seed ^ 0x5EED,
            },
            lost_after_stock: 0.04,
            work: Duration::from_millis(15),
            // Far above an order's own time (a stock call and `work`), so that only the slow
            // fault times an attempt out: on a busy machine a debug build's threads can wait for
            // a CPU longer than they run, and a timeout near the order's time then times out
            // most attempts, whose retries add the load that times out the next ones.
            attempt_timeout: Duration::from_millis(1000),
            max_attempts: 8,
            progress: false,
        }
    }
}

/// Runs the chaos scenario.
///
/// # Errors
///
/// Setting up the servers (or connecting to Redis) failed.
pub async fn run(
    cfg: ChaosConfig,
) -> Result<ChaosReport, Box<dyn std::error::Error + Send + Sync>> {
    let handle = metrics::recorder(); // before the engines, so their gauges register
    let metrics_addr = metrics::serve(handle).await?;
    // The stock service: a shop of its own behind the idem layer with its own engine, no faults.
    let stock = Shop::new();
    let stock_server = grpc::serve(
        stock.clone(),
        Engine::builder().build()?,
        StatusFaults::default(),
    )
    .await?;
    let stock_client = tower::ServiceBuilder::new()
        .layer(
            RetryLayer::builder()
                .writes(Writes::paths(WRITES))
                .build()?,
        )
        .service(Endpoint::from_shared(format!("http://{}", stock_server.addr))?.connect_lazy());
    let link = StockLink::new(stock_client, cfg.lost_after_stock, cfg.proxy.seed ^ 0x570C);
    let shop = Shop::with_stock(cfg.work, link);
    let mut report = drive_instances(cfg, shop.clone(), metrics_addr).await?;
    report.deductions = stock.deductions();
    report.runs_lost = shop.stock_link().map_or(0, StockLink::lost);
    stock_server.stop().await;
    Ok(report)
}

async fn drive_instances(
    cfg: ChaosConfig,
    shop: Shop,
    metrics_addr: std::net::SocketAddr,
) -> Result<ChaosReport, Box<dyn std::error::Error + Send + Sync>> {
    match cfg.instances.clone() {
        Instances::One => {
            let engine = Engine::builder().build()?;
            drive::drive(cfg, shop, vec![engine], metrics_addr, |_| None).await
        }
        Instances::Redis {
            url,
            count,
            allow_volatile,
        } => {
            // A prefix of this run's own, so runs on one Redis never see each other's records.
            let prefix = format!("idem:chaos:{}:", idem_dedup::remote::OwnerId::random());
            let mut engines = Vec::with_capacity(count);
            for _ in 0..count.max(1) {
                let tier = RedisTier::builder()
                    .prefix(prefix.clone())
                    .command_timeout(Duration::from_secs(2))
                    .allow_volatile(allow_volatile)
                    .connect(&url)
                    .await?;
                engines.push(TieredEngine::<StoredResponse>::builder(tier).build()?);
            }
            drive::drive(cfg, shop, engines, metrics_addr, |e| Some(e.stats())).await
        }
    }
}
