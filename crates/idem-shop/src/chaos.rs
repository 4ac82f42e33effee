//! The chaos run shared by the demo and the Z1 test: a gRPC shop behind the idem layer, a
//! fault-injecting proxy in front of it, many concurrent clients creating orders through the
//! client layer, and an exact per-intent check of what happened. Each order deducts its stock
//! first in a separate stock service (also behind the idem layer), through the client layer and
//! without a key; a share of the order runs are lost between that deduction and the order, so
//! the retry runs the intent again and must replay the deduction, not take the stock twice.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use idem_core::IdempotencyKey;
use idem_dedup::tiered::TierStats;
use idem_dedup::{Deduplicator, Engine, Stats};
use idem_redis::{RedisTier, TieredEngine};
use idem_retry::{Failure, GiveUp, RetryBudget, RetryPolicy};
use idem_tower::{CallFailed, CallReport, ClientStats, RetryLayer, StoredResponse, Writes};
use tonic::transport::Endpoint;

use crate::faults::StatusFaults;
use crate::pb::shop_client::ShopClient;
use crate::pb::CreateOrderRequest;
use crate::proxy::{ProxyCounts, ProxyFaults};
use crate::stock::StockLink;
use crate::{grpc, metrics, Shop, WRITES};

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
                slow_by: Duration::from_millis(400),
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
            attempt_timeout: Duration::from_millis(250),
            max_attempts: 8,
            progress: false,
        }
    }
}

/// One intent's fate as its client saw it.
#[derive(Debug, Clone)]
pub struct IntentResult {
    /// The business intent id.
    pub intent: String,
    /// The order id the client was told, or the final status code (gave up).
    pub outcome: Result<u64, tonic::Code>,
    /// Attempts made.
    pub attempts: u32,
}

/// What a chaos run did.
#[derive(Debug)]
pub struct ChaosReport {
    /// Per intent, in order.
    pub results: Vec<IntentResult>,
    /// Orders the shop created, per intent.
    pub orders: HashMap<String, Vec<u64>>,
    /// Stock deductions the stock service made, per intent.
    pub deductions: HashMap<String, u32>,
    /// Order runs lost after their deduction (the retry ran the intent again).
    pub runs_lost: u64,
    /// The client layer's counters.
    pub client: ClientStats,
    /// The (local) engines' counters, summed over instances.
    pub engine: Stats,
    /// Server instances.
    pub instances: usize,
    /// The tiered engines' counters, summed over instances (`None` with one embedded engine).
    pub tier: Option<TierStats>,
    /// What the proxy injected.
    pub proxy: Arc<ProxyCounts>,
    /// `UNAVAILABLE` answers injected.
    pub unavailable: u64,
    /// `RESOURCE_EXHAUSTED` answers injected.
    pub resource_exhausted: u64,
    /// Highest in-flight count scraped from `/metrics` during the run.
    pub peak_in_flight: f64,
    /// `/metrics` scrapes made.
    pub scrapes: u64,
    /// Wall time of the run.
    pub elapsed: Duration,
    /// Clients.
    pub clients: usize,
}

impl ChaosReport {
    /// Intents reported successful.
    pub fn succeeded(&self) -> usize {
        self.results.iter().filter(|r| r.outcome.is_ok()).count()
    }

    /// Intents that gave up.
    pub fn gave_up(&self) -> usize {
        self.results.len() - self.succeeded()
    }

    /// Orders the shop created in all.
    pub fn orders_created(&self) -> usize {
        self.orders.values().map(Vec::len).sum()
    }

    /// Stock deductions in all.
    pub fn deductions_total(&self) -> usize {
        self.deductions.values().map(|&n| n as usize).sum()
    }

    /// Every broken promise, per intent: created or deducted twice, reported successful but not
    /// created (or created under another order id) or not deducted exactly once, an order without
    /// its deduction or for an unknown intent; and, when no intent gave up, deductions, orders
    /// and successful intents not all equal. Empty when all is well.
    pub fn violations(&self) -> Vec<String> {
        let mut v = Vec::new();
        let deducted = |intent: &str| self.deductions.get(intent).copied().unwrap_or(0);
        for r in &self.results {
            let d = deducted(&r.intent);
            if d > 1 || (r.outcome.is_ok() && d != 1) {
                v.push(format!("{}: stock deducted {d} times", r.intent));
            }
            let created = self.orders.get(&r.intent).map(Vec::as_slice).unwrap_or(&[]);
            if created.len() > 1 {
                v.push(format!(
                    "{}: created {} times {:?}",
                    r.intent,
                    created.len(),
                    created
                ));
            }
            if let Ok(id) = r.outcome {
                if created != [id] {
                    v.push(format!(
                        "{}: reported order {id} but the shop has {created:?}",
                        r.intent
                    ));
                }
            }
        }
        let known: std::collections::HashSet<&str> =
            self.results.iter().map(|r| r.intent.as_str()).collect();
        for intent in self.orders.keys() {
            if !known.contains(intent.as_str()) {
                v.push(format!("{intent}: an order for an intent nobody made"));
            }
            if deducted(intent) == 0 {
                v.push(format!("{intent}: an order without its stock deduction"));
            }
        }
        let (d, o, s) = (
            self.deductions_total(),
            self.orders_created(),
            self.succeeded(),
        );
        if self.gave_up() == 0 && (d != o || o != s) {
            v.push(format!(
                "{d} deductions, {o} orders and {s} successful intents are not equal"
            ));
        }
        v
    }

    /// The final table.
    pub fn table(&self) -> String {
        let c = &self.client;
        let e = &self.engine.outcomes;
        let p = &self.proxy;
        let gave_up_created = self
            .results
            .iter()
            .filter(|r| r.outcome.is_err())
            .filter(|r| self.orders.get(&r.intent).is_some_and(|o| !o.is_empty()))
            .count();
        let rows: Vec<(String, String)> = vec![
            ("business intents".into(), self.results.len().to_string()),
            ("concurrent clients".into(), self.clients.to_string()),
            (
                "server instances".into(),
                match self.tier {
                    None => "1 (embedded engine)".to_owned(),
                    Some(_) => format!("{} (sharing one Redis)", self.instances),
                },
            ),
            ("attempts".into(), c.retrier.attempts.to_string()),
            ("retries".into(), c.retrier.retries.to_string()),
            (
                "  after a dropped connection".into(),
                c.retries(Failure::Transport).to_string(),
            ),
            (
                "  after a slow answer (timeout)".into(),
                c.retries(Failure::Timeout).to_string(),
            ),
            (
                "  after UNAVAILABLE".into(),
                c.retries(Failure::Unavailable).to_string(),
            ),
            (
                "  after RESOURCE_EXHAUSTED (pushback)".into(),
                c.retries(Failure::ResourceExhausted).to_string(),
            ),
            (
                "  after ABORTED / DEADLINE / other".into(),
                (c.retries(Failure::Aborted)
                    + c.retries(Failure::DeadlineExceeded)
                    + c.retries(Failure::Other))
                .to_string(),
            ),
            (
                "faults injected: drop before send".into(),
                p.dropped_before_send.load(Relaxed).to_string(),
            ),
            (
                "faults injected: drop after send".into(),
                p.dropped_after_send.load(Relaxed).to_string(),
            ),
            (
                "faults injected: slow answer".into(),
                p.slowed.load(Relaxed).to_string(),
            ),
            (
                "faults injected: UNAVAILABLE".into(),
                self.unavailable.to_string(),
            ),
            (
                "faults injected: RESOURCE_EXHAUSTED".into(),
                self.resource_exhausted.to_string(),
            ),
            (
                "faults injected: run lost after its stock call".into(),
                self.runs_lost.to_string(),
            ),
            ("server: executed".into(), e.executed.to_string()),
            ("server: replays".into(), e.replayed.to_string()),
            ("server: joins".into(), e.joined.to_string()),
            ("server: conflicts".into(), e.conflicts.to_string()),
        ];
        let mut rows = rows;
        if let Some(t) = &self.tier {
            rows.extend([
                (
                    "tier: claimed and ran / other instance's result".into(),
                    format!("{} / {}", t.executed, t.remote_replayed + t.remote_joined),
                ),
                (
                    "tier: fenced out / unrecorded / unavailable".into(),
                    format!("{} / {} / {}", t.fenced_out, t.unrecorded, t.unavailable),
                ),
            ]);
        }
        rows.extend::<Vec<(String, String)>>(vec![
            ("intents succeeded".into(), self.succeeded().to_string()),
            (
                "give-ups".into(),
                format!(
                    "{} (of which created once: {gave_up_created})",
                    self.gave_up()
                ),
            ),
            (
                "  by why: attempts / deadline / budget / not retryable".into(),
                format!(
                    "{} / {} / {} / {}",
                    c.retrier.give_ups(GiveUp::Attempts),
                    c.retrier.give_ups(GiveUp::Deadline),
                    c.retrier.give_ups(GiveUp::Budget),
                    c.retrier.give_ups(GiveUp::NotRetryable) + c.retrier.give_ups(GiveUp::Pushback)
                ),
            ),
            (
                "orders actually created".into(),
                self.orders_created().to_string(),
            ),
            (
                "stock deductions (stock service)".into(),
                self.deductions_total().to_string(),
            ),
            (
                "intents deducted twice".into(),
                self.deductions
                    .values()
                    .filter(|&&n| n > 1)
                    .count()
                    .to_string(),
            ),
            (
                "deductions / orders / successful intents".into(),
                format!(
                    "{} / {} / {}",
                    self.deductions_total(),
                    self.orders_created(),
                    self.succeeded()
                ),
            ),
            (
                "intents created twice".into(),
                self.results
                    .iter()
                    .filter(|r| self.orders.get(&r.intent).is_some_and(|o| o.len() > 1))
                    .count()
                    .to_string(),
            ),
            (
                "successes not created exactly once".into(),
                self.results
                    .iter()
                    .filter(|r| {
                        r.outcome.is_ok_and(|id| {
                            self.orders.get(&r.intent).map(Vec::as_slice) != Some(&[id])
                        })
                    })
                    .count()
                    .to_string(),
            ),
            (
                "peak in-flight (scraped from /metrics)".into(),
                format!("{} ({} scrapes)", self.peak_in_flight, self.scrapes),
            ),
            (
                "wall time".into(),
                format!("{:.2} s", self.elapsed.as_secs_f64()),
            ),
        ]);
        let w = rows.iter().map(|r| r.0.len()).max().unwrap_or(0);
        let v = rows.iter().map(|r| r.1.len()).max().unwrap_or(0);
        let line = format!("+{}+{}+\n", "-".repeat(w + 2), "-".repeat(v + 2));
        let mut out = line.clone();
        for (k, val) in rows {
            let _ = writeln!(out, "| {k:<w$} | {val:>v$} |");
        }
        out.push_str(&line);
        out
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
            drive(cfg, shop, vec![engine], metrics_addr, |_| None).await
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
            drive(cfg, shop, engines, metrics_addr, |e| Some(e.stats())).await
        }
    }
}

async fn drive<D: Deduplicator<Value = StoredResponse>>(
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
