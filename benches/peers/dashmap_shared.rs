//! The design users hand-roll today: a `DashMap` of in-flight `Shared` futures, plus a completed
//! map with expiry times, swept by a background task.

use std::future::Future;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use dashmap::mapref::entry::Entry;
use dashmap::DashMap;
use futures::future::{BoxFuture, FutureExt, Shared};

use super::common::Val;
use super::store::{Store, StoreConfig};

type Running = Shared<BoxFuture<'static, Val>>;

/// In-flight runs and completed results, both keyed by `"{tenant}:{method}:{key}"`.
pub struct DashShared {
    in_flight: DashMap<String, Running>,
    done: Arc<DashMap<String, (Val, Instant)>>,
    ttl: Duration,
}

fn fresh(done: &DashMap<String, (Val, Instant)>, key: &str, now: Instant) -> Option<Val> {
    let e = done.get(key)?;
    (e.1 > now).then(|| e.0.clone())
}

impl Store for DashShared {
    const NAME: &'static str = "dashmap_shared";
    type Key = String;

    fn key(tenant: &str, method: &str, uuid: &str) -> Self::Key {
        format!("{tenant}:{method}:{uuid}")
    }

    fn build(cfg: &StoreConfig) -> Self {
        let done = Arc::new(DashMap::new());
        // The sweeper a user adds so expired results do not pile up.
        let weak: Weak<DashMap<String, (Val, Instant)>> = Arc::downgrade(&done);
        let every = cfg.ttl.min(Duration::from_secs(1));
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            loop {
                tick.tick().await;
                let Some(done) = weak.upgrade() else { break };
                let now = Instant::now();
                done.retain(|_, e| e.1 > now);
            }
        });
        DashShared {
            in_flight: DashMap::new(),
            done,
            ttl: cfg.ttl,
        }
    }

    async fn call<F, Fut>(&self, key: &Self::Key, action: F) -> Val
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = Val> + Send + 'static,
    {
        let now = Instant::now();
        if let Some(v) = fresh(&self.done, key, now) {
            return v;
        }
        let (run, leader) = match self.in_flight.entry(key.clone()) {
            Entry::Occupied(o) => (o.get().clone(), false),
            Entry::Vacant(v) => {
                // The leader stores the result before it leaves the in-flight map: look again.
                if let Some(val) = fresh(&self.done, key, now) {
                    return val;
                }
                let run = action().boxed().shared();
                v.insert(run.clone());
                (run, true)
            }
        };
        let val = run.await;
        if leader {
            let expires = Instant::now() + self.ttl;
            self.done.insert(key.clone(), (val.clone(), expires));
            self.in_flight.remove(key);
        }
        val
    }
}
