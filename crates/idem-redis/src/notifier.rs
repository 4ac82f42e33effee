//! Completion notices through pub/sub, so waiting instances wake when the holder completes.
//!
//! Each [`RedisTier`](crate::RedisTier) keeps one subscriber connection with one pattern
//! subscription to every completion channel under its prefix (`P{*}:done`). Completion scripts
//! publish only when a waiter marked the record, so the traffic is one message per cross-instance
//! join, not per call. A message wakes the local waiters of that scope (a map from scope tag to a
//! [`Notify`]); messages for scopes nobody here waits on are dropped.
//!
//! Pub/sub is a fast path, not a guarantee: while the subscriber is down (Redis restarting, a
//! cluster node gone) messages are lost, so every wait is also bounded by a polling interval (see
//! [`TieredBuilder::poll_interval`](crate::TieredBuilder::poll_interval)). When the subscriber
//! reconnects it wakes every waiter, which then re-read their records.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use futures::StreamExt;
use idem_dedup::remote::{Waiters, Waiting};

use crate::keys::{tag_of_channel, Tag};

/// Local waiters by scope tag.
#[derive(Debug)]
pub(crate) struct Notifier {
    prefix: String,
    waiters: Arc<Waiters<Tag>>,
    subscribed: AtomicBool,
}

impl Notifier {
    pub(crate) fn new(prefix: String) -> Arc<Self> {
        Arc::new(Notifier {
            prefix,
            waiters: Arc::default(),
            subscribed: AtomicBool::new(false),
        })
    }

    /// Registers interest in a scope's completion.
    pub(crate) fn watch(&self, tag: Tag) -> Waiting<Tag> {
        self.waiters.watch(tag)
    }

    /// Whether the subscriber connection is up.
    pub(crate) fn is_subscribed(&self) -> bool {
        self.subscribed.load(Ordering::Relaxed)
    }

    fn dispatch(&self, channel: &[u8]) {
        if let Some(tag) = tag_of_channel(&self.prefix, channel) {
            self.waiters.wake(&tag);
        }
    }

    fn wake_all(&self) {
        self.waiters.wake_all();
    }
}

/// The subscriber task: connects to one of `clients` (rotating on failure), subscribes to
/// `pattern`, dispatches messages; reconnects with a capped backoff. Ends
/// when the notifier is dropped (the tier also aborts it on drop).
pub(crate) async fn run(
    notifier: Weak<Notifier>,
    clients: Vec<redis::Client>,
    pattern: String,
    connect_timeout: Duration,
) {
    let mut backoff = Duration::from_millis(50);
    let mut next = 0usize;
    loop {
        let client = &clients[next % clients.len()];
        next += 1;
        let connected = tokio::time::timeout(connect_timeout, async {
            let mut ps = client.get_async_pubsub().await?;
            ps.psubscribe(&pattern).await?;
            Ok::<_, redis::RedisError>(ps)
        })
        .await;
        if let Ok(Ok(pubsub)) = connected {
            let Some(n) = notifier.upgrade() else { return };
            n.subscribed.store(true, Ordering::Relaxed);
            // Messages may have been missed while we were away: let every waiter re-read.
            n.wake_all();
            drop(n);
            backoff = Duration::from_millis(50);
            let mut stream = pubsub.into_on_message();
            while let Some(msg) = stream.next().await {
                let Some(n) = notifier.upgrade() else { return };
                n.dispatch(msg.get_channel_name().as_bytes());
            }
            let Some(n) = notifier.upgrade() else { return };
            n.subscribed.store(false, Ordering::Relaxed);
            n.wake_all();
        }
        if notifier.strong_count() == 0 {
            return;
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(1));
    }
}
