//! Floor: a sharded `parking_lot::Mutex<hashbrown::HashTable>` with expiry times and no futures.
//! Not a dedup store (concurrent first calls all run); it shows the cost of the map alone.

use std::future::Future;
use std::hash::{BuildHasher, RandomState};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use hashbrown::HashTable;
use parking_lot::Mutex;

use super::common::Val;
use super::store::{Store, StoreConfig};

type Table = HashTable<(String, Val, Instant)>;

/// Shards of a plain table, picked by the key's hash.
pub struct MutexFloor {
    shards: Arc<[Mutex<Table>]>,
    hasher: RandomState,
    ttl: Duration,
}

impl MutexFloor {
    fn shard(&self, h: u64) -> &Mutex<Table> {
        // High bits pick the shard; the table uses the low bits and the top seven.
        &self.shards[(h >> 32) as usize % self.shards.len()]
    }
}

impl Store for MutexFloor {
    const NAME: &'static str = "mutex_floor";
    type Key = String;

    fn key(tenant: &str, method: &str, uuid: &str) -> Self::Key {
        format!("{tenant}:{method}:{uuid}")
    }

    fn build(cfg: &StoreConfig) -> Self {
        // DashMap's default: four shards per CPU, rounded up to a power of two.
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let n = (cpus * 4).next_power_of_two();
        let shards: Arc<[Mutex<Table>]> = (0..n).map(|_| Mutex::new(Table::new())).collect();
        let weak: Weak<[Mutex<Table>]> = Arc::downgrade(&shards);
        let every = cfg.ttl.min(Duration::from_secs(1));
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            loop {
                tick.tick().await;
                let Some(shards) = weak.upgrade() else { break };
                let now = Instant::now();
                for s in shards.iter() {
                    s.lock().retain(|e| e.2 > now);
                }
            }
        });
        MutexFloor {
            shards,
            hasher: RandomState::new(),
            ttl: cfg.ttl,
        }
    }

    async fn call<F, Fut>(&self, key: &Self::Key, action: F) -> Val
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = Val> + Send + 'static,
    {
        let h = self.hasher.hash_one(key);
        let now = Instant::now();
        if let Some(e) = self.shard(h).lock().find(h, |e| e.0 == *key) {
            if e.2 > now {
                return e.1.clone();
            }
        }
        let val = action().await;
        let expires = Instant::now() + self.ttl;
        let mut table = self.shard(h).lock();
        match table.entry(h, |e| e.0 == *key, |e| self.hasher.hash_one(&e.0)) {
            hashbrown::hash_table::Entry::Occupied(mut o) => {
                *o.get_mut() = (key.clone(), val.clone(), expires)
            }
            hashbrown::hash_table::Entry::Vacant(v) => {
                v.insert((key.clone(), val.clone(), expires));
            }
        }
        val
    }
}
