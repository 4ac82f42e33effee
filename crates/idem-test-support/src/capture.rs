//! A `tracing` subscriber that keeps every span and event it sees, for tests of what the engine,
//! the retrier and the layers trace. Installed per thread ([`capture`]), so it sees what a
//! current-thread runtime runs: the callers, the leaders' actions and the shard actors.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex};

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::subscriber::{DefaultGuard, Interest};
use tracing::{Event, Level, Metadata, Subscriber};

/// A span as the subscriber saw it: its name, target, parent and every field recorded on it.
#[derive(Debug, Clone)]
pub struct SpanRec {
    /// The id the subscriber gave it (1, 2, ... in the order the spans were made).
    pub id: u64,
    /// The span's name.
    pub name: &'static str,
    /// The span's target (the module path unless the span names one).
    pub target: String,
    /// The span's level.
    pub level: Level,
    /// The id of the span it was made in, if any.
    pub parent: Option<u64>,
    /// Every field recorded on it, as text: at creation and by `record` later.
    pub fields: BTreeMap<String, String>,
}

/// An event: its name, level, target, fields (`message` included) and the span it was in.
#[derive(Debug, Clone)]
pub struct EventRec {
    /// The event's name (`event file:line` unless it names one).
    pub name: &'static str,
    /// The event's level.
    pub level: Level,
    /// The event's target.
    pub target: String,
    /// The id of the span it happened in, if any.
    pub parent: Option<u64>,
    /// Every field, as text (`message` included).
    pub fields: BTreeMap<String, String>,
}

impl EventRec {
    /// The field `name`, as text.
    pub fn field(&self, name: &str) -> Option<&str> {
        self.fields.get(name).map(String::as_str)
    }
}

impl SpanRec {
    /// The field `name`, as text.
    pub fn field(&self, name: &str) -> Option<&str> {
        self.fields.get(name).map(String::as_str)
    }
}

#[derive(Debug, Default)]
struct State {
    next: u64,
    spans: Vec<SpanRec>,
    events: Vec<EventRec>,
    stack: Vec<u64>,
}

/// What a capture has seen so far; clones share it.
#[derive(Debug, Clone)]
pub struct Captured {
    state: Arc<Mutex<State>>,
    /// Spans at levels above this one are not enabled (events always are).
    span_level: Level,
}

impl Captured {
    /// Every span so far, in the order they were made.
    pub fn spans(&self) -> Vec<SpanRec> {
        self.state.lock().unwrap().spans.clone()
    }

    /// The spans named `name`.
    pub fn spans_named(&self, name: &str) -> Vec<SpanRec> {
        self.spans()
            .into_iter()
            .filter(|s| s.name == name)
            .collect()
    }

    /// The span with id `id`.
    ///
    /// # Panics
    ///
    /// When there is none (a test that asks for it expects it).
    pub fn span(&self, id: u64) -> SpanRec {
        self.spans().into_iter().find(|s| s.id == id).unwrap()
    }

    /// Every event so far, in order.
    pub fn events(&self) -> Vec<EventRec> {
        self.state.lock().unwrap().events.clone()
    }

    /// The events named `name`.
    pub fn events_named(&self, name: &str) -> Vec<EventRec> {
        self.events()
            .into_iter()
            .filter(|e| e.name == name)
            .collect()
    }

    /// Every field value of every span and event, one per line: what a log would show.
    pub fn all_text(&self) -> String {
        let st = self.state.lock().unwrap();
        let spans = st.spans.iter().map(|s| &s.fields);
        let events = st.events.iter().map(|e| &e.fields);
        spans
            .chain(events)
            .flat_map(|f| f.iter().map(|(k, v)| format!("{k}={v}")))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// Installs a capture on this thread until the guard is dropped; spans at every level.
pub fn capture() -> (Captured, DefaultGuard) {
    capture_spans_up_to(Level::TRACE)
}

/// As [`capture`], but spans more verbose than `level` are disabled (as a subscriber filtering at
/// `level` would): events are all kept.
pub fn capture_spans_up_to(level: Level) -> (Captured, DefaultGuard) {
    let captured = Captured {
        state: Arc::default(),
        span_level: level,
    };
    let guard = tracing::subscriber::set_default(Capture(captured.clone()));
    (captured, guard)
}

#[derive(Debug)]
struct Capture(Captured);

struct Fields<'a>(&'a mut BTreeMap<String, String>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

impl Subscriber for Capture {
    fn register_callsite(&self, _: &'static Metadata<'static>) -> Interest {
        Interest::sometimes()
    }

    fn enabled(&self, meta: &Metadata<'_>) -> bool {
        meta.is_event() || *meta.level() <= self.0.span_level
    }

    fn max_level_hint(&self) -> Option<tracing::level_filters::LevelFilter> {
        Some(tracing::level_filters::LevelFilter::TRACE)
    }

    fn new_span(&self, attrs: &Attributes<'_>) -> Id {
        let mut st = self.0.state.lock().unwrap();
        st.next += 1;
        let id = st.next;
        let parent = match attrs.parent() {
            Some(p) => Some(p.into_u64()),
            None if attrs.is_contextual() => st.stack.last().copied(),
            None => None,
        };
        let mut fields = BTreeMap::new();
        attrs.record(&mut Fields(&mut fields));
        let meta = attrs.metadata();
        st.spans.push(SpanRec {
            id,
            name: meta.name(),
            target: meta.target().to_owned(),
            level: *meta.level(),
            parent,
            fields,
        });
        Id::from_u64(id)
    }

    fn record(&self, span: &Id, values: &Record<'_>) {
        let mut st = self.0.state.lock().unwrap();
        if let Some(s) = st.spans.iter_mut().find(|s| s.id == span.into_u64()) {
            values.record(&mut Fields(&mut s.fields));
        }
    }

    fn record_follows_from(&self, _: &Id, _: &Id) {}

    fn event(&self, event: &Event<'_>) {
        let mut st = self.0.state.lock().unwrap();
        let parent = match event.parent() {
            Some(p) => Some(p.into_u64()),
            None if event.is_contextual() => st.stack.last().copied(),
            None => None,
        };
        let mut fields = BTreeMap::new();
        event.record(&mut Fields(&mut fields));
        let meta = event.metadata();
        st.events.push(EventRec {
            name: meta.name(),
            level: *meta.level(),
            target: meta.target().to_owned(),
            parent,
            fields,
        });
    }

    fn enter(&self, span: &Id) {
        self.0.state.lock().unwrap().stack.push(span.into_u64());
    }

    fn exit(&self, span: &Id) {
        let mut st = self.0.state.lock().unwrap();
        if let Some(at) = st.stack.iter().rposition(|&id| id == span.into_u64()) {
            st.stack.remove(at);
        }
    }
}
