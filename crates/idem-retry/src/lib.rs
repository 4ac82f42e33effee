//! # idem-retry: retries that cannot double a side effect
//!
//! Backoff ([`RetryPolicy`]), error classification ([`classify`]), deadline checks
//! ([`check_retry`]), a retry budget ([`RetryBudget`]), a pluggable clock ([`Scheduler`]) and the
//! [`Retrier`] that ties them together for any async operation. No tower needed; `idem-tower`'s
//! client layer builds on it.
//!
//! # Delivery semantics (S1)
//!
//! A call that failed may or may not have run on the server. What a client does about that picks
//! one of three guarantees, each with its cost:
//!
//! | guarantee | how | cost |
//! |---|---|---|
//! | **at-most-once** | never retry | every transient blip is a user-visible failure |
//! | **at-least-once** | retry, no key | a retry after a lost reply runs the side effect twice |
//! | **effectively-once** | retry with one stable key + server dedup | the server stores each result for a TTL, one lookup per write; the client keeps the key for the whole intent |
//!
//! At-most-once: a non-idempotent call with no key is never retried (S2).
//!
//! ```
//! use idem_core::Code;
//! use idem_retry::{Call, Retrier};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let retrier = Retrier::default();
//! let r: Result<(), Code> = retrier
//!     .call(&Call::non_idempotent(), |_| async { Err(Code::Unavailable) })
//!     .await;
//! assert_eq!(r, Err(Code::Unavailable));
//! assert_eq!(retrier.stats().attempts, 1); // the blip reached the user
//! # }
//! ```
//!
//! At-least-once: declaring a call idempotent means "duplicates are harmless". Here the first
//! attempt's reply is lost after the server acted, so the retry sends a second notification.
//!
//! ```
//! use idem_core::{Code, Reason, Status};
//! use idem_retry::{Call, Retrier};
//! use std::sync::atomic::{AtomicU32, Ordering};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let sent = AtomicU32::new(0);
//! let r = Retrier::default()
//!     .call(&Call::idempotent(), |_| {
//!         let n = sent.fetch_add(1, Ordering::Relaxed) + 1; // the side effect
//!         async move {
//!             if n == 1 {
//!                 Err(Status::new(Code::Unavailable, "reply lost").with_reason(Reason::UNKNOWN_OUTCOME))
//!             } else {
//!                 Ok(())
//!             }
//!         }
//!     })
//!     .await;
//! assert!(r.is_ok());
//! assert_eq!(sent.load(Ordering::Relaxed), 2); // the cost: a duplicate
//! # }
//! ```
//!
//! Effectively-once: the same failure on a keyed call; the server deduplicates by key (the
//! `idem-dedup` engine's job, a map here), so the side effect runs once and the retry gets the
//! stored result.
//!
//! ```
//! use idem_core::{Code, IdempotencyKey, Reason, Status};
//! use idem_retry::{Call, Retrier};
//! use std::collections::HashMap;
//! use std::sync::atomic::{AtomicU32, Ordering};
//! use std::sync::Mutex;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let charged = AtomicU32::new(0);
//! let server: Mutex<HashMap<IdempotencyKey, u32>> = Mutex::new(HashMap::new());
//! let key = IdempotencyKey::derive("order-1001", "Charge"); // once per intent
//!
//! let r = Retrier::default()
//!     .call(&Call::keyed(key), |attempt| {
//!         let key = attempt.key().cloned().unwrap();
//!         let receipt = *server
//!             .lock()
//!             .unwrap()
//!             .entry(key)
//!             .or_insert_with(|| charged.fetch_add(1, Ordering::Relaxed) + 1);
//!         async move {
//!             if attempt.number() == 1 {
//!                 Err(Status::new(Code::Unavailable, "reply lost").with_reason(Reason::UNKNOWN_OUTCOME))
//!             } else {
//!                 Ok(receipt)
//!             }
//!         }
//!     })
//!     .await;
//! assert_eq!(r, Ok(1)); // the stored result of the first run
//! assert_eq!(charged.load(Ordering::Relaxed), 1); // charged once
//! # }
//! ```
//!
//! # Retry at one layer only (R7)
//!
//! Retries multiply across layers. If the gateway, the order service and the stock service each
//! make 3 attempts, one failing stock call becomes 3 × 3 × 3 = **27** calls to the stock database,
//! at the moment it is already failing. So retry in one place — the outermost client — and let
//! inner layers report failures at once. The server-side dedup layer never retries. A
//! [`RetryBudget`] is the second guard: even at one layer, retries stay a small fraction of load.
//!
//! # Why the retrier never sleeps (R4)
//!
//! It runs on executor threads shared with many other tasks; putting the thread to sleep would stall them
//! all for the whole backoff (the workspace's clippy config bans it). Every wait is a future from a
//! [`Scheduler`] — tokio's timer by default ([`TokioScheduler`]), a [`VirtualScheduler`] in tests,
//! which runs a whole retry sequence instantly and records each delay.
//!
//! # Server pushback (R8)
//!
//! A server that knows when it can take the call again says so, and the retrier follows it as
//! gRPC A6 says: a valid pushback ([`Classify::retry_after`]) sets the next wait exactly (no
//! jitter, no cap; still bounded by the deadline and the budget), and the backoff after it starts
//! again at the base delay; a pushback the server got wrong — negative, not a number, or sent
//! twice ([`Classify::forbids_retry`]) — means *do not retry*, and the call ends with
//! [`GiveUp::Pushback`].
//!
//! ```
//! use idem_core::{Code, Status};
//! use idem_retry::{Call, FixedRandom, Retrier, RetryPolicy, VirtualScheduler};
//! use std::time::Duration;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), idem_retry::InvalidPolicy> {
//! let ms = Duration::from_millis;
//! let clock = VirtualScheduler::instant();
//! let policy = RetryPolicy::builder().max_attempts(4).random_source(FixedRandom::new(0.5)).build()?;
//! let retrier = Retrier::new(policy).with_scheduler(clock.clone());
//! let r: Result<(), Status> = retrier
//!     .call(&Call::idempotent(), |attempt| async move {
//!         let busy = Status::new(Code::Unavailable, "busy");
//!         Err(if attempt.number() == 1 { busy.with_retry_after(ms(1000)) } else { busy })
//!     })
//!     .await;
//! assert!(r.is_err());
//! assert_eq!(clock.requested(), vec![ms(1000), ms(20), ms(40)]); // base delay again after it
//! # Ok(())
//! # }
//! ```
//!
//! # Defaults
//!
//! | setting | default | set in |
//! |---|---|---|
//! | attempts (total, first included) | 3 | [`RetryPolicy`] ([`DEFAULT_MAX_ATTEMPTS`]) |
//! | first delay | 20 ms | [`RetryPolicy`] ([`DEFAULT_BASE_DELAY`]) |
//! | growth | ×2 | [`RetryPolicy`] ([`DEFAULT_MULTIPLIER`]) |
//! | delay cap | 1 s | [`RetryPolicy`] ([`DEFAULT_MAX_DELAY`]) |
//! | jitter | ±20% | [`RetryPolicy`] ([`DEFAULT_JITTER`]) |
//! | minimum attempt time | 50 ms | [`RetryPolicy`] ([`DEFAULT_MIN_ATTEMPT_TIME`]) |
//! | budget ratio | 10% of requests | [`RetryBudget`] ([`DEFAULT_BUDGET_RATIO`]) |
//! | budget floor | 10 retries/s, bursts of at most 10 | [`RetryBudget`] ([`DEFAULT_MIN_RETRIES_PER_SEC`]) |
//! | budget window | 10 s | [`RetryBudget`] ([`DEFAULT_BUDGET_WINDOW`]) |
//! | scheduler | tokio's timer | [`Retrier`] ([`TokioScheduler`]) |
//!
//! The budget's defaults keep retries within 10% of the load (or 10 a second): when more than
//! 10% of first attempts fail, most failing calls are not retried and end with "the retry budget
//! was spent", by design (at 40% failures, three in four of them). To retry through more,
//! raise the ratio to about the expected failure rate × (attempts − 1), and the floor for quiet
//! clients: see [`RetryBudget`]'s "Sizing the budget".
//!
//! # Where things are
//!
//! | file | what | requirement |
//! |---|---|---|
//! | `policy.rs`, `random.rs` | [`RetryPolicy`], jitter sources | R1 |
//! | `call.rs` | [`Call`], [`CallKind`], [`Attempt`] | S1–S3, R6 |
//! | `classify.rs` | [`Classify`], [`classify`], [`Decision`] | R2, R8, S2, S3 |
//! | `deadline.rs` | [`check_retry`], [`leaves_room`] | R3 |
//! | `scheduler.rs` | [`Scheduler`], [`TokioScheduler`], [`VirtualScheduler`] | R4 |
//! | `budget/`: `mod.rs`, `builder.rs`, `window.rs` | [`RetryBudget`], [`RetryBudgetBuilder`], the sliding window and the floor's token bucket | R5 |
//! | `retrier/`: `mod.rs`, `attempts.rs`, `refresh.rs` | [`Retrier`] and its calls; one call's attempt loop, span and give-up; the refresh step of `ABORTED` retries | R1–R6, R8 |
//! | `error.rs` | [`RetryError`] | R3, R5 |
//! | `pushback.rs` | [`parse_retry_after`], [`status_from_http`]: HTTP's `Retry-After`, an HTTP answer as a client retries it | R8 |
//! | `failure.rs` | [`Failure`]: why an attempt failed, as client layers count retries; [`FailureCounters`], [`FailureCounts`] | E9 |
//! | `metrics.rs`, `stats.rs` | metric names, [`GiveUp`], [`RetryStats`] | E9, E15 |
#![cfg_attr(docsrs, feature(doc_cfg))]

mod budget;
mod call;
mod classify;
mod deadline;
mod error;
mod failure;
mod hedge;
mod latency;
pub mod metrics;
mod policy;
mod pushback;
mod random;
mod retrier;
mod scheduler;
mod stats;

pub use budget::{
    BudgetSnapshot, RetryBudget, RetryBudgetBuilder, DEFAULT_BUDGET_RATIO, DEFAULT_BUDGET_WINDOW,
    DEFAULT_MIN_RETRIES_PER_SEC,
};
pub use call::{Attempt, Call, CallKind};
pub use classify::{classify, Classify, Decision, NotRetryable, Wait};
pub use deadline::{check_retry, leaves_room};
pub use error::RetryError;
pub use failure::{Failure, FailureCounters, FailureCounts};
pub use hedge::{
    HedgeDelay, HedgingPolicy, HedgingPolicyBuilder, DEFAULT_HEDGE_ATTEMPTS,
    DEFAULT_HEDGE_PERCENTILE, MAX_HEDGE_ATTEMPTS,
};
pub use latency::{
    LatencyTracker, LatencyTrackerBuilder, DEFAULT_LATENCY_WINDOW, DEFAULT_MIN_SAMPLES,
};
pub use metrics::GiveUp;
pub use policy::{
    InvalidPolicy, RetryPolicy, RetryPolicyBuilder, DEFAULT_BASE_DELAY, DEFAULT_JITTER,
    DEFAULT_MAX_ATTEMPTS, DEFAULT_MAX_DELAY, DEFAULT_MIN_ATTEMPT_TIME, DEFAULT_MULTIPLIER,
};
pub use pushback::{parse_retry_after, status_from_http};
pub use random::{FixedRandom, RandomSource, SplitMix64};
pub use retrier::Retrier;
pub use scheduler::{Release, Scheduler, TokioScheduler, VirtualScheduler, VirtualSleep};
pub use stats::RetryStats;
