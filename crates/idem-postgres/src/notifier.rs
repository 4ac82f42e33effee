//! Completion notices through LISTEN/NOTIFY, so a waiting instance wakes when the holder
//! completes or releases.
//!
//! Each [`PgTier`](crate::PgTier) keeps one listening connection (taken from the pool for good)
//! on one channel per schema, `<schema>.done`. The schema's `complete` and `release` functions
//! send `NOTIFY` only when a waiter marked the row (`awaited`), so the traffic is one notice per
//! cross-instance wait, not per call: a `NOTIFY` serializes the commits that send one, and most
//! commits need none. The payload is the scope's digest in hex; a notice wakes this instance's
//! waiters of that scope, others are dropped.
//!
//! Notices are a fast path, not a guarantee: while the listening connection is down
//! (PostgreSQL restarting) they are lost, so every wait is also bounded by the polling interval
//! ([`TieredBuilder::poll_interval`](idem_dedup::tiered::TieredBuilder::poll_interval)), and the
//! listener wakes every waiter when it reconnects.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use idem_dedup::remote::{Waiters, Waiting};
use sqlx::postgres::PgListener;
use sqlx::PgPool;

use crate::digest::ScopeDigest;

/// Local waiters by scope digest.
#[derive(Debug, Default)]
pub(crate) struct Notifier {
    waiters: Arc<Waiters<ScopeDigest>>,
    listening: AtomicBool,
}

impl Notifier {
    /// Registers interest in a scope's completion.
    pub(crate) fn watch(&self, digest: ScopeDigest) -> Waiting<ScopeDigest> {
        self.waiters.watch(digest)
    }

    /// Whether the listening connection is up.
    pub(crate) fn is_listening(&self) -> bool {
        self.listening.load(Ordering::Relaxed)
    }

    fn dispatch(&self, payload: &str) {
        if let Some(digest) = ScopeDigest::from_hex(payload) {
            self.waiters.wake(&digest);
        }
    }

    fn wake_all(&self) {
        self.waiters.wake_all();
    }
}

/// The listener task: listens on `channel` through a connection of `pool`, dispatches notices,
/// and reconnects (with a capped backoff on tokio's timer) when the connection is lost. Ends
/// when the notifier is dropped (the tier also aborts it on drop).
pub(crate) async fn run(notifier: Weak<Notifier>, pool: PgPool, channel: String) {
    let mut backoff = Duration::from_millis(50);
    loop {
        let listener = async {
            let mut l = PgListener::connect_with(&pool).await?;
            l.listen(&channel).await?;
            Ok::<_, sqlx::Error>(l)
        }
        .await;
        if let Ok(mut listener) = listener {
            let Some(n) = notifier.upgrade() else { return };
            n.listening.store(true, Ordering::Relaxed);
            // Notices may have been missed while we were away: let every waiter re-read.
            n.wake_all();
            drop(n);
            backoff = Duration::from_millis(50);
            loop {
                let got = listener.try_recv().await;
                let Some(n) = notifier.upgrade() else { return };
                match got {
                    Ok(Some(notice)) => n.dispatch(notice.payload()),
                    // The connection was lost and taken up again: notices may be lost.
                    Ok(None) => n.wake_all(),
                    Err(_) => {
                        n.listening.store(false, Ordering::Relaxed);
                        n.wake_all();
                        break;
                    }
                }
            }
        }
        if notifier.strong_count() == 0 {
            return;
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(1));
    }
}
