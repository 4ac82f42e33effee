//! E15 for the tiered engine: its call span (holding its local engine's), the warn events of its
//! faults — fail-open, fencing-out, unwritten and lost completions — with the scope's digest and
//! never its key, and its metrics under the engine's name with tier round-trip histograms. The
//! tier is the in-memory one of `tier/`, with its faults switched on by hand.

mod common;
mod tier;

use std::time::Duration;

use common::{fp, scope};
use idem_core::{Code, Scope, Status};
use idem_dedup::metrics as names;
use idem_dedup::tiered::{OnUnavailable, TieredEngine};
use idem_dedup::trace::ScopeDigest;
use idem_dedup::{LocalCache, OutcomeKind, Source};
use idem_test_support::capture::{capture, Captured, EventRec};
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use metrics_util::MetricKind;
use tier::MemTier;
use tracing::Level;

type Tiered = TieredEngine<String, MemTier>;

fn engine(tier: &MemTier, name: &str) -> Tiered {
    TieredEngine::<String, _>::builder(tier.clone())
        .name(name)
        .local(LocalCache::new().shards(1))
        .lease(Duration::from_secs(2))
        .build()
        .unwrap()
}

fn ok(
    v: &'static str,
) -> impl FnOnce(idem_dedup::remote::FencingToken) -> std::future::Ready<Result<String, Status>> {
    move |_| std::future::ready(Ok(v.to_owned()))
}

/// The one warn event named `name`, with the common fields checked against `s`.
fn one_warning(c: &Captured, name: &str, engine: &str, s: &Scope) -> EventRec {
    let events = c.events_named(name);
    assert_eq!(events.len(), 1, "one {name} in {:#?}", c.events());
    let e = events[0].clone();
    assert_eq!(e.level, Level::WARN, "{name}");
    assert_eq!(e.target, "idem_dedup");
    assert_eq!(e.field("engine"), Some(engine));
    assert_eq!(e.field("method"), Some(s.method()));
    let digest = ScopeDigest::of(s).to_string();
    assert_eq!(e.field("scope_digest"), Some(digest.as_str()));
    e
}

fn assert_no_raw_scope(c: &Captured, s: &Scope) {
    let text = c.all_text();
    assert!(!text.contains(s.key()), "the key leaked:\n{text}");
    assert!(!text.contains(s.tenant()), "the tenant leaked:\n{text}");
}

/// E15: a tiered call is an `idem_dedup.tiered.execute` span (engine, method, digest, outcome,
/// source) that holds its local engine's `idem_dedup.execute` span; another instance's replay
/// says where its value came from.
#[tokio::test(start_paused = true)]
async fn e15_a_tiered_call_is_a_span_holding_its_local_engines_span() {
    let (c, _guard) = capture();
    let tier = MemTier::default();
    let (a, b) = (engine(&tier, "orders-a"), engine(&tier, "orders-b"));
    let s = scope("order-e15-tier-0001");
    let first = a.execute(&s, fp("x"), ok("order-1")).await.unwrap();
    assert_eq!(first.source(), Source::ThisInstance);
    let other = b.execute(&s, fp("x"), ok("order-2")).await.unwrap();
    assert_eq!(
        (other.kind(), other.source()),
        (OutcomeKind::Replayed, Source::OtherInstance)
    );

    let tiered = c.spans_named("idem_dedup.tiered.execute");
    assert_eq!(tiered.len(), 2, "{tiered:#?}");
    let digest = ScopeDigest::of(&s).to_string();
    for (span, (engine, outcome, source)) in tiered.iter().zip([
        ("orders-a", "executed", "this_instance"),
        ("orders-b", "replayed", "other_instance"),
    ]) {
        assert_eq!(span.level, Level::DEBUG);
        assert_eq!(span.field("engine"), Some(engine));
        assert_eq!(span.field("method"), Some(s.method()));
        assert_eq!(span.field("scope_digest"), Some(digest.as_str()));
        assert_eq!(span.field("outcome"), Some(outcome));
        assert_eq!(span.field("source"), Some(source));
        let local: Vec<_> = c
            .spans_named("idem_dedup.execute")
            .into_iter()
            .filter(|l| l.parent == Some(span.id))
            .collect();
        assert_eq!(local.len(), 1, "the local engine's span inside {span:#?}");
        assert_eq!(local[0].field("engine"), Some(engine));
    }
    assert_no_raw_scope(&c, &s);
}

/// D3, E15: with the tier down, a fail-open run is a warn event with the scope's digest and
/// the tier's error; failing closed is only a debug event (one per call in an outage).
#[tokio::test(start_paused = true)]
async fn d3_e15_fail_open_is_a_warn_event_and_fail_closed_is_not() {
    let (c, _guard) = capture();
    let tier = MemTier::default();
    tier.fail_claims(true);
    let closed = engine(&tier, "closed");
    let open = TieredEngine::<String, _>::builder(tier.clone())
        .name("open")
        .local(LocalCache::new().shards(1))
        .on_unavailable(OnUnavailable::FailOpen)
        .build()
        .unwrap();
    let s = scope("order-e15-down-0001");
    let err = closed.execute(&s, fp("x"), ok("no")).await.unwrap_err();
    assert_eq!(err.code(), Code::Unavailable);
    assert!(
        c.events().iter().all(|e| e.level != Level::WARN),
        "{:#?}",
        c.events()
    );
    let debug = c.events_named("idem_dedup.tier.unavailable");
    assert_eq!(debug.len(), 1);
    assert_eq!(debug[0].level, Level::DEBUG);

    let out = open.execute(&s, fp("x"), ok("ran")).await.unwrap();
    assert_eq!(out.source(), Source::FailOpen);
    let e = one_warning(&c, "idem_dedup.tier.fail_open", "open", &s);
    assert!(e.field("error").unwrap().contains("tier down"));
    assert_no_raw_scope(&c, &s);
}

/// D1, E15: a run whose completion finds a later claim is fenced out: a warn event with its
/// token and the lease.
#[tokio::test(start_paused = true)]
async fn d1_e15_fencing_out_is_a_warn_event() {
    let (c, _guard) = capture();
    let tier = MemTier::default();
    tier.fence_completes(true);
    let e = engine(&tier, "orders");
    let s = scope("order-e15-fence-001");
    let err = e.execute(&s, fp("x"), ok("late")).await.unwrap_err();
    assert_eq!(err.code(), Code::Aborted);
    let w = one_warning(&c, "idem_dedup.tier.fenced_out", "orders", &s);
    assert_eq!(w.field("token"), Some("1"));
    assert_eq!(w.field("lease_ms"), Some("2000"));
    assert_no_raw_scope(&c, &s);
}

/// D5, E15: a completion that cannot be written is a warn event; when the background retry
/// gives up at the end of the lease, a second one says the record was lost.
#[tokio::test(start_paused = true)]
async fn d5_e15_unwritten_and_lost_completions_are_warn_events() {
    let (c, _guard) = capture();
    let tier = MemTier::default();
    tier.fail_completes(true);
    let e = engine(&tier, "orders");
    let s = scope("order-e15-unrec-001");
    let out = e.execute(&s, fp("x"), ok("order-1")).await.unwrap();
    assert!(!out.is_recorded());
    let w = one_warning(&c, "idem_dedup.tier.unrecorded", "orders", &s);
    assert!(w.field("error").unwrap().contains("tier down"));
    assert!(c.events_named("idem_dedup.tier.record_lost").is_empty());
    // The retry window is the lease (2 s): past it, the background retry gives up.
    for _ in 0..100 {
        if e.stats().record_lost == 1 {
            break;
        }
        tokio::time::advance(Duration::from_millis(100)).await;
    }
    assert_eq!(e.stats().record_lost, 1);
    let lost = one_warning(&c, "idem_dedup.tier.record_lost", "orders", &s);
    assert_eq!(lost.field("fenced_out"), Some("false"));
    assert_no_raw_scope(&c, &s);
}

/// E15: the tier's metrics and the local engine's carry the tiered engine's name; each tier
/// operation's round trip lands in `idem_tier_round_trip_seconds` under its `op` (a 30 ms tier on
/// tokio's paused clock, so the times are exact); every tier metric is described.
#[tokio::test(start_paused = true)]
async fn e15_tier_metrics_carry_the_engine_name_and_round_trip_times() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let tier = MemTier::default();
    let rt = Duration::from_millis(30);
    tier.round_trip(rt);
    let e = metrics::with_local_recorder(&recorder, || engine(&tier, "orders"));
    let s = scope("order-e15-metric-01");
    let _ = e.execute(&s, fp("x"), ok("order-1")).await.unwrap();
    assert!(e
        .lookup(&scope("order-e15-absent-1"))
        .await
        .unwrap()
        .is_none());
    assert!(e.forget(&s).await.unwrap());

    let mut histograms = std::collections::HashMap::new();
    let mut described = std::collections::HashSet::new();
    let mut calls = None;
    for (ck, _unit, desc, value) in snapshotter.snapshot().into_vec() {
        let (kind, key) = ck.into_parts();
        let label = |name: &str| {
            key.labels()
                .find(|l| l.key() == name)
                .map(|l| l.value().to_owned())
        };
        assert_eq!(
            label(names::LABEL_ENGINE).as_deref(),
            Some("orders"),
            "{key:?}"
        );
        if desc.is_some() {
            described.insert(key.name().to_owned());
        }
        match (kind, key.name(), value) {
            (MetricKind::Histogram, names::TIER_ROUND_TRIP_SECONDS, DebugValue::Histogram(v)) => {
                let op = label(names::LABEL_OP).unwrap();
                histograms.insert(op, v.iter().map(|f| f.into_inner()).collect::<Vec<_>>());
            }
            (MetricKind::Counter, names::TIER_CALLS_TOTAL, DebugValue::Counter(n))
                if label(names::LABEL_RESULT).as_deref() == Some("executed") =>
            {
                calls = Some(n);
            }
            _ => {}
        }
    }
    assert_eq!(calls, Some(1));
    let secs = rt.as_secs_f64();
    assert_eq!(histograms["claim"], [secs]);
    assert_eq!(histograms["complete"], [secs]);
    assert_eq!(histograms["lookup"], [secs]);
    assert_eq!(histograms["forget"], [secs]);
    assert_eq!(histograms["release"], Vec::<f64>::new());
    assert_eq!(histograms["wait"], Vec::<f64>::new());
    for name in [
        names::TIER_CALLS_TOTAL,
        names::TIER_ROUND_TRIP_SECONDS,
        names::CALLS_TOTAL,
        names::EXECUTE_SECONDS,
    ] {
        assert!(described.contains(name), "{name} is not described");
    }
}

/// D8, E15: a renewal that finds the claim taken over is a warn event with its token and the
/// lease; a renewal the tier fails is only a debug event (in an outage there is one per running
/// action and tick; the metric is what to alert on).
#[tokio::test(start_paused = true)]
async fn d8_e15_a_lost_lease_is_a_warn_event_and_a_failed_renewal_is_not() {
    let (c, _guard) = capture();
    let tier = MemTier::default();
    let e = engine(&tier, "orders"); // a 2 s lease: renewed every 666 ms
    let slow = |_| async {
        tokio::time::sleep(Duration::from_secs(1)).await;
        Ok::<_, Status>("slow".to_owned())
    };
    tier.fail_renewals(true);
    let s = scope("order-e15-renew-001");
    let out = e.execute(&s, fp("x"), slow).await.unwrap();
    assert!(out.is_recorded());
    assert!(
        c.events().iter().all(|e| e.level != Level::WARN),
        "{:#?}",
        c.events()
    );
    let failed = c.events_named("idem_dedup.tier.renew_failed");
    assert_eq!(failed.len(), 1, "{failed:#?}");
    assert_eq!(failed[0].level, Level::DEBUG);
    assert!(failed[0].field("error").unwrap().contains("tier down"));

    tier.fail_renewals(false);
    tier.fence_renewals(true);
    let lost = scope("order-e15-renew-002");
    let _ = e.execute(&lost, fp("x"), slow).await.unwrap();
    let w = one_warning(&c, "idem_dedup.tier.lease_lost", "orders", &lost);
    assert_eq!(w.field("token"), Some("2"));
    assert_eq!(w.field("lease_ms"), Some("2000"));
    assert_eq!((e.stats().renew_failed, e.stats().lease_lost), (1, 1));
    assert_no_raw_scope(&c, &s);
    assert_no_raw_scope(&c, &lost);
}
