//! R9, R10: `Retrier::call_hedged` on tokio's paused clock. Each copy is a scripted future that
//! sleeps on tokio's timer, so the times asserted here are exact and no real time passes: when
//! the hedge is sent, which copy wins, what a fatal or a pushback failure does, what the budget
//! and the deadline refuse, and the adaptive delay read from the latency tracker.

use std::sync::atomic::{AtomicU32, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use idem_core::{Code, Deadline, IdempotencyKey, Reason, Status};
use idem_retry::{
    Attempt, Call, Classify, GiveUp, HedgeDelay, HedgingPolicy, LatencyTracker, Retrier,
    RetryBudget, RetryPolicy,
};
use idem_test_support::time::ms;
use tokio::time::Instant;

/// How one copy ends: after this long, with this result.
#[derive(Clone)]
enum Step {
    Ok(u64),
    Fail(u64, Status),
    /// A failure whose pushback forbids any further attempt.
    Forbid(u64),
}

/// A failure whose server asked for no retry at all.
#[derive(Debug)]
struct NoRetry;
impl Classify for NoRetry {
    fn code(&self) -> Code {
        Code::Unavailable
    }
    fn forbids_retry(&self) -> bool {
        true
    }
}

#[derive(Debug)]
enum Failed {
    Status(Status),
    NoRetry(NoRetry),
}
impl Classify for Failed {
    fn code(&self) -> Code {
        match self {
            Failed::Status(s) => s.code(),
            Failed::NoRetry(n) => n.code(),
        }
    }
    fn reason(&self) -> Option<&Reason> {
        match self {
            Failed::Status(s) => s.reason(),
            Failed::NoRetry(_) => None,
        }
    }
    fn retry_after(&self) -> Option<Duration> {
        match self {
            Failed::Status(s) => s.retry_after(),
            Failed::NoRetry(_) => None,
        }
    }
    fn forbids_retry(&self) -> bool {
        matches!(self, Failed::NoRetry(_))
    }
}

/// What the copies of one call saw: when each started (from the call's start), its attempt,
/// and how many were dropped before they ended.
#[derive(Clone, Default)]
struct Copies {
    started: Arc<Mutex<Vec<(Duration, Attempt)>>>,
    dropped: Arc<AtomicU32>,
}

struct Unfinished(Arc<AtomicU32>, bool);
impl Drop for Unfinished {
    fn drop(&mut self) {
        if !self.1 {
            self.0.fetch_add(1, SeqCst);
        }
    }
}

impl Copies {
    fn starts(&self) -> Vec<Duration> {
        self.started.lock().unwrap().iter().map(|s| s.0).collect()
    }
}

/// Runs one hedged call whose `n`-th copy ends as `script[n - 1]`; returns its result, how long
/// it took and what the copies saw.
async fn hedged<S>(
    retrier: &Retrier<S>,
    call: &Call,
    policy: &HedgingPolicy,
    script: &[Step],
) -> (
    Result<u32, idem_retry::RetryError<Failed>>,
    Duration,
    Copies,
)
where
    S: idem_retry::Scheduler,
{
    let copies = Copies::default();
    let t0 = Instant::now();
    let r = retrier
        .call_hedged(call, policy, |attempt: Attempt| {
            let step = script[attempt.number() as usize - 1].clone();
            let n = attempt.number();
            copies.started.lock().unwrap().push((t0.elapsed(), attempt));
            let dropped = copies.dropped.clone();
            async move {
                // Made inside the future: it is dropped with it.
                let mut guard = Unfinished(dropped, false);
                let (after, result) = match step {
                    Step::Ok(after) => (after, Ok(n)),
                    Step::Fail(after, s) => (after, Err(Failed::Status(s))),
                    Step::Forbid(after) => (after, Err(Failed::NoRetry(NoRetry))),
                };
                tokio::time::sleep(ms(after)).await;
                guard.1 = true;
                result
            }
        })
        .await;
    (r, t0.elapsed(), copies)
}

fn fixed(delay_ms: u64, copies: u32) -> HedgingPolicy {
    HedgingPolicy::builder()
        .max_attempts(copies)
        .delay(HedgeDelay::Fixed(ms(delay_ms)))
        .build()
        .unwrap()
}

/// A retrier whose budget grants every hedge.
fn retrier() -> Retrier {
    Retrier::default().with_budget(RetryBudget::builder().ratio(1.0).build().unwrap())
}

fn key() -> IdempotencyKey {
    IdempotencyKey::derive("order-1001", "CreateOrder")
}

fn unavailable() -> Status {
    Status::new(Code::Unavailable, "instance draining")
}

#[tokio::test(start_paused = true)]
async fn r9_hedge_overtakes_a_slow_copy_with_the_same_key_and_the_loser_is_dropped() {
    let retrier = retrier();
    let call = Call::keyed(key());
    let (r, took, copies) = hedged(
        &retrier,
        &call,
        &fixed(50, 2),
        &[Step::Ok(1_000), Step::Ok(10)],
    )
    .await;
    assert_eq!(r.unwrap(), 2, "the hedge answered first");
    assert_eq!(took, ms(60), "the delay plus the hedge's own time");
    assert_eq!(copies.starts(), vec![ms(0), ms(50)]);
    let started = copies.started.lock().unwrap().clone();
    for (i, (_, attempt)) in started.iter().enumerate() {
        assert_eq!(
            attempt.key(),
            Some(&key()),
            "every copy carries the call's key"
        );
        assert_eq!(attempt.number(), i as u32 + 1);
    }
    assert_eq!(
        copies.dropped.load(SeqCst),
        1,
        "the slow copy was cancelled"
    );
    let stats = retrier.stats();
    assert_eq!(
        (stats.calls, stats.attempts, stats.hedges, stats.retries),
        (1, 2, 1, 0)
    );
    assert_eq!(
        retrier.budget().snapshot().retries,
        1,
        "the hedge was charged"
    );
}

#[tokio::test(start_paused = true)]
async fn r9_an_answer_before_the_delay_sends_no_hedge() {
    let retrier = retrier();
    let (r, took, copies) = hedged(
        &retrier,
        &Call::keyed(key()),
        &fixed(50, 3),
        &[Step::Ok(49), Step::Ok(1), Step::Ok(1)],
    )
    .await;
    assert_eq!(r.unwrap(), 1);
    assert_eq!(took, ms(49));
    assert_eq!(copies.starts(), vec![ms(0)]);
    assert_eq!(retrier.stats().hedges, 0);
    assert_eq!(retrier.budget().snapshot().retries, 0);
}

#[tokio::test(start_paused = true)]
async fn r9_copies_are_sent_one_delay_apart_up_to_max_attempts() {
    let retrier = retrier();
    let (r, took, copies) = hedged(
        &retrier,
        &Call::idempotent(),
        &fixed(30, 3),
        &[Step::Ok(500), Step::Ok(500), Step::Ok(500)],
    )
    .await;
    assert_eq!(r.unwrap(), 1, "the first copy still ends first");
    assert_eq!(took, ms(500));
    assert_eq!(copies.starts(), vec![ms(0), ms(30), ms(60)]);
    assert_eq!(copies.dropped.load(SeqCst), 2);
    assert_eq!(retrier.stats().hedges, 2);
}

#[tokio::test(start_paused = true)]
async fn r9_a_call_that_may_not_run_twice_is_made_once() {
    let retrier = retrier();
    let (r, took, copies) = hedged(
        &retrier,
        &Call::non_idempotent(),
        &fixed(10, 5),
        &[Step::Ok(1_000), Step::Ok(1)],
    )
    .await;
    assert_eq!(r.unwrap(), 1);
    assert_eq!(took, ms(1_000), "no hedge overtook it");
    assert_eq!(copies.starts(), vec![ms(0)]);
    assert_eq!(retrier.stats().hedges, 0);
}

#[tokio::test(start_paused = true)]
async fn r9_a_fatal_failure_of_either_copy_ends_the_call() {
    // The first copy fails fatally while the hedge runs: the hedge is dropped.
    let retrier = retrier();
    let (r, took, copies) = hedged(
        &retrier,
        &Call::keyed(key()),
        &fixed(20, 2),
        &[
            Step::Fail(
                40,
                Status::new(Code::InvalidArgument, "qty must be positive"),
            ),
            Step::Ok(100),
        ],
    )
    .await;
    let err = r.unwrap_err();
    assert_eq!((err.reason(), err.attempts()), (GiveUp::NotRetryable, 2));
    assert_eq!(err.error().code(), Code::InvalidArgument);
    assert_eq!(took, ms(40));
    assert_eq!(
        copies.dropped.load(SeqCst),
        1,
        "the hedge in flight was cancelled"
    );

    // The hedge fails fatally while the first copy runs: the first copy is dropped.
    let (r, took, copies) = hedged(
        &retrier,
        &Call::keyed(key()),
        &fixed(20, 2),
        &[
            Step::Ok(1_000),
            Step::Fail(5, Status::new(Code::PermissionDenied, "no")),
        ],
    )
    .await;
    assert_eq!(r.unwrap_err().error().code(), Code::PermissionDenied);
    assert_eq!(took, ms(25));
    assert_eq!(copies.dropped.load(SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn r9_a_non_fatal_failure_sends_the_next_copy_at_once() {
    let retrier = retrier();
    let (r, took, copies) = hedged(
        &retrier,
        &Call::keyed(key()),
        &fixed(100, 3),
        &[
            Step::Fail(10, unavailable()),
            Step::Fail(
                5,
                Status::new(Code::Aborted, "running").with_reason(Reason::REQUEST_IN_FLIGHT),
            ),
            Step::Ok(7),
        ],
    )
    .await;
    assert_eq!(r.unwrap(), 3);
    assert_eq!(copies.starts(), vec![ms(0), ms(10), ms(15)]);
    assert_eq!(took, ms(22));
    assert_eq!(retrier.stats().hedges, 2);
}

#[tokio::test(start_paused = true)]
async fn r9_when_every_copy_fails_the_call_ends_with_the_last_failure() {
    let retrier = retrier();
    let (r, _, copies) = hedged(
        &retrier,
        &Call::keyed(key()),
        &fixed(10, 2),
        &[
            Step::Fail(30, unavailable()),
            Step::Fail(30, Status::new(Code::Unavailable, "second")),
        ],
    )
    .await;
    let err = r.unwrap_err();
    assert_eq!((err.reason(), err.attempts()), (GiveUp::Attempts, 2));
    assert_eq!(err.error().code(), Code::Unavailable);
    assert_eq!(copies.starts().len(), 2, "and no retry after them");
}

#[tokio::test(start_paused = true)]
async fn r9_a_pushback_that_forbids_retries_stops_further_copies() {
    let retrier = retrier();
    let (r, took, copies) = hedged(
        &retrier,
        &Call::keyed(key()),
        &fixed(50, 3),
        &[Step::Forbid(10), Step::Ok(1), Step::Ok(1)],
    )
    .await;
    let err = r.unwrap_err();
    assert_eq!((err.reason(), err.attempts()), (GiveUp::Pushback, 1));
    assert_eq!(took, ms(10));
    assert_eq!(copies.starts(), vec![ms(0)]);

    // With a copy still in flight, the call waits for it instead.
    let (r, took, copies) = hedged(
        &retrier,
        &Call::keyed(key()),
        &fixed(50, 3),
        &[Step::Ok(200), Step::Forbid(10), Step::Ok(1)],
    )
    .await;
    assert_eq!(r.unwrap(), 1);
    assert_eq!(took, ms(200));
    assert_eq!(copies.starts(), vec![ms(0), ms(50)], "no third copy");
}

#[tokio::test(start_paused = true)]
async fn r9_a_pushback_with_a_delay_makes_the_next_copy_wait_that_long() {
    let retrier = retrier();
    let (r, _, copies) = hedged(
        &retrier,
        &Call::keyed(key()),
        &fixed(10, 2),
        &[
            Step::Fail(5, unavailable().with_retry_after(ms(300))),
            Step::Ok(1),
        ],
    )
    .await;
    assert_eq!(r.unwrap(), 2);
    assert_eq!(
        copies.starts(),
        vec![ms(0), ms(305)],
        "not 10 ms, nor at once"
    );
}

#[tokio::test(start_paused = true)]
async fn r9_hedges_are_drawn_from_the_budget_and_refused_when_it_is_spent() {
    let budget = RetryBudget::builder()
        .ratio(0.0)
        .min_per_sec(0)
        .build()
        .unwrap();
    let retrier = Retrier::default().with_budget(budget);
    let (r, took, copies) = hedged(
        &retrier,
        &Call::keyed(key()),
        &fixed(10, 3),
        &[Step::Ok(400), Step::Ok(1), Step::Ok(1)],
    )
    .await;
    assert_eq!(
        r.unwrap(),
        1,
        "the first copy is always sent, and waited for"
    );
    assert_eq!(took, ms(400));
    assert_eq!(copies.starts(), vec![ms(0)]);
    assert_eq!(retrier.stats().hedges, 0);
    assert_eq!(retrier.budget().snapshot().refused, 1);
}

#[tokio::test(start_paused = true)]
async fn r9_no_copy_is_sent_that_the_deadline_leaves_no_time_for() {
    // 50 ms minimum attempt time (the default); 80 ms of deadline: the hedge at 40 ms is refused.
    let retrier = retrier();
    let call = Call::keyed(key()).with_deadline(Deadline::after(ms(80)));
    let (r, _, copies) = hedged(&retrier, &call, &fixed(40, 2), &[Step::Ok(70), Step::Ok(1)]).await;
    assert_eq!(r.unwrap(), 1);
    assert_eq!(copies.starts(), vec![ms(0)]);
    assert_eq!(retrier.stats().hedges, 0);
}

/// A tracker that has seen 100 successes of `target`: 1 ms, 2 ms, ..., 100 ms.
fn scripted(target: &str) -> LatencyTracker {
    let t = LatencyTracker::builder().min_samples(100).build().unwrap();
    for n in 1..=100 {
        t.record(target, ms(n));
    }
    t
}

#[tokio::test(start_paused = true)]
async fn r9_adaptive_delay_fires_at_the_configured_percentile() {
    let target = "POST /orders";
    let policy = HedgingPolicy::builder()
        .delay(HedgeDelay::Percentile(0.9))
        .build()
        .unwrap();
    let retrier = retrier().with_latencies(scripted(target));
    let p90 = retrier
        .latencies()
        .unwrap()
        .percentile(target, 0.9)
        .unwrap();
    assert!(p90 >= ms(90) && p90 < ms(93), "p90 is {p90:?}");
    let call = Call::keyed(key()).with_target(target);
    let (r, _, copies) = hedged(&retrier, &call, &policy, &[Step::Ok(1_000), Step::Ok(1)]).await;
    assert_eq!(r.unwrap(), 2);
    // tokio's timer fires on the next whole millisecond.
    let hedge = copies.starts()[1];
    assert!(
        hedge >= p90 && hedge < p90 + ms(1),
        "the hedge went out at {hedge:?}, p90 {p90:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn r9_adaptive_delay_without_enough_samples_is_not_hedged() {
    let target = "POST /orders";
    let tracker = LatencyTracker::builder().min_samples(100).build().unwrap();
    for n in 1..=99 {
        tracker.record(target, ms(n));
    }
    let retrier = retrier().with_latencies(tracker.clone());
    let call = Call::keyed(key()).with_target(target);
    let (r, took, copies) = hedged(
        &retrier,
        &call,
        &HedgingPolicy::default(),
        &[Step::Ok(1_000), Step::Ok(1)],
    )
    .await;
    assert_eq!(r.unwrap(), 1);
    assert_eq!(took, ms(1_000));
    assert_eq!(copies.starts(), vec![ms(0)]);
    assert_eq!(retrier.stats().hedges, 0);
    // The winner's time was recorded: the 100th sample makes the percentile known.
    assert_eq!(tracker.samples(target), 100);
    assert!(tracker.percentile(target, 0.95).is_some());
}

#[tokio::test(start_paused = true)]
async fn r9_only_the_winning_copy_is_recorded() {
    let target = "GET /books";
    let tracker = LatencyTracker::builder().min_samples(1).build().unwrap();
    let retrier = retrier().with_latencies(tracker.clone());
    let call = Call::idempotent().with_target(target);
    let (r, _, _) = hedged(
        &retrier,
        &call,
        &fixed(20, 2),
        &[Step::Fail(10, unavailable()), Step::Ok(35)],
    )
    .await;
    assert_eq!(r.unwrap(), 2);
    assert_eq!(tracker.samples(target), 1, "the failure is not a latency");
    let p = tracker.percentile(target, 1.0).unwrap();
    assert!(p >= ms(35) && p < ms(37), "the winner's own time, {p:?}");
}

#[tokio::test(start_paused = true)]
async fn r10_a_hedge_needs_the_observed_attempt_time_left() {
    // The deadline leaves 60 ms at the 40 ms hedge: more than the fixed 50 ms minimum, less than
    // the target's observed p90 (~90 ms) that the rule reads instead: no hedge.
    let target = "POST /orders";
    let policy = RetryPolicy::builder()
        .observed_min_attempt(0.9)
        .build()
        .unwrap();
    let observed = Retrier::new(policy)
        .with_budget(RetryBudget::builder().ratio(1.0).build().unwrap())
        .with_latencies(scripted(target));
    let call = || {
        Call::keyed(key())
            .with_target(target)
            .with_deadline(Deadline::after(ms(100)))
    };
    assert!(observed.min_attempt_time(&call()) >= ms(90));
    let (_, _, copies) = hedged(
        &observed,
        &call(),
        &fixed(40, 2),
        &[Step::Ok(95), Step::Ok(1)],
    )
    .await;
    assert_eq!(copies.starts(), vec![ms(0)]);

    // The fixed rule (R3) would have sent it.
    let fixed_rule = retrier();
    let (r, _, copies) = hedged(
        &fixed_rule,
        &call(),
        &fixed(40, 2),
        &[Step::Ok(95), Step::Ok(1)],
    )
    .await;
    assert_eq!(r.unwrap(), 2);
    assert_eq!(copies.starts(), vec![ms(0), ms(40)]);
}
