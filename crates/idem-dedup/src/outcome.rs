//! What a call got: executed, joined or replayed (SPEC E1).

use tokio::time::Instant;

/// How a successful call got its value (SPEC E1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OutcomeKind {
    /// This call ran the action.
    Executed,
    /// Another call was running the action; this one waited for it and shares its result.
    Joined,
    /// The result was already stored; nothing ran.
    Replayed,
}

impl OutcomeKind {
    /// `"executed"`, `"joined"` or `"replayed"` (the `outcome` label of the metrics).
    pub const fn as_str(self) -> &'static str {
        match self {
            OutcomeKind::Executed => "executed",
            OutcomeKind::Joined => "joined",
            OutcomeKind::Replayed => "replayed",
        }
    }
}

/// A value from [`Engine::execute`](crate::Engine::execute) and how it was obtained.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use idem_core::{Fingerprint, Scope};
/// use idem_dedup::{Engine, OutcomeKind};
///
/// let engine = Engine::<u32>::builder().build()?;
/// let scope = Scope::parse("tenant-1", "/shop/CreateOrder", "order-0001")?;
/// let fp = Fingerprint::of(b"qty=1");
/// let first = engine.execute(&scope, fp, || async { Ok(7) }).await?;
/// let again = engine.execute(&scope, fp, || async { Ok(8) }).await?;
/// assert_eq!((first.kind(), *first.value()), (OutcomeKind::Executed, 7));
/// assert_eq!((again.kind(), again.into_value()), (OutcomeKind::Replayed, 7));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Outcome<V> {
    value: V,
    kind: OutcomeKind,
    expires_at: Instant,
}

impl<V> Outcome<V> {
    pub(crate) fn new(value: V, kind: OutcomeKind, expires_at: Instant) -> Self {
        Outcome {
            value,
            kind,
            expires_at,
        }
    }

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

    /// When the stored result expires (tokio clock): the action's completion + TTL, the same
    /// instant for the leader, its joiners and every replay (to the nanosecond of the shard's
    /// record).
    pub fn expires_at(&self) -> Instant {
        self.expires_at
    }
}
