//! What [`Engine::lookup`](crate::Engine::lookup) tells an operator about a scope: its
//! state, its age and when it expires. The public face of an entry, kept apart from the entry
//! itself so the messages that carry it need not know the table's layout.

use std::time::Duration;

use idem_core::Code;

/// What an operator sees when looking a scope up.
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
#[non_exhaustive]
pub enum EntryState {
    /// A run is going on.
    InFlight {
        /// Callers waiting for it (the leader not counted).
        waiters: usize,
    },
    /// A success is stored and will be replayed.
    Completed,
    /// A failure with a cacheable code is stored and will be replayed.
    CachedFailure(Code),
}
