//! What the crates' metrics say to an operator: a recorder that keeps every description (the
//! Prometheus `# HELP` text), and the check that each is in words, with no requirement ID.

use std::future::Future;
use std::sync::Mutex;

use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit};

/// Every description handed to the recorder (what the Prometheus exporter prints as `# HELP`),
/// whether or not the metric has a value yet.
#[derive(Debug, Default)]
pub struct Descriptions(Mutex<Vec<(String, String)>>);

impl Descriptions {
    fn push(&self, key: KeyName, text: SharedString) {
        let mut all = self.0.lock().unwrap();
        all.push((key.as_str().to_owned(), text.into_owned()));
    }

    /// The (name, description) pairs received, in order.
    pub fn into_vec(self) -> Vec<(String, String)> {
        self.0.into_inner().unwrap()
    }

    /// Checks that each of `names` was described and that no description names a requirement.
    ///
    /// # Panics
    ///
    /// When one was not described, or a description is shorter than a few words or names a
    /// requirement ID.
    pub fn assert_in_words(self, names: &[&str]) {
        let described = self.into_vec();
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
}

impl Recorder for Descriptions {
    fn describe_counter(&self, k: KeyName, _: Option<Unit>, t: SharedString) {
        self.push(k, t);
    }

    fn describe_gauge(&self, k: KeyName, _: Option<Unit>, t: SharedString) {
        self.push(k, t);
    }

    fn describe_histogram(&self, k: KeyName, _: Option<Unit>, t: SharedString) {
        self.push(k, t);
    }

    fn register_counter(&self, _: &Key, _: &Metadata<'_>) -> Counter {
        Counter::noop()
    }

    fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::noop()
    }

    fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::noop()
    }
}

/// The requirement IDs in `text`: words such as `E9`, `D4`, `T1a` (a capital letter, one or two
/// digits, maybe a lower-case letter), bare or in brackets.
pub fn requirement_ids(text: &str) -> Vec<&str> {
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

/// Runs `build` on a current-thread runtime of its own, with `recorder` as this thread's
/// recorder.
pub fn with_recorder(recorder: &Descriptions, build: impl Future<Output = ()>) {
    metrics::with_local_recorder(recorder, || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(build)
    });
}
