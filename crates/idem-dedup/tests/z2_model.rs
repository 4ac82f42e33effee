//! Z2: a model-based property test of the engine.
//!
//! proptest draws a configuration (shards, in-flight policy, entry cap) and a sequence of steps over
//! three scopes (same key; other tenant; other method) and two fingerprints:
//!
//! - execute an action that succeeds, fails (with a code declared cacheable or not), panics (in the
//!   closure or inside the future), or stays pending on a oneshot gate;
//! - resolve a pending run: complete, fail or panic it;
//! - advance tokio's paused clock (results expire, leases run out);
//! - forget a scope; look a scope up;
//! - drop a waiting call (its client left): a leader hands its run to a task that finishes it
//!   (E5), a joined call just stops waiting.
//!
//! Each step runs against the engine and against [`Model`], a plain map of scope → in flight
//! (fingerprint, waiters) or completed (fingerprint, value or cached error, expiry). After every
//! step the test compares: each finished call's outcome kind, value, expiry or exact error; that
//! calls the model says are still waiting have not returned; how many times actions ran; `lookup`
//! of every scope (state, waiters, age, time to expiry); and `stats()` (in flight, completed and
//! every outcome counter).
//!
//! Everything runs on a current-thread runtime with a paused clock, built inside each case, so the
//! interleavings are deterministic and time only moves when a step advances it. The test task never
//! awaits a call that could block (calls run as spawned tasks), so the clock never auto-advances.

mod common;

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::Once;
use std::time::Duration;

use common::Runs;
use idem_core::{Code, CodeSet, Fingerprint, Scope, Status};
use idem_dedup::{
    DedupError, Engine, EntryInfo, EntryState, InFlightPolicy, Outcome, OutcomeCounts, OutcomeKind,
};
use proptest::prelude::*;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// How long a success is kept.
const TTL: Duration = Duration::from_millis(200);
/// How long a failure with a cacheable code is kept.
const FAILURE_TTL: Duration = Duration::from_millis(70);
/// The in-flight lease; short enough that pending runs sometimes run out of it.
const LEASE: Duration = Duration::from_millis(250);
/// The hint sent with `Overloaded` and `InFlight`.
const RETRY_AFTER: Duration = Duration::from_millis(5);
/// Failure codes the engine is told to cache.
const CACHED: CodeSet = CodeSet::EMPTY
    .with(Code::FailedPrecondition)
    .with(Code::InvalidArgument);
/// Every injected panic message starts with this; the panic hook keeps them quiet.
const PANIC_TAG: &str = "z2 injected panic";
/// Yields that let spawned calls, runs and shards pass their messages around.
const SETTLE_YIELDS: usize = 32;

/// How a run ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    Ok,
    Fail(Code),
    /// A panic inside the action's future.
    Panic,
}

/// What an executed action does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Act {
    /// Ends at once, as given.
    Now(End),
    /// The closure panics before it makes a future.
    PanicInClosure,
    /// Waits on a gate until a `Resolve` step ends it.
    Pending,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Execute {
        scope: usize,
        fp: usize,
        act: Act,
    },
    /// Ends the pending run number `pick % runs` (oldest first); nothing if none is pending.
    Resolve {
        pick: usize,
        end: End,
    },
    /// Advances the paused clock by this many milliseconds.
    Advance(u64),
    Forget(usize),
    Lookup(usize),
    /// Drops waiting call number `pick % waiting` (a client gone or past its deadline): a leader
    /// hands its run to a task, which finishes it (E5); a joined call just stops waiting.
    Drop {
        pick: usize,
    },
}

#[derive(Debug, Clone, Copy)]
struct Cfg {
    shards: usize,
    policy: InFlightPolicy,
    max_entries: usize,
}

fn code() -> impl Strategy<Value = Code> {
    prop::sample::select(vec![
        Code::FailedPrecondition,
        Code::InvalidArgument,
        Code::Unavailable,
        Code::Internal,
    ])
}

fn end() -> impl Strategy<Value = End> {
    prop_oneof![
        3 => Just(End::Ok),
        2 => code().prop_map(End::Fail),
        1 => Just(End::Panic),
    ]
}

fn act() -> impl Strategy<Value = Act> {
    prop_oneof![
        4 => end().prop_map(Act::Now),
        1 => Just(Act::PanicInClosure),
        3 => Just(Act::Pending),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let scope = 0..3usize;
    let fp = prop_oneof![3 => Just(0usize), 1 => Just(1usize)];
    prop_oneof![
        8 => (scope.clone(), fp, act()).prop_map(|(scope, fp, act)| Op::Execute { scope, fp, act }),
        3 => (any::<usize>(), end()).prop_map(|(pick, end)| Op::Resolve { pick, end }),
        // Some steps land exactly on a TTL, failure TTL or lease boundary.
        2 => prop::sample::select(vec![1u64, 10, 50, 69, 70, 100, 130, 199, 200, 250])
            .prop_map(Op::Advance),
        1 => scope.clone().prop_map(Op::Forget),
        1 => scope.prop_map(Op::Lookup),
        1 => any::<usize>().prop_map(|pick| Op::Drop { pick }),
    ]
}

fn cfg() -> impl Strategy<Value = Cfg> {
    (
        1..=3usize,
        prop_oneof![3 => Just(InFlightPolicy::Wait), 1 => Just(InFlightPolicy::Reject)],
        // 2: a third scope is refused while two are held (E7); 64: never full.
        prop_oneof![Just(2usize), Just(64usize)],
    )
        .prop_map(|(shards, policy, max_entries)| Cfg {
            shards,
            policy,
            max_entries,
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn z2_engine_matches_model(cfg in cfg(), ops in prop::collection::vec(op(), 1..60)) {
        quiet_injected_panics();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .unwrap();
        rt.block_on(run_case(cfg, ops));
    }
}

async fn run_case(cfg: Cfg, ops: Vec<Op>) {
    let mut w = World::new(cfg);
    for (step, op) in ops.iter().enumerate() {
        w.apply(*op).await;
        w.check(&format!("step {step} ({op:?})")).await;
    }
    // Finish every pending run, then let every result expire: nothing may be left behind (Z3).
    while !w.model.runs.is_empty() {
        w.apply(Op::Resolve {
            pick: 0,
            end: End::Ok,
        })
        .await;
        w.check("final resolve").await;
    }
    w.apply(Op::Advance(TTL.as_millis() as u64)).await;
    w.check("final expiry").await;
    let st = w.engine.stats();
    assert_eq!(
        (st.in_flight, st.completed),
        (0, 0),
        "entries left after expiry"
    );
}

// ---------------------------------------------------------------------------------------------
// The model.

/// What the model holds for one scope.
#[derive(Debug)]
enum Slot {
    InFlight {
        fp: usize,
        /// The leading call.
        run: u64,
        started: Duration,
        /// Calls that joined the run.
        waiters: Vec<u64>,
    },
    Done {
        fp: usize,
        result: Stored,
        completed: Duration,
        expires: Duration,
    },
}

impl Slot {
    fn fp(&self) -> usize {
        match self {
            Slot::InFlight { fp, .. } | Slot::Done { fp, .. } => *fp,
        }
    }
}

/// A run whose action waits on its gate. It stays here after its scope was forgotten (an orphan:
/// it still runs and answers its leader, but nothing is stored).
#[derive(Debug)]
struct PendingRun {
    call: u64,
    scope: usize,
    fp: usize,
    started: Duration,
    gate: oneshot::Sender<End>,
}

/// A stored result: the value, or a failure with a cacheable code.
type Stored = Result<u64, Status>;

/// What a call returned, comparable: (kind, value, expires at) or the exact error.
type Got = Result<(OutcomeKind, u64, Instant), DedupError>;

/// The plain model of the engine: no shards, no messages, no timers.
#[derive(Debug)]
struct Model {
    cfg: Cfg,
    /// Time since the case started.
    now: Duration,
    slots: [Option<Slot>; 3],
    /// Pending runs, oldest first.
    runs: Vec<PendingRun>,
    /// Calls that have finished by now and what they got.
    due: Vec<(u64, Got)>,
    /// Calls dropped by their caller: they get nothing. A dropped joined call still counts in
    /// `lookup`'s waiters until its run ends (the shard learns of it only then).
    gone: HashSet<u64>,
    /// How many actions were called.
    ran: u64,
    counts: OutcomeCounts,
    base: Instant,
}

fn status(code: Code, call: u64) -> Status {
    Status::new(code, format!("fail #{call}"))
}

fn panic_message(call: u64) -> String {
    format!("{PANIC_TAG} #{call}")
}

impl Model {
    fn at(&self, t: Duration) -> Instant {
        self.base + t
    }

    /// `call` returns `got` now, unless its caller dropped it.
    fn answer(&mut self, call: u64, got: Got) {
        if !self.gone.contains(&call) {
            self.due.push((call, got));
        }
    }

    fn entries(&self) -> usize {
        self.slots.iter().filter(|s| s.is_some()).count()
    }

    fn is_attached(&self, run: &PendingRun) -> bool {
        matches!(&self.slots[run.scope], Some(Slot::InFlight { run: r, .. }) if *r == run.call)
    }

    /// A call to `execute`; returns true if it leads with a pending action.
    fn execute(&mut self, call: u64, s: usize, fp: usize, act: Act) -> bool {
        let retry_after = RETRY_AFTER;
        let full = self.entries() >= self.cfg.max_entries;
        let got: Got = match &mut self.slots[s] {
            Some(slot) if slot.fp() != fp => {
                self.counts.conflicts += 1;
                Err(DedupError::Conflict)
            }
            Some(Slot::InFlight { waiters, .. }) => match self.cfg.policy {
                InFlightPolicy::Wait => {
                    self.counts.joined += 1;
                    waiters.push(call);
                    return false;
                }
                InFlightPolicy::Reject => {
                    self.counts.rejected_in_flight += 1;
                    Err(DedupError::InFlight { retry_after })
                }
            },
            Some(Slot::Done {
                result, expires, ..
            }) => {
                self.counts.replayed += 1;
                match result {
                    Ok(v) => Ok((OutcomeKind::Replayed, *v, self.base + *expires)),
                    Err(status) => Err(DedupError::Action {
                        status: status.clone(),
                        outcome: OutcomeKind::Replayed,
                    }),
                }
            }
            None if full => {
                self.counts.overloaded += 1;
                Err(DedupError::Overloaded { retry_after })
            }
            None => {
                self.counts.executed += 1;
                self.ran += 1;
                match act {
                    Act::Pending => {
                        self.slots[s] = Some(Slot::InFlight {
                            fp,
                            run: call,
                            started: self.now,
                            waiters: Vec::new(),
                        });
                        return true;
                    }
                    Act::PanicInClosure => self.end_run(call, Some(s), fp, End::Panic),
                    Act::Now(end) => self.end_run(call, Some(s), fp, end),
                }
                return false;
            }
        };
        self.answer(call, got);
        false
    }

    /// A run led by `call` ends now; `attached` is its scope unless it was forgotten.
    fn end_run(&mut self, call: u64, attached: Option<usize>, fp: usize, end: End) {
        let expires_at = self.at(self.now + TTL);
        let leader: Got = match end {
            End::Ok => Ok((OutcomeKind::Executed, call, expires_at)),
            End::Fail(code) => Err(DedupError::Action {
                status: status(code, call),
                outcome: OutcomeKind::Executed,
            }),
            End::Panic => Err(DedupError::Panicked {
                message: panic_message(call),
            }),
        };
        self.answer(call, leader);
        let Some(s) = attached else { return };
        let waiters = match self.slots[s].take() {
            Some(Slot::InFlight { waiters, .. }) => waiters,
            None => Vec::new(),
            Some(done @ Slot::Done { .. }) => {
                panic!("model: run ended on a completed slot {done:?}")
            }
        };
        let (joined, stored): (Got, Option<(Stored, Duration)>) = match end {
            End::Ok => (
                Ok((OutcomeKind::Joined, call, expires_at)),
                Some((Ok(call), TTL)),
            ),
            End::Fail(code) => {
                self.counts.failed += 1;
                let st = status(code, call);
                let joined = Err(DedupError::Action {
                    status: st.clone(),
                    outcome: OutcomeKind::Joined,
                });
                (
                    joined,
                    CACHED.contains(code).then_some((Err(st), FAILURE_TTL)),
                )
            }
            End::Panic => {
                self.counts.panicked += 1;
                let joined = Err(DedupError::Panicked {
                    message: panic_message(call),
                });
                (joined, None)
            }
        };
        for w in waiters {
            self.answer(w, joined.clone());
        }
        if let Some((result, ttl)) = stored {
            self.slots[s] = Some(Slot::Done {
                fp,
                result,
                completed: self.now,
                expires: self.now + ttl,
            });
        }
    }

    /// Ends pending run `pick % len` with `end`; returns the run so its gate can be opened.
    fn resolve(&mut self, pick: usize, end: End) -> Option<PendingRun> {
        if self.runs.is_empty() {
            return None;
        }
        let run = self.runs.remove(pick % self.runs.len());
        let attached = self.is_attached(&run).then_some(run.scope);
        self.end_run(run.call, attached, run.fp, end);
        Some(run)
    }

    /// Time moves on: results expire (at exactly completion + TTL), leases run out.
    fn advance(&mut self, by: Duration) {
        self.now += by;
        for slot in &mut self.slots {
            if matches!(slot, Some(Slot::Done { expires, .. }) if *expires <= self.now) {
                *slot = None;
                self.counts.expired += 1;
            }
        }
        let (gone, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut self.runs)
            .into_iter()
            .partition(|r| r.started + LEASE <= self.now);
        self.runs = kept;
        let err = DedupError::LeaseExpired { after: LEASE };
        for run in gone {
            if self.is_attached(&run) {
                self.counts.lease_expired += 1;
                if let Some(Slot::InFlight { waiters, .. }) = self.slots[run.scope].take() {
                    for w in waiters {
                        self.answer(w, Err(err.clone()));
                    }
                }
            }
            self.answer(run.call, Err(err.clone()));
        }
    }

    /// `forget(scope)`: returns whether there was an entry; its waiters get `Abandoned`.
    ///
    /// The engine counts no outcome for a forgotten run (not `abandoned`, although
    /// `OutcomeCounts::abandoned` documents "or forgotten"), and nothing when that run ends later
    /// (not `lease_expired` either). REQUIREMENTS.md is silent on these counters; the model follows the engine.
    fn forget(&mut self, s: usize) -> bool {
        match self.slots[s].take() {
            None => false,
            Some(Slot::InFlight { waiters, .. }) => {
                // A forgotten run counts as abandoned (`OutcomeCounts::abandoned`).
                self.counts.abandoned += 1;
                for w in waiters {
                    self.answer(w, Err(DedupError::Abandoned));
                }
                true
            }
            Some(Slot::Done { .. }) => true,
        }
    }

    fn info(&self, s: usize) -> Option<EntryInfo> {
        let now = self.now;
        self.slots[s].as_ref().map(|slot| match slot {
            Slot::InFlight {
                started, waiters, ..
            } => EntryInfo {
                state: EntryState::InFlight {
                    waiters: waiters.len(),
                },
                age: now - *started,
                expires_in: None,
            },
            Slot::Done {
                result,
                completed,
                expires,
                ..
            } => EntryInfo {
                state: match result {
                    Ok(_) => EntryState::Completed,
                    Err(st) => EntryState::CachedFailure(st.code()),
                },
                age: now - *completed,
                expires_in: Some(*expires - now),
            },
        })
    }

    fn in_flight(&self) -> u64 {
        let in_flight = |s: &&Option<Slot>| matches!(s, Some(Slot::InFlight { .. }));
        self.slots.iter().filter(in_flight).count() as u64
    }

    fn completed(&self) -> u64 {
        let done = |s: &&Option<Slot>| matches!(s, Some(Slot::Done { .. }));
        self.slots.iter().filter(done).count() as u64
    }
}

// ---------------------------------------------------------------------------------------------
// The engine side.

type Action = Pin<Box<dyn Future<Output = Result<u64, Status>> + Send>>;

fn finish(call: u64, end: End) -> Result<u64, Status> {
    match end {
        End::Ok => Ok(call),
        End::Fail(code) => Err(status(code, call)),
        End::Panic => panic!("{}", panic_message(call)),
    }
}

fn scopes() -> [Scope; 3] {
    let key = "order-00000001";
    [
        Scope::parse("tenant-a", "/shop.v1.Shop/CreateOrder", key).unwrap(),
        // Same key and method, other tenant.
        Scope::parse("tenant-b", "/shop.v1.Shop/CreateOrder", key).unwrap(),
        // Same tenant and key, other method.
        Scope::parse("tenant-a", "/shop.v1.Shop/DeductStock", key).unwrap(),
    ]
}

fn fingerprint(i: usize) -> Fingerprint {
    Fingerprint::of(format!("qty={i}").as_bytes())
}

struct World {
    engine: Engine<u64>,
    scopes: [Scope; 3],
    model: Model,
    /// Calls not yet checked, by call number.
    calls: HashMap<u64, JoinHandle<Result<Outcome<u64>, DedupError>>>,
    next_call: u64,
    ran: Runs,
}

impl World {
    fn new(cfg: Cfg) -> World {
        let engine = Engine::<u64>::builder()
            .shards(cfg.shards)
            .ttl(TTL)
            .in_flight_timeout(LEASE)
            .max_entries(cfg.max_entries)
            .in_flight_policy(cfg.policy)
            .cache_failures(CACHED, FAILURE_TTL)
            .retry_after(RETRY_AFTER)
            .build()
            .unwrap();
        World {
            engine,
            scopes: scopes(),
            model: Model {
                cfg,
                now: Duration::ZERO,
                slots: [None, None, None],
                runs: Vec::new(),
                due: Vec::new(),
                gone: HashSet::new(),
                ran: 0,
                counts: OutcomeCounts::default(),
                base: Instant::now(),
            },
            calls: HashMap::new(),
            next_call: 1,
            ran: Runs::default(),
        }
    }

    async fn apply(&mut self, op: Op) {
        match op {
            Op::Execute { scope, fp, act } => self.execute(scope, fp, act),
            Op::Resolve { pick, end } => {
                if let Some(run) = self.model.resolve(pick, end) {
                    assert!(
                        run.gate.send(end).is_ok(),
                        "run #{} was dropped before it ended",
                        run.call
                    );
                }
            }
            Op::Advance(ms) => {
                let by = Duration::from_millis(ms);
                tokio::time::advance(by).await;
                self.model.advance(by);
            }
            Op::Forget(s) => {
                let found = self.engine.forget(&self.scopes[s]).await.unwrap();
                assert_eq!(found, self.model.forget(s), "forget({s})");
            }
            Op::Drop { pick } => {
                let mut waiting: Vec<u64> = self.calls.keys().copied().collect();
                if !waiting.is_empty() {
                    waiting.sort_unstable();
                    let call = waiting[pick % waiting.len()];
                    self.calls.remove(&call).expect("a waiting call").abort();
                    self.model.gone.insert(call);
                }
            }
            Op::Lookup(s) => {
                let info = self.engine.lookup(&self.scopes[s]).await.unwrap();
                assert_eq!(info, self.model.info(s), "lookup({s})");
            }
        }
    }

    fn execute(&mut self, s: usize, fp: usize, act: Act) {
        let call = self.next_call;
        self.next_call += 1;
        let (gate, gate_rx) = oneshot::channel::<End>();
        let (engine, scope, ran) = (
            self.engine.clone(),
            self.scopes[s].clone(),
            self.ran.clone(),
        );
        let handle = tokio::spawn(async move {
            let action = move |_: ()| -> Action {
                ran.hit();
                match act {
                    Act::Now(end) => Box::pin(async move { finish(call, end) }),
                    Act::PanicInClosure => panic!("{}", panic_message(call)),
                    Act::Pending => Box::pin(async move {
                        match gate_rx.await {
                            Ok(end) => finish(call, end),
                            // The model lost the gate: hang, so the check sees the difference.
                            Err(_) => std::future::pending().await,
                        }
                    }),
                }
            };
            engine.execute(&scope, fingerprint(fp), action).await
        });
        self.calls.insert(call, handle);
        if self.model.execute(call, s, fp, act) {
            let now = self.model.now;
            self.model.runs.push(PendingRun {
                call,
                scope: s,
                fp,
                started: now,
                gate,
            });
        }
    }

    /// Lets spawned calls, runs and shards exchange their messages. The look-ups go through every
    /// shard that holds one of the scopes, behind whatever was sent to it before (FIFO mailboxes).
    async fn settle(&self) {
        for _ in 0..SETTLE_YIELDS {
            tokio::task::yield_now().await;
        }
        for s in &self.scopes {
            self.engine.lookup(s).await.unwrap();
        }
        for _ in 0..SETTLE_YIELDS {
            tokio::task::yield_now().await;
        }
    }

    async fn check(&mut self, step: &str) {
        self.settle().await;
        let m = &mut self.model;
        for (call, want) in std::mem::take(&mut m.due) {
            let h = self.calls.remove(&call).expect("a call is due once");
            assert!(
                h.is_finished(),
                "{step}: call #{call} should have returned {want:?}"
            );
            let got: Got = h
                .await
                .expect("the call's task does not panic")
                .map(|o| (o.kind(), *o.value(), o.expires_at()));
            assert_eq!(got, want, "{step}: call #{call}");
        }
        for (call, h) in &self.calls {
            assert!(
                !h.is_finished(),
                "{step}: call #{call} returned, but the model has it waiting"
            );
        }
        assert_eq!(self.ran.get(), m.ran, "{step}: actions run");
        for (s, scope) in self.scopes.iter().enumerate() {
            let info = self.engine.lookup(scope).await.unwrap();
            assert_eq!(info, m.info(s), "{step}: lookup(scope {s})");
        }
        let st = self.engine.stats();
        assert_eq!(st.in_flight, m.in_flight(), "{step}: stats in_flight");
        assert_eq!(st.completed, m.completed(), "{step}: stats completed");
        assert_eq!(
            st.shards
                .iter()
                .map(|s| s.in_flight + s.completed)
                .sum::<u64>(),
            st.entries(),
            "{step}: per-shard stats add up"
        );
        assert_eq!(st.outcomes, m.counts, "{step}: outcome counters");
    }
}

/// Injected panics are expected; keep their messages out of the test output. Any other panic (a
/// failed assertion) still goes to the default hook.
fn quiet_injected_panics() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let p = info.payload();
            let msg = p
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| p.downcast_ref::<&str>().copied())
                .unwrap_or("");
            if !msg.starts_with(PANIC_TAG) {
                default(info);
            }
        }));
    });
}
