//! What a call got: executed, joined or replayed, and from where.

use tokio::time::Instant;

use crate::remote::FencingToken;

/// How a successful call got its value.
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
/// let first = engine.execute(&scope, fp, |_| async { Ok(7) }).await?;
/// let again = engine.execute(&scope, fp, |_| async { Ok(8) }).await?;
/// assert_eq!((first.kind(), *first.value()), (OutcomeKind::Executed, 7));
/// assert_eq!((again.kind(), again.into_value()), (OutcomeKind::Replayed, 7));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
#[must_use = "an outcome holds the call's value and says how it was obtained"]
pub struct Outcome<V> {
    value: V,
    kind: OutcomeKind,
    source: Source,
    /// Whether the shared tier holds the result (always true without one).
    recorded: bool,
    /// The fencing token's number; 0 when there is none.
    token: u64,
    expires_at: Instant,
}

/// Where the value of an [`Outcome`] was produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Source {
    /// This engine, which has no shared tier behind it (an [`Engine`](crate::Engine)).
    Local,
    /// An action run on this instance under a claim of the shared tier.
    ThisInstance,
    /// Another instance's run, read from the shared tier.
    OtherInstance,
    /// An action run on this instance *without* a claim, because the shared tier was unreachable
    /// and the engine was built to fail open
    /// ([`OnUnavailable::FailOpen`](crate::tiered::OnUnavailable::FailOpen)).
    FailOpen,
}

impl<V> Outcome<V> {
    /// An outcome: the value, how this call got it, and when its stored result expires; its
    /// [`source`](Self::source) is [`Source::Local`], it has no
    /// [`fencing_token`](Self::fencing_token), and it [`is_recorded`](Self::is_recorded). The
    /// `with_*` methods set the rest, for a deduplicator outside this crate (a store with a mode
    /// of its own, such as `idem-postgres`' transactional engine).
    ///
    /// ```
    /// use idem_dedup::remote::FencingToken;
    /// use idem_dedup::{Outcome, OutcomeKind, Source};
    /// use tokio::time::Instant;
    ///
    /// let at = Instant::now();
    /// let o = Outcome::new(7, OutcomeKind::Executed, at)
    ///     .with_source(Source::ThisInstance)
    ///     .with_fencing_token(FencingToken::new(3));
    /// assert_eq!((o.kind(), o.source()), (OutcomeKind::Executed, Source::ThisInstance));
    /// assert_eq!(o.fencing_token(), Some(FencingToken::new(3)));
    /// assert!(o.is_recorded());
    /// assert!(!o.unrecorded().is_recorded());
    /// ```
    pub const fn new(value: V, kind: OutcomeKind, expires_at: Instant) -> Self {
        Outcome {
            value,
            kind,
            source: Source::Local,
            recorded: true,
            token: 0,
            expires_at,
        }
    }

    /// Where the value was produced. Default: [`Source::Local`].
    pub const fn with_source(mut self, source: Source) -> Self {
        self.source = source;
        self
    }

    /// The fencing token of the claim the value was produced under;
    /// [`FencingToken::UNFENCED`] is none. Default: none.
    pub const fn with_fencing_token(mut self, token: FencingToken) -> Self {
        self.token = token.get();
        self
    }

    /// Marks the value as not held by the shared record: the action ran, but its completion
    /// could not be written (yet), or there was no claim. Default: recorded.
    pub const fn unrecorded(mut self) -> Self {
        self.recorded = false;
        self
    }

    /// When the stored result expires (tokio clock).
    pub const fn with_expires_at(mut self, expires_at: Instant) -> Self {
        self.expires_at = expires_at;
        self
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

    /// Where the value was produced: [`Source::Local`] for an [`Engine`](crate::Engine); for a
    /// [`TieredEngine`](crate::tiered::TieredEngine), this instance, another one, or a fail-open
    /// run.
    pub fn source(&self) -> Source {
        self.source
    }

    /// The fencing token of the run that produced the value, when it ran on this instance under
    /// a claim of the shared tier; `None` for an [`Engine`](crate::Engine), for values from other
    /// instances and for fail-open runs.
    pub fn fencing_token(&self) -> Option<FencingToken> {
        (self.token != 0).then_some(FencingToken::new(self.token))
    }

    /// Whether the shared tier holds the result, so other instances replay it. `false` when
    /// the action ran here but its completion could not be written (the tier failed; writing it is
    /// retried while the claim is still this run's, and counted in
    /// [`TierStats::unrecorded`](crate::tiered::TierStats::unrecorded)), and for fail-open runs.
    /// Always `true` for an [`Engine`](crate::Engine), which has no shared tier.
    pub fn is_recorded(&self) -> bool {
        self.recorded
    }

    /// When the stored result expires (tokio clock): the action's completion + TTL, the same
    /// instant for the leader, its joiners and every replay (to the nanosecond of the shard's
    /// record).
    ///
    /// For a [`TieredEngine`](crate::tiered::TieredEngine), a result this instance ran and
    /// recorded expires from the shared record `ttl` after its completion; a result of another
    /// instance ([`Source::OtherInstance`]) carries the local copy's expiry, since the tier's
    /// answer does not say when the record lapses (it may lapse earlier).
    pub fn expires_at(&self) -> Instant {
        self.expires_at
    }
}
