//! What a tiered call got, and from where.

use idem_dedup::remote::FencingToken;
use idem_dedup::OutcomeKind;
use tokio::time::Instant;

/// Where the value of a [`TieredOutcome`] was produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Source {
    /// An action run on this instance under a Redis claim.
    ThisInstance,
    /// Another instance's run, read from Redis.
    OtherInstance,
    /// An action run on this instance *without* a claim because Redis was unreachable and the
    /// engine was built with [`OnUnavailable::FailOpen`](crate::OnUnavailable::FailOpen).
    FailOpen,
}

/// A value from [`TieredEngine::execute`](crate::TieredEngine::execute) and how it was obtained.
///
/// [`kind`](Self::kind) tells it as the engine does, across both tiers: `Executed` when this call
/// ran the action; `Joined` when it waited for a run (of this instance, or of another one through
/// Redis); `Replayed` when the result was already stored (in the local engine, or in Redis).
#[derive(Debug, Clone)]
pub struct TieredOutcome<V> {
    pub(crate) value: V,
    pub(crate) kind: OutcomeKind,
    pub(crate) source: Source,
    pub(crate) token: Option<FencingToken>,
    pub(crate) expires_at: Instant,
}

impl<V> TieredOutcome<V> {
    /// The value.
    pub fn value(&self) -> &V {
        &self.value
    }

    /// The value, by move.
    pub fn into_value(self) -> V {
        self.value
    }

    /// Executed, joined or replayed.
    pub fn kind(&self) -> OutcomeKind {
        self.kind
    }

    /// Whether nothing ran for this call (joined or replayed): what servers mark as a replay.
    pub fn is_duplicate(&self) -> bool {
        self.kind != OutcomeKind::Executed
    }

    /// Where the value was produced.
    pub fn source(&self) -> Source {
        self.source
    }

    /// The fencing token of the run that produced the value, when it ran on this instance under a
    /// claim; `None` for values from other instances and for fail-open runs.
    pub fn fencing_token(&self) -> Option<FencingToken> {
        self.token
    }

    /// When this instance's copy of the result expires (tokio clock).
    pub fn expires_at(&self) -> Instant {
        self.expires_at
    }
}
