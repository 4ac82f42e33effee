//! E15: every deduplicated call is a `tracing` span (engine, method, a short scope digest,
//! outcome), never showing the raw tenant or key unless asked to; lease expiries, panics and
//! results lost to a lease are warn events. A capturing subscriber (idem-test-support's `capture`) records them.

mod common;

use std::time::Duration;

use common::{eventually, fp, scope};
use idem_core::{Code, Scope};
use idem_dedup::trace::{ScopeDigest, ScopeLogging};
use idem_dedup::{DedupError, Engine, OutcomeKind};
use idem_test_support::capture::{capture, capture_spans_up_to, Captured, SpanRec};
use tokio::sync::oneshot;
use tokio::time::advance;
use tracing::Level;

const EXECUTE: &str = "idem_dedup.execute";

/// The span of the call that ended with `outcome`.
fn span_with_outcome(c: &Captured, outcome: &str) -> SpanRec {
    let spans = c.spans_named(EXECUTE);
    let found: Vec<_> = spans
        .iter()
        .filter(|s| s.field("outcome") == Some(outcome))
        .collect();
    assert_eq!(
        found.len(),
        1,
        "one span with outcome {outcome} in {spans:#?}"
    );
    found[0].clone()
}

/// Neither the tenant nor the key appears anywhere in what was traced.
fn assert_no_raw_scope(c: &Captured, s: &Scope) {
    let text = c.all_text();
    assert!(!text.contains(s.key()), "the key leaked:\n{text}");
    assert!(!text.contains(s.tenant()), "the tenant leaked:\n{text}");
}

/// E15: each call — executed, joined, replayed from the read path, refused — is one span with
/// the engine's name, the method, the scope's digest and how it ended; the digest is the one
/// `ScopeDigest` gives, and the key and the tenant appear nowhere.
#[tokio::test(start_paused = true)]
async fn e15_each_call_is_a_span_with_method_digest_and_outcome_and_no_raw_scope() {
    let (c, _guard) = capture();
    let engine = Engine::<u32>::builder().shards(1).build().unwrap();
    let s = scope("order-e15-span-0001");
    let x = fp("x");
    let (open, gate) = oneshot::channel::<()>();
    let leader = tokio::spawn({
        let (engine, s) = (engine.clone(), s.clone());
        async move {
            let action = |_| async move {
                gate.await.unwrap();
                Ok(7)
            };
            engine.execute(&s, x, action).await
        }
    });
    eventually("in flight", || engine.stats().in_flight == 1).await;
    let joiner = tokio::spawn({
        let (engine, s) = (engine.clone(), s.clone());
        async move { engine.execute(&s, x, |_| async { Ok(9) }).await }
    });
    eventually("joined", || engine.stats().outcomes.joined == 1).await;
    open.send(()).unwrap();
    assert_eq!(leader.await.unwrap().unwrap().kind(), OutcomeKind::Executed);
    assert_eq!(joiner.await.unwrap().unwrap().kind(), OutcomeKind::Joined);
    eventually("stored", || engine.stats().completed == 1).await;
    let replay = engine.execute(&s, x, |_| async { Ok(9) }).await.unwrap();
    assert_eq!(replay.kind(), OutcomeKind::Replayed);
    let conflict = engine.execute(&s, fp("y"), |_| async { Ok(9) }).await;
    assert_eq!(conflict.unwrap_err(), DedupError::Conflict);

    let spans = c.spans_named(EXECUTE);
    assert_eq!(spans.len(), 4, "{spans:#?}");
    let digest = ScopeDigest::of(&s).to_string();
    for span in &spans {
        assert_eq!(span.target, "idem_dedup");
        assert_eq!(span.level, Level::DEBUG);
        assert_eq!(span.field("engine"), Some("default"));
        assert_eq!(span.field("method"), Some("/shop.v1.Shop/CreateOrder"));
        assert_eq!(span.field("scope_digest"), Some(digest.as_str()));
        assert_eq!(span.field("tenant"), None);
        assert_eq!(span.field("key"), None);
    }
    for outcome in ["executed", "joined", "replayed"] {
        assert_eq!(span_with_outcome(&c, outcome).field("code"), None);
    }
    let refused = span_with_outcome(&c, "IDEMPOTENCY_CONFLICT");
    assert_eq!(refused.field("code"), Some("FAILED_PRECONDITION"));
    assert_no_raw_scope(&c, &s);
}

/// E15: the leader's action runs inside its call's span, so what the handler logs is part of
/// the call.
#[tokio::test(start_paused = true)]
async fn e15_the_action_runs_inside_its_calls_span() {
    let (c, _guard) = capture();
    let engine = Engine::<u32>::builder().shards(1).build().unwrap();
    let s = scope("order-e15-inside-01");
    let action = |_| async {
        tracing::info!("charging the card");
        Ok(1)
    };
    let _ = engine.execute(&s, fp("x"), action).await.unwrap();
    let events: Vec<_> = c
        .events()
        .into_iter()
        .filter(|e| e.field("message") == Some("charging the card"))
        .collect();
    assert_eq!(events.len(), 1);
    let parent = c.span(events[0].parent.expect("the event is in a span"));
    assert_eq!(parent.name, EXECUTE);
    assert_eq!(parent.field("outcome"), Some("executed"));
}

/// E15: `ScopeLogging::Raw` adds the tenant and the key to spans and events; the default
/// (checked above) never shows them.
#[tokio::test(start_paused = true)]
async fn e15_raw_scope_in_traces_is_an_opt_in() {
    let (c, _guard) = capture();
    let engine = Engine::<u32>::builder()
        .shards(1)
        .scope_logging(ScopeLogging::Raw)
        .build()
        .unwrap();
    let s = scope("order-e15-raw-0001");
    let _ = engine
        .execute(&s, fp("x"), |_| async { Ok(1) })
        .await
        .unwrap();
    let _ = engine
        .execute(&s, fp("x"), |_| async { Ok(2) })
        .await
        .unwrap();
    let spans = c.spans_named(EXECUTE);
    assert_eq!(spans.len(), 2);
    for span in spans {
        assert_eq!(span.field("tenant"), Some("tenant-0042"));
        assert_eq!(span.field("key"), Some("order-e15-raw-0001"));
    }
}

/// E15: with the engine's spans filtered out (a subscriber at `INFO`), a call makes no span
/// and records nothing on the caller's own span, even one with fields named like the engine's.
#[tokio::test(start_paused = true)]
async fn e15_filtered_out_spans_touch_nothing_of_the_callers() {
    let (c, _guard) = capture_spans_up_to(Level::INFO);
    let engine = Engine::<u32>::builder().shards(1).build().unwrap();
    let s = scope("order-e15-filtered");
    let request = tracing::info_span!(
        "request",
        outcome = tracing::field::Empty,
        code = tracing::field::Empty
    );
    let _entered = request.enter();
    let _ = engine
        .execute(&s, fp("x"), |_| async { Ok(1) })
        .await
        .unwrap();
    let _ = engine
        .execute(&s, fp("x"), |_| async { Ok(1) })
        .await
        .unwrap();
    let err = engine.execute(&s, fp("y"), |_| async { Ok(1) }).await;
    assert_eq!(err.unwrap_err().code(), Code::FailedPrecondition);
    assert!(c.spans_named(EXECUTE).is_empty());
    let spans = c.spans();
    assert_eq!(spans.len(), 1);
    assert_eq!(spans[0].name, "request");
    assert_eq!(spans[0].field("outcome"), None);
    assert_eq!(spans[0].field("code"), None);
}

/// E6, E15: a run that passes its lease is a warn event naming the engine, the method and the
/// scope's digest (not its key), with the lease.
#[tokio::test(start_paused = true)]
async fn e6_e15_a_lease_expiry_is_a_warn_event() {
    let (c, _guard) = capture();
    let lease = Duration::from_secs(1);
    let engine = Engine::<u32>::builder()
        .name("orders")
        .shards(1)
        .in_flight_timeout(lease)
        .build()
        .unwrap();
    let s = scope("order-e15-lease-01");
    let hung = tokio::spawn({
        let (engine, s) = (engine.clone(), s.clone());
        async move {
            let action = |_| std::future::pending::<Result<u32, idem_core::Status>>();
            engine.execute(&s, fp("x"), action).await
        }
    });
    eventually("in flight", || engine.stats().in_flight == 1).await;
    advance(lease).await;
    let err = hung.await.unwrap().unwrap_err();
    assert_eq!(err, DedupError::LeaseExpired { after: lease });

    let events = c.events_named("idem_dedup.lease_expired");
    assert_eq!(events.len(), 1, "{:#?}", c.events());
    let e = &events[0];
    assert_eq!(e.level, Level::WARN);
    assert_eq!(e.target, "idem_dedup");
    assert_eq!(e.field("engine"), Some("orders"));
    assert_eq!(e.field("method"), Some("/shop.v1.Shop/CreateOrder"));
    let digest = ScopeDigest::of(&s).to_string();
    assert_eq!(e.field("scope_digest"), Some(digest.as_str()));
    assert_eq!(e.field("lease_ms"), Some("1000"));
    assert!(e.field("message").unwrap().contains("lease"));
    assert_eq!(
        span_with_outcome(&c, "LEASE_EXPIRED").field("code"),
        Some("UNAVAILABLE")
    );
    assert_no_raw_scope(&c, &s);
}

/// E4, E15: a panicking action is a warn event with the panic's message.
#[tokio::test(start_paused = true)]
async fn e4_e15_a_panic_is_a_warn_event() {
    let (c, _guard) = capture();
    let engine = Engine::<u32>::builder().shards(1).build().unwrap();
    let s = scope("order-e15-panic-01");
    let err = engine
        .execute(&s, fp("x"), |_| async { panic!("card service exploded") })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Internal);
    let events = c.events_named("idem_dedup.panicked");
    assert_eq!(events.len(), 1, "{:#?}", c.events());
    assert_eq!(events[0].level, Level::WARN);
    assert_eq!(events[0].field("panic"), Some("card service exploded"));
    assert_eq!(events[0].field("engine"), Some("default"));
    assert_eq!(
        span_with_outcome(&c, "ACTION_PANICKED").field("code"),
        Some("INTERNAL")
    );
    assert_no_raw_scope(&c, &s);
}

/// E6, E15: a leader whose action finished only after its run was ended at the lease gets the
/// lease error, and a warn event says its result was not stored (a retry runs it again), besides
/// the lease expiry itself.
#[tokio::test(start_paused = true)]
async fn e6_e15_a_result_lost_to_the_lease_is_a_warn_event() {
    let (c, _guard) = capture();
    let lease = Duration::from_secs(5);
    let engine = Engine::<u32>::builder()
        .shards(1)
        .in_flight_timeout(lease)
        .build()
        .unwrap();
    let s = scope("order-e15-late-0001");
    let mut leader = Box::pin(engine.execute(&s, fp("a"), |_| async { Ok(1) }));
    // Sends `Begin`; the shard chooses this call to lead, then sweeps it at its lease before
    // the leader is polled again.
    assert!(futures::poll!(leader.as_mut()).is_pending());
    eventually("chosen to lead", || engine.stats().in_flight == 1).await;
    advance(lease + Duration::from_millis(1)).await;
    eventually("swept", || engine.stats().outcomes.lease_expired == 1).await;
    assert_eq!(
        leader.await.unwrap_err(),
        DedupError::LeaseExpired { after: lease }
    );
    assert_eq!(c.events_named("idem_dedup.lease_expired").len(), 1);
    let late = c.events_named("idem_dedup.completed_after_lease");
    assert_eq!(late.len(), 1, "{:#?}", c.events());
    assert_eq!(late[0].level, Level::WARN);
    assert_eq!(late[0].field("lease_ms"), Some("5000"));
    // The event is part of the leader's call.
    let parent = c.span(late[0].parent.expect("in the call's span"));
    assert_eq!(parent.name, EXECUTE);
    assert_no_raw_scope(&c, &s);
}
