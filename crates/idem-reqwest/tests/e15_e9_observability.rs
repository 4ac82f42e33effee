//! E15, E9: each call through the middleware is one `idem_reqwest.client` span (method, path,
//! where its key came from, attempts, outcome, code) holding the retrier's span, with the key
//! nowhere in the trace; the middleware's counters reach the `metrics` facade, described.

mod support;

use idem_test_support::capture;

use std::collections::{BTreeMap, HashSet};

use idem_core::run::{Run, RunStart};
use idem_core::Scope;
use idem_reqwest::stats::{KEYS_TOTAL, RETRIES_TOTAL};
use idem_reqwest::CallReport;
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use support::{builder, client, Reply, Server};
use tracing::Level;

fn inbound() -> Scope {
    Scope::parse("tenant-0042", "/checkout", "a6b1c0de-7f00-4d1e").unwrap()
}

/// E15: a write inside a run that succeeds on its second attempt: one span with its fields, the
/// retrier's span inside it, and the derived key in no field of any span or event.
#[tokio::test]
async fn e15_a_call_is_a_span_with_key_source_attempts_and_outcome() {
    let (c, _guard) = capture::capture();
    let server = Server::start(vec![Reply::status(503), Reply::ok()]).await;
    let (b, _) = builder(3);
    let http = client(b.build().unwrap());
    let report = Run::new(&inbound(), None, RunStart::Fresh)
        .attach(async {
            let response = http.post(server.url("/v1/charges")).send().await.unwrap();
            CallReport::of(&response).cloned().unwrap()
        })
        .await;

    let spans = c.spans_named("idem_reqwest.client");
    assert_eq!(spans.len(), 1);
    let span = &spans[0];
    assert_eq!(
        (span.target.as_str(), span.level),
        ("idem_reqwest", Level::DEBUG)
    );
    assert_eq!(span.field("method"), Some("POST"));
    assert_eq!(span.field("path"), Some("/v1/charges"));
    assert_eq!(span.field("key_source"), Some("run"));
    assert_eq!(span.field("attempts"), Some("2"));
    assert_eq!(span.field("outcome"), Some("ok"));
    assert_eq!(span.field("code"), Some("OK"));
    let retrier = c.spans_named("idem_retry.call");
    assert_eq!(retrier.len(), 1);
    assert_eq!(retrier[0].parent, Some(span.id));
    assert_eq!(retrier[0].field("kind"), Some("keyed"));
    assert_eq!(c.events_named("idem_retry.retry").len(), 1);

    let key = report.key.unwrap();
    let text = c.all_text();
    assert!(!text.contains(key.as_str()), "the key leaked:\n{text}");
}

/// E15: a call given up on records why, after how many attempts, and the last answer's code;
/// nothing is logged above DEBUG (a failing dependency is not the operator's alarm).
#[tokio::test]
async fn e15_a_give_up_is_recorded_on_its_span() {
    let (c, _guard) = capture::capture();
    let server = Server::start(vec![Reply::status(503)]).await;
    let (b, _) = builder(3);
    let response = client(b.build().unwrap())
        .get(server.url("/v1/charges/ch_1"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 503);
    let spans = c.spans_named("idem_reqwest.client");
    assert_eq!(spans.len(), 1);
    assert_eq!(spans[0].field("key_source"), None); // a read: no key
    assert_eq!(spans[0].field("attempts"), Some("3"));
    assert_eq!(spans[0].field("outcome"), Some("attempts"));
    assert_eq!(spans[0].field("code"), Some("UNAVAILABLE"));
    assert!(
        c.events().iter().all(|e| e.level > Level::INFO),
        "{:#?}",
        c.events()
    );
}

/// E9: retries by failure, keys by source and the retrier's own series reach the recorder, and
/// every one of them is described (Prometheus `# HELP`).
#[test]
fn e9_retries_and_keys_are_counted_and_described() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::with_local_recorder(&recorder, || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let server = Server::start(vec![Reply::status(503), Reply::ok()]).await;
            let (b, _) = builder(3);
            let http = client(b.build().unwrap());
            Run::new(&inbound(), None, RunStart::Fresh)
                .attach(http.post(server.url("/v1/charges")).send())
                .await
                .unwrap();
            http.post(server.url("/v1/charges")).send().await.unwrap();
        });
    });
    let mut counts = BTreeMap::new();
    let mut described = HashSet::new();
    for (ck, _, desc, value) in snapshotter.snapshot().into_vec() {
        let key = ck.key();
        let name = key.name().to_owned();
        assert!(desc.is_some(), "{name} is not described");
        described.insert(name.clone());
        let labels: Vec<String> = key
            .labels()
            .map(|l| format!("{}={}", l.key(), l.value()))
            .collect();
        if let DebugValue::Counter(n) = value {
            counts.insert((name, labels.join(",")), n);
        }
    }
    let count = |name: &str, labels: &str| {
        counts
            .get(&(name.to_owned(), labels.to_owned()))
            .copied()
            .unwrap_or(0)
    };
    assert_eq!(count(RETRIES_TOTAL, "reason=unavailable"), 1, "{counts:?}");
    assert_eq!(count(KEYS_TOTAL, "source=run"), 1, "{counts:?}");
    assert_eq!(count(KEYS_TOTAL, "source=random"), 1, "{counts:?}");
    assert_eq!(count(idem_retry::metrics::ATTEMPTS, ""), 3, "{counts:?}");
    for name in [
        RETRIES_TOTAL,
        KEYS_TOTAL,
        idem_retry::metrics::ATTEMPTS,
        idem_retry::metrics::RETRIES,
    ] {
        assert!(
            described.contains(name),
            "{name} was not reported: {described:?}"
        );
    }
}
