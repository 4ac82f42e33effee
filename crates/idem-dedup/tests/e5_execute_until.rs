//! E5, T5: `Deduplicator::execute_until` is one call with an optional deadline, on every
//! engine: without one the caller waits for the run; with one it stops waiting then, and the
//! run goes on and is stored for the retry.

mod common;
mod tier;

use std::time::Duration;

use common::{fp, scope, Runs};
use idem_core::{Deadline, Status};
use idem_dedup::tiered::TieredEngine;
use idem_dedup::{DedupError, Deduplicator, Engine, LocalCache, OutcomeKind};
use tier::MemTier;

/// A slow write (200 ms of the paused clock), run twice: once past the caller's deadline, then
/// without one.
async fn deadline_then_none<D: Deduplicator<Value = String>>(d: &D) {
    let s = scope("order-until-0001");
    let runs = Runs::default();
    let slow = |runs: Runs| {
        move |_| async move {
            runs.hit();
            tokio::time::sleep(Duration::from_millis(200)).await;
            Ok::<_, Status>("order-1001".to_owned())
        }
    };
    let soon = Some(Deadline::after(Duration::from_millis(50)));
    let err = d
        .execute_until(&s, fp("x"), soon, slow(runs.clone()))
        .await
        .unwrap_err();
    assert_eq!(err, DedupError::DeadlineExceeded);
    // No deadline: the retry waits for the run that goes on, and gets its result.
    let out = d
        .execute_until(&s, fp("x"), None, slow(runs.clone()))
        .await
        .unwrap();
    assert_eq!(out.value(), "order-1001");
    assert_ne!(out.kind(), OutcomeKind::Executed);
    assert_eq!(runs.get(), 1);
}

#[tokio::test(start_paused = true)]
async fn e5_execute_until_stops_at_its_deadline_and_waits_without_one() {
    let engine = Engine::<String>::builder().shards(1).build().unwrap();
    deadline_then_none(&engine).await;
}

#[tokio::test(start_paused = true)]
async fn e5_t5_a_tiered_engines_execute_until_does_the_same() {
    let tiered = TieredEngine::<String, MemTier>::builder(MemTier::default())
        .local(LocalCache::new().shards(1))
        .build()
        .unwrap();
    deadline_then_none(&tiered).await;
}
