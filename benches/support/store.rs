//! The one trait every store sits behind, so each workload drives every peer identically.

use std::future::Future;
use std::time::Duration;

use super::common::Val;

/// How a workload configures a store.
#[derive(Debug, Clone, Copy)]
pub struct StoreConfig {
    /// How long a completed result is kept.
    pub ttl: Duration,
    /// Entries the store must hold without refusing or evicting.
    pub capacity: usize,
    /// Shards, where the store has a setting (idem); `None`: the store's default.
    pub shards: Option<usize>,
}

/// A dedup store: run `action` once per key, share its value with concurrent callers, replay it to
/// later callers until the TTL ends.
pub trait Store: Send + Sync + Sized + 'static {
    /// The name in the summary.
    const NAME: &'static str;
    /// The key as a user of this store would write it.
    type Key: Send + Sync + 'static;
    /// The key of a request, from the strings a server gets on the wire.
    fn key(tenant: &str, method: &str, uuid: &str) -> Self::Key;
    /// Builds the store on the current tokio runtime.
    fn build(cfg: &StoreConfig) -> Self;
    /// One call: the stored value, or the shared run, or `action`'s value.
    fn call<F, Fut>(&self, key: &Self::Key, action: F) -> impl Future<Output = Val> + Send
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = Val> + Send + 'static;
    /// Waits until completed work is visible to measurements (counters, pending maintenance).
    fn settle(&self) -> impl Future<Output = ()> + Send {
        async {}
    }
}
