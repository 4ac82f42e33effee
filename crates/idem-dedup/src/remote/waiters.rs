//! This instance's callers waiting for another instance's run, by the key a tier's notices name
//! (a Redis hash tag, a PostgreSQL scope digest): the part of [`RemoteTier::wait`] every tier
//! with push notices shares.
//!
//! [`RemoteTier::wait`]: crate::remote::RemoteTier::wait

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::futures::Notified;
use tokio::sync::Notify;

/// Local waiters by key. A tier's listener calls [`wake`](Self::wake) for each notice and
/// [`wake_all`](Self::wake_all) when notices may have been lost (its connection came back);
/// each waiting call holds a [`Waiting`] from [`watch`](Self::watch) while it waits. Keys
/// nobody waits on are not kept, so a notice for them costs one map lookup.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use std::sync::Arc;
/// use idem_dedup::remote::Waiters;
///
/// let waiters = Arc::new(Waiters::<u64>::default());
/// let waiting = waiters.watch(7);
/// let woken = waiting.notified(); // registered before the notice can come
/// waiters.wake(&7);
/// woken.await;
/// drop(waiting);
/// assert_eq!(waiters.len(), 0);
/// # }
/// ```
#[derive(Debug)]
pub struct Waiters<K> {
    map: Mutex<HashMap<K, Entry>>,
}

#[derive(Debug)]
struct Entry {
    count: usize,
    notify: Arc<Notify>,
}

impl<K> Default for Waiters<K> {
    fn default() -> Self {
        Waiters {
            map: Mutex::new(HashMap::new()),
        }
    }
}

impl<K: Eq + Hash + Clone> Waiters<K> {
    /// Registers one waiter of `key`, until the returned [`Waiting`] is dropped.
    pub fn watch(self: &Arc<Self>, key: K) -> Waiting<K> {
        let notify = {
            let mut map = self.map.lock();
            let entry = map.entry(key.clone()).or_insert_with(|| Entry {
                count: 0,
                notify: Arc::new(Notify::new()),
            });
            entry.count += 1;
            entry.notify.clone()
        };
        Waiting {
            waiters: self.clone(),
            key,
            notify,
        }
    }

    /// Wakes every waiter of `key` (a notice named it).
    pub fn wake(&self, key: &K) {
        let notify = self.map.lock().get(key).map(|e| e.notify.clone());
        if let Some(n) = notify {
            n.notify_waiters();
        }
    }

    /// Wakes every waiter (notices may have been lost): each re-reads its record.
    pub fn wake_all(&self) {
        let all: Vec<_> = self.map.lock().values().map(|e| e.notify.clone()).collect();
        for n in all {
            n.notify_waiters();
        }
    }

    /// How many keys have waiters now.
    pub fn len(&self) -> usize {
        self.map.lock().len()
    }

    /// Whether no key has a waiter now.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One waiter's registration ([`Waiters::watch`]); dropping it unregisters.
#[derive(Debug)]
pub struct Waiting<K: Eq + Hash + Clone> {
    waiters: Arc<Waiters<K>>,
    key: K,
    notify: Arc<Notify>,
}

impl<K: Eq + Hash + Clone> Waiting<K> {
    /// Completes at the next wake of this key (or of all). Create it before re-reading the
    /// record, so a notice between the read and the wait is not missed.
    pub fn notified(&self) -> Notified<'_> {
        self.notify.notified()
    }
}

impl<K: Eq + Hash + Clone> Drop for Waiting<K> {
    fn drop(&mut self) {
        let mut map = self.waiters.map.lock();
        if let Some(entry) = map.get_mut(&self.key) {
            entry.count -= 1;
            if entry.count == 0 {
                map.remove(&self.key);
            }
        }
    }
}
