//! What a shard stores per scope.

use std::sync::Arc;
use std::time::Duration;

use idem_core::{Code, Fingerprint, Scope, Status};
use tokio::sync::oneshot;

use crate::message::Reply;
use crate::wheel::Nanos;

/// One scope's record in a shard's map: in flight (with its waiters) or completed (with its result).
///
/// Kept small, since a completed entry lives for the whole TTL: no timer handle (the timer queues
/// hold `(hash, token)` instead) and the expiry as 8 bytes of [`Nanos`]. The in-flight part
/// (start time and an empty-until-joined `Vec` of waiters) is no larger than a stored result, so
/// it sits in the entry unboxed: a new key costs no allocation for it. The hash is kept (8 bytes) so the table never re-runs SipHash over the scope when it
/// grows: that rehash cost ~400 instructions per new key, about a tenth of the new-key path.
pub(crate) struct Entry<V> {
    /// The scope's keyed hash, computed once by the caller.
    pub(crate) hash: u64,
    /// Identifies this run; a `Complete` or timer for an older run of the same scope is ignored.
    pub(crate) token: u64,
    pub(crate) scope: Scope,
    pub(crate) fingerprint: Fingerprint,
    pub(crate) state: State<V>,
}

pub(crate) enum State<V> {
    InFlight(InFlight<V>),
    Done {
        /// Failures are boxed behind an `Arc` so a stored success costs only `V`.
        result: Result<V, Arc<Status>>,
        /// Exact expiry: completion + TTL (or the failure TTL).
        expires: Nanos,
    },
}

pub(crate) struct InFlight<V> {
    pub(crate) started: Nanos,
    pub(crate) waiters: Vec<oneshot::Sender<Reply<V>>>,
}

/// What an operator sees when looking a scope up (SPEC E13).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntryInfo {
    /// In flight or completed.
    pub state: EntryState,
    /// Time since the run started (in flight) or completed (completed).
    pub age: Duration,
    /// Time until the stored result expires; `None` while in flight.
    pub expires_in: Option<Duration>,
}

/// The state part of [`EntryInfo`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryState {
    /// A run is going on.
    InFlight {
        /// Callers waiting for it (the leader not counted).
        waiters: usize,
    },
    /// A success is stored and will be replayed.
    Completed,
    /// A failure with a cacheable code is stored and will be replayed (SPEC E13).
    CachedFailure(Code),
}

impl<V> Entry<V> {
    /// Whether a stored result has passed its exact expiry at `now`.
    pub(crate) fn is_expired(&self, now: Nanos) -> bool {
        matches!(&self.state, State::Done { expires, .. } if now >= *expires)
    }

    pub(crate) fn info(&self, now: Nanos, ttl: Duration, failure_ttl: Duration) -> EntryInfo {
        let nanos = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        match &self.state {
            State::InFlight(f) => EntryInfo {
                state: EntryState::InFlight {
                    waiters: f.waiters.len(),
                },
                age: Duration::from_nanos(now.saturating_sub(f.started)),
                expires_in: None,
            },
            State::Done { result, expires } => {
                let (state, ttl) = match result {
                    Ok(_) => (EntryState::Completed, ttl),
                    Err(s) => (EntryState::CachedFailure(s.code()), failure_ttl),
                };
                let completed = expires.saturating_sub(nanos(ttl));
                EntryInfo {
                    state,
                    age: Duration::from_nanos(now.saturating_sub(completed)),
                    expires_in: Some(Duration::from_nanos(expires.saturating_sub(now))),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// E7: what a table slot costs. The in-flight part is unboxed only because it fits in the
    /// space a stored result takes anyway; this pins that.
    #[test]
    fn e7_entry_is_eighty_bytes_for_an_arc_value() {
        assert_eq!(std::mem::size_of::<Entry<Arc<[u8]>>>(), 80);
        assert_eq!(std::mem::size_of::<Entry<u64>>(), 80);
    }
}
