//! E9, E15: the engine's figures reach the `metrics` facade under the documented names and
//! labels (`idem_dedup::metrics`), each with the engine's name and a description, with latency
//! histograms; and `stats()` reports the same totals.
//!
//! This file is a test binary of its own (its own process), so it installs a global
//! `DebuggingRecorder`. Its tests share that recorder, so they run one at a time (`SERIAL`). A
//! snapshot swaps every counter and gauge back to zero, so each test takes one right after building
//! its engine and each later snapshot holds only what happened since the one before.

mod common;

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use common::{fp, scope, Runs};
use idem_core::{Code, CodeSet, Scope, Status};
use idem_dedup::{metrics as names, DedupError, Engine, InFlightPolicy, OutcomeKind, Stats};
use idem_test_support::help::{requirement_ids, Descriptions};
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use metrics_util::MetricKind;
use tokio::sync::oneshot;

/// Every value of the `outcome` label, as documented in `idem_dedup::metrics`.
const OUTCOMES: [&str; 10] = [
    "executed",
    "joined",
    "replayed",
    "conflict",
    "failed",
    "panicked",
    "overloaded",
    "rejected_in_flight",
    "lease_expired",
    "abandoned",
];

static SERIAL: Mutex<()> = Mutex::new(());

/// The process-wide recorder, installed before the first engine is built (metric handles are bound
/// to the recorder present when a shard starts).
fn snapshotter() -> &'static Snapshotter {
    static SNAPSHOTTER: OnceLock<Snapshotter> = OnceLock::new();
    SNAPSHOTTER.get_or_init(|| {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        recorder
            .install()
            .expect("no other recorder in this process");
        snapshotter
    })
}

/// Runs `test` alone, on a current-thread runtime with a paused clock.
fn serial<F: Future<Output = ()>>(test: impl FnOnce() -> F) {
    let _guard = SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    snapshotter();
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap()
        .block_on(test());
}

type Labels = Vec<(String, String)>;

/// The name of engines built without one.
const DEFAULT_ENGINE: &str = "default";

/// One snapshot, keyed by (kind, name, labels sorted by key); with each metric's description.
#[derive(Debug)]
struct Snap {
    values: HashMap<(MetricKind, String, Labels), DebugValue>,
    descriptions: HashMap<String, (Option<metrics::Unit>, String)>,
}

impl Snap {
    fn take() -> Snap {
        let mut values = HashMap::new();
        let mut descriptions = HashMap::new();
        for (ck, unit, desc, value) in snapshotter().snapshot().into_vec() {
            let (kind, key) = ck.into_parts();
            let mut labels: Labels = key
                .labels()
                .map(|l| (l.key().to_owned(), l.value().to_owned()))
                .collect();
            labels.sort();
            if let Some(desc) = desc {
                descriptions.insert(key.name().to_owned(), (unit, desc.into_owned()));
            }
            values.insert((kind, key.name().to_owned(), labels), value);
        }
        Snap {
            values,
            descriptions,
        }
    }

    /// The series of `name` with `labels` (the engine label included), in any order.
    fn series(&self, kind: MetricKind, name: &str, labels: &[(&str, &str)]) -> Option<&DebugValue> {
        let mut labels: Labels = labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        labels.sort();
        self.values.get(&(kind, name.to_owned(), labels))
    }

    /// The series of the default engine with one more label.
    fn get(&self, kind: MetricKind, name: &str, label: (&str, &str)) -> Option<&DebugValue> {
        let engine = (names::LABEL_ENGINE, DEFAULT_ENGINE);
        self.series(kind, name, &[engine, label])
    }

    /// The values a histogram recorded since the last snapshot.
    fn histogram(&self, name: &str, labels: &[(&str, &str)]) -> Vec<f64> {
        match self.series(MetricKind::Histogram, name, labels) {
            Some(DebugValue::Histogram(v)) => v.iter().map(|f| f.into_inner()).collect(),
            other => panic!("histogram {name}{labels:?}: {other:?}"),
        }
    }

    fn counter(&self, name: &str, label: (&str, &str)) -> u64 {
        match self.get(MetricKind::Counter, name, label) {
            Some(DebugValue::Counter(n)) => *n,
            other => panic!("counter {name}{{{}={}}}: {other:?}", label.0, label.1),
        }
    }

    fn gauge(&self, name: &str, label: (&str, &str)) -> f64 {
        match self.get(MetricKind::Gauge, name, label) {
            Some(DebugValue::Gauge(g)) => g.into_inner(),
            other => panic!("gauge {name}{{{}={}}}: {other:?}", label.0, label.1),
        }
    }

    fn calls(&self, outcome: &str) -> u64 {
        self.counter(names::CALLS_TOTAL, (names::LABEL_OUTCOME, outcome))
    }

    fn per_shard(&self, kind: MetricKind, name: &str, shards: usize) -> Vec<u64> {
        (0..shards)
            .map(|i| {
                let label = (names::LABEL_SHARD, &*i.to_string());
                match kind {
                    MetricKind::Counter => self.counter(name, label),
                    _ => {
                        let g = self.gauge(name, label);
                        assert_eq!(g, g.trunc(), "{name}: a count");
                        g as u64
                    }
                }
            })
            .collect()
    }

    fn names(&self) -> Vec<&str> {
        let mut v: Vec<&str> = self.values.keys().map(|(_, n, _)| n.as_str()).collect();
        v.sort_unstable();
        v.dedup();
        v
    }
}

/// Gauges are set when a shard drains its mailbox, and a snapshot zeroes them; look-ups of 64
/// absent scopes make every shard drain (and so publish) right before the snapshot. (A shard misses
/// all 64 with probability 2^-64 per shard for two shards; fewer for more.)
async fn publish_all(engine: &Engine<u64>) {
    for i in 0..64 {
        let probe = scope(&format!("probe-{i:08}"));
        assert_eq!(engine.lookup(&probe).await.unwrap(), None);
    }
}

/// Yields until `cond` holds; a bounded loop, since the paused clock never moves on its own here.
async fn settle_until(what: &str, cond: impl Fn() -> bool) {
    for _ in 0..10_000 {
        if cond() {
            return;
        }
        tokio::task::yield_now().await;
    }
    panic!("never happened: {what}");
}

/// Checks each shard's gauges against `stats()` and returns the totals (in flight, completed).
fn gauges_match_stats(snap: &Snap, st: &Stats) -> (u64, u64) {
    let shards = st.shards.len();
    let in_flight = snap.per_shard(MetricKind::Gauge, names::IN_FLIGHT, shards);
    let completed = snap.per_shard(MetricKind::Gauge, names::COMPLETED, shards);
    for (i, sh) in st.shards.iter().enumerate() {
        assert_eq!(in_flight[i], sh.in_flight, "in_flight gauge of shard {i}");
        assert_eq!(completed[i], sh.completed, "completed gauge of shard {i}");
    }
    let totals = (in_flight.iter().sum(), completed.iter().sum());
    assert_eq!(totals, (st.in_flight, st.completed));
    totals
}

/// Every outcome counter of the snapshot against `stats()` (the snapshot must cover the engine's
/// whole life).
fn calls_match_stats(snap: &Snap, st: &Stats) {
    let o = &st.outcomes;
    let pairs = [
        ("executed", o.executed),
        ("joined", o.joined),
        ("replayed", o.replayed),
        ("conflict", o.conflicts),
        ("failed", o.failed),
        ("panicked", o.panicked),
        ("overloaded", o.overloaded),
        ("rejected_in_flight", o.rejected_in_flight),
        ("lease_expired", o.lease_expired),
        ("abandoned", o.abandoned),
    ];
    for (outcome, n) in pairs {
        assert_eq!(
            snap.calls(outcome),
            n,
            "{} outcome={outcome}",
            names::CALLS_TOTAL
        );
    }
}

#[test]
fn e9_metric_names_are_the_documented_ones() {
    assert_eq!(names::IN_FLIGHT, "idem_dedup_in_flight");
    assert_eq!(names::COMPLETED, "idem_dedup_completed");
    assert_eq!(names::CALLS_TOTAL, "idem_dedup_calls_total");
    assert_eq!(names::EXPIRED_TOTAL, "idem_dedup_expired_total");
    assert_eq!(names::LABEL_SHARD, "shard");
    assert_eq!(names::LABEL_OUTCOME, "outcome");
    assert_eq!(names::LABEL_ENGINE, "engine");
    assert_eq!(names::EXECUTE_SECONDS, "idem_dedup_execute_seconds");
    assert_eq!(names::JOIN_WAIT_SECONDS, "idem_dedup_join_wait_seconds");
    assert_eq!(names::TIER_CALLS_TOTAL, "idem_tier_calls_total");
    assert_eq!(
        names::TIER_ROUND_TRIP_SECONDS,
        "idem_tier_round_trip_seconds"
    );
    assert_eq!(names::LABEL_OP, "op");
    for kind in [
        OutcomeKind::Executed,
        OutcomeKind::Joined,
        OutcomeKind::Replayed,
    ] {
        assert!(OUTCOMES.contains(&kind.as_str()));
    }
}

#[test]
fn e9_metrics_report_gauges_and_calls_by_outcome() {
    serial(|| async {
        let engine = Engine::<u64>::builder()
            .shards(2)
            .ttl(Duration::from_secs(10))
            .cache_failures(
                CodeSet::EMPTY.with(Code::FailedPrecondition),
                Duration::from_secs(5),
            )
            .build()
            .unwrap();
        Snap::take(); // start from zero
        let ok = |v: u64| move |_| async move { Ok(v) };
        let fail = |code: Code| move |_| async move { Err(Status::new(code, "no")) };
        let (a, b, c, d, e, f) = (
            scope("order-e9-000a"),
            scope("order-e9-000b"),
            scope("order-e9-000c"),
            scope("order-e9-000d"),
            scope("order-e9-000e"),
            scope("order-e9-000f"),
        );
        let x = fp("x");

        // executed: a, b, c, d, e, f; replayed: a, a, d; conflict: a; failed: c, d; panicked: e;
        // joined: one waiter on f.
        assert_eq!(
            engine.execute(&a, x, ok(1)).await.unwrap().kind(),
            OutcomeKind::Executed
        );
        assert_eq!(
            engine.execute(&b, x, ok(2)).await.unwrap().kind(),
            OutcomeKind::Executed
        );
        for _ in 0..2 {
            let r = engine.execute(&a, x, ok(9)).await.unwrap();
            assert_eq!((r.kind(), *r.value()), (OutcomeKind::Replayed, 1));
        }
        let conflict = engine.execute(&a, fp("y"), ok(9)).await.unwrap_err();
        assert_eq!(conflict, DedupError::Conflict);
        let err = engine.execute(&c, x, fail(Code::Unavailable)).await;
        assert_eq!(err.unwrap_err().code(), Code::Unavailable);
        let err = engine.execute(&d, x, fail(Code::FailedPrecondition)).await;
        assert_eq!(err.unwrap_err().code(), Code::FailedPrecondition);
        let replayed = engine.execute(&d, x, ok(9)).await.unwrap_err();
        assert_eq!(
            replayed,
            DedupError::Action {
                status: Status::new(Code::FailedPrecondition, "no"),
                outcome: OutcomeKind::Replayed
            }
        );
        let panicked = engine
            .execute(&e, x, |_| async { panic!("e9 test panic") })
            .await
            .unwrap_err();
        assert_eq!(panicked.code(), Code::Internal);

        let (open, gate) = oneshot::channel::<()>();
        let leader = tokio::spawn({
            let (engine, f) = (engine.clone(), f.clone());
            async move {
                let action = |_| async move {
                    gate.await.unwrap();
                    Ok(6)
                };
                engine.execute(&f, x, action).await
            }
        });
        settle_until("f in flight", || engine.stats().in_flight == 1).await;
        let joiner = tokio::spawn({
            let (engine, f) = (engine.clone(), f.clone());
            async move { engine.execute(&f, x, ok(9)).await }
        });
        settle_until("f joined", || engine.stats().outcomes.joined == 1).await;

        publish_all(&engine).await;
        let snap = Snap::take();
        assert_eq!(
            snap.names(),
            [
                names::CALLS_TOTAL,
                names::COMPLETED,
                names::EXECUTE_SECONDS,
                names::EXPIRED_TOTAL,
                names::IN_FLIGHT,
                names::JOIN_WAIT_SECONDS,
            ],
            "only the documented metrics"
        );
        let want = [
            ("executed", 6),
            ("joined", 1),
            ("replayed", 3),
            ("conflict", 1),
            ("failed", 2),
            ("panicked", 1),
            ("overloaded", 0),
            ("rejected_in_flight", 0),
            ("lease_expired", 0),
            ("abandoned", 0),
        ];
        for (outcome, n) in want {
            assert_eq!(snap.calls(outcome), n, "outcome={outcome}");
        }
        let st = engine.stats();
        calls_match_stats(&snap, &st);
        // In flight: f. Completed: a, b and the cached failure of d.
        assert_eq!(gauges_match_stats(&snap, &st), (1, 3));
        let expired = snap.per_shard(MetricKind::Counter, names::EXPIRED_TOTAL, 2);
        assert_eq!(expired, [0, 0]);

        // f completes; then d's failure (5 s) and a, b, f (10 s) expire, all without a read.
        open.send(()).unwrap();
        let l = leader.await.unwrap().unwrap();
        let j = joiner.await.unwrap().unwrap();
        assert_eq!((l.kind(), *l.value()), (OutcomeKind::Executed, 6));
        assert_eq!((j.kind(), *j.value()), (OutcomeKind::Joined, 6));
        settle_until("f stored", || engine.stats().completed == 4).await;
        tokio::time::advance(Duration::from_secs(5)).await;
        settle_until("d expired", || engine.stats().completed == 3).await;
        tokio::time::advance(Duration::from_secs(5)).await;
        settle_until("all expired", || engine.stats().completed == 0).await;

        publish_all(&engine).await;
        let snap = Snap::take();
        for outcome in OUTCOMES {
            assert_eq!(snap.calls(outcome), 0, "no call since the last snapshot");
        }
        let st = engine.stats();
        assert_eq!(gauges_match_stats(&snap, &st), (0, 0));
        let expired = snap.per_shard(MetricKind::Counter, names::EXPIRED_TOTAL, 2);
        assert_eq!(expired.iter().sum::<u64>(), 4);
        assert_eq!(st.outcomes.expired, 4);
    });
}

#[test]
fn e9_stats_report_the_same_totals_as_the_metrics() {
    serial(|| async {
        let engine = Engine::<u64>::builder()
            .shards(4)
            .max_entries(30)
            .in_flight_policy(InFlightPolicy::Reject)
            .in_flight_timeout(Duration::from_secs(1))
            .build()
            .unwrap();
        Snap::take(); // start from zero
        let runs = Runs::default();
        let ok = |v: u64| {
            let runs = runs.clone();
            move |_| async move {
                runs.hit();
                Ok(v)
            }
        };
        let scopes: Vec<Scope> = (0..33).map(|i| scope(&format!("order-{i:08}"))).collect();
        let x = fp("x");

        // 29 results, one run that never ends (scope 29): the engine is full at 30 entries.
        for (i, s) in scopes[..29].iter().enumerate() {
            let out = engine.execute(s, x, ok(i as u64)).await.unwrap();
            assert_eq!(out.kind(), OutcomeKind::Executed);
        }
        let hung = tokio::spawn({
            let (engine, s) = (engine.clone(), scopes[29].clone());
            async move {
                engine
                    .execute(&s, x, |_| std::future::pending::<Result<u64, Status>>())
                    .await
            }
        });
        settle_until("scope 29 in flight", || engine.stats().in_flight == 1).await;
        // 10 replays, 5 conflicts, 1 rejected duplicate, 3 refused new scopes.
        for (i, s) in scopes[..10].iter().enumerate() {
            let out = engine.execute(s, x, ok(99)).await.unwrap();
            assert_eq!(
                (out.kind(), *out.value()),
                (OutcomeKind::Replayed, i as u64)
            );
        }
        for s in &scopes[10..15] {
            let err = engine.execute(s, fp("y"), ok(99)).await.unwrap_err();
            assert_eq!(err, DedupError::Conflict);
        }
        let err = engine.execute(&scopes[29], x, ok(99)).await.unwrap_err();
        assert_eq!(err.code(), Code::Aborted);
        for s in &scopes[30..] {
            let err = engine.execute(s, x, ok(99)).await.unwrap_err();
            assert_eq!(err.code(), Code::ResourceExhausted);
        }
        assert_eq!(runs.get(), 29);

        // The hung run passes its 1 s lease.
        tokio::time::advance(Duration::from_secs(1)).await;
        settle_until("lease ran out", || hung.is_finished()).await;
        let err = hung.await.unwrap().unwrap_err();
        assert_eq!(
            err,
            DedupError::LeaseExpired {
                after: Duration::from_secs(1)
            }
        );
        settle_until("lease counted", || engine.stats().in_flight == 0).await;

        publish_all(&engine).await;
        let snap = Snap::take();
        let st = engine.stats();
        calls_match_stats(&snap, &st);
        assert_eq!(gauges_match_stats(&snap, &st), (0, 29));
        let o = st.outcomes;
        assert_eq!(
            (o.executed, o.replayed, o.conflicts, o.rejected_in_flight),
            (30, 10, 5, 1)
        );
        assert_eq!((o.overloaded, o.lease_expired), (3, 1));
        assert_eq!(
            (o.joined, o.failed, o.panicked, o.abandoned, o.expired),
            (0, 0, 0, 0, 0)
        );
        assert_eq!(st.entries(), 29);
        assert_eq!(st.shards.len(), 4);
        assert_eq!(st.shards.iter().map(|s| s.completed).sum::<u64>(), 29);
    });
}

/// E15: two engines in one process report under their own `engine` label, so their figures
/// neither add up nor overwrite each other.
#[test]
fn e15_two_engines_keep_their_figures_apart_by_name() {
    serial(|| async {
        let orders = Engine::<u64>::builder()
            .name("orders")
            .shards(1)
            .build()
            .unwrap();
        let refunds = Engine::<u64>::builder()
            .name("refunds")
            .shards(1)
            .build()
            .unwrap();
        Snap::take(); // start from zero
        let x = fp("x");
        for i in 0..3 {
            let s = scope(&format!("order-e15-{i:04}"));
            let _ = orders.execute(&s, x, |_| async { Ok(1) }).await.unwrap();
        }
        let s = scope("refund-e15-0001");
        let _ = refunds.execute(&s, x, |_| async { Ok(2) }).await.unwrap();
        let _ = refunds.execute(&s, x, |_| async { Ok(3) }).await.unwrap(); // replayed
        for engine in [&orders, &refunds] {
            assert_eq!(engine.lookup(&scope("probe-e15-0000")).await.unwrap(), None);
        }
        let snap = Snap::take();
        let calls = |engine: &str, outcome: &str| match snap.series(
            MetricKind::Counter,
            names::CALLS_TOTAL,
            &[
                (names::LABEL_ENGINE, engine),
                (names::LABEL_OUTCOME, outcome),
            ],
        ) {
            Some(DebugValue::Counter(n)) => *n,
            other => panic!("{engine}/{outcome}: {other:?}"),
        };
        assert_eq!(calls("orders", "executed"), 3);
        assert_eq!(calls("orders", "replayed"), 0);
        assert_eq!(calls("refunds", "executed"), 1);
        assert_eq!(calls("refunds", "replayed"), 1);
        let completed = |engine: &str| match snap.series(
            MetricKind::Gauge,
            names::COMPLETED,
            &[(names::LABEL_ENGINE, engine), (names::LABEL_SHARD, "0")],
        ) {
            Some(DebugValue::Gauge(g)) => g.into_inner(),
            other => panic!("{engine}: {other:?}"),
        };
        assert_eq!((completed("orders"), completed("refunds")), (3.0, 1.0));
        // Every series carries the engine label.
        for (_, name, labels) in snap.values.keys() {
            assert!(
                labels.iter().any(|(k, _)| k == names::LABEL_ENGINE),
                "{name}{labels:?} has no engine label"
            );
        }
    });
}

/// E15: an engine name is 1-64 characters of `A-Z a-z 0-9 _ - .`; others are refused with a
/// message that says so.
#[test]
fn e15_an_engine_name_outside_the_rule_is_refused() {
    serial(|| async {
        for bad in ["", "two words", "ünicode", &"x".repeat(65)] {
            let err = Engine::<u64>::builder().name(bad).build().unwrap_err();
            assert!(
                err.to_string().contains("1-64 characters"),
                "{bad:?}: {err}"
            );
        }
        for good in ["orders", "orders-v2.eu_west", &"x".repeat(64)] {
            assert!(
                Engine::<u64>::builder().name(good).build().is_ok(),
                "{good:?}"
            );
        }
    });
}

/// E15: the execute histogram times, by outcome, the calls that reached the shard — here on
/// tokio's paused clock, so the times are exact: a leader whose action takes 2 s, its duplicate
/// that waited for it (in the join-wait histogram too), a conflict answered at once. A replay
/// served by the read path is not timed.
#[test]
fn e15_latency_histograms_time_the_calls_that_reached_the_shard() {
    serial(|| async {
        let engine = Engine::<u64>::builder().shards(1).build().unwrap();
        Snap::take(); // start from zero
        let s = scope("order-e15-hist");
        let x = fp("x");
        let leader = tokio::spawn({
            let (engine, s) = (engine.clone(), s.clone());
            async move {
                let action = |_| async {
                    tokio::time::sleep(Duration::from_secs(2)).await;
                    Ok(7)
                };
                engine.execute(&s, x, action).await
            }
        });
        settle_until("in flight", || engine.stats().in_flight == 1).await;
        let joiner = tokio::spawn({
            let (engine, s) = (engine.clone(), s.clone());
            async move { engine.execute(&s, x, |_| async { Ok(9) }).await }
        });
        settle_until("joined", || engine.stats().outcomes.joined == 1).await;
        let conflict = engine.execute(&s, fp("y"), |_| async { Ok(9) }).await;
        assert_eq!(conflict.unwrap_err(), DedupError::Conflict);
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(leader.await.unwrap().unwrap().kind(), OutcomeKind::Executed);
        assert_eq!(joiner.await.unwrap().unwrap().kind(), OutcomeKind::Joined);
        settle_until("stored", || engine.stats().completed == 1).await;
        let replay = engine.execute(&s, x, |_| async { Ok(9) }).await.unwrap();
        assert_eq!(replay.kind(), OutcomeKind::Replayed);

        let snap = Snap::take();
        let execute = |outcome: &str| {
            let labels = [
                (names::LABEL_ENGINE, DEFAULT_ENGINE),
                (names::LABEL_OUTCOME, outcome),
            ];
            snap.histogram(names::EXECUTE_SECONDS, &labels)
        };
        assert_eq!(execute("executed"), [2.0]);
        assert_eq!(execute("joined"), [2.0]);
        assert_eq!(execute("conflict"), [0.0]);
        assert_eq!(
            execute("replayed"),
            Vec::<f64>::new(),
            "read-path replays are not timed"
        );
        let join_wait = [(names::LABEL_ENGINE, DEFAULT_ENGINE)];
        assert_eq!(snap.histogram(names::JOIN_WAIT_SECONDS, &join_wait), [2.0]);
    });
}

/// E15: every metric of the engine has a description (Prometheus `# HELP`), and the histograms
/// are in seconds.
#[test]
fn e15_every_metric_is_described() {
    serial(|| async {
        let engine = Engine::<u64>::builder().shards(1).build().unwrap();
        let _ = engine
            .execute(&scope("order-e15-desc"), fp("x"), |_| async { Ok(1) })
            .await
            .unwrap();
        publish_all(&engine).await;
        let snap = Snap::take();
        for name in [
            names::IN_FLIGHT,
            names::COMPLETED,
            names::CALLS_TOTAL,
            names::EXPIRED_TOTAL,
            names::EXECUTE_SECONDS,
            names::JOIN_WAIT_SECONDS,
        ] {
            let (_, text) = snap
                .descriptions
                .get(name)
                .unwrap_or_else(|| panic!("{name} has no description"));
            assert!(text.len() > 10, "{name}: {text:?}");
        }
        for name in [names::EXECUTE_SECONDS, names::JOIN_WAIT_SECONDS] {
            assert_eq!(snap.descriptions[name].0, Some(metrics::Unit::Seconds));
        }
    });
}

#[test]
fn e9_requirement_ids_are_recognised() {
    assert_eq!(requirement_ids("Runs in flight in the shard (E9)."), ["E9"]);
    assert_eq!(
        requirement_ids("see T1a and D4, not p99 or HTTP2"),
        ["T1a", "D4"]
    );
    assert!(requirement_ids("Stored results removed by TTL expiry.").is_empty());
}

/// E9: the HELP text an operator reads explains the metric in words; it carries no requirement
/// ID, which means nothing outside this repository.
#[test]
fn e9_help_text_names_no_requirement_ids() {
    let recorder = Descriptions::default();
    metrics::with_local_recorder(&recorder, names::describe);
    let described = recorder.into_vec();
    for name in [
        names::IN_FLIGHT,
        names::COMPLETED,
        names::CALLS_TOTAL,
        names::EXPIRED_TOTAL,
        names::EXECUTE_SECONDS,
        names::JOIN_WAIT_SECONDS,
        names::TIER_CALLS_TOTAL,
        names::TIER_ROUND_TRIP_SECONDS,
    ] {
        assert!(
            described.iter().any(|(n, _)| n == name),
            "{name} is described"
        );
    }
    for (name, text) in &described {
        let ids = requirement_ids(text);
        assert!(
            ids.is_empty(),
            "the HELP text of {name} names {ids:?}: {text:?}"
        );
    }
}
