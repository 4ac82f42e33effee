//! The messages between engine handles, runs and shard actors.

use idem_core::{Fingerprint, Scope, Status};
use tokio::sync::oneshot;

use crate::actor::hash::ScopeId;
use crate::actor::wheel::Nanos;
use crate::info::EntryInfo;
use crate::{DedupError, Outcome};

/// A request to a shard. Only the shard reads or writes its map; everything else sends one of these.
pub(crate) enum Msg<V> {
    /// A call for `scope`: the shard answers `Lead` (run the action) or `Done` (replay, conflict,
    /// full, reject; for a run in flight, when it ends).
    /// `scope` is the caller's (shared): a new run keeps it while in flight (see `entry.rs`).
    Begin {
        id: ScopeId,
        scope: Scope,
        fingerprint: Fingerprint,
        reply: oneshot::Sender<Reply<V>>,
    },
    /// A result obtained elsewhere, to store as the scope's completed result if the shard holds
    /// nothing for it (see `Engine::seed`). Boxed: it carries a value, which no other message
    /// does, and the mailbox's slots stay the size of the others.
    Seed(Box<Seed<V>>),
    /// Operator look-up.
    Lookup {
        id: ScopeId,
        reply: oneshot::Sender<Option<EntryInfo>>,
    },
    /// Operator eviction.
    Forget {
        id: ScopeId,
        reply: oneshot::Sender<bool>,
    },
    /// Shutdown: fail what is still in flight and stop.
    Stop,
}

/// What [`Msg::Seed`] carries.
pub(crate) struct Seed<V> {
    pub(crate) id: ScopeId,
    pub(crate) scope: Scope,
    pub(crate) fingerprint: Fingerprint,
    pub(crate) value: V,
    /// Answered `Done`, never `Lead`: the shard stores the value itself.
    pub(crate) reply: oneshot::Sender<Reply<V>>,
}

/// A shard's answer to `Begin` (and to `Seed`).
pub(crate) enum Reply<V> {
    /// This caller leads: run the action and report its end with this token. The shard sweeps
    /// the run at `lease_deadline` (shard clock) if it has not ended by then.
    Lead { token: u64, lease_deadline: Nanos },
    /// The final answer for this caller (for a duplicate of a run in flight, sent when the run
    /// ends; see `join.rs`).
    Done(Result<Outcome<V>, DedupError>),
}

/// How a run ended.
pub(crate) enum RunEnd<V> {
    /// The action returned, at `at` (tokio clock): the TTL counts from then.
    Finished(Result<V, Status>, tokio::time::Instant),
    /// The action (or the closure that made it) panicked.
    Panicked(String),
    /// The run passed its lease and was cancelled by its driver.
    LeaseExpired,
    /// The leader's call was dropped before the action was started.
    Abandoned,
}
