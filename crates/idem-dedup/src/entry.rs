//! What a shard stores per scope.

use std::sync::Arc;
use std::time::Duration;

use idem_core::{Code, Fingerprint, Scope, Status};

use crate::join::JoinCell;
use crate::wheel::Nanos;

/// One scope's record in a shard's map: in flight (with its join cell) or completed (with its result).
///
/// The table holds a `Box` per entry, not the entry itself: a hashbrown table keeps between 1.14
/// and 2.3 slots per entry (it doubles at 7/8 full), so an 8-byte slot instead of the whole record
/// is what keeps a completed entry small at any table size (E7). The box carries the scope's
/// bytes inline when they fit ([`StoredScope`]), so a replay's comparison reads the same
/// allocation as its result instead of following the scope's own pointer.
///
/// Also kept small, since a completed entry lives for the whole TTL: no timer handle (the timer
/// queues hold `(hash, token)` instead) and the expiry as 8 bytes of [`Nanos`]. The in-flight part
/// (start time and, once a duplicate arrives, the run's join cell) is smaller than a stored
/// result, so it sits in the entry unboxed: a new key allocates nothing for it. The hash is kept
/// (8 bytes) so the table never re-runs SipHash over the scope when it grows: that rehash cost
/// ~400 instructions per new key, about a tenth of the new-key path.
pub(crate) struct Entry<V> {
    /// The scope's keyed hash, computed once by the caller.
    pub(crate) hash: u64,
    /// Identifies this run; a `Complete` or timer for an older run of the same scope is ignored.
    pub(crate) token: u64,
    pub(crate) scope: StoredScope,
    pub(crate) fingerprint: Fingerprint,
    pub(crate) state: State<V>,
}

/// Bytes of a scope encoding that fit in an entry (86: with the enum's tag and length byte the
/// field is 88 bytes and the whole entry 152, one allocator size class). A scope of a 36-character
/// UUID key, a 12-byte tenant and a method up to 34 bytes fits; a longer one keeps a reference to
/// the caller's shared bytes instead (16 bytes here, its own allocation elsewhere).
pub(crate) const INLINE_SCOPE: usize = 86;

/// A scope as an entry keeps it: its encoded bytes inline when they fit, else the shared bytes.
/// Either way it is stored once (the caller's `Scope` is released when its request ends).
pub(crate) enum StoredScope {
    /// `bytes[..len]` is the encoding.
    Inline { len: u8, bytes: [u8; INLINE_SCOPE] },
    /// Too long to inline.
    Shared(Scope),
}

impl StoredScope {
    pub(crate) fn new(scope: Scope) -> Self {
        let enc = scope.as_bytes();
        match u8::try_from(enc.len()) {
            Ok(len) if enc.len() <= INLINE_SCOPE => {
                let mut bytes = [0; INLINE_SCOPE];
                bytes[..enc.len()].copy_from_slice(enc);
                StoredScope::Inline { len, bytes }
            }
            _ => StoredScope::Shared(scope),
        }
    }

    #[inline]
    pub(crate) fn as_bytes(&self) -> &[u8] {
        match self {
            StoredScope::Inline { len, bytes } => &bytes[..usize::from(*len)],
            StoredScope::Shared(scope) => scope.as_bytes(),
        }
    }

    /// Whether this is `scope` (the same encoded bytes; K3 makes the encoding injective).
    #[inline]
    pub(crate) fn is(&self, scope: &Scope) -> bool {
        self.as_bytes() == scope.as_bytes()
    }
}

impl<V> Entry<V> {
    /// Empties a removed entry so its allocation can hold the shard's next new key (see
    /// [`Spares`]): returns its state and lets go of a shared scope. What is left is a few
    /// plain bytes.
    pub(crate) fn vacate(&mut self) -> State<V> {
        if let StoredScope::Shared(_) = self.scope {
            self.scope = StoredScope::Inline {
                len: 0,
                bytes: [0; INLINE_SCOPE],
            };
        }
        let vacant = State::InFlight(InFlight {
            started: 0,
            join: None,
        });
        std::mem::replace(&mut self.state, vacant)
    }
}

/// A shard's emptied entry allocations, kept for its next new keys.
///
/// A removed entry's box would go back to the allocator and a new key would ask it for one
/// again; under a steady stream of new keys the shard removes about as many entries (expired)
/// as it creates, so it keeps up to [`Spares::MAX`] boxes and reuses them. This takes the
/// allocator's free path (which, for a box that another worker thread allocated, takes that
/// thread's arena lock) and its allocation path off the actor. The kept boxes hold no values
/// or scopes ([`Entry::vacate`]), and at most `MAX` × 152 bytes (~150 KiB) per shard.
pub(crate) struct Spares<V> {
    boxes: Vec<Box<Entry<V>>>,
}

impl<V> Spares<V> {
    /// Boxes kept per shard.
    pub(crate) const MAX: usize = 1024;

    pub(crate) fn new() -> Self {
        Spares { boxes: Vec::new() }
    }

    /// Takes a removed entry: returns its state, and keeps the box if there is room.
    pub(crate) fn keep(&mut self, mut e: Box<Entry<V>>) -> State<V> {
        let state = e.vacate();
        if self.boxes.len() < Self::MAX {
            self.boxes.push(e);
        }
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
        /// Exact expiry: completion + TTL (or the failure TTL).
        expires: Nanos,
    },
}

pub(crate) struct InFlight<V> {
    pub(crate) started: Nanos,
    /// Created by the actor for the run's first duplicate; later ones find it on the read path
    /// (see `join.rs`). `None` while nobody waits, so a new key allocates nothing for it.
    pub(crate) join: Option<Arc<JoinCell<V>>>,
}

/// What an operator sees when looking a scope up (E13).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntryInfo {
    /// In flight or completed.
    pub state: EntryState,
    /// Time since the run started (in flight) or completed (completed).
    pub age: Duration,
    /// Time until the stored result expires; `None` while in flight.
    pub expires_in: Option<Duration>,
}

/// The state part of [`EntryInfo`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryState {
    /// A run is going on.
    InFlight {
        /// Callers waiting for it (the leader not counted).
        waiters: usize,
    },
    /// A success is stored and will be replayed.
    Completed,
    /// A failure with a cacheable code is stored and will be replayed (E13).
    CachedFailure(Code),
}

impl<V> Entry<V> {
    /// Whether a stored result has passed its exact expiry at `now`.
    pub(crate) fn is_expired(&self, now: Nanos) -> bool {
        matches!(&self.state, State::Done { expires, .. } if now >= *expires)
    }

    pub(crate) fn info(&self, now: Nanos, ttl: Duration, failure_ttl: Duration) -> EntryInfo {
        let nanos = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        match &self.state {
            State::InFlight(f) => EntryInfo {
                state: EntryState::InFlight {
                    waiters: f.join.as_ref().map_or(0, |c| c.joined()),
                },
                age: Duration::from_nanos(now.saturating_sub(f.started)),
                expires_in: None,
            },
            State::Done { result, expires } => {
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

    /// E7: what an entry's box costs. The in-flight part is unboxed only because it fits in the
    /// space a stored result takes anyway, and the inline scope is sized to land on 152 bytes;
    /// this pins both.
    #[test]
    fn e7_entry_is_152_bytes_for_an_arc_value() {
        assert_eq!(std::mem::size_of::<StoredScope>(), 88);
        assert_eq!(std::mem::size_of::<Entry<Arc<[u8]>>>(), 152);
        // A `u64` result is 8 bytes smaller than an `Arc<[u8]>` one.
        assert_eq!(std::mem::size_of::<Entry<u64>>(), 144);
    }

    fn scope(tenant: &str, method: &str, key: &str) -> Scope {
        Scope::parse(tenant, method, key).expect("valid scope")
    }

    fn done(scope: Scope, value: Arc<[u8]>) -> Entry<Arc<[u8]>> {
        Entry {
            hash: 1,
            token: 2,
            scope: StoredScope::new(scope),
            fingerprint: Fingerprint::of(b"body"),
            state: State::Done {
                result: Ok(value),
                expires: 3,
            },
        }
    }

    /// E7: a removed entry kept for reuse holds neither its value nor a long scope's shared
    /// bytes; the next new key gets the same allocation; no more than `MAX` are kept.
    #[test]
    fn e7_spare_boxes_let_go_of_values_and_scopes_and_are_reused() {
        let mut spares = Spares::new();
        let value: Arc<[u8]> = Arc::from(&b"result"[..]);
        let method = format!("/{}/CreateOrder", "very.long.package.name".repeat(8));
        let long = scope("t", &method, "key-00000001");
        let e = Box::new(done(long.clone(), value.clone()));
        assert!(matches!(e.scope, StoredScope::Shared(_)));
        let addr = std::ptr::from_ref::<Entry<_>>(&*e);
        assert_eq!(Arc::strong_count(&value), 2);
        let state = spares.keep(e);
        drop(state);
        assert_eq!(
            Arc::strong_count(&value),
            1,
            "the kept box dropped the value"
        );
        assert!(
            matches!(spares.boxes[0].scope, StoredScope::Inline { len: 0, .. }),
            "and the long scope's shared bytes"
        );
        assert_eq!(spares.len(), 1);

        let next = spares.boxed(done(scope("t", "/m", "key-00000002"), value.clone()));
        assert_eq!(std::ptr::from_ref::<Entry<_>>(&*next), addr, "reused");
        assert!(next.scope.is(&scope("t", "/m", "key-00000002")));
        assert_eq!(spares.len(), 0);

        for _ in 0..Spares::<Arc<[u8]>>::MAX + 10 {
            drop(spares.keep(Box::new(done(
                scope("t", "/m", "key-00000003"),
                value.clone(),
            ))));
        }
        assert_eq!(spares.len(), Spares::<Arc<[u8]>>::MAX);
        assert_eq!(Arc::strong_count(&value), 2, "only `next` still holds it");
    }

    /// K3/E8: an entry's scope compares by the encoded bytes, inline or shared, at and around the
    /// inline limit, and never equals another scope.
    #[test]
    fn k3_stored_scope_inline_and_shared_compare_by_bytes() {
        // 2 + tenant + 2 + method + key bytes: a 64-byte key (K1's longest) and a method that
        // brings the encoding to the limit, then one byte over it.
        let key = "k".repeat(64);
        let method = |n: usize| "m".repeat(n);
        let fits = scope("t", &method(INLINE_SCOPE - 64 - 5), &key);
        let over = scope("t", &method(INLINE_SCOPE - 64 - 4), &key);
        assert_eq!(fits.as_bytes().len(), INLINE_SCOPE);
        let (a, b) = (
            StoredScope::new(fits.clone()),
            StoredScope::new(over.clone()),
        );
        assert!(matches!(a, StoredScope::Inline { .. }));
        assert!(matches!(b, StoredScope::Shared(_)));
        assert!(a.is(&fits) && !a.is(&over));
        assert!(b.is(&over) && !b.is(&fits));
        assert_eq!(a.as_bytes(), fits.as_bytes());
        // Same bytes split differently over tenant and method are other scopes (K3).
        let x = scope("ab", "c", "key-0001");
        let y = scope("a", "bc", "key-0001");
        assert!(StoredScope::new(x.clone()).is(&x));
        assert!(!StoredScope::new(x).is(&y));
    }
}
