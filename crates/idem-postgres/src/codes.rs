//! The numbers the schema's functions answer with (`sql/schema.sql`), named: what a claim
//! found, whether a completion or release held its claim, and a record's state.

/// The `outcome` column of the `claim` and `tx_claim` functions.
pub(crate) mod claim {
    /// The scope was free: claimed, with a new token.
    pub(crate) const CLAIMED: i16 = 0;
    /// Another claim holds the scope (its token and lease left come with it).
    pub(crate) const HELD: i16 = 1;
    /// A result is stored (it comes with the row).
    pub(crate) const COMPLETED: i16 = 2;
    /// The scope is held or stored with another fingerprint.
    pub(crate) const CONFLICT: i16 = 3;
    /// The scope was held by this owner's orphaned claim, now taken back with a new token
    /// (`claim` only).
    pub(crate) const RECLAIMED: i16 = 4;
}

/// What `complete` and `release` answer.
pub(crate) mod commit {
    /// The claim still held the scope: written, or released.
    pub(crate) const COMMITTED: i16 = 1;
    /// A later claim exists, or the scope completed: nothing was written.
    pub(crate) const FENCED_OUT: i16 = 0;
}

/// The `state` column of a record.
pub(crate) mod state {
    /// A claim holds the scope.
    pub(crate) const IN_FLIGHT: i16 = 1;
}
