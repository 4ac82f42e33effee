//! One chaos run against its servers: the instances behind the fault proxy, the concurrent
//! clients through the client layer, the `/metrics` scraper, and the report.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use idem_core::IdempotencyKey;
use idem_dedup::tiered::TierStats;
use idem_dedup::{Deduplicator, Stats};
use idem_retry::{RetryBudget, RetryPolicy};
use idem_tower::{CallFailed, CallReport, RetryLayer, StoredResponse, Writes};
use tonic::transport::Endpoint;

use super::{ChaosConfig, ChaosReport, IntentResult};
use crate::pb::shop_client::ShopClient;
use crate::pb::CreateOrderRequest;
use crate::{grpc, metrics, Shop, WRITES};

pub(super) async fn drive<D: Deduplicator<Value = StoredResponse>>(
    cfg: ChaosConfig,
    shop: Shop,
    engines: Vec<D>,
    metrics_addr: std::net::SocketAddr,
    tier_stats: impl Fn(&D) -> Option<TierStats>,
) -> Result<ChaosReport, Box<dyn std::error::Error + Send + Sync>> {
    let mut servers = Vec::with_capacity(engines.len());
    for engine in &engines {
        servers.push(grpc::serve(shop.clone(), engine.clone(), cfg.status).await?);
    }
    let proxy =
        crate::proxy::start_many(servers.iter().map(|s| s.addr).collect(), cfg.proxy).await?;

    let layer = RetryLayer::builder()
        .policy(
            RetryPolicy::builder()
                .max_attempts(cfg.max_attempts)
                .base_delay(Duration::from_millis(10))
                .max_delay(Duration::from_millis(200))
                .build()?,
        )
        .budget(
            RetryBudget::builder()
                .ratio(0.5)
                .min_per_sec(1000)
                .build()?,
        )
        .writes(Writes::paths(WRITES))
        .call_timeout(Duration::from_secs(20))
        .attempt_timeout(cfg.attempt_timeout)
        .build()?;

    // Scrape /metrics while the run goes on; keep the peak of the summed in-flight gauge.
    let running = Arc::new(AtomicBool::new(true));
    let peak = Arc::new(AtomicU64::new(0));
    let scrapes = Arc::new(AtomicU64::new(0));
    let scraper = {
        let (running, peak, scrapes) = (running.clone(), peak.clone(), scrapes.clone());
        tokio::spawn(async move {
            while running.load(Relaxed) {
                if let Ok(text) = metrics::scrape(metrics_addr).await {
                    let v = metrics::sum(&text, idem_dedup::metrics::IN_FLIGHT);
                    peak.fetch_max(v as u64, Relaxed);
                    scrapes.fetch_add(1, Relaxed);
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    let done = Arc::new(AtomicU64::new(0));
    let total = (cfg.clients * cfg.intents_per_client) as u64;
    let ticker = cfg.progress.then(|| {
        let (running, done, layer, peak) = (running.clone(), done.clone(), layer.clone(), peak.clone());
        tokio::spawn(async move {
            while running.load(Relaxed) {
                tokio::time::sleep(Duration::from_millis(500)).await;
                let s = layer.stats();
                eprintln!(
                    "  {:>5}/{total} intents done · {:>5} attempts · {:>4} retries · peak in-flight {}",
                    done.load(Relaxed),
                    s.retrier.attempts,
                    s.retrier.retries,
                    peak.load(Relaxed)
                );
            }
        })
    });

    let started = Instant::now();
    let endpoint = Endpoint::from_shared(format!("http://{}", proxy.addr))?;
    let mut tasks = Vec::with_capacity(cfg.clients);
    for c in 0..cfg.clients {
        let channel = tower::ServiceBuilder::new()
            .layer(layer.clone())
            .service(endpoint.clone().connect_lazy());
        let mut client = ShopClient::new(channel);
        let done = done.clone();
        let n = cfg.intents_per_client;
        tasks.push(tokio::spawn(async move {
            let mut results = Vec::with_capacity(n);
            for i in 0..n {
                let intent = format!("intent-{c:04}-{i:03}");
                // K2: one key per business intent, derived so a restarted client would reuse it.
                let key = IdempotencyKey::derive(&intent, "CreateOrder");
                let mut req = tonic::Request::new(CreateOrderRequest {
                    intent_id: intent.clone(),
                    sku: "book-42".into(),
                    quantity: 1,
                });
                let md = req.metadata_mut();
                md.insert(
                    "authorization",
                    "Bearer tenant-demo".parse().expect("ascii"),
                );
                md.insert(
                    "x-idempotency-key",
                    key.as_str().parse().expect("K1 is ascii"),
                );
                let (outcome, attempts) = match client.create_order(req).await {
                    Ok(resp) => {
                        let attempts = resp
                            .extensions()
                            .get::<CallReport>()
                            .map_or(1, |r| r.attempts);
                        (Ok(resp.get_ref().order_id), attempts)
                    }
                    Err(status) => {
                        let attempts = std::error::Error::source(&status)
                            .and_then(|e| e.downcast_ref::<CallFailed>())
                            .map_or(0, CallFailed::attempts);
                        (Err(status.code()), attempts)
                    }
                };
                done.fetch_add(1, Relaxed);
                results.push(IntentResult {
                    intent,
                    outcome,
                    attempts,
                });
            }
            results
        }));
    }
    let mut results = Vec::with_capacity(total as usize);
    for t in tasks {
        results.extend(t.await?);
    }
    let elapsed = started.elapsed();
    running.store(false, Relaxed);
    let _ = scraper.await;
    if let Some(t) = ticker {
        let _ = t.await;
    }
    // Runs handed off by dropped callers (E5) finish on their own; wait for the engines to drain.
    while engines.iter().any(|e| e.stats().in_flight > 0) {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let mut engine = Stats::default();
    let mut tier: Option<TierStats> = None;
    for e in &engines {
        add_stats(&mut engine, &e.stats());
        if let Some(t) = tier_stats(e) {
            let sum = tier.get_or_insert_with(TierStats::default);
            add_tier(sum, &t);
        }
    }
    let fault_count =
        |f: fn(&crate::faults::StatusFaultCounts) -> &std::sync::atomic::AtomicU64| {
            servers
                .iter()
                .map(|s| f(&s.faults).load(Relaxed))
                .sum::<u64>()
        };
    let report = ChaosReport {
        orders: shop.orders(),
        deductions: HashMap::new(),
        runs_lost: 0,
        client: layer.stats(),
        engine,
        instances: engines.len(),
        tier,
        proxy: proxy.counts.clone(),
        unavailable: fault_count(|f| &f.unavailable),
        resource_exhausted: fault_count(|f| &f.resource_exhausted),
        peak_in_flight: peak.load(Relaxed) as f64,
        scrapes: scrapes.load(Relaxed),
        elapsed,
        clients: cfg.clients,
        results,
    };
    drop(proxy);
    drop(servers); // signals shutdown
    Ok(report)
}

fn add_stats(sum: &mut Stats, s: &Stats) {
    sum.in_flight += s.in_flight;
    sum.completed += s.completed;
    let (o, a) = (&mut sum.outcomes, &s.outcomes);
    o.executed += a.executed;
    o.joined += a.joined;
    o.replayed += a.replayed;
    o.conflicts += a.conflicts;
    o.failed += a.failed;
    o.panicked += a.panicked;
    o.overloaded += a.overloaded;
    o.rejected_in_flight += a.rejected_in_flight;
    o.lease_expired += a.lease_expired;
    o.abandoned += a.abandoned;
    o.expired += a.expired;
    o.deadline_exceeded += a.deadline_exceeded;
    o.mailbox_full += a.mailbox_full;
}

fn add_tier(sum: &mut TierStats, t: &TierStats) {
    sum.executed += t.executed;
    sum.remote_replayed += t.remote_replayed;
    sum.remote_joined += t.remote_joined;
    sum.conflicts += t.conflicts;
    sum.unavailable += t.unavailable;
    sum.fail_open += t.fail_open;
    sum.fenced_out += t.fenced_out;
    sum.wait_timeouts += t.wait_timeouts;
    sum.failed += t.failed;
    sum.unrecorded += t.unrecorded;
    sum.recorded_late += t.recorded_late;
    sum.record_lost += t.record_lost;
    sum.release_failed += t.release_failed;
    sum.reclaimed += t.reclaimed;
    sum.local_full += t.local_full;
}
