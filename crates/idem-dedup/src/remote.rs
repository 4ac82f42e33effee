//! A second tier behind the engine, shared by several server instances.
//!
//! # Why a second tier
//!
//! The [`Engine`](crate::Engine) deduplicates the callers of *one* process. When a service runs as
//! several instances behind a load balancer, a client's retry can land on another instance, whose
//! engine has never seen the key: without a shared record the side effect runs twice. A remote
//! tier is that shared record: a store every instance reaches (Redis in `idem-redis`, PostgreSQL
//! in `idem-postgres`) that arbitrates *between* instances, while each instance's engine keeps
//! coalescing its own callers in front of it (the [`TieredEngine`](crate::tiered::TieredEngine)),
//! so the store sees at most one claim per scope per instance.
//!
//! # The protocol
//!
//! 1. [`claim`](RemoteTier::claim) atomically looks the scope up and, if nobody holds it, takes it
//!    with a *lease* and a [`FencingToken`]. The answer is a [`ClaimOutcome`]: claimed, in flight
//!    elsewhere, completed (with the stored value), or a conflict (same scope, other fingerprint).
//! 2. The holder runs the action, passing the token to whatever store takes the side effect, and
//!    [`renew`](RemoteTier::renew)s the lease while it runs (the tiered engine does it every third
//!    of the lease), so the claim lasts as long as a live action and lapses about one lease after
//!    its holder died. Then it [`complete`](RemoteTier::complete)s with the encoded value and the
//!    TTL, or [`release`](RemoteTier::release)s after a failure so the next call runs again.
//! 3. An instance that met another's claim [`wait`](RemoteTier::wait)s for a change (a completion
//!    notice, or the holder's lease lapsing), then claims again: it then gets the result, or, if the
//!    holder died, the claim itself.
//! 4. Operators [`lookup`](RemoteTier::lookup) and [`forget`](RemoteTier::forget) records.
//!
//! # Owners and orphans
//!
//! Every claim names its [`OwnerId`]: one per tiered engine, random, so it differs between
//! processes and between restarts. A claim whose reply was lost (a timeout: the store ran it, the
//! caller never heard) is an *orphan*: nobody will complete it. When the same owner claims the
//! scope again, the tier hands the claim back to it at once, with a new, higher token
//! ([`ClaimOutcome::Claimed`] with `reclaimed: true`), instead of letting it wait out its own
//! lease. This is safe because one tiered engine runs at most one claim of a scope at a time
//! (its local engine coalesces the instance's callers), so a held claim with its own owner is
//! always one it abandoned.
//!
//! # Fencing: what a token protects, and what it does not
//!
//! Renewals keep a live holder's claim, however long its action runs. A lease still lapses under
//! a holder that exists but cannot renew: a stall longer than what is left of its lease (a long
//! GC pause, a stalled disk, `SIGSTOP`), or a tier it cannot reach. Another instance then claims
//! and gets a *higher* token; every claim of a scope gets a token greater than every earlier
//! claim of that scope, and a tier must keep that true even when it loses its data (a Redis
//! restart without persistence must not hand out token 1 twice).
//!
//! * **The tier's own record is protected.** Complete, release and renew succeed only while no
//!   later claim exists (the scope's fence still equals the caller's token), so a late holder
//!   never overwrites the new holder's result ([`Commit::FencedOut`]). Nobody else claiming, a
//!   holder whose lease merely ran out still completes: the result is stored and replayed.
//! * **The late holder learns it at its next renewal.** A renewal fenced out tells the holder
//!   that another run took the scope over; the tiered engine then marks the action's
//!   [`Run`](idem_core::run::Run) ([`is_lease_lost`](idem_core::run::Run::is_lease_lost),
//!   [`lease_lost`](idem_core::run::Run::lease_lost)), so the action can stop its further side
//!   effects. The action is not cancelled: what it already did cannot be undone by idem.
//! * **A side-effect store that checks tokens protects itself only partly.** A store that keeps
//!   the highest token it accepted per resource and refuses lower ones refuses the late holder's
//!   write *when the new holder wrote first*. If the late holder writes first (it stalled just
//!   past its lease, then wrote at once), the store accepts its lower token, then the new
//!   holder's higher one: two side effects. Tokens order writers; they do not make a lapsed lease
//!   safe.
//! * **What does exclude a second side effect:** a lease longer than the longest stall a holder
//!   can survive (with renewals the lease no longer has to outlast the action; without them it
//!   must: give the action its own timeout below it), or the record and the side effect in one
//!   transaction (`idem-postgres`'s transactional mode), where the database itself refuses the
//!   late holder.
//!
//! # Errors
//!
//! Every method returns the store's failures as a [`Status`], normally `UNAVAILABLE` (retryable):
//! the caller decides whether to fail closed (the default) or open.
//!
//! # Examples
//!
//! A complete, single-process implementation (a mutex-guarded map; it has no leases, so nothing
//! ever lapses and a renewal only checks the claim), and the claim loop a tiered engine drives
//! with it:
//!
//! ```
//! use idem_core::{Fingerprint, Scope, Status};
//! use idem_dedup::remote::{
//!     Claim, ClaimOutcome, Commit, FencingToken, OwnerId, RecordState, RemoteRecord, RemoteTier,
//! };
//! use std::collections::HashMap;
//! use std::future::{ready, Future};
//! use std::sync::Mutex;
//! use std::time::Duration;
//!
//! #[derive(Clone)]
//! enum Record {
//!     Running { fp: Fingerprint, token: FencingToken, owner: OwnerId },
//!     Done { fp: Fingerprint, token: FencingToken, value: Vec<u8> },
//! }
//!
//! #[derive(Default)]
//! struct InMemory {
//!     records: Mutex<(HashMap<Scope, Record>, HashMap<Scope, u64>)>, // records, fences
//! }
//!
//! impl RemoteTier for InMemory {
//!     fn claim(&self, scope: &Scope, fp: Fingerprint, _lease: Duration, owner: OwnerId)
//!         -> impl Future<Output = Result<ClaimOutcome, Status>> + Send {
//!         let mut guard = self.records.lock().unwrap();
//!         let (records, fences) = &mut *guard;
//!         let out = match records.get(scope).cloned() {
//!             Some(Record::Running { fp: f, .. }) | Some(Record::Done { fp: f, .. }) if f != fp => {
//!                 ClaimOutcome::Conflict
//!             }
//!             Some(Record::Done { value, .. }) => ClaimOutcome::Completed(value),
//!             Some(Record::Running { token, owner: o, .. }) if o != owner => {
//!                 ClaimOutcome::InFlightElsewhere { holder: token, lease_left: Duration::from_secs(1) }
//!             }
//!             held => {
//!                 // Free, or our own orphan: a new, higher token either way.
//!                 let fence = fences.entry(scope.clone()).or_insert(0);
//!                 *fence += 1;
//!                 let token = FencingToken::new(*fence);
//!                 records.insert(scope.clone(), Record::Running { fp, token, owner });
//!                 ClaimOutcome::Claimed { token, reclaimed: held.is_some() }
//!             }
//!         };
//!         ready(Ok(out))
//!     }
//!
//!     fn complete(&self, claim: Claim<'_>, value: Vec<u8>, _ttl: Duration)
//!         -> impl Future<Output = Result<Commit, Status>> + Send {
//!         let mut guard = self.records.lock().unwrap();
//!         let (records, fences) = &mut *guard;
//!         let ours = fences.get(claim.scope) == Some(&claim.token.get());
//!         let out = match records.get(claim.scope) {
//!             // Completed by this very claim already: a retry after a lost reply.
//!             Some(Record::Done { token, .. }) if *token == claim.token => Commit::Committed,
//!             Some(Record::Done { .. }) => Commit::FencedOut,
//!             _ if ours => {
//!                 let done = Record::Done { fp: claim.fingerprint, token: claim.token, value };
//!                 records.insert(claim.scope.clone(), done);
//!                 Commit::Committed
//!             }
//!             _ => Commit::FencedOut,
//!         };
//!         ready(Ok(out))
//!     }
//!
//!     fn renew(&self, claim: Claim<'_>, _lease: Duration)
//!         -> impl Future<Output = Result<Commit, Status>> + Send {
//!         let guard = self.records.lock().unwrap();
//!         let (records, fences) = &*guard;
//!         let out = match records.get(claim.scope) {
//!             // Still this claim's, in flight: a real tier extends the lease here.
//!             Some(Record::Running { token, .. }) if *token == claim.token
//!                 && fences.get(claim.scope) == Some(&token.get()) => Commit::Committed,
//!             _ => Commit::FencedOut,
//!         };
//!         ready(Ok(out))
//!     }
//!
//!     fn release(&self, claim: Claim<'_>) -> impl Future<Output = Result<Commit, Status>> + Send {
//!         let mut guard = self.records.lock().unwrap();
//!         let (records, fences) = &mut *guard;
//!         let out = match records.get(claim.scope) {
//!             Some(Record::Running { token, .. }) if *token == claim.token
//!                 && fences.get(claim.scope) == Some(&token.get()) => {
//!                 records.remove(claim.scope);
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
//!
//!     fn lookup(&self, scope: &Scope)
//!         -> impl Future<Output = Result<Option<RemoteRecord>, Status>> + Send {
//!         let guard = self.records.lock().unwrap();
//!         let info = guard.0.get(scope).map(|r| match r {
//!             Record::Running { token, .. } => RemoteRecord {
//!                 state: RecordState::InFlight { holder: *token },
//!                 expires_in: None,
//!             },
//!             Record::Done { .. } => RemoteRecord { state: RecordState::Completed, expires_in: None },
//!         });
//!         ready(Ok(info))
//!     }
//!
//!     fn forget(&self, scope: &Scope) -> impl Future<Output = Result<bool, Status>> + Send {
//!         // The fence stays: a later claim must still get a higher token.
//!         ready(Ok(self.records.lock().unwrap().0.remove(scope).is_some()))
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let tier = InMemory::default();
//! let (a, b) = (OwnerId::random(), OwnerId::random()); // two instances
//! let scope = Scope::parse("tenant-1", "/shop/CreateOrder", "order-0001")?;
//! let fp = Fingerprint::of(b"qty=1");
//! let lease = Duration::from_secs(30);
//!
//! let ClaimOutcome::Claimed { token, .. } = tier.claim(&scope, fp, lease, a).await? else { panic!() };
//! // Another instance meets the claim...
//! assert!(matches!(tier.claim(&scope, fp, lease, b).await?, ClaimOutcome::InFlightElsewhere { .. }));
//! // ...and another payload under the same key is a conflict (K4).
//! assert_eq!(tier.claim(&scope, Fingerprint::of(b"qty=2"), lease, b).await?, ClaimOutcome::Conflict);
//!
//! let claim = Claim { scope: &scope, fingerprint: fp, token, owner: a };
//! // While the action runs, the holder keeps its lease.
//! assert_eq!(tier.renew(claim, lease).await?, Commit::Committed);
//! let ttl = Duration::from_secs(3600);
//! assert_eq!(tier.complete(claim, b"order-1001".to_vec(), ttl).await?, Commit::Committed);
//! assert_eq!(tier.claim(&scope, fp, lease, b).await?, ClaimOutcome::Completed(b"order-1001".to_vec()));
//! // A completion retried after a lost reply is still committed; a release or a renewal is
//! // refused.
//! assert_eq!(tier.complete(claim, b"order-1001".to_vec(), ttl).await?, Commit::Committed);
//! assert_eq!(tier.release(claim).await?, Commit::FencedOut);
//! assert_eq!(tier.renew(claim, lease).await?, Commit::FencedOut);
//! # Ok(()) }
//! ```

use std::future::Future;
use std::time::Duration;

use idem_core::{Fingerprint, Scope, Status};

mod claim;
mod token;
mod waiters;

pub use claim::{Claim, ClaimOutcome, Commit, RecordState, RemoteRecord};
pub use token::{FencingToken, OwnerId};
pub use waiters::{Waiters, Waiting};

/// A shared record of scopes that several instances consult; see the [module
/// docs](self) for the protocol and a complete implementation.
///
/// Implementations must make [`claim`](Self::claim) atomic (two concurrent claims of a free scope:
/// exactly one gets [`ClaimOutcome::Claimed`]), keep tokens growing per scope even across a loss
/// of data, measure leases on the store's own clock (a claim's and a renewal's, so instances'
/// clocks never have to agree), and put a time limit on every call to the store, answering
/// `UNAVAILABLE` when it passes. The futures must be `Send` so tiers can be used from multi-threaded runtimes.
pub trait RemoteTier: Send + Sync + 'static {
    /// Looks `scope` up and claims it for `lease` if nobody holds it, or only an orphaned claim of
    /// `owner` does (see [`ClaimOutcome`]).
    ///
    /// # Errors
    ///
    /// The store failed or did not answer in time (normally `UNAVAILABLE`): no claim was made, or
    /// one was made that nobody will use; the same owner takes it back at its next claim.
    fn claim(
        &self,
        scope: &Scope,
        fingerprint: Fingerprint,
        lease: Duration,
        owner: OwnerId,
    ) -> impl Future<Output = Result<ClaimOutcome, Status>> + Send;

    /// Stores the encoded `value` for `ttl` if no later claim of the scope exists, even if the
    /// claim's lease ran out, and lets waiters know. Completing again with the same
    /// claim once it is stored answers [`Commit::Committed`] (a retry after a lost reply).
    ///
    /// # Errors
    ///
    /// The store failed or did not answer in time; whether the value was stored is unknown (a
    /// retry tells).
    fn complete(
        &self,
        claim: Claim<'_>,
        value: Vec<u8>,
        ttl: Duration,
    ) -> impl Future<Output = Result<Commit, Status>> + Send;

    /// Extends the claim's lease to `lease` from now, on the tier's own clock, while the claim
    /// still holds the scope: the keep-alive a holder sends while its action runs.
    ///
    /// Fenced like [`complete`](Self::complete): [`Commit::Committed`] while the scope's record is
    /// this claim's, still in flight; like a completion, a claim whose lease lapsed while nobody
    /// else claimed the scope (its fence still equals the token) is taken again for `lease`, where
    /// the tier can tell. [`Commit::FencedOut`] otherwise: a later claim took the scope, or it was
    /// completed, released or forgotten. A renewal never changes a completed record.
    ///
    /// # Errors
    ///
    /// The store failed or did not answer in time; whether the lease was extended is unknown. The
    /// lease then runs from the last renewal that succeeded (the tiered engine tries again at its
    /// next tick).
    fn renew(
        &self,
        claim: Claim<'_>,
        lease: Duration,
    ) -> impl Future<Output = Result<Commit, Status>> + Send;

    /// Drops the claim if it still holds the scope (after a failed action, so the next call runs
    /// again), and lets waiters know.
    ///
    /// # Errors
    ///
    /// The store failed or did not answer in time; the claim then lapses with its lease, or its
    /// owner takes it back.
    fn release(&self, claim: Claim<'_>) -> impl Future<Output = Result<Commit, Status>> + Send;

    /// Waits until the record of `scope` may have changed from "held by `holder`" (completed,
    /// released, lapsed), or `at_most` passed, whichever comes first. The caller then
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

    /// What the tier holds for `scope`, if anything.
    ///
    /// # Errors
    ///
    /// The store failed or did not answer in time.
    fn lookup(
        &self,
        scope: &Scope,
    ) -> impl Future<Output = Result<Option<RemoteRecord>, Status>> + Send;

    /// Removes the record of `scope` (in flight or completed), keeping what makes later tokens
    /// higher; returns whether there was one. The next call runs the action again.
    ///
    /// # Errors
    ///
    /// The store failed or did not answer in time.
    fn forget(&self, scope: &Scope) -> impl Future<Output = Result<bool, Status>> + Send;
}
