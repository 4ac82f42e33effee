//! What a shard stores per scope.

use std::sync::Arc;
use std::time::Duration;

use idem_core::{Code, Fingerprint, Scope, Status};
use tokio::sync::oneshot;
use tokio::time::Instant;
use tokio_util::time::delay_queue;

use crate::message::Reply;

/// One scope's record in a shard's map: in flight (with its waiters) or completed (with its result).
pub(crate) struct Entry<V> {
    /// The scope's keyed hash, computed once by the caller and reused by the shard's table.
    pub(crate) hash: u64,
    /// Identifies this run; a `Complete` or timer for an older run of the same scope is ignored.
    pub(crate) token: u64,
    pub(crate) scope: Scope,
    pub(crate) fingerprint: Fingerprint,
    /// The lease timer while in flight, the TTL timer once completed.
    pub(crate) timer: delay_queue::Key,
    pub(crate) state: State<V>,
}

pub(crate) enum State<V> {
    InFlight {
        started: Instant,
        waiters: Vec<oneshot::Sender<Reply<V>>>,
    },
    Done {
        /// Failures are boxed behind an `Arc` so a stored success costs only `V`.
        result: Result<V, Arc<Status>>,
        completed: Instant,
        expires_at: Instant,
    },
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
    pub(crate) fn info(&self, now: Instant) -> EntryInfo {
        match &self.state {
            State::InFlight { started, waiters } => EntryInfo {
                state: EntryState::InFlight {
                    waiters: waiters.len(),
                },
                age: now.saturating_duration_since(*started),
                expires_in: None,
            },
            State::Done {
                result,
                completed,
                expires_at,
            } => EntryInfo {
                state: match result {
                    Ok(_) => EntryState::Completed,
                    Err(s) => EntryState::CachedFailure(s.code()),
                },
                age: now.saturating_duration_since(*completed),
                expires_in: Some(expires_at.saturating_duration_since(now)),
            },
        }
    }
}
