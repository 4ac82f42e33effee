//! E15: connecting a tier describes the crate's metrics (the Prometheus `# HELP` lines), in
//! words: no requirement ID, which means nothing to an operator.

use std::sync::Mutex;

use idem_redis::metrics::{RECONNECTS_TOTAL, UNREPLICATED_TOTAL, VOLATILE};
use metrics::Unit;

use idem_test_support::redis::RedisServer;

/// Every description handed to the recorder (what the Prometheus exporter prints as `# HELP`),
/// whether or not the metric has a value yet.
#[derive(Default)]
struct Descriptions(Mutex<Vec<(String, String)>>);

impl Descriptions {
    fn push(&self, key: metrics::KeyName, text: metrics::SharedString) {
        let mut all = self.0.lock().unwrap();
        all.push((key.as_str().to_owned(), text.into_owned()));
    }
}

impl metrics::Recorder for Descriptions {
    fn describe_counter(&self, k: metrics::KeyName, _: Option<Unit>, t: metrics::SharedString) {
        self.push(k, t);
    }

    fn describe_gauge(&self, k: metrics::KeyName, _: Option<Unit>, t: metrics::SharedString) {
        self.push(k, t);
    }

    fn describe_histogram(&self, k: metrics::KeyName, _: Option<Unit>, t: metrics::SharedString) {
        self.push(k, t);
    }

    fn register_counter(&self, _: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Counter {
        metrics::Counter::noop()
    }

    fn register_gauge(&self, _: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Gauge {
        metrics::Gauge::noop()
    }

    fn register_histogram(
        &self,
        _: &metrics::Key,
        _: &metrics::Metadata<'_>,
    ) -> metrics::Histogram {
        metrics::Histogram::noop()
    }
}

/// The requirement IDs in `text`: words such as `E9`, `D4`, `T1a` (a capital letter, one or two
/// digits, maybe a lower-case letter), bare or in brackets.
fn requirement_ids(text: &str) -> Vec<&str> {
    text.split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| {
            let b = w.as_bytes();
            let digits = b.iter().skip(1).take_while(|c| c.is_ascii_digit()).count();
            let rest = &b[(1 + digits).min(b.len())..];
            b.len() >= 2
                && b[0].is_ascii_uppercase()
                && (1..=2).contains(&digits)
                && (rest.is_empty() || (rest.len() == 1 && rest[0].is_ascii_lowercase()))
        })
        .collect()
}

/// Runs `build` on a runtime of its own with `recorder` as this thread's recorder.
fn with_recorder(recorder: &Descriptions, build: impl std::future::Future<Output = ()>) {
    metrics::with_local_recorder(recorder, || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(build)
    });
}

/// Checks that each of `names` was described and that no description names a requirement.
fn assert_described_in_words(recorder: Descriptions, names: &[&str]) {
    let described = recorder.0.into_inner().unwrap();
    for name in names {
        assert!(
            described.iter().any(|(n, _)| n == name),
            "{name} is described: {described:?}"
        );
    }
    for (name, text) in &described {
        let ids = requirement_ids(text);
        assert!(
            ids.is_empty(),
            "the HELP text of {name} names {ids:?}: {text:?}"
        );
        assert!(text.len() > 10, "{name}: {text:?}");
    }
}

#[test]
fn e15_connecting_a_tier_describes_its_metrics_in_words() {
    let recorder = Descriptions::default();
    with_recorder(&recorder, async {
        let redis = RedisServer::start().await;
        let _tier = crate::tier(&redis.url()).await;
    });
    assert_described_in_words(recorder, &[RECONNECTS_TOTAL, VOLATILE, UNREPLICATED_TOTAL]);
}
