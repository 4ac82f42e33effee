//! [`RedisTier`]: the [`RemoteTier`](idem_dedup::remote::RemoteTier) on Redis or Redis Cluster.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use idem_core::{Scope, Status};
use redis::Value;

use crate::config::{RedisTierBuilder, TierSettings};
use crate::conn::Lua;
use crate::keys::{channel_pattern, ScopeKeys};
use crate::link::Link;
use crate::notifier::{self, Notifier};
use crate::persistence::Persistence;
use crate::scripts::Scripts;

mod remote;

/// The Redis tier: claims, completions and waits on one Redis server or one Redis Cluster.
/// Cheap to clone (clones share the connections).
///
/// Build it with [`RedisTier::builder`] and put it behind a [`TieredEngine`](crate::TieredEngine);
/// see the [crate docs](crate) for the protocol, the key layout and the defaults.
///
/// Every call has a time limit ([`RedisTierBuilder::command_timeout`]); a call that fails or
/// passes it answers `UNAVAILABLE` with reason `UPSTREAM_UNAVAILABLE` (retryable).
#[derive(Clone)]
pub struct RedisTier {
    inner: Arc<Inner>,
}

struct Inner {
    link: Arc<Link>,
    scripts: Scripts,
    prefix: String,
    command_timeout: Duration,
    wait_replicas: Option<(u32, Duration)>,
    persistence: Persistence,
    notifier: Arc<Notifier>,
    subscriber: Option<tokio::task::JoinHandle<()>>,
    commands: AtomicU64,
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(s) = &self.subscriber {
            s.abort();
        }
    }
}

impl fmt::Debug for RedisTier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisTier")
            .field("prefix", &self.inner.prefix)
            .field("cluster", &self.inner.link.is_cluster())
            .field("command_timeout", &self.inner.command_timeout)
            .field("persistence", &self.inner.persistence)
            .field("wait_replicas", &self.inner.wait_replicas)
            .field("subscribed", &self.inner.notifier.is_subscribed())
            .field("reconnects", &self.inner.link.reconnects())
            .finish_non_exhaustive()
    }
}

impl RedisTier {
    /// A builder with every default (see [`RedisTierBuilder`]).
    pub fn builder() -> RedisTierBuilder {
        RedisTierBuilder::new()
    }

    pub(crate) async fn start(
        link: Arc<Link>,
        pubsub_clients: Vec<redis::Client>,
        settings: TierSettings,
    ) -> Self {
        let TierSettings {
            prefix,
            command_timeout,
            connect_timeout,
            wait_replicas,
            persistence,
        } = settings;
        let notifier = Notifier::new(prefix.clone());
        let subscriber = (!pubsub_clients.is_empty()).then(|| {
            tokio::spawn(notifier::run(
                Arc::downgrade(&notifier),
                pubsub_clients,
                channel_pattern(&prefix),
                connect_timeout,
            ))
        });
        let scripts = Scripts::new();
        let conn = link.get();
        for s in [
            &scripts.claim,
            &scripts.complete,
            &scripts.release,
            &scripts.renew,
            &scripts.forget,
        ] {
            conn.preload(s, command_timeout).await;
        }
        RedisTier {
            inner: Arc::new(Inner {
                link,
                scripts,
                prefix,
                command_timeout,
                wait_replicas,
                persistence,
                notifier,
                subscriber,
                commands: AtomicU64::new(0),
            }),
        }
    }

    /// Redis calls this tier has made (scripts and reads; the subscriber's own traffic is not
    /// counted). A replay served by the local engine adds nothing.
    pub fn commands_sent(&self) -> u64 {
        self.inner.commands.load(Relaxed)
    }

    /// Whether the pub/sub subscriber is connected (waits fall back to polling while it is not).
    pub fn is_subscribed(&self) -> bool {
        self.inner.notifier.is_subscribed()
    }

    /// The key prefix.
    pub fn prefix(&self) -> &str {
        &self.inner.prefix
    }

    /// What the server (the weakest primary of a cluster) kept across a restart when the tier
    /// connected (see [`Persistence`] and [`RedisTierBuilder::allow_volatile`]).
    pub fn persistence(&self) -> Persistence {
        self.inner.persistence
    }

    /// How many times the health check replaced the connection with a fresh client because
    /// calls kept failing (see [`RedisTierBuilder::health_window`]).
    pub fn reconnects(&self) -> u64 {
        self.inner.link.reconnects()
    }

    fn keys(&self, scope: &Scope) -> ScopeKeys {
        ScopeKeys::new(&self.inner.prefix, scope)
    }

    /// Runs a script on the current connection, noting the result for the health check.
    async fn eval(&self, script: &Lua, keys: &[&str], args: &[&[u8]]) -> Result<Value, Status> {
        let inner = &*self.inner;
        inner.commands.fetch_add(1, Relaxed);
        let r = inner
            .link
            .get()
            .eval(script, keys, args, inner.command_timeout)
            .await;
        inner.link.note(&r);
        r
    }
}
