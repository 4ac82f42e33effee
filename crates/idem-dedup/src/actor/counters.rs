//! The counters shard actors and callers write, read by `stats()` without a message.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Per-shard counters. The shard actor is the only writer of most fields, so increments never
/// contend; `stats()` reads them with relaxed loads. Aligned to 128 bytes so two shards never share
/// a cache line.
#[derive(Debug, Default)]
#[repr(align(128))]
pub(crate) struct ShardCounters {
    pub(crate) in_flight: AtomicU64,
    pub(crate) completed: AtomicU64,
    pub(crate) bytes: AtomicU64,
    pub(crate) executed: AtomicU64,
    pub(crate) joined: AtomicU64,
    pub(crate) replayed: AtomicU64,
    pub(crate) conflicts: AtomicU64,
    pub(crate) failed: AtomicU64,
    pub(crate) panicked: AtomicU64,
    pub(crate) overloaded: AtomicU64,
    pub(crate) tenant_refused: AtomicU64,
    pub(crate) rejected_in_flight: AtomicU64,
    pub(crate) lease_expired: AtomicU64,
    pub(crate) abandoned: AtomicU64,
    pub(crate) expired: AtomicU64,
    // Written by callers, not the actor.
    pub(crate) deadline_exceeded: AtomicU64,
    pub(crate) mailbox_full: AtomicU64,
}

/// A counter written from many threads: one padded slot per thread (modulo 16), summed on read,
/// so concurrent increments never fight over one cache line.
#[derive(Debug, Default)]
pub(crate) struct Striped {
    slots: [Padded; STRIPES],
}

#[derive(Debug, Default)]
#[repr(align(128))]
struct Padded(AtomicU64);

thread_local! {
    // Const-initialised with a marker instead of lazily: reading it is one thread-local load,
    // with no lazy-initialisation state to check on every replay.
    static SLOT: Cell<usize> = const { Cell::new(usize::MAX) };
}

/// This thread's slot (its first use takes the next one, round-robin).
#[inline]
fn slot() -> usize {
    SLOT.with(|s| {
        let i = s.get();
        if i < STRIPES {
            return i;
        }
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let i = NEXT.fetch_add(1, Relaxed) % STRIPES;
        s.set(i);
        i
    })
}

/// Slots per [`Striped`] counter.
const STRIPES: usize = 16;

impl Striped {
    #[inline]
    pub(crate) fn add(&self, n: u64) {
        self.slots[slot()].0.fetch_add(n, Relaxed);
    }

    pub(crate) fn sum(&self) -> u64 {
        self.slots.iter().map(|p| p.0.load(Relaxed)).sum()
    }
}

pub(crate) fn bump(c: &AtomicU64) {
    c.fetch_add(1, Relaxed);
}
