//! How a call is seen: its span and its latency, timed from the shard's answer.

use std::future::Future;
use std::pin::Pin;

use idem_core::Scope;
use tokio::time::Instant;
use tracing::Instrument;

use crate::trace;
use crate::{DedupError, Outcome, OutcomeKind};

use super::Engine;

impl<V: Clone + Send + Sync + 'static> Engine<V> {
    /// `wait` boxed, in the call's span, which records how it ended.
    pub(super) fn traced<'a, W>(
        &self,
        scope: &Scope,
        wait: W,
    ) -> Pin<Box<impl Future<Output = Result<Outcome<V>, DedupError>> + 'a>>
    where
        W: Future<Output = Result<Outcome<V>, DedupError>> + 'a,
    {
        let span = self.span(scope);
        let end = span.clone();
        let recorded = async move {
            let answer = wait.await;
            trace::record_end(&end, &answer);
            answer
        };
        Box::pin(recorded.instrument(span))
    }

    /// The span of a call answered at once, without a wait: a replay served by the
    /// read path (`Ok`), or a refusal. Out of line, out of the replay's way.
    #[cold]
    #[inline(never)]
    pub(super) fn trace_now(&self, scope: &Scope, answer: Result<OutcomeKind, DedupError>) {
        let span = self.span(scope);
        if span.is_disabled() {
            return;
        }
        match answer {
            Ok(kind) => {
                span.record("outcome", kind.as_str());
            }
            Err(e) => trace::record_error(&span, &e),
        }
    }

    /// The span of a call for `scope`.
    pub(super) fn span(&self, scope: &Scope) -> tracing::Span {
        let cfg = &self.inner.cfg;
        trace::call_span(&cfg.name, cfg.scope_logging, scope)
    }

    /// Times a call that reached the shard: from `start` until `end` (a clock read
    /// the call already made) or now.
    pub(super) fn finish(
        &self,
        start: Instant,
        end: Option<Instant>,
        answer: &Result<Outcome<V>, DedupError>,
    ) {
        let took = end
            .unwrap_or_else(Instant::now)
            .saturating_duration_since(start);
        self.inner.latency.record(took, answer);
    }
}
