//! idem's engine: the natural key is a `Scope` plus the request's `Fingerprint`.

use std::future::Future;

use futures::FutureExt;

use idem::dedup::Engine;
use idem::{Fingerprint, Scope};

use super::common::Val;
use super::store::{Store, StoreConfig};

/// The engine with its defaults except TTL and capacity (and shards when a bench asks).
pub struct Idem(pub Engine<Val>);

impl Store for Idem {
    const NAME: &'static str = "idem";
    type Key = (Scope, Fingerprint);

    fn key(tenant: &str, method: &str, uuid: &str) -> Self::Key {
        let scope = Scope::parse(tenant, method, uuid).expect("a valid scope");
        // The body's fingerprint; the key's bytes stand in for a body here.
        (scope, Fingerprint::of(uuid.as_bytes()))
    }

    fn build(cfg: &StoreConfig) -> Self {
        let mut b = Engine::<Val>::builder()
            .ttl(cfg.ttl)
            .max_entries(cfg.capacity);
        if let Some(n) = cfg.shards {
            b = b.shards(n);
        }
        Idem(b.build().expect("idem engine"))
    }

    /// `execute`'s own future, mapped to the value: no second state machine around it (a
    /// handler awaiting `execute` inline has none either), so the spawned hot-key tasks carry
    /// the store's future and not an adapter's.
    fn call<'s, 'k, F, Fut>(
        &'s self,
        key: &'k Self::Key,
        action: F,
    ) -> impl Future<Output = Val> + Send + use<'s, 'k, F, Fut>
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = Val> + Send + 'static,
    {
        let run = move |_| {
            let fut = action();
            async move { Ok(fut.await) }
        };
        self.0.execute(&key.0, key.1, run).map(|r| match r {
            Ok(out) => out.into_value(),
            Err(e) => panic!("idem call failed: {e}"),
        })
    }

    async fn settle(&self) {
        while self.0.stats().in_flight > 0 {
            tokio::task::yield_now().await;
        }
    }
}
