//! `async_singleflight`: coalesces concurrent calls on one key; keeps no result (hot key only).

use std::future::Future;

use async_singleflight::UnaryGroup;

use super::common::Val;
use super::store::{Store, StoreConfig};

/// A single-flight group keyed by `"{tenant}:{method}:{key}"`.
pub struct Singleflight(UnaryGroup<String, Val>);

impl Store for Singleflight {
    const NAME: &'static str = "singleflight";
    type Key = String;

    fn key(tenant: &str, method: &str, uuid: &str) -> Self::Key {
        format!("{tenant}:{method}:{uuid}")
    }

    fn build(_: &StoreConfig) -> Self {
        Singleflight(UnaryGroup::new())
    }

    fn call<F, Fut>(&self, key: &Self::Key, action: F) -> impl Future<Output = Val> + Send
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = Val> + Send + 'static,
    {
        self.0.work(key.as_str(), async move { action().await })
    }
}
