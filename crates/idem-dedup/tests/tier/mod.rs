//! An in-memory shared tier for tiered-engine tests, with switches for the faults a real one has:
//! claims that fail, completions or renewals that fail or find a later claim, and a round trip
//! that takes time (on tokio's clock, so a paused clock makes it exact). It notes when each
//! renewal started and ended.
#![allow(dead_code)]

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use idem_core::{Code, Fingerprint, Scope, Status};
use idem_dedup::remote::{
    Claim, ClaimOutcome, Commit, FencingToken, OwnerId, RecordState, RemoteRecord, RemoteTier,
};
use tokio::time::Instant;

#[derive(Clone)]
enum Record {
    Running {
        fp: Fingerprint,
        token: FencingToken,
        owner: OwnerId,
    },
    Done {
        fp: Fingerprint,
        value: Vec<u8>,
    },
}

#[derive(Default)]
struct State {
    records: Mutex<(HashMap<Scope, Record>, u64)>,
    fail_claims: AtomicBool,
    fail_completes: AtomicBool,
    fence_completes: AtomicBool,
    fail_renewals: AtomicBool,
    fence_renewals: AtomicBool,
    renewals: Mutex<Vec<(Instant, Instant)>>,
    round_trip: Mutex<Duration>,
}

/// The shared record of every engine built over a clone.
#[derive(Clone, Default)]
pub(crate) struct MemTier(Arc<State>);

impl std::fmt::Debug for MemTier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MemTier")
    }
}

fn down() -> Status {
    Status::new(Code::Unavailable, "tier down (test)")
}

impl MemTier {
    /// Claims fail with `UNAVAILABLE` while set.
    pub(crate) fn fail_claims(&self, on: bool) {
        self.0.fail_claims.store(on, SeqCst);
    }
    /// Completions fail with `UNAVAILABLE` while set.
    pub(crate) fn fail_completes(&self, on: bool) {
        self.0.fail_completes.store(on, SeqCst);
    }
    /// Completions answer `FencedOut` while set.
    pub(crate) fn fence_completes(&self, on: bool) {
        self.0.fence_completes.store(on, SeqCst);
    }
    /// Renewals fail with `UNAVAILABLE` while set.
    pub(crate) fn fail_renewals(&self, on: bool) {
        self.0.fail_renewals.store(on, SeqCst);
    }
    /// Renewals answer `FencedOut` while set.
    pub(crate) fn fence_renewals(&self, on: bool) {
        self.0.fence_renewals.store(on, SeqCst);
    }
    /// When each renewal started and when it answered (tokio's clock), in order.
    pub(crate) fn renewals(&self) -> Vec<(Instant, Instant)> {
        self.0.renewals.lock().unwrap().clone()
    }
    /// Every call takes this long (tokio's clock).
    pub(crate) fn round_trip(&self, d: Duration) {
        *self.0.round_trip.lock().unwrap() = d;
    }

    fn delay(&self) -> impl Future<Output = ()> + Send + 'static {
        let d = *self.0.round_trip.lock().unwrap();
        async move {
            if !d.is_zero() {
                tokio::time::sleep(d).await;
            }
        }
    }
}

impl RemoteTier for MemTier {
    fn claim(
        &self,
        scope: &Scope,
        fp: Fingerprint,
        _lease: Duration,
        owner: OwnerId,
    ) -> impl Future<Output = Result<ClaimOutcome, Status>> + Send {
        let (state, scope, delay) = (self.0.clone(), scope.clone(), self.delay());
        async move {
            delay.await;
            if state.fail_claims.load(SeqCst) {
                return Err(down());
            }
            let mut guard = state.records.lock().unwrap();
            let (records, fence) = &mut *guard;
            Ok(match records.get(&scope).cloned() {
                Some(Record::Running { fp: f, .. }) | Some(Record::Done { fp: f, .. })
                    if f != fp =>
                {
                    ClaimOutcome::Conflict
                }
                Some(Record::Done { value, .. }) => ClaimOutcome::Completed(value),
                Some(Record::Running {
                    token, owner: o, ..
                }) if o != owner => ClaimOutcome::InFlightElsewhere {
                    holder: token,
                    lease_left: Duration::from_secs(1),
                },
                held => {
                    *fence += 1;
                    let token = FencingToken::new(*fence);
                    records.insert(scope, Record::Running { fp, token, owner });
                    ClaimOutcome::Claimed {
                        token,
                        reclaimed: held.is_some(),
                    }
                }
            })
        }
    }

    fn complete(
        &self,
        claim: Claim<'_>,
        value: Vec<u8>,
        _ttl: Duration,
    ) -> impl Future<Output = Result<Commit, Status>> + Send {
        let (state, delay) = (self.0.clone(), self.delay());
        let (scope, fp) = (claim.scope.clone(), claim.fingerprint);
        async move {
            delay.await;
            if state.fail_completes.load(SeqCst) {
                return Err(down());
            }
            if state.fence_completes.load(SeqCst) {
                return Ok(Commit::FencedOut);
            }
            let mut guard = state.records.lock().unwrap();
            guard.0.insert(scope, Record::Done { fp, value });
            Ok(Commit::Committed)
        }
    }

    fn renew(
        &self,
        claim: Claim<'_>,
        _lease: Duration,
    ) -> impl Future<Output = Result<Commit, Status>> + Send {
        let (state, delay) = (self.0.clone(), self.delay());
        let (scope, token) = (claim.scope.clone(), claim.token);
        async move {
            let started = Instant::now();
            delay.await;
            state
                .renewals
                .lock()
                .unwrap()
                .push((started, Instant::now()));
            if state.fail_renewals.load(SeqCst) {
                return Err(down());
            }
            if state.fence_renewals.load(SeqCst) {
                return Ok(Commit::FencedOut);
            }
            let guard = state.records.lock().unwrap();
            Ok(match guard.0.get(&scope) {
                Some(Record::Running { token: t, .. }) if *t == token => Commit::Committed,
                _ => Commit::FencedOut,
            })
        }
    }

    fn release(&self, claim: Claim<'_>) -> impl Future<Output = Result<Commit, Status>> + Send {
        let (state, scope, delay) = (self.0.clone(), claim.scope.clone(), self.delay());
        async move {
            delay.await;
            state.records.lock().unwrap().0.remove(&scope);
            Ok(Commit::Committed)
        }
    }

    async fn wait(
        &self,
        _scope: &Scope,
        _holder: FencingToken,
        at_most: Duration,
    ) -> Result<(), Status> {
        tokio::time::sleep(at_most).await;
        Ok(())
    }

    fn lookup(
        &self,
        scope: &Scope,
    ) -> impl Future<Output = Result<Option<RemoteRecord>, Status>> + Send {
        let (state, scope, delay) = (self.0.clone(), scope.clone(), self.delay());
        async move {
            delay.await;
            let guard = state.records.lock().unwrap();
            Ok(guard.0.get(&scope).map(|r| RemoteRecord {
                state: match r {
                    Record::Running { token, .. } => RecordState::InFlight { holder: *token },
                    Record::Done { .. } => RecordState::Completed,
                },
                expires_in: None,
            }))
        }
    }

    fn forget(&self, scope: &Scope) -> impl Future<Output = Result<bool, Status>> + Send {
        let (state, scope, delay) = (self.0.clone(), scope.clone(), self.delay());
        async move {
            delay.await;
            Ok(state.records.lock().unwrap().0.remove(&scope).is_some())
        }
    }
}
