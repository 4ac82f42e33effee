//! What the caller declares about one call, and what each attempt is told (S1–S3, R6).

use std::sync::Arc;

use idem_core::{Deadline, IdempotencyKey};

/// What makes a call safe to repeat; decides whether it may be retried at all (S1, S2).
///
/// | kind | delivery | retried? |
/// |---|---|---|
/// | [`Idempotent`](CallKind::Idempotent) | at-least-once (harmless duplicates) | yes, by the R2 table |
/// | [`Keyed`](CallKind::Keyed) | effectively-once (key + server dedup) | yes, by the R2 table, always with the same key |
/// | [`Neither`](CallKind::Neither) | at-most-once | never |
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CallKind {
    /// Running it twice has the same effect as once (a read, a full-state PUT), or the caller
    /// accepts duplicates.
    Idempotent,
    /// Not idempotent, but carries an [`IdempotencyKey`] the server deduplicates by.
    Keyed,
    /// Not idempotent and no key: a retry could repeat the side effect, so none is made (S2).
    Neither,
}

impl CallKind {
    /// All three kinds.
    pub const ALL: [CallKind; 3] = [CallKind::Idempotent, CallKind::Keyed, CallKind::Neither];

    /// `idempotent`, `keyed` or `neither`.
    pub const fn as_str(self) -> &'static str {
        match self {
            CallKind::Idempotent => "idempotent",
            CallKind::Keyed => "keyed",
            CallKind::Neither => "neither",
        }
    }
}

/// One logical call as the caller declares it: its [`CallKind`], its key, its overall deadline and
/// whether its `INTERNAL`/`UNKNOWN` failures are transient.
///
/// The key is made **once**, before the first attempt, and every attempt carries it (K2, R6);
/// the retrier never makes a new one.
///
/// # Examples
///
/// ```
/// use idem_core::{Deadline, IdempotencyKey};
/// use idem_retry::{Call, CallKind};
/// use std::time::Duration;
///
/// // A read: retried freely.
/// assert_eq!(Call::idempotent().kind(), CallKind::Idempotent);
///
/// // A write with one key for the business intent, inside a 2 s budget.
/// let key = IdempotencyKey::derive("order-1001", "CreateOrder");
/// let call = Call::keyed(key.clone()).with_deadline(Deadline::after(Duration::from_secs(2)));
/// assert_eq!(call.kind(), CallKind::Keyed);
/// assert_eq!(call.key(), Some(&key));
///
/// // A write without a key: at most once.
/// assert_eq!(Call::non_idempotent().kind(), CallKind::Neither);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    idempotent: bool,
    key: Option<IdempotencyKey>,
    deadline: Option<Deadline>,
    transient_declared: bool,
    target: Option<Arc<str>>,
}

impl Call {
    /// An idempotent call (a read, or a write whose duplicates are harmless), without a key.
    pub const fn idempotent() -> Self {
        Call {
            idempotent: true,
            key: None,
            deadline: None,
            transient_declared: false,
            target: None,
        }
    }

    /// A non-idempotent call carrying `key`: retried with that same key, so the server's dedup
    /// makes it effectively-once.
    pub const fn keyed(key: IdempotencyKey) -> Self {
        Call {
            idempotent: false,
            key: Some(key),
            deadline: None,
            transient_declared: false,
            target: None,
        }
    }

    /// A keyed call to `target` whose key follows the intent being served: inside a deduplicated
    /// run, the key [derived from the run](idem_core::run::Run::next_key) for its next call to
    /// `target`; outside one, a fresh random key. Use it for a write sent downstream by any client
    /// (a database driver, an SDK) that takes an idempotency key but is not one of idem's.
    ///
    /// # Why
    ///
    /// A handler that calls another service runs again when its run dies before recording its
    /// result: a retry, or another instance, takes the intent over. A key drawn at random would
    /// make the downstream call a new intent, done twice. A key derived from the inbound intent is
    /// the same on every run, so the downstream service replays what the first run caused.
    ///
    /// `target` names where the call goes, the same way on every run: the HTTP method and path
    /// (`POST /v1/charges`), or the gRPC method (`/stock.v1.Stock/Deduct`). Each call of this
    /// function is one logical call and takes the next place among the run's calls to `target`:
    /// make it once and retry that [`Call`], never make a new one per attempt. Where the order of
    /// calls can differ between runs (concurrent calls, a branch on data), name the step
    /// instead: [`outbound_step`](Self::outbound_step).
    ///
    /// # Examples
    ///
    /// ```
    /// use idem_core::run::{Run, RunStart};
    /// use idem_core::Scope;
    /// use idem_retry::{Call, CallKind};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let inbound = Scope::parse("tenant-0042", "/shop.v1.Shop/CreateOrder", "3f1c2b7e-9d4a-4c55")?;
    /// // The handler, as a deduplicator runs it: each call takes the next key of the run.
    /// let handler = || async {
    ///     let first = Call::outbound("POST /v1/charges");
    ///     let second = Call::outbound("POST /v1/charges");
    ///     (first.key().cloned().unwrap(), second.key().cloned().unwrap())
    /// };
    /// let run = Run::new(&inbound, None, RunStart::Fresh).attach(handler()).await;
    /// let rerun = Run::new(&inbound, Some(2), RunStart::TakeOver).attach(handler()).await;
    /// assert_eq!(run, rerun); // the re-run sends the same keys, in the same order
    /// assert_ne!(run.0, run.1); // two calls, two intents downstream
    ///
    /// // Outside a run: a fresh key per call.
    /// let call = Call::outbound("POST /v1/charges");
    /// assert_eq!(call.kind(), CallKind::Keyed);
    /// assert_ne!(call.key(), Call::outbound("POST /v1/charges").key());
    /// # Ok(()) }
    /// ```
    pub fn outbound(target: &str) -> Self {
        Call::keyed(idem_core::run::outbound_key(target, None))
    }

    /// Like [`outbound`](Self::outbound), for the step of the run named `step`: inside a run the
    /// key is [`Run::key_for`](idem_core::run::Run::key_for) of `target` and `step`, the same on
    /// every run whatever else the run called before; outside one, a fresh random key.
    ///
    /// ```
    /// use idem_core::run::{Run, RunStart};
    /// use idem_core::Scope;
    /// use idem_retry::Call;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let inbound = Scope::parse("tenant-0042", "/checkout", "a6b1c0de-7f00-4d1e")?;
    /// let run = Run::new(&inbound, None, RunStart::Fresh);
    /// let call = run
    ///     .clone()
    ///     .attach(async { Call::outbound_step("POST /v1/charges", "charge") })
    ///     .await;
    /// assert_eq!(call.key(), Some(&run.key_for("POST /v1/charges", "charge")));
    /// # Ok(()) }
    /// ```
    pub fn outbound_step(target: &str, step: &str) -> Self {
        Call::keyed(idem_core::run::outbound_key(target, Some(step)))
    }

    /// A non-idempotent call with no key: at-most-once, never retried (S2).
    pub const fn non_idempotent() -> Self {
        Call {
            idempotent: false,
            key: None,
            deadline: None,
            transient_declared: false,
            target: None,
        }
    }

    /// Adds (or replaces) the key every attempt carries. On a
    /// [`non_idempotent`](Self::non_idempotent) call this makes it [`CallKind::Keyed`].
    #[must_use]
    pub fn with_key(mut self, key: IdempotencyKey) -> Self {
        self.key = Some(key);
        self
    }

    /// Sets the deadline of the whole call (all attempts and waits).
    #[must_use]
    pub const fn with_deadline(mut self, deadline: Deadline) -> Self {
        self.deadline = Some(deadline);
        self
    }

    /// Declares this call's `INTERNAL` and `UNKNOWN` failures transient. They are then retried if the
    /// call is also [`Idempotent`](CallKind::Idempotent) (R2); otherwise this has no effect.
    #[must_use]
    pub const fn declare_transient(mut self) -> Self {
        self.transient_declared = true;
        self
    }

    /// The kind, from idempotence and the presence of a key.
    pub const fn kind(&self) -> CallKind {
        match (self.idempotent, self.key.is_some()) {
            (true, _) => CallKind::Idempotent,
            (false, true) => CallKind::Keyed,
            (false, false) => CallKind::Neither,
        }
    }

    /// The key every attempt carries, if any.
    pub const fn key(&self) -> Option<&IdempotencyKey> {
        self.key.as_ref()
    }

    /// The deadline of the whole call, if any.
    pub const fn deadline(&self) -> Option<&Deadline> {
        self.deadline.as_ref()
    }

    /// Names where the call goes (the gRPC method, or the HTTP method and path): the key under
    /// which a retrier with a [`LatencyTracker`](crate::LatencyTracker) records its attempts'
    /// latencies and reads their percentiles (an adaptive hedging delay, the deadline-aware
    /// minimum attempt time).
    #[must_use]
    pub fn with_target(mut self, target: impl Into<Arc<str>>) -> Self {
        self.target = Some(target.into());
        self
    }

    /// Where the call goes, if named ([`with_target`](Self::with_target)).
    pub fn target(&self) -> Option<&str> {
        self.target.as_deref()
    }

    /// Whether `INTERNAL`/`UNKNOWN` failures were declared transient.
    pub const fn is_transient_declared(&self) -> bool {
        self.transient_declared
    }
}

/// What one attempt is told: the call's key (the same on every attempt), the attempt number and
/// the call's deadline (R6).
///
/// Send [`key`](Self::key) as the idempotency-key header and
/// [`previous_attempts`](Self::previous_attempts) as `grpc-previous-rpc-attempts`.
///
/// ```
/// use idem_core::IdempotencyKey;
/// use idem_retry::Attempt;
///
/// let a = Attempt::new(Some(IdempotencyKey::derive("order-1", "Pay")), 2, None);
/// assert_eq!(a.number(), 2);
/// assert_eq!(a.previous_attempts(), 1);
/// assert!(a.is_retry());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempt {
    key: Option<IdempotencyKey>,
    number: u32,
    deadline: Option<Deadline>,
}

impl Attempt {
    /// An attempt; the retrier makes these, tests and other layers may too. `number` starts at 1.
    pub const fn new(key: Option<IdempotencyKey>, number: u32, deadline: Option<Deadline>) -> Self {
        Attempt {
            key,
            number,
            deadline,
        }
    }

    /// The call's key: the same on every attempt.
    pub const fn key(&self) -> Option<&IdempotencyKey> {
        self.key.as_ref()
    }

    /// This attempt's number, from 1.
    pub const fn number(&self) -> u32 {
        self.number
    }

    /// Attempts made before this one (`grpc-previous-rpc-attempts`).
    pub const fn previous_attempts(&self) -> u32 {
        self.number.saturating_sub(1)
    }

    /// Whether this is a retry (not the first attempt).
    pub const fn is_retry(&self) -> bool {
        self.number > 1
    }

    /// The whole call's deadline; send its remaining time as the attempt's timeout.
    pub const fn deadline(&self) -> Option<&Deadline> {
        self.deadline.as_ref()
    }
}
