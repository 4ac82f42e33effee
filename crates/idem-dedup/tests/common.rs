//! Helpers shared by the engine tests (included with `mod common;`).
#![allow(dead_code)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use idem_core::{Fingerprint, Scope};

pub fn scope(key: &str) -> Scope {
    Scope::parse("tenant-0042", "/shop.v1.Shop/CreateOrder", key).unwrap()
}

pub fn nth_scope(i: u64) -> Scope {
    scope(&format!("order-{i:08}"))
}

pub fn fp(body: &str) -> Fingerprint {
    Fingerprint::of(body.as_bytes())
}

/// Counts executions of an action.
#[derive(Clone, Default)]
pub struct Runs(Arc<AtomicU64>);

impl Runs {
    pub fn hit(&self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

/// Waits (yielding, bounded by a generous guard) until `cond` holds. Completions reach the shards
/// just after the leader's call returns, so counters settle a moment later.
pub async fn eventually(what: &str, cond: impl Fn() -> bool) {
    let guard = tokio::time::Instant::now();
    while !cond() {
        assert!(
            guard.elapsed() < std::time::Duration::from_secs(30),
            "never happened: {what}"
        );
        tokio::task::yield_now().await;
    }
}
