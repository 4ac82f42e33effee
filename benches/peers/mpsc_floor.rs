//! Floor: a bare tokio mpsc + oneshot round trip to one of N actor tasks (N = CPUs, idem's default
//! shard count), which answer with a stored value at once: no map, no action. The cost of the
//! message alone, which an actor-per-shard design pays per call.

use std::future::Future;
use std::hash::{BuildHasher, RandomState};

use tokio::sync::{mpsc, oneshot};

use super::common::{fresh_value, Val};
use super::store::{Store, StoreConfig};

/// Senders to the actors.
pub struct MpscFloor {
    actors: Vec<mpsc::Sender<oneshot::Sender<Val>>>,
    hasher: RandomState,
}

impl Store for MpscFloor {
    const NAME: &'static str = "mpsc_floor";
    type Key = String;

    fn key(tenant: &str, method: &str, uuid: &str) -> Self::Key {
        format!("{tenant}:{method}:{uuid}")
    }

    fn build(cfg: &StoreConfig) -> Self {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let n = cfg.shards.unwrap_or(cpus);
        let actors = (0..n)
            .map(|_| {
                let (tx, mut rx) = mpsc::channel::<oneshot::Sender<Val>>(1024);
                tokio::spawn(async move {
                    let val = fresh_value();
                    let mut batch = Vec::with_capacity(128);
                    while rx.recv_many(&mut batch, 128).await > 0 {
                        for reply in batch.drain(..) {
                            let _ = reply.send(val.clone());
                        }
                    }
                });
                tx
            })
            .collect();
        MpscFloor {
            actors,
            hasher: RandomState::new(),
        }
    }

    async fn call<F, Fut>(&self, key: &Self::Key, _action: F) -> Val
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = Val> + Send + 'static,
    {
        let h = self.hasher.hash_one(key);
        let (tx, rx) = oneshot::channel();
        let actor = &self.actors[(h >> 32) as usize % self.actors.len()];
        actor.send(tx).await.expect("actor alive");
        rx.await.expect("actor replies")
    }
}
