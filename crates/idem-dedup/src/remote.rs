//! A second tier behind the engine, shared by several server instances (SPEC D1–D4).
//!
//! # Why a second tier
//!
//! The [`Engine`](crate::Engine) deduplicates the callers of *one* process. When a service runs as
//! several instances behind a load balancer, a client's retry can land on another instance, whose
//! engine has never seen the key: without a shared record the side effect runs twice. A remote
//! tier is that shared record: a store every instance reaches (Redis in `idem-redis`, a relational
//! table later, SPEC D4) that arbitrates *between* instances, while each instance's engine keeps
//! coalescing its own callers in front of it, so the store sees at most one claim per scope per
//! instance.
//!
//! # The protocol
//!
//! 1. [`claim`](RemoteTier::claim) atomically looks the scope up and, if nobody holds it, takes it
//!    with a *lease* and a [`FencingToken`]. The answer is a [`ClaimOutcome`]: claimed, in flight
//!    elsewhere, completed (with the stored value), or a conflict (same scope, other fingerprint).
//! 2. The holder runs the action, passing the token to whatever store takes the side effect, then
//!    [`complete`](RemoteTier::complete)s with the encoded value and the TTL, or
//!    [`release`](RemoteTier::release)s after a failure so the next call runs again.
//! 3. An instance that met another's claim [`wait`](RemoteTier::wait)s for a change (a completion
//!    notice, or the holder's lease lapsing), then claims again: it then gets the result, or, if the
//!    holder died, the claim itself.
//!
//! # Fencing
//!
//! A lease can lapse while its holder still runs (a long GC pause, a stalled disk). Another
//! instance then claims and gets a *higher* token. Complete and release only succeed while the
//! caller's token still holds the claim ([`Commit::FencedOut`] otherwise), so the late holder never
//! overwrites the new holder's result; and a side-effect store that remembers the highest token
//! it accepted can refuse the late holder's write too (the classic fencing-token scheme).
//!
//! # Errors
//!
//! Every method returns the store's failures as a [`Status`], normally `UNAVAILABLE` (retryable):
//! the caller decides whether to fail closed (the default in `idem-redis`) or open.
//!
//! # Examples
//!
//! A complete, single-process implementation (a mutex-guarded map), and the claim loop a tier
//! drives with it:
//!
//! ```
//! use idem_core::{Fingerprint, Scope, Status};
//! use idem_dedup::remote::{ClaimOutcome, Commit, FencingToken, RemoteTier};
//! use std::collections::HashMap;
//! use std::future::{ready, Future};
//! use std::sync::Mutex;
//! use std::time::Duration;
//!
//! enum Record {
//!     Running { fp: Fingerprint, token: FencingToken },
//!     Done { fp: Fingerprint, value: Vec<u8> },
//! }
//!
//! #[derive(Default)]
//! struct InMemory {
//!     records: Mutex<HashMap<Scope, Record>>,
//!     fence: Mutex<u64>,
//! }
//!
//! impl RemoteTier for InMemory {
//!     fn claim(&self, scope: &Scope, fp: Fingerprint, _lease: Duration)
//!         -> impl Future<Output = Result<ClaimOutcome, Status>> + Send {
//!         let mut records = self.records.lock().unwrap();
//!         let out = match records.get(scope) {
//!             Some(Record::Running { fp: f, .. }) | Some(Record::Done { fp: f, .. }) if *f != fp => {
//!                 ClaimOutcome::Conflict
//!             }
//!             Some(Record::Running { token, .. }) => ClaimOutcome::InFlightElsewhere {
//!                 holder: *token,
//!                 lease_left: Duration::from_secs(1), // leases are not modelled here
//!             },
//!             Some(Record::Done { value, .. }) => ClaimOutcome::Completed(value.clone()),
//!             None => {
//!                 let mut fence = self.fence.lock().unwrap();
//!                 *fence += 1;
//!                 let token = FencingToken::new(*fence);
//!                 records.insert(scope.clone(), Record::Running { fp, token });
//!                 ClaimOutcome::Claimed { token }
//!             }
//!         };
//!         ready(Ok(out))
//!     }
//!
//!     fn complete(&self, scope: &Scope, token: FencingToken, value: Vec<u8>, _ttl: Duration)
//!         -> impl Future<Output = Result<Commit, Status>> + Send {
//!         let mut records = self.records.lock().unwrap();
//!         let out = match records.get(scope) {
//!             Some(Record::Running { fp, token: t }) if *t == token => {
//!                 let fp = *fp;
//!                 records.insert(scope.clone(), Record::Done { fp, value });
//!                 Commit::Committed
//!             }
//!             _ => Commit::FencedOut,
//!         };
//!         ready(Ok(out))
//!     }
//!
//!     fn release(&self, scope: &Scope, token: FencingToken)
//!         -> impl Future<Output = Result<Commit, Status>> + Send {
//!         let mut records = self.records.lock().unwrap();
//!         let out = match records.get(scope) {
//!             Some(Record::Running { token: t, .. }) if *t == token => {
//!                 records.remove(scope);
//!                 Commit::Committed
//!             }
//!             _ => Commit::FencedOut,
//!         };
//!         ready(Ok(out))
//!     }
//!
//!     fn wait(&self, _scope: &Scope, _holder: FencingToken, _at_most: Duration)
//!         -> impl Future<Output = Result<(), Status>> + Send {
//!         ready(Ok(())) // one process: nothing to wait for in this sketch
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let tier = InMemory::default();
//! let scope = Scope::parse("tenant-1", "/shop/CreateOrder", "order-0001")?;
//! let fp = Fingerprint::of(b"qty=1");
//! let lease = Duration::from_secs(30);
//!
//! let ClaimOutcome::Claimed { token } = tier.claim(&scope, fp, lease).await? else { panic!() };
//! assert_eq!(token, FencingToken::new(1));
//! // Another instance meets the claim...
//! assert!(matches!(tier.claim(&scope, fp, lease).await?, ClaimOutcome::InFlightElsewhere { .. }));
//! // ...and another payload under the same key is a conflict (SPEC K4).
//! assert_eq!(tier.claim(&scope, Fingerprint::of(b"qty=2"), lease).await?, ClaimOutcome::Conflict);
//!
//! let ttl = Duration::from_secs(3600);
//! assert_eq!(tier.complete(&scope, token, b"order-1001".to_vec(), ttl).await?, Commit::Committed);
//! assert_eq!(tier.claim(&scope, fp, lease).await?, ClaimOutcome::Completed(b"order-1001".to_vec()));
//! // A stale holder is fenced out.
//! assert_eq!(tier.release(&scope, token).await?, Commit::FencedOut);
//! # Ok(()) }
//! ```

use std::fmt;
use std::future::Future;
use std::time::Duration;

use idem_core::{Fingerprint, Scope, Status};

/// A number handed out with each claim of a scope that only grows: a later claim of the same
/// scope always gets a larger token than every earlier one (within the store's memory of the
/// scope, see the implementation's docs).
///
/// Pass it to the store that takes the side effect: a store that keeps the highest token it
/// accepted and refuses lower ones cannot be written by a holder whose lease lapsed.
///
/// [`FencingToken::UNFENCED`] (zero) marks a run made without any claim (fail-open); real
/// tokens start at 1.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct FencingToken(u64);

impl FencingToken {
    /// The token of a run made without a claim (fail-open): lower than every real token.
    pub const UNFENCED: FencingToken = FencingToken(0);

    /// A token from its number.
    pub const fn new(n: u64) -> Self {
        FencingToken(n)
    }

    /// The number.
    pub const fn get(self) -> u64 {
        self.0
    }

    /// Whether this is a real claim's token (not [`UNFENCED`](Self::UNFENCED)).
    pub const fn is_fenced(self) -> bool {
        self.0 != 0
    }
}

impl fmt::Debug for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FencingToken({})", self.0)
    }
}

impl fmt::Display for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// What [`RemoteTier::claim`] found (SPEC D1, K4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimOutcome {
    /// Nobody held the scope: this caller holds it now, with a lease, and must run the action and
    /// then complete or release with `token`.
    Claimed {
        /// The claim's fencing token.
        token: FencingToken,
    },
    /// Another caller (normally another instance) holds the scope and its lease still runs.
    InFlightElsewhere {
        /// The holder's token (pass it to [`RemoteTier::wait`]).
        holder: FencingToken,
        /// How long the holder's lease still runs; after that a new claim succeeds.
        lease_left: Duration,
    },
    /// The scope completed with the same fingerprint; here is the stored, encoded value.
    Completed(Vec<u8>),
    /// The scope is held or completed with another fingerprint: the same key was reused for a
    /// different request. The action must not run (`FAILED_PRECONDITION`).
    Conflict,
}

/// Whether a complete or release still held the claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Commit {
    /// The token held the claim; the record was written (complete) or removed (release).
    Committed,
    /// The token no longer holds the claim (its lease lapsed and the record expired or was claimed
    /// again with a higher token): nothing was written.
    FencedOut,
}

/// A shared record of scopes that several instances consult (SPEC D1–D4); see the [module
/// docs](self) for the protocol and a complete implementation.
///
/// Implementations must make [`claim`](Self::claim) atomic (two concurrent claims of a free scope:
/// exactly one gets [`ClaimOutcome::Claimed`]) and must put a time limit on every call to the
/// store, answering `UNAVAILABLE` when it passes. The futures must be `Send` so tiers can be used
/// from multi-threaded runtimes; nothing here depends on a particular runtime.
pub trait RemoteTier: Send + Sync + 'static {
    /// Looks `scope` up and claims it for `lease` if nobody holds it (see [`ClaimOutcome`]).
    ///
    /// # Errors
    ///
    /// The store failed or did not answer in time (normally `UNAVAILABLE`): no claim was made, or
    /// one was made that nobody will use and that lapses with its lease.
    fn claim(
        &self,
        scope: &Scope,
        fingerprint: Fingerprint,
        lease: Duration,
    ) -> impl Future<Output = Result<ClaimOutcome, Status>> + Send;

    /// Stores the encoded `value` for `ttl` if `token` still holds the claim, and lets waiters
    /// know (SPEC D1).
    ///
    /// # Errors
    ///
    /// The store failed or did not answer in time; whether the value was stored is unknown.
    fn complete(
        &self,
        scope: &Scope,
        token: FencingToken,
        value: Vec<u8>,
        ttl: Duration,
    ) -> impl Future<Output = Result<Commit, Status>> + Send;

    /// Drops the claim if `token` still holds it (after a failed action, so the next call runs
    /// again), and lets waiters know.
    ///
    /// # Errors
    ///
    /// The store failed or did not answer in time; the claim then lapses with its lease.
    fn release(
        &self,
        scope: &Scope,
        token: FencingToken,
    ) -> impl Future<Output = Result<Commit, Status>> + Send;

    /// Waits until the record of `scope` may have changed from "held by `holder`" (completed,
    /// released, lapsed), or `at_most` passed, whichever comes first (SPEC D2). The caller then
    /// claims again. Implementations must not miss a change that happens after the claim that
    /// reported `holder` (they may report spurious ones), and must never spin.
    ///
    /// # Errors
    ///
    /// The store failed; callers treat it as a change and claim again (which reports the
    /// failure if it persists).
    fn wait(
        &self,
        scope: &Scope,
        holder: FencingToken,
        at_most: Duration,
    ) -> impl Future<Output = Result<(), Status>> + Send;
}
