//! In-process counters of a [`Retrier`](crate::Retrier): the metrics, readable without a recorder.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::metrics::{self, GiveUp};

/// A snapshot of a [`Retrier`](crate::Retrier)'s counters, from
/// [`Retrier::stats`](crate::Retrier::stats). Clones of a retrier share them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RetryStats {
    /// Calls started.
    pub calls: u64,
    /// Attempts made, first ones included.
    pub attempts: u64,
    /// Retries started (`attempts - calls`, once every call has finished).
    pub retries: u64,
    /// Hedged copies started: attempts after the first of a hedged call, counted in `attempts`
    /// and not in `retries`.
    pub hedges: u64,
    /// Calls given up because the failure was not retryable.
    pub not_retryable: u64,
    /// Calls given up with no attempts left.
    pub exhausted: u64,
    /// Calls given up because the deadline left no room.
    pub deadline: u64,
    /// Calls given up because the budget refused.
    pub budget: u64,
    /// Calls given up because the server's pushback said not to retry (R8).
    pub pushback: u64,
}

impl RetryStats {
    /// Calls given up for `why`.
    pub const fn give_ups(&self, why: GiveUp) -> u64 {
        match why {
            GiveUp::NotRetryable => self.not_retryable,
            GiveUp::Attempts => self.exhausted,
            GiveUp::Deadline => self.deadline,
            GiveUp::Budget => self.budget,
            GiveUp::Pushback => self.pushback,
        }
    }
}

#[derive(Debug, Default)]
pub(crate) struct Counters {
    calls: AtomicU64,
    attempts: AtomicU64,
    retries: AtomicU64,
    hedges: AtomicU64,
    give_ups: [AtomicU64; GiveUp::ALL.len()],
}

impl Counters {
    pub(crate) fn call(&self) {
        self.calls.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn attempt(&self) {
        self.attempts.fetch_add(1, Ordering::Relaxed);
        metrics::attempt();
    }

    pub(crate) fn retry(&self) {
        self.retries.fetch_add(1, Ordering::Relaxed);
        metrics::retry();
    }

    pub(crate) fn hedge(&self) {
        self.hedges.fetch_add(1, Ordering::Relaxed);
        metrics::hedge();
    }

    pub(crate) fn give_up(&self, why: GiveUp) {
        let i = GiveUp::ALL.iter().position(|g| *g == why).unwrap_or(0);
        self.give_ups[i].fetch_add(1, Ordering::Relaxed);
        metrics::give_up(why);
    }

    pub(crate) fn snapshot(&self) -> RetryStats {
        let g = |i: usize| self.give_ups[i].load(Ordering::Relaxed);
        RetryStats {
            calls: self.calls.load(Ordering::Relaxed),
            attempts: self.attempts.load(Ordering::Relaxed),
            retries: self.retries.load(Ordering::Relaxed),
            hedges: self.hedges.load(Ordering::Relaxed),
            not_retryable: g(0),
            exhausted: g(1),
            deadline: g(2),
            budget: g(3),
            pushback: g(4),
        }
    }
}
