//! The fencing race every shared tier must win the same way: a holder stalls past its lease,
//! another instance claims with a higher token and completes, and the stalled holder's late
//! completion is refused.
//!
//! A stall here is what a GC pause or a stopped process does to the holder: its whole task
//! stops, the lease renewals that run beside the action included. An action that merely awaits
//! something for long is a live run, whose renewals keep its claim.
//!
//! A test sets the race up with its own tier, lease and timing checks; these helpers are the
//! parts that are the same for every tier: the stalled holder, the waiters that take over, and
//! what everyone sees after.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use idem_core::{Code, Fingerprint, Reason, Scope, Status};
use idem_dedup::remote::RemoteTier;
use idem_dedup::tiered::TieredEngine;
use idem_dedup::{DedupError, Outcome, Source};
use tokio::task::JoinHandle;

/// A holder that claimed a scope and stalls in its action: spawned by [`StalledHolder::spawn`].
#[derive(Debug)]
pub struct StalledHolder {
    token: Arc<AtomicU64>,
    run: JoinHandle<Result<Outcome<String>, DedupError>>,
}

impl StalledHolder {
    /// Spawns a call of `engine` for `scope` whose action notes its claim's token, stalls its
    /// task for `stall` (set it past the lease: the thread sleeps inside
    /// [`block_in_place`](tokio::task::block_in_place), so the task's lease renewals stop too,
    /// while the runtime's other tasks go on), then returns `"from A"`.
    ///
    /// # Panics
    ///
    /// The action panics on a current-thread runtime: the test needs a multi-threaded one.
    pub fn spawn<R: RemoteTier>(
        engine: &TieredEngine<String, R>,
        scope: &Scope,
        fp: Fingerprint,
        stall: Duration,
    ) -> Self {
        let token = Arc::new(AtomicU64::new(0));
        let (engine, scope, noted) = (engine.clone(), scope.clone(), token.clone());
        let run = tokio::spawn(async move {
            engine
                .execute(&scope, fp, move |token| async move {
                    noted.store(token.get(), Ordering::SeqCst);
                    stall_task(stall);
                    Ok::<_, Status>("from A".to_string())
                })
                .await
        });
        StalledHolder { token, run }
    }

    /// The token of the holder's claim; 0 until its action runs.
    pub fn token(&self) -> u64 {
        self.token.load(Ordering::SeqCst)
    }
}

/// Stops the calling task for `d`, whatever else it polls (its lease renewals): the thread
/// sleeps inside `block_in_place`, which hands the runtime's other tasks to another thread.
// The blocked thread is the point here: a GC pause or `SIGSTOP` of the holder, in one process.
#[allow(clippy::disallowed_methods)]
fn stall_task(d: Duration) {
    tokio::task::block_in_place(|| std::thread::sleep(d));
}

/// What the instances that waited for the stalled holder's claim got, once its lease lapsed.
#[derive(Debug)]
pub struct Takeover {
    /// The two waiters' outcomes, in the order they were given to [`take_over`].
    pub outcomes: [Outcome<String>; 2],
    /// How many of their actions ran.
    pub runs: u32,
    /// The token of the claim whose action ran last (the new holder's).
    pub token: u64,
}

/// Two instances call for `scope` while the stalled holder holds it: they wait, and when its
/// lease lapses one of them claims and runs (its action returns `"from the new holder"`), the
/// other joins it or replays its result.
///
/// # Panics
///
/// When a waiter's call fails or its task panics.
pub async fn take_over<R: RemoteTier>(
    b: &TieredEngine<String, R>,
    c: &TieredEngine<String, R>,
    scope: &Scope,
    fp: Fingerprint,
) -> Takeover {
    let runs = Arc::new(AtomicU32::new(0));
    let token_new = Arc::new(AtomicU64::new(0));
    let waiter = |e: TieredEngine<String, R>| {
        let (s, runs, tn) = (scope.clone(), runs.clone(), token_new.clone());
        tokio::spawn(async move {
            e.execute(&s, fp, move |token| async move {
                runs.fetch_add(1, Ordering::SeqCst);
                tn.store(token.get(), Ordering::SeqCst);
                Ok::<_, Status>("from the new holder".to_string())
            })
            .await
        })
    };
    let (wb, wc) = (waiter(b.clone()), waiter(c.clone()));
    let (ob, oc) = (wb.await.unwrap().unwrap(), wc.await.unwrap().unwrap());
    Takeover {
        outcomes: [ob, oc],
        runs: runs.load(Ordering::SeqCst),
        token: token_new.load(Ordering::SeqCst),
    }
}

/// The end of the race. The stalled holder wakes and completes late: it is fenced out (`ABORTED`
/// with the reason `FENCED_OUT`, counted in its engine's stats), nothing is overwritten, and its
/// token is lower than the new holder's. Then every engine, the holder's (`engines[0]`)
/// included, replays the new holder's result, and the holder's engine says it came from
/// another instance.
///
/// # Panics
///
/// When any of that does not hold: this is the test's assertion.
pub async fn assert_fenced_out<R: RemoteTier>(
    holder: StalledHolder,
    takeover: &Takeover,
    engines: [&TieredEngine<String, R>; 3],
    scope: &Scope,
    fp: Fingerprint,
) {
    let a = engines[0];
    let late = holder.run.await.unwrap().unwrap_err();
    assert_eq!(late.code(), Code::Aborted, "{late}");
    assert_eq!(late.reason(), Some(Reason::FENCED_OUT));
    assert_eq!(a.stats().fenced_out, 1);
    let (ta, tn) = (holder.token.load(Ordering::SeqCst), takeover.token);
    assert!(
        ta < tn,
        "stale token {ta} must be lower than the new holder's {tn}"
    );

    // Everyone, A included, now gets the new holder's result.
    for e in engines {
        let r = e
            .execute(scope, fp, |_| async {
                Ok::<_, Status>("must not run".into())
            })
            .await
            .unwrap();
        assert_eq!(r.value(), "from the new holder");
    }
    let again = a
        .execute(scope, fp, |_| async { Ok::<_, Status>("x".into()) })
        .await
        .unwrap();
    assert_eq!(again.source(), Source::OtherInstance);
}
