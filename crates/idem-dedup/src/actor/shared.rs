//! What the engine's handles and its shard actors share: the engine-wide counters and clock
//! ([`Shared`]) and each shard's published table ([`SharedTable`]). Both sides depend on this
//! module, and it on neither, so the handle (`engine`) and the actor (`shard`) import one way:
//! the handle starts actors, the actors never reach back into the handle.

use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::sync::Arc;

use crossbeam_utils::sync::ShardedLock;
use crossbeam_utils::CachePadded;
use hashbrown::HashTable;
use tokio::sync::Notify;

use crate::actor::counters::{ShardCounters, Striped};
use crate::actor::entry::Entry;
use crate::actor::wheel::Clock;

/// State shared by handles and shard actors; none of it is the map.
pub(crate) struct Shared {
    pub(crate) counters: Box<[ShardCounters]>,
    /// In-flight + completed entries over all shards. On a cache line of its own: the
    /// actors write it for every new key and every expiry, and every call reads the fields
    /// beside it (`shutting_down`, the clock).
    pub(crate) entries: CachePadded<AtomicUsize>,
    /// Weight of the stored values over all shards, with a weigher. Written when a
    /// shard stores or removes values (once per turn), on a line of its own.
    pub(crate) bytes: CachePadded<AtomicUsize>,
    pub(crate) shutting_down: AtomicBool,
    /// Replays answered from the read path, without a message (summed into `stats().replayed`).
    pub(crate) fast_replays: Striped,
    /// Joins made on the read path, without a message (summed into `stats().joined`).
    pub(crate) fast_joins: Striped,
    /// The time base of every shard's expiries.
    pub(crate) clock: Clock,
    /// Signalled by shards when their last run ends during shutdown.
    pub(crate) idle: Notify,
}

/// A shard's table, shared for reading. Only the shard actor writes it; it takes the write lock for
/// one synchronous batch at a time (never across an `.await`), and callers take `try_read` to
/// replay a stored result, or find the join cell of a run in flight, without sending a message
/// (see `Engine::read_path`, in `engine/read_path.rs`).
///
/// The lock is sharded by reader thread (`crossbeam_utils::sync::ShardedLock`: one cache-padded
/// lock per thread slot): a replay's read lock is an atomic update on a line its own worker
/// thread owns, where a single `RwLock` word bounced between the workers on every replay. The
/// actor pays for it once per batch, taking every slot's write lock.
pub(crate) type SharedTable<V> = Arc<ShardedLock<HashTable<Box<Entry<V>>>>>;
