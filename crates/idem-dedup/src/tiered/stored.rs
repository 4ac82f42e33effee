//! What the local engine stores for a scope ([`Stored`]: the value and how it came to be), and
//! the results of this engine whose completion is still being written ([`Unrecorded`]).

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use idem_core::Scope;
use parking_lot::Mutex;

use crate::remote::FencingToken;

/// How the local engine's copy of a value came to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Via {
    /// This instance ran the action under a claim.
    Ran,
    /// Another instance's stored result, found at the first claim.
    RemoteReplay,
    /// Another instance's result, after waiting for its run.
    RemoteJoin,
    /// Ran without a claim (fail-open).
    FailOpen,
    /// An earlier run of this instance whose completion is still being written.
    Retained,
}

/// What the local engine stores for a scope: the value and where it came from.
#[derive(Debug, Clone)]
pub(crate) struct Stored<V> {
    pub(crate) value: V,
    pub(crate) via: Via,
    pub(crate) token: FencingToken,
    pub(crate) recorded: bool,
}

/// Results of this engine whose completion could not be written yet, by scope.
pub(crate) struct Unrecorded<V> {
    map: Mutex<std::collections::HashMap<Scope, Stored<V>>>,
    /// How many there are: read without the lock, so the common case (none) costs one load.
    len: AtomicUsize,
}

impl<V> Default for Unrecorded<V> {
    fn default() -> Self {
        Unrecorded {
            map: Mutex::new(std::collections::HashMap::new()),
            len: AtomicUsize::new(0),
        }
    }
}

impl<V: Clone> Unrecorded<V> {
    pub(crate) fn get(&self, scope: &Scope) -> Option<Stored<V>> {
        if self.len.load(Relaxed) == 0 {
            return None;
        }
        self.map.lock().get(scope).cloned()
    }

    pub(crate) fn insert(&self, scope: Scope, stored: Stored<V>) {
        let mut map = self.map.lock();
        map.insert(scope, stored);
        self.len.store(map.len(), Relaxed);
    }

    pub(crate) fn remove(&self, scope: &Scope) {
        let mut map = self.map.lock();
        map.remove(scope);
        self.len.store(map.len(), Relaxed);
    }
}
