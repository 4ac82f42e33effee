//! `moka::future::Cache` with a TTL: `get_with_by_ref` (the `get_with` family; it clones the key
//! only when it inserts) coalesces concurrent initialisations of one key.

use std::future::Future;

use moka::future::Cache;

use super::common::Val;
use super::store::{Store, StoreConfig};

/// A moka cache keyed by `"{tenant}:{method}:{key}"`.
pub struct Moka(pub Cache<String, Val>);

impl Store for Moka {
    const NAME: &'static str = "moka";
    type Key = String;

    fn key(tenant: &str, method: &str, uuid: &str) -> Self::Key {
        format!("{tenant}:{method}:{uuid}")
    }

    fn build(cfg: &StoreConfig) -> Self {
        Moka(
            Cache::builder()
                .max_capacity(cfg.capacity as u64)
                .time_to_live(cfg.ttl)
                .build(),
        )
    }

    fn call<F, Fut>(&self, key: &Self::Key, action: F) -> impl Future<Output = Val> + Send
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = Val> + Send + 'static,
    {
        self.0
            .get_with_by_ref(key.as_str(), async move { action().await })
    }

    fn settle(&self) -> impl Future<Output = ()> + Send {
        self.0.run_pending_tasks()
    }
}
