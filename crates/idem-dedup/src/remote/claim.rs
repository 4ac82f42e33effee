//! What a tier and its caller say to each other: the [`Claim`] a holder presents, what a claim
//! found ([`ClaimOutcome`]), whether a completion or release still held it ([`Commit`]), and
//! what a tier holds for operators ([`RemoteRecord`]).

use std::time::Duration;

use idem_core::{Fingerprint, Scope};

use super::{FencingToken, OwnerId};

/// A claim held by its maker: what [`complete`](crate::remote::RemoteTier::complete),
/// [`release`](crate::remote::RemoteTier::release) and [`renew`](crate::remote::RemoteTier::renew)
/// present to the tier.
#[derive(Debug, Clone, Copy)]
pub struct Claim<'a> {
    /// The scope claimed.
    pub scope: &'a Scope,
    /// The request fingerprint the claim was made with (a completion whose record lapsed is
    /// written again with it).
    pub fingerprint: Fingerprint,
    /// The claim's token.
    pub token: FencingToken,
    /// Who made the claim.
    pub owner: OwnerId,
}

/// What [`RemoteTier::claim`](crate::remote::RemoteTier::claim) found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimOutcome {
    /// Nobody held the scope, or only an orphan of this owner did: this caller holds it now, with
    /// a lease, and must run the action and then complete or release with `token`.
    Claimed {
        /// The claim's fencing token.
        token: FencingToken,
        /// Whether the scope was held by an orphaned claim of the same owner, now taken back.
        reclaimed: bool,
    },
    /// Another owner holds the scope and its lease still runs.
    InFlightElsewhere {
        /// The holder's token (pass it to [`RemoteTier::wait`](crate::remote::RemoteTier::wait)).
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

/// Whether a complete, release or renew still held the claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Commit {
    /// The token held the claim; the record was written (complete), removed (release) or its
    /// lease extended (renew).
    Committed,
    /// A later claim exists (the scope's fence moved past the token), or the scope is already
    /// completed (for a renewal: or no longer held by this claim at all): nothing was written.
    FencedOut,
}

/// What a tier holds for a scope, for operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RemoteRecord {
    /// In flight or completed.
    pub state: RecordState,
    /// Time until the record lapses (the lease while in flight, the TTL once completed), when the
    /// tier knows it.
    pub expires_in: Option<Duration>,
}

/// The state part of [`RemoteRecord`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordState {
    /// A claim holds the scope.
    InFlight {
        /// The holder's token.
        holder: FencingToken,
    },
    /// A result is stored.
    Completed,
}
