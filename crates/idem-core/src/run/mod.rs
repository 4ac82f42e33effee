//! The run in progress: which intent the code is running for, so that every write it sends
//! downstream carries a key derived from that intent.
//!
//! # Why
//!
//! A deduplicated run makes one intent's side effect happen once *in its own service*. But a
//! handler often calls another service: the order service deducts stock in the stock service, a
//! checkout charges a payment provider. If the run dies after that call and before its own record
//! (a crash, a stall past the lease), the retry or another instance runs the handler again. A
//! client that draws a fresh random key for the downstream call then sends a *new* intent, and the
//! stock is deducted twice, although both services deduplicate.
//!
//! The cure is for the downstream key to follow the inbound intent: a function of the inbound
//! [`Scope`], the downstream target and the place of the call in the run. Every re-run, on any
//! instance and in any process, sends the same keys in the same order, and the downstream service
//! replays what the first run caused.
//!
//! # How
//!
//! Every idem deduplicator runs its action inside a [`Run`]: the inbound scope, the fencing token
//! of the run's claim (if a shared tier gave one), and whether the run took over from an earlier
//! holder. The run is set as a tokio task-local for the action's future, so idem's clients deep in
//! the handler's call tree find it with [`Run::current`] and derive their keys from it
//! ([`outbound_key`]); the server layers also put it in the request's extensions, for code that
//! prefers to be handed it.
//!
//! | call inside a run | key sent downstream |
//! |---|---|
//! | the caller set a key | that key, unchanged |
//! | a named step ([`Run::key_for`], or a [`StepName`] on the request) | [`downstream_key`] of (scope, target, the name) |
//! | otherwise | [`downstream_key`] of (scope, target, *n*), for the *n*-th such call to that target in this run, counted from 0 |
//!
//! Outside a run nothing changes: each logical call gets a fresh random key.
//!
//! # Examples
//!
//! ```
//! use idem_core::run::{self, Run, RunStart};
//! use idem_core::Scope;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let inbound = Scope::parse("tenant-0042", "/shop.v1.Shop/CreateOrder", "3f1c2b7e-9d4a-4c55")?;
//!
//! // What a deduplicator does around the action (every idem engine does it for you):
//! let first = Run::new(&inbound, None, RunStart::Fresh)
//!     .attach(async { run::outbound_key("/stock.v1.Stock/Deduct", None) })
//!     .await;
//! // The run dies; the retry runs the handler again, on another instance perhaps:
//! let again = Run::new(&inbound, Some(7), RunStart::TakeOver)
//!     .attach(async { run::outbound_key("/stock.v1.Stock/Deduct", None) })
//!     .await;
//! assert_eq!(first, again); // the stock service replays the first deduction
//!
//! // Outside a run: a fresh key per call, as before.
//! assert_ne!(run::outbound_key("/stock.v1.Stock/Deduct", None), first);
//! # Ok(()) }
//! ```
//!
//! # Spawned tasks
//!
//! A tokio task-local does not follow `tokio::spawn`. Code that spawns part of its work and
//! wants that part's calls keyed by the run passes the run along:
//! `tokio::spawn(Run::current().unwrap().attach(work))`.

use std::borrow::Cow;
use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use tokio::sync::Notify;

use crate::{IdempotencyKey, Scope};

mod derive;

pub use derive::{downstream_key, Step};

tokio::task_local! {
    static CURRENT: Run;
    static STEP: StepName;
}

/// How a [`Run`] started.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RunStart {
    /// Nothing shows that the intent ran before (it may have: a crash can leave no trace).
    Fresh,
    /// The run took the intent over from an earlier holder whose claim lapsed or was abandoned,
    /// or resumes an operation an earlier run left unfinished: some of its side effects may
    /// already have happened, and downstream calls replay them.
    TakeOver,
}

/// One deduplicated run of an action: the inbound intent it runs for, and what it sends
/// downstream (see the [module docs](self)).
///
/// Cheap to clone (one reference count); clones are the same run and share its count of calls.
///
/// # Examples
///
/// A handler that needs the run explicitly (a server layer also puts it in the request's
/// extensions):
///
/// ```
/// use idem_core::run::{Run, RunStart};
/// use idem_core::Scope;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let scope = Scope::parse("tenant-0042", "/checkout", "a6b1c0de-7f00-4d1e")?;
/// let run = Run::new(&scope, Some(3), RunStart::Fresh);
/// run.clone()
///     .attach(async {
///         let run = Run::current().expect("inside a run");
///         assert_eq!(run.fencing_token(), Some(3));
///         let charge = run.key_for("POST /v1/charges", "charge");
///         assert_eq!(charge, run.key_for("POST /v1/charges", "charge")); // names are stable
///         let a = run.next_key("/stock.v1.Stock/Deduct");
///         let b = run.next_key("/stock.v1.Stock/Deduct");
///         assert_ne!(a, b); // the first and the second deduction of this run
///     })
///     .await;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Run(Arc<State>);

struct State {
    scope: Scope,
    digest: OnceLock<[u8; 32]>,
    token: Option<u64>,
    start: RunStart,
    /// How many ordinal keys each target has been given in this run. A run makes few downstream
    /// calls, so a list beats a map; never locked across an `.await`.
    ordinals: Mutex<Vec<(Box<str>, u32)>>,
    lost: AtomicBool,
    lost_wake: Notify,
}

impl Run {
    /// The run of an action for `scope`, with the fencing token of its claim (`None` when no shared
    /// tier gave one) and how it started. Deduplicators make it; code inside a run reads it with
    /// [`Run::current`].
    pub fn new(scope: &Scope, fencing_token: Option<u64>, start: RunStart) -> Run {
        Run(Arc::new(State {
            scope: scope.clone(),
            digest: OnceLock::new(),
            token: fencing_token,
            start,
            ordinals: Mutex::new(Vec::new()),
            lost: AtomicBool::new(false),
            lost_wake: Notify::new(),
        }))
    }

    /// The run the current task is executing, if it is inside one.
    pub fn current() -> Option<Run> {
        CURRENT.try_with(Run::clone).ok()
    }

    /// `fut`, run with `self` as [`Run::current`] whenever it is polled (it travels with the
    /// future, to whatever task polls it).
    pub fn attach<F: Future>(self, fut: F) -> impl Future<Output = F::Output> {
        CURRENT.scope(self, fut)
    }

    /// The inbound scope: the intent this run is for.
    pub fn scope(&self) -> &Scope {
        &self.0.scope
    }

    /// SHA-256 of the inbound scope's encoding ([`Scope::as_bytes`]): what downstream keys are
    /// derived from, the same in every process.
    pub fn digest(&self) -> &[u8; 32] {
        self.0.digest.get_or_init(|| self.0.scope.digest())
    }

    /// The fencing token of the run's claim, when a shared tier gave one.
    pub fn fencing_token(&self) -> Option<u64> {
        self.0.token
    }

    /// How the run started.
    pub fn start(&self) -> RunStart {
        self.0.start
    }

    /// Whether the run took the intent over from an earlier holder (see [`RunStart::TakeOver`]).
    pub fn is_takeover(&self) -> bool {
        self.0.start == RunStart::TakeOver
    }

    /// The key of the next call to `target` in this run: [`downstream_key`] with the count of
    /// earlier calls to `target` that asked for one. Each call of this method counts once, so
    /// ask once per logical call and keep the key for every retry of it.
    ///
    /// `target` names where the call goes: the gRPC method path (`/stock.v1.Stock/Deduct`), or the
    /// HTTP method and path (`POST /v1/charges`), as idem's client layers name them.
    pub fn next_key(&self, target: &str) -> IdempotencyKey {
        let n = {
            let mut ordinals = self
                .0
                .ordinals
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            match ordinals.iter_mut().find(|(t, _)| &**t == target) {
                Some((_, n)) => {
                    let this = *n;
                    *n = n.saturating_add(1);
                    this
                }
                None => {
                    ordinals.push((target.into(), 1));
                    0
                }
            }
        };
        downstream_key(self.digest(), target, Step::Ordinal(n))
    }

    /// The key of the step named `step` of this run on `target`: the same for every run of the
    /// intent, whatever else the run called before it. Name a step when the order of calls may
    /// change between runs (concurrent calls, a branch on data), or for an operation's steps.
    pub fn key_for(&self, target: &str, step: &str) -> IdempotencyKey {
        downstream_key(self.digest(), target, Step::Named(step))
    }

    /// Whether the run's claim was lost: a renewal found that another run took the intent over.
    /// The run's result will not be stored; its further side effects should stop.
    pub fn is_lease_lost(&self) -> bool {
        self.0.lost.load(Ordering::Acquire)
    }

    /// Resolves once the run's claim is lost (see [`is_lease_lost`](Self::is_lease_lost)); never,
    /// if it is kept. An action can race its work against it.
    pub async fn lease_lost(&self) {
        loop {
            let notified = self.0.lost_wake.notified();
            let mut notified = std::pin::pin!(notified);
            notified.as_mut().enable();
            if self.is_lease_lost() {
                return;
            }
            notified.await;
        }
    }

    /// Marks the run's claim lost. Called by a deduplicator whose renewal was refused.
    pub fn mark_lease_lost(&self) {
        self.0.lost.store(true, Ordering::Release);
        self.0.lost_wake.notify_waiters();
    }
}

impl fmt::Debug for Run {
    /// The scope's digest stands for the scope: the key and the tenant stay out of logs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = self.digest();
        f.debug_struct("Run")
            .field(
                "scope_digest",
                &format_args!("{:02x}{:02x}{:02x}{:02x}", d[0], d[1], d[2], d[3]),
            )
            .field("fencing_token", &self.0.token)
            .field("start", &self.0.start)
            .field("lease_lost", &self.is_lease_lost())
            .finish()
    }
}

/// The key for the next keyed call to `target`: inside a run, derived from it
/// ([`Run::key_for`] when `step` names the call, or when the call is made inside [`in_step`];
/// else [`Run::next_key`]); outside one, a fresh random key ([`IdempotencyKey::generate`]). What
/// idem's client layers use for a write the caller sent without a key.
pub fn outbound_key(target: &str, step: Option<&str>) -> IdempotencyKey {
    let Some(run) = Run::current() else {
        return IdempotencyKey::generate();
    };
    match step {
        Some(step) => run.key_for(target, step),
        None => match STEP.try_with(|s| run.key_for(target, s.as_str())) {
            Ok(key) => key,
            Err(_) => run.next_key(target),
        },
    }
}

/// `fut`, run as the step `name` of the current run: the writes it sends through idem's clients
/// without a key get [`Run::key_for`] of their target and `name` rather than an ordinal, so they
/// keep their keys when the order of a run's calls changes (a multi-step operation that resumes
/// after its committed steps). Within one step, make one write per target: two would share a key.
///
/// ```
/// use idem_core::run::{self, Run, RunStart};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let scope = idem_core::Scope::parse("tenant-0042", "/checkout", "a6b1c0de-7f00-4d1e")?;
/// let run = Run::new(&scope, None, RunStart::Fresh);
/// let key = run
///     .clone()
///     .attach(run::in_step("charge", async { run::outbound_key("POST /v1/charges", None) }))
///     .await;
/// assert_eq!(key, run.key_for("POST /v1/charges", "charge"));
/// # Ok(()) }
/// ```
pub fn in_step<F: Future>(
    name: impl Into<Cow<'static, str>>,
    fut: F,
) -> impl Future<Output = F::Output> {
    STEP.scope(StepName::new(name), fut)
}

/// Names the step of a downstream call, for idem's client layers: put it in the request's
/// extensions and, inside a run, the call's key is [`Run::key_for`] of its target and this name,
/// not its ordinal.
///
/// ```
/// use idem_core::run::StepName;
/// // With tonic: `request.extensions_mut().insert(StepName::new("charge"))`.
/// let step = StepName::new("charge");
/// assert_eq!(step.as_str(), "charge");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct StepName(Cow<'static, str>);

impl StepName {
    /// A step's name.
    pub fn new(name: impl Into<Cow<'static, str>>) -> StepName {
        StepName(name.into())
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}
