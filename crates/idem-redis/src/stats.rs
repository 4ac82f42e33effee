//! Counters of the tier, read without locks (SPEC E9).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::metrics::{CALLS_TOTAL, LABEL_RESULT};

/// What the tier's claim loop did, summed since the engine was built. Calls served by the local
/// engine alone (local joins and replays) are not counted here; see [`TieredEngine::local_stats`](crate::TieredEngine::local_stats).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TierStats {
    /// Claimed in Redis and ran the action here.
    pub executed: u64,
    /// Got another instance's stored result at the first claim.
    pub remote_replayed: u64,
    /// Waited for another instance's run and got its result.
    pub remote_joined: u64,
    /// Same scope, other fingerprint, found in Redis.
    pub conflicts: u64,
    /// Redis failed or was too slow and the call failed closed (`UNAVAILABLE`).
    pub unavailable: u64,
    /// Redis failed and the action ran without a claim (fail-open, opt-in).
    pub fail_open: u64,
    /// The holder's lease lapsed before it completed: its result was not stored.
    pub fenced_out: u64,
    /// Another instance still held the scope when `max_wait` passed.
    pub wait_timeouts: u64,
    /// The action failed (its claim was released).
    pub failed: u64,
    /// The action ran but storing its result in Redis failed (retried in the background).
    pub complete_failed: u64,
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
    CompleteFailed,
}

impl Event {
    const ALL: usize = 10;

    fn label(self) -> &'static str {
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
            Event::CompleteFailed => "complete_failed",
        }
    }
}

#[derive(Debug, Default)]
pub(crate) struct Counters([AtomicU64; Event::ALL]);

impl Counters {
    pub(crate) fn bump(&self, e: Event) {
        self.0[e as usize].fetch_add(1, Relaxed);
        metrics::counter!(CALLS_TOTAL, LABEL_RESULT => e.label()).increment(1);
    }

    pub(crate) fn snapshot(&self) -> TierStats {
        let g = |e: Event| self.0[e as usize].load(Relaxed);
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
            complete_failed: g(Event::CompleteFailed),
        }
    }
}
