//! What a shard stores per scope.

use std::sync::Arc;
use std::time::Duration;

use idem_core::{Fingerprint, Scope, Status};

use crate::actor::hash::ScopeId;
use crate::actor::join::JoinCell;
use crate::actor::quota::TenantId;
use crate::actor::wheel::Nanos;
use crate::info::{EntryInfo, EntryState};

/// One scope's record in a shard's map: in flight (with its join cell) or completed (with its result).
///
/// The table holds a `Box` per entry, not the entry itself: a hashbrown table keeps between 1.14
/// and 2.3 slots per entry (it doubles at 7/8 full), so an 8-byte slot instead of the whole record
/// is what keeps a completed entry small at any table size. Inline, this 72-byte record
/// would take 83 to 168 bytes of slots and control bytes; boxed it takes 72 plus 10 to 21.
///
/// The scope is known by its keyed 128-bit digest ([`ScopeId`]), not by its bytes: 16 bytes
/// instead of 88, compared in two words on a replay (see `hash.rs` for why a digest tells scopes
/// apart as surely as the bytes). The digest's first half is the table hash, so the table never
/// re-runs SipHash when it grows. A run in flight also holds the caller's [`Scope`] (shared, not
/// copied) for its warn events and its tenant's count; a completed entry lets it go
/// and keeps the tenant's 4-byte number instead, in room the record has anyway.
///
/// Also kept small, since a completed entry lives for the whole TTL: no timer handle (the timer
/// queues hold `(hash, token)` for runs and `(hash, expiry)` for results instead), the run's
/// token only while it runs, and one 8-byte [`Nanos`] field that is the start while in flight and
/// the expiry once completed. The in-flight part (token, join cell, the caller's scope: 32
/// bytes, the state enum's tag in the scope pointer's niche) sets the state's size, of which a
/// stored result uses 20. Boxed, it would bring the entry to 64 bytes (99.7 instead of 107.7
/// heap bytes per entry in `examples/entry_bytes.rs`), but even with completed runs' boxes
/// reused for new keys it cost 55 to 77 more instructions per new key (callgrind, the
/// `instructions` bench; issue 17), so it stays unboxed: a new key allocates nothing for it.
pub(crate) struct Entry<V> {
    /// The scope's keyed digest, computed once by the caller.
    pub(crate) id: ScopeId,
    pub(crate) fingerprint: Fingerprint,
    /// In flight: when the run started. Completed: the exact expiry (completion + TTL, or the
    /// failure TTL).
    pub(crate) at: Nanos,
    pub(crate) state: State<V>,
}

impl<V> Entry<V> {
    /// The table hash (the digest's first half).
    #[inline]
    pub(crate) fn hash(&self) -> u64 {
        self.id.hash()
    }

    /// Whether this is the run `token`, still in flight.
    #[inline]
    pub(crate) fn runs(&self, token: u64) -> bool {
        matches!(&self.state, State::InFlight(f) if f.token == token)
    }

    /// Whether this is a stored result of the scope hashed to `hash` that expires at `expires`:
    /// what an expiry timer names (see `wheel.rs`).
    #[inline]
    pub(crate) fn expires_exactly(&self, hash: u64, expires: Nanos) -> bool {
        matches!(self.state, State::Done { .. }) && self.at == expires && self.hash() == hash
    }
}

/// A shard's emptied entry allocations, kept for its next new keys.
///
/// A removed entry's box would go back to the allocator and a new key would ask it for one
/// again; under a steady stream of new keys the shard removes about as many entries (expired)
/// as it creates, so it keeps up to [`Spares::MAX`] boxes and reuses them. This takes the
/// allocator's free path (which, for a box that another worker thread allocated, takes that
/// thread's arena lock) and its allocation path off the actor. The kept boxes hold no values
/// and no callers' scopes (each holds the shard's one placeholder scope instead), and at most
/// `MAX` × 72 bytes (72 KiB) per shard.
pub(crate) struct Spares<V> {
    boxes: Vec<Box<Entry<V>>>,
    /// What a kept box's state holds instead of a caller's scope; `None` (never, in practice:
    /// the scope is a valid constant) keeps no boxes.
    vacant: Option<Scope>,
}

impl<V> Spares<V> {
    /// Boxes kept per shard.
    pub(crate) const MAX: usize = 1024;

    pub(crate) fn new() -> Self {
        Spares {
            boxes: Vec::new(),
            vacant: Scope::parse("idem", "/idem.vacant", "vacant-entry").ok(),
        }
    }

    /// Takes a removed entry: returns its state, and keeps the box if there is room.
    pub(crate) fn keep(&mut self, mut e: Box<Entry<V>>) -> State<V> {
        let Some(vacant) = &self.vacant else {
            return e.state;
        };
        if self.boxes.len() >= Self::MAX {
            return e.state;
        }
        let empty = State::InFlight(InFlight {
            token: 0,
            join: None,
            scope: vacant.clone(),
        });
        let state = std::mem::replace(&mut e.state, empty);
        self.boxes.push(e);
        state
    }

    /// Boxes `e`, in a kept allocation when there is one.
    pub(crate) fn boxed(&mut self, e: Entry<V>) -> Box<Entry<V>> {
        match self.boxes.pop() {
            Some(mut b) => {
                *b = e;
                b
            }
            None => Box::new(e),
        }
    }

    /// Boxes kept now.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.boxes.len()
    }
}

pub(crate) enum State<V> {
    InFlight(InFlight<V>),
    Done {
        /// Failures are boxed behind an `Arc` so a stored success costs only `V`.
        result: Result<V, Arc<Status>>,
        /// Whose use this entry counts in.
        tenant: TenantId,
    },
}

pub(crate) struct InFlight<V> {
    /// Identifies this run; a report or lease timer for an older run of the same scope is
    /// ignored.
    pub(crate) token: u64,
    /// Created by the actor for the run's first duplicate; later ones find it on the read path
    /// (see `join.rs`). `None` while nobody waits, so a new key allocates nothing for it.
    pub(crate) join: Option<Arc<JoinCell<V>>>,
    /// The leader's scope, shared: its tenant is counted in, and a run that ends badly is
    /// named in the warn event. Let go when the run completes.
    pub(crate) scope: Scope,
}

impl<V> Entry<V> {
    /// Whether a stored result has passed its exact expiry at `now`.
    pub(crate) fn is_expired(&self, now: Nanos) -> bool {
        matches!(&self.state, State::Done { .. }) && now >= self.at
    }

    pub(crate) fn info(&self, now: Nanos, ttl: Duration, failure_ttl: Duration) -> EntryInfo {
        let nanos = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        match &self.state {
            State::InFlight(f) => EntryInfo {
                state: EntryState::InFlight {
                    waiters: f.join.as_ref().map_or(0, |c| c.joined()),
                },
                age: Duration::from_nanos(now.saturating_sub(self.at)),
                expires_in: None,
            },
            State::Done { result, .. } => {
                let expires = self.at;
                let (state, ttl) = match result {
                    Ok(_) => (EntryState::Completed, ttl),
                    Err(s) => (EntryState::CachedFailure(s.code()), failure_ttl),
                };
                let completed = expires.saturating_sub(nanos(ttl));
                EntryInfo {
                    state,
                    age: Duration::from_nanos(now.saturating_sub(completed)),
                    expires_in: Some(Duration::from_nanos(expires.saturating_sub(now))),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::actor::hash::ScopeHasher;

    /// What an entry's box costs, for a `u64` value and an `Arc<[u8]>` one alike.
    /// The in-flight part is unboxed only because it fits in the room a stored result takes
    /// (the state enum's tag sits in the scope pointer's niche); this pins both.
    #[test]
    fn e7_entry_is_72_bytes() {
        assert_eq!(std::mem::size_of::<State<u64>>(), 32);
        assert_eq!(std::mem::size_of::<State<Arc<[u8]>>>(), 32);
        assert_eq!(std::mem::size_of::<Entry<u64>>(), 72);
        assert_eq!(std::mem::size_of::<Entry<Arc<[u8]>>>(), 72);
    }

    fn scope(tenant: &str, method: &str, key: &str) -> Scope {
        Scope::parse(tenant, method, key).expect("valid scope")
    }

    fn done(id: ScopeId, value: Arc<[u8]>) -> Entry<Arc<[u8]>> {
        Entry {
            id,
            fingerprint: Fingerprint::of(b"body"),
            at: 3,
            state: State::Done {
                result: Ok(value),
                tenant: TenantId::default(),
            },
        }
    }

    fn in_flight(id: ScopeId, scope: Scope) -> Entry<Arc<[u8]>> {
        Entry {
            id,
            fingerprint: Fingerprint::of(b"body"),
            at: 3,
            state: State::InFlight(InFlight {
                token: 9,
                join: None,
                scope,
            }),
        }
    }

    fn held_scope(e: &Entry<Arc<[u8]>>) -> &Scope {
        match &e.state {
            State::InFlight(f) => &f.scope,
            State::Done { .. } => panic!("expected an in-flight state"),
        }
    }

    /// A removed entry kept for reuse holds neither its value nor its caller's scope; the
    /// next new key gets the same allocation; no more than `MAX` are kept.
    #[test]
    fn e7_spare_boxes_let_go_of_values_and_scopes_and_are_reused() {
        let hasher = ScopeHasher::random();
        let mut spares = Spares::new();
        let value: Arc<[u8]> = Arc::from(&b"result"[..]);
        let s1 = scope("t", "/m", "key-00000001");
        let e = Box::new(done(hasher.id(s1.as_bytes()), value.clone()));
        let addr = std::ptr::from_ref::<Entry<_>>(&*e);
        assert_eq!(Arc::strong_count(&value), 2);
        let state = spares.keep(e);
        drop(state);
        assert_eq!(
            Arc::strong_count(&value),
            1,
            "the kept box dropped the value"
        );
        assert_eq!(spares.len(), 1);

        // An in-flight entry's scope is replaced by the placeholder when its box is kept.
        let s2 = scope("t", "/m", "key-00000002");
        let next = spares.boxed(in_flight(hasher.id(s2.as_bytes()), s2.clone()));
        assert_eq!(std::ptr::from_ref::<Entry<_>>(&*next), addr, "reused");
        assert_eq!(next.id, hasher.id(s2.as_bytes()));
        assert_eq!(spares.len(), 0);
        assert_eq!(held_scope(&next), &s2);
        let state = spares.keep(next);
        assert!(matches!(&state, State::InFlight(f) if f.scope == s2));
        assert_ne!(
            held_scope(&spares.boxes[0]),
            &s2,
            "the caller's scope is let go"
        );
        drop(state);

        for _ in 0..Spares::<Arc<[u8]>>::MAX + 10 {
            let id = hasher.id(s1.as_bytes());
            drop(spares.keep(Box::new(done(id, value.clone()))));
        }
        assert_eq!(spares.len(), Spares::<Arc<[u8]>>::MAX);
        assert_eq!(Arc::strong_count(&value), 1, "no kept box holds it");
    }

    /// An entry knows its scope by the keyed digest of the encoding: the same
    /// scope gives the same digest however it was built, and other scopes, even with the same
    /// bytes split differently over tenant and method, or longer than any inline copy, do not.
    #[test]
    fn k3_entries_tell_scopes_apart_by_their_digest() {
        let hasher = ScopeHasher::random();
        let id = |s: &Scope| hasher.id(s.as_bytes());
        let x = scope("ab", "c", "key-0001");
        let y = scope("a", "bc", "key-0001");
        assert_eq!(id(&x), id(&x.clone()));
        assert_eq!(id(&x), id(&scope("ab", "c", "key-0001")));
        assert_ne!(id(&x), id(&y));
        let key = "k".repeat(64);
        let method = format!("/{}/CreateOrder", "very.long.package.name".repeat(8));
        let long = scope("t", &method, &key);
        let longer = scope("t", &format!("{method}x"), &key);
        assert_ne!(id(&long), id(&longer));
        let e = done(id(&long), Arc::from(&b"v"[..]));
        assert!(e.expires_exactly(id(&long).hash(), 3));
        assert!(!e.expires_exactly(id(&long).hash(), 4));
        assert!(!e.expires_exactly(id(&longer).hash(), 3));
        assert!(!e.runs(9));
        let f = in_flight(id(&y), y.clone());
        assert!(f.runs(9) && !f.runs(8));
        assert!(
            !f.expires_exactly(id(&y).hash(), 3),
            "a run is no stored result"
        );
    }
}
