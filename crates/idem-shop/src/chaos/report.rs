//! What a chaos run did, per intent and in all, and every broken promise in it.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use idem_dedup::tiered::TierStats;
use idem_dedup::Stats;
use idem_tower::ClientStats;

use crate::proxy::ProxyCounts;

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
}
