//! Counters of the tiered engine's claim loop, read without locks.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use tokio::time::Instant;

use crate::metrics::{
    LABEL_ENGINE, LABEL_OP, LABEL_RESULT, TIER_CALLS_TOTAL, TIER_ROUND_TRIP_SECONDS,
};

/// What the tiered engine's claim loop did, summed since the engine was built. Calls served by
/// the local engine alone (local joins and replays) are not counted here; see
/// [`TieredEngine::local_stats`](crate::tiered::TieredEngine::local_stats).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TierStats {
    /// Claimed in the shared tier and ran the action here.
    pub executed: u64,
    /// Got another instance's stored result at the first claim.
    pub remote_replayed: u64,
    /// Waited for another instance's run and got its result.
    pub remote_joined: u64,
    /// Same scope, other fingerprint, found in the shared tier.
    pub conflicts: u64,
    /// The tier failed or was too slow and the call failed closed (`UNAVAILABLE`).
    pub unavailable: u64,
    /// The tier failed and the action ran without a claim (fail-open, opt-in).
    pub fail_open: u64,
    /// A later claim took the scope over before this run completed: its result was not stored.
    pub fenced_out: u64,
    /// Another instance still held the scope when `max_wait` passed.
    pub wait_timeouts: u64,
    /// The action failed (its claim was released).
    pub failed: u64,
    /// The action ran but its completion could not be written at once; the caller got its value
    /// marked not recorded, and writing it was retried in the background.
    pub unrecorded: u64,
    /// Of those, completions written later by the background retry.
    pub recorded_late: u64,
    /// Of those, completions never written: a later claim took over, or the retry window (the
    /// lease) passed. Other instances may run such an intent again.
    pub record_lost: u64,
    /// Releases that failed (retried in the background until the lease ends).
    pub release_failed: u64,
    /// Orphaned claims of this engine (a claim whose reply was lost) taken back at once.
    pub reclaimed: u64,
    /// Calls that went to the shared tier directly because the local engine was full.
    pub local_full: u64,
    /// Renewals of a running action's lease that held.
    pub renewed: u64,
    /// Renewals that found another run holding the scope: the run's lease was lost, its `Run`
    /// says so, and its result will not be stored.
    pub lease_lost: u64,
    /// Renewals the tier failed or did not answer in time (tried again at the next tick; the
    /// lease runs from the last renewal that held).
    pub renew_failed: u64,
}

#[derive(Debug, Clone, Copy)]
pub(crate) enum Event {
    Executed,
    RemoteReplayed,
    RemoteJoined,
    Conflict,
    Unavailable,
    FailOpen,
    FencedOut,
    WaitTimeout,
    Failed,
    Unrecorded,
    RecordedLate,
    RecordLost,
    ReleaseFailed,
    Reclaimed,
    LocalFull,
    Renewed,
    LeaseLost,
    RenewFailed,
}

impl Event {
    const ALL: usize = 18;

    /// Every event, in slot order.
    const EVERY: [Event; Event::ALL] = [
        Event::Executed,
        Event::RemoteReplayed,
        Event::RemoteJoined,
        Event::Conflict,
        Event::Unavailable,
        Event::FailOpen,
        Event::FencedOut,
        Event::WaitTimeout,
        Event::Failed,
        Event::Unrecorded,
        Event::RecordedLate,
        Event::RecordLost,
        Event::ReleaseFailed,
        Event::Reclaimed,
        Event::LocalFull,
        Event::Renewed,
        Event::LeaseLost,
        Event::RenewFailed,
    ];

    pub(crate) fn label(self) -> &'static str {
        match self {
            Event::Executed => "executed",
            Event::RemoteReplayed => "remote_replayed",
            Event::RemoteJoined => "remote_joined",
            Event::Conflict => "conflict",
            Event::Unavailable => "unavailable",
            Event::FailOpen => "fail_open",
            Event::FencedOut => "fenced_out",
            Event::WaitTimeout => "wait_timeout",
            Event::Failed => "failed",
            Event::Unrecorded => "unrecorded",
            Event::RecordedLate => "recorded_late",
            Event::RecordLost => "record_lost",
            Event::ReleaseFailed => "release_failed",
            Event::Reclaimed => "reclaimed",
            Event::LocalFull => "local_full",
            Event::Renewed => "renewed",
            Event::LeaseLost => "lease_lost",
            Event::RenewFailed => "renew_failed",
        }
    }
}

/// A call to the shared tier, as `idem_tier_round_trip_seconds` labels it (`op`).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Op {
    Claim,
    Complete,
    Release,
    Wait,
    Lookup,
    Forget,
    Renew,
}

impl Op {
    const ALL: [Op; 7] = [
        Op::Claim,
        Op::Complete,
        Op::Release,
        Op::Wait,
        Op::Lookup,
        Op::Forget,
        Op::Renew,
    ];

    pub(crate) fn label(self) -> &'static str {
        match self {
            Op::Claim => "claim",
            Op::Complete => "complete",
            Op::Release => "release",
            Op::Wait => "wait",
            Op::Lookup => "lookup",
            Op::Forget => "forget",
            Op::Renew => "renew",
        }
    }
}

/// The claim loop's counters, and its metric handles (resolved once, with the engine's name).
#[derive(Debug)]
pub(crate) struct Counters {
    counts: [AtomicU64; Event::ALL],
    calls: [metrics::Counter; Event::ALL],
    round_trip: [metrics::Histogram; Op::ALL.len()],
}

impl Counters {
    /// The counters of the tiered engine named `engine`.
    pub(crate) fn new(engine: &Arc<str>) -> Self {
        let engine = metrics::SharedString::from(engine.clone());
        Counters {
            counts: Default::default(),
            calls: Event::EVERY.map(|e| {
                metrics::counter!(TIER_CALLS_TOTAL, LABEL_ENGINE => engine.clone(), LABEL_RESULT => e.label())
            }),
            round_trip: Op::ALL.map(|op| {
                metrics::histogram!(TIER_ROUND_TRIP_SECONDS, LABEL_ENGINE => engine.clone(), LABEL_OP => op.label())
            }),
        }
    }

    pub(crate) fn bump(&self, e: Event) {
        self.counts[e as usize].fetch_add(1, Relaxed);
        self.calls[e as usize].increment(1);
    }

    /// Awaits one call to the tier, timing it as `op`.
    pub(crate) async fn timed<T>(&self, op: Op, call: impl Future<Output = T>) -> T {
        let start = Instant::now();
        let out = call.await;
        self.round_trip[op as usize].record(start.elapsed().as_secs_f64());
        out
    }

    pub(crate) fn snapshot(&self) -> TierStats {
        let g = |e: Event| self.counts[e as usize].load(Relaxed);
        TierStats {
            executed: g(Event::Executed),
            remote_replayed: g(Event::RemoteReplayed),
            remote_joined: g(Event::RemoteJoined),
            conflicts: g(Event::Conflict),
            unavailable: g(Event::Unavailable),
            fail_open: g(Event::FailOpen),
            fenced_out: g(Event::FencedOut),
            wait_timeouts: g(Event::WaitTimeout),
            failed: g(Event::Failed),
            unrecorded: g(Event::Unrecorded),
            recorded_late: g(Event::RecordedLate),
            record_lost: g(Event::RecordLost),
            release_failed: g(Event::ReleaseFailed),
            reclaimed: g(Event::Reclaimed),
            local_full: g(Event::LocalFull),
            renewed: g(Event::Renewed),
            lease_lost: g(Event::LeaseLost),
            renew_failed: g(Event::RenewFailed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_event_has_its_own_slot_and_label() {
        // `EVERY` holds each event once, in slot order: a variant left out or put twice would
        // break the slot check or the label count.
        let all = Event::EVERY;
        let c = Counters::new(&Arc::from("default"));
        for (i, e) in all.iter().enumerate() {
            assert_eq!(*e as usize, i);
            c.bump(*e);
        }
        let labels: std::collections::HashSet<_> = all.iter().map(|e| e.label()).collect();
        assert_eq!(labels.len(), Event::ALL);
        let s = c.snapshot();
        assert_eq!(s.executed + s.local_full + s.reclaimed + s.record_lost, 4);
        assert_eq!((s.renewed, s.lease_lost, s.renew_failed), (1, 1, 1));
    }
}
