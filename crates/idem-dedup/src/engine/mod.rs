//! The public handle: `execute`, `lookup`, `forget`, `stats`, `shutdown`. One call's way to
//! its answer is in `call` (a `Begin` to the shard, then leading or waiting), `read_path` (a
//! replay or a join without a message) and `wait` (what a call waits for besides its run: room
//! in a mailbox, the shard's answer, a report applied, its deadline); its span and timing are in
//! `observe`, and the settings in `builder`.

mod builder;
mod call;
mod observe;
mod read_path;
mod seed;
mod wait;

use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Release};
use std::sync::Arc;
use std::time::Duration;

use crossbeam_utils::CachePadded;
use idem_core::{Deadline, Fingerprint, Scope, Status};
use tokio::sync::{mpsc, oneshot, Notify};
use tokio::time::Instant;

pub use builder::EngineBuilder;

use crate::actor::counters::{ShardCounters, Striped};
use crate::actor::hash::ScopeHasher;
use crate::actor::inbox::Inbox;
use crate::actor::message::Msg;
use crate::actor::shard::Shard;
use crate::actor::shared::{Shared, SharedTable};
use crate::actor::wheel::Clock;
use crate::config::{Config, Weigher};
use crate::info::EntryInfo;
use crate::metrics::CallLatency;
use crate::stats::Stats;
use crate::{DedupError, Outcome};

struct Inner<V> {
    shards: Box<[mpsc::Sender<Msg<V>>]>,
    /// Each shard's completion queue: how leaders report their runs' ends (see `inbox.rs`).
    inboxes: Box<[Arc<Inbox<V>>]>,
    /// Each shard's table, for lock-free-in-practice replays (`try_read`, never waits).
    tables: Box<[SharedTable<V>]>,
    hasher: ScopeHasher,
    shared: Arc<Shared>,
    cfg: Arc<Config>,
    handle: tokio::runtime::Handle,
    /// The latency histograms, resolved at build.
    latency: CallLatency,
}

/// The deduplication engine: runs each scope's action once and gives its result to every duplicate.
///
/// `Engine` is a cheap handle (`Clone` shares one engine). Dropping the last handle stops the shard
/// actors once the runs still going have reported.
///
/// # Concurrent calls with the same scope
///
/// Of N concurrent calls with one scope and one fingerprint, exactly one runs the action
/// ([`OutcomeKind::Executed`](crate::OutcomeKind::Executed)); the others wait for it and get a
/// clone of the same value ([`OutcomeKind::Joined`](crate::OutcomeKind::Joined)), or, under
/// [`InFlightPolicy::Reject`](crate::InFlightPolicy::Reject), an immediate
/// [`DedupError::InFlight`]. Calls that arrive after it completed, within the TTL, get the stored
/// value ([`OutcomeKind::Replayed`](crate::OutcomeKind::Replayed)). If the action fails, every
/// waiter gets the same error and nothing is stored (unless its code is declared cacheable), so the
/// next call runs it again. A call with the same scope but another fingerprint gets
/// [`DedupError::Conflict`] and runs nothing.
///
/// # Cancellation safety
///
/// Dropping an `execute` future never leaves half a side effect: if it was running the action, the
/// action moves to a task of its own, runs to completion and its result is stored for the retry
/// that follows. Dropping a waiting call only stops that caller waiting.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use idem_core::{Fingerprint, Scope};
/// use idem_dedup::{Engine, OutcomeKind};
/// use std::sync::atomic::{AtomicU32, Ordering};
/// use std::sync::Arc;
///
/// let engine = Engine::<u64>::builder().build()?;
/// let scope = Scope::parse("tenant-1", "/shop.v1.Shop/CreateOrder", "order-0001")?;
/// let fp = Fingerprint::of(b"sku=42&qty=1");
/// let runs = Arc::new(AtomicU32::new(0));
///
/// let calls = (0..10).map(|_| {
///     let runs = runs.clone();
///     engine.execute(&scope, fp, move |_| async move {
///         runs.fetch_add(1, Ordering::SeqCst);
///         Ok(1001) // the order id
///     })
/// });
/// let outcomes = futures::future::join_all(calls).await;
/// assert_eq!(runs.load(Ordering::SeqCst), 1);
/// assert!(outcomes.iter().all(|o| *o.as_ref().unwrap().value() == 1001));
///
/// let replay = engine.execute(&scope, fp, |_| async { Ok(0) }).await?;
/// assert_eq!(replay.kind(), OutcomeKind::Replayed);
/// # Ok(()) }
/// ```
pub struct Engine<V> {
    inner: Arc<Inner<V>>,
}

impl<V> Clone for Engine<V> {
    fn clone(&self) -> Self {
        Engine {
            inner: self.inner.clone(),
        }
    }
}

impl<V> fmt::Debug for Engine<V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Engine")
            .field("shards", &self.inner.shards.len())
            .field("config", &self.inner.cfg)
            .finish()
    }
}

/// What [`Engine::shutdown`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
#[must_use = "runs that did not finish within the grace period had their results dropped"]
pub struct ShutdownReport {
    /// Runs still in flight when the grace period ended; their waiters got `UNAVAILABLE` and their
    /// results were not stored (the actions themselves were not aborted).
    pub unfinished: u64,
}

impl<V: Clone + Send + Sync + 'static> Engine<V> {
    /// A builder with every default (see [`EngineBuilder`]).
    pub fn builder() -> EngineBuilder<V> {
        EngineBuilder::new()
    }

    /// Starts the shard actors on `handle`, with `weigher` for a byte budget.
    pub(crate) fn launch(
        cfg: Config,
        weigher: Option<Weigher<V>>,
        handle: tokio::runtime::Handle,
    ) -> Self {
        crate::metrics::describe();
        let cfg = Arc::new(cfg);
        let latency = CallLatency::new(&cfg.name);
        let shared = Arc::new(Shared {
            counters: (0..cfg.shards).map(|_| ShardCounters::default()).collect(),
            entries: CachePadded::new(AtomicUsize::new(0)),
            bytes: CachePadded::new(AtomicUsize::new(0)),
            shutting_down: AtomicBool::new(false),
            fast_replays: Striped::default(),
            fast_joins: Striped::default(),
            clock: Clock::new(),
            idle: Notify::new(),
        });
        let tables: Box<[SharedTable<V>]> =
            (0..cfg.shards).map(|_| SharedTable::default()).collect();
        let inboxes: Box<[Arc<Inbox<V>>]> = (0..cfg.shards).map(|_| Arc::default()).collect();
        let shards = tables
            .iter()
            .zip(inboxes.iter())
            .enumerate()
            .map(|(i, (table, inbox))| {
                let (tx, rx) = mpsc::channel(cfg.mailbox_capacity);
                let shard = Shard::new(
                    i,
                    rx,
                    inbox.clone(),
                    table.clone(),
                    cfg.clone(),
                    shared.clone(),
                    weigher.clone(),
                );
                handle.spawn(shard.run());
                tx
            })
            .collect();
        Engine {
            inner: Arc::new(Inner {
                shards,
                inboxes,
                tables,
                hasher: ScopeHasher::random(),
                shared,
                cfg,
                handle,
                latency,
            }),
        }
    }

    /// Runs `action` once for `scope`, or shares the run or stored result of an earlier call.
    ///
    /// `fingerprint` identifies the request's content; the same scope with another
    /// fingerprint is a conflict. `action` is called only if this call leads; it returns the value
    /// to store, or a [`Status`] error (not stored unless its code is declared cacheable).
    ///
    /// The action is given its context, here `()`: every engine hands its action one (the
    /// [`TieredEngine`](crate::tiered::TieredEngine) a fencing token, `idem-postgres`' engine a
    /// transaction), so the same closure, `|_| async { ... }`, serves an `Engine` and any
    /// [`Deduplicator`](crate::Deduplicator).
    ///
    /// # Errors
    ///
    /// See [`DedupError`]: conflict, the action's error, panic, full, in flight (Reject policy),
    /// lease expired, shutting down.
    ///
    /// # Cancellation safety
    ///
    /// See the type docs: a dropped leader hands its action to a task.
    pub fn execute<'s, 'k, F, Fut>(
        &'s self,
        scope: &'k Scope,
        fingerprint: Fingerprint,
        action: F,
    ) -> impl Future<Output = Result<Outcome<V>, DedupError>> + use<'s, 'k, V, F, Fut>
    where
        F: FnOnce(()) -> Fut,
        Fut: Future<Output = Result<V, Status>> + Send + 'static,
    {
        // A plain `fn` returning the call's future, not an `async fn` awaiting it: one state
        // machine instead of two, 40 bytes less in every request's future.
        self.call(scope, fingerprint, None, action)
    }

    /// As [`execute`](Self::execute), but this caller stops waiting at `deadline` with
    /// [`DedupError::DeadlineExceeded`]. The run itself is not disturbed: if this call
    /// was running the action, the action continues in a task and its result is stored.
    ///
    /// # Errors
    ///
    /// As [`execute`](Self::execute), plus [`DedupError::DeadlineExceeded`].
    pub fn execute_with_deadline<'s, 'k, F, Fut>(
        &'s self,
        scope: &'k Scope,
        fingerprint: Fingerprint,
        deadline: Deadline,
        action: F,
    ) -> impl Future<Output = Result<Outcome<V>, DedupError>> + use<'s, 'k, V, F, Fut>
    where
        F: FnOnce(()) -> Fut,
        Fut: Future<Output = Result<V, Status>> + Send + 'static,
    {
        self.call(scope, fingerprint, Some(deadline), action)
    }

    /// Looks a scope up: in flight or completed, its age and time to expiry. `None` if
    /// the engine holds nothing for it (or it just expired).
    ///
    /// # Errors
    ///
    /// [`DedupError::ShuttingDown`] once the actors stopped.
    pub async fn lookup(&self, scope: &Scope) -> Result<Option<EntryInfo>, DedupError> {
        let id = self.inner.hasher.id(scope.as_bytes());
        let index = shard_index(id.hash(), self.inner.shards.len());
        let (reply, rx) = oneshot::channel();
        self.send(index, Msg::Lookup { id, reply }).finish().await?;
        rx.await.map_err(|_| DedupError::ShuttingDown)
    }

    /// Removes whatever the engine holds for `scope`; returns whether there was
    /// anything. The next call for the scope runs the action again. Forgetting an in-flight scope
    /// does not stop its run, but its result is not stored and its waiters get
    /// [`DedupError::Abandoned`].
    ///
    /// # Errors
    ///
    /// [`DedupError::ShuttingDown`] once the actors stopped.
    pub async fn forget(&self, scope: &Scope) -> Result<bool, DedupError> {
        let id = self.inner.hasher.id(scope.as_bytes());
        let index = shard_index(id.hash(), self.inner.shards.len());
        let (reply, rx) = oneshot::channel();
        self.send(index, Msg::Forget { id, reply }).finish().await?;
        rx.await.map_err(|_| DedupError::ShuttingDown)
    }

    /// Counts per shard and in total, read from atomics without a message.
    pub fn stats(&self) -> Stats {
        let shared = &self.inner.shared;
        Stats::collect(
            &shared.counters,
            shared.fast_replays.sum(),
            shared.fast_joins.sum(),
        )
    }

    /// The number of shards.
    pub fn shard_count(&self) -> usize {
        self.inner.shards.len()
    }

    /// Stops accepting calls (they get `UNAVAILABLE`), waits up to `grace` for runs in flight to
    /// finish, then stops the shard actors. Waiters of runs still going after the grace
    /// period get [`DedupError::ShuttingDown`]; those actions are not aborted (half a side effect is
    /// worse than a late one), but their results are not stored.
    pub async fn shutdown(&self, grace: Duration) -> ShutdownReport {
        let shared = &self.inner.shared;
        shared.shutting_down.store(true, Release);
        let until = Instant::now() + grace;
        loop {
            let idle = shared.idle.notified();
            tokio::pin!(idle);
            idle.as_mut().enable();
            if self.stats().in_flight == 0 {
                break;
            }
            tokio::select! {
                _ = idle => {}
                _ = tokio::time::sleep_until(until) => break,
            }
        }
        let unfinished = self.stats().in_flight;
        for tx in self.inner.shards.iter() {
            let _ = tx.send(Msg::Stop).await;
        }
        for tx in self.inner.shards.iter() {
            tx.closed().await;
        }
        ShutdownReport { unfinished }
    }
}

/// Maps a scope hash to a shard. Mixes the hash first so the shard index uses other bits than the
/// shard's own table does (hashbrown takes the low bits for the bucket and the top 7 for tags).
fn shard_index(hash: u64, shards: usize) -> usize {
    let mixed = hash.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32;
    ((mixed * shards as u64) >> 32) as usize
}
