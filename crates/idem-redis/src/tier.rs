//! [`RedisTier`]: the [`RemoteTier`] on Redis or Redis Cluster (SPEC D1–D3).

use std::fmt;
use std::pin::pin;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use idem_core::{Fingerprint, Scope, Status};
use idem_dedup::remote::{
    Claim, ClaimOutcome, Commit, FencingToken, OwnerId, RecordState, RemoteRecord, RemoteTier,
};
use idem_retry::{Scheduler, TokioScheduler};
use redis::Cmd;

use crate::config::RedisTierBuilder;
use crate::conn::{protocol, Conn};
use crate::keys::{channel_pattern, ScopeKeys};
use crate::notifier::{self, Notifier};
use crate::scripts::{claim_reply, complete_reply, ClaimReply, Scripts};

/// The Redis tier: claims, completions and waits on one Redis server or one Redis Cluster
/// (SPEC D1–D3). Cheap to clone (clones share the connections).
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
    conn: Conn,
    scripts: Scripts,
    prefix: String,
    command_timeout: Duration,
    notifier: Arc<Notifier>,
    subscriber: tokio::task::JoinHandle<()>,
    commands: AtomicU64,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.subscriber.abort();
    }
}

impl fmt::Debug for RedisTier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisTier")
            .field("prefix", &self.inner.prefix)
            .field("cluster", &matches!(self.inner.conn, Conn::Cluster(_)))
            .field("command_timeout", &self.inner.command_timeout)
            .field("subscribed", &self.inner.notifier.is_subscribed())
            .finish_non_exhaustive()
    }
}

impl RedisTier {
    /// A builder with every default (see [`RedisTierBuilder`]).
    pub fn builder() -> RedisTierBuilder {
        RedisTierBuilder::new()
    }

    pub(crate) async fn start(
        conn: Conn,
        pubsub_clients: Vec<redis::Client>,
        prefix: String,
        command_timeout: Duration,
        connect_timeout: Duration,
    ) -> Self {
        let notifier = Notifier::new(prefix.clone());
        let subscriber = tokio::spawn(notifier::run(
            Arc::downgrade(&notifier),
            pubsub_clients,
            channel_pattern(&prefix),
            connect_timeout,
        ));
        let scripts = Scripts::new();
        for s in [
            &scripts.claim,
            &scripts.complete,
            &scripts.release,
            &scripts.forget,
        ] {
            conn.preload(s, command_timeout).await;
        }
        RedisTier {
            inner: Arc::new(Inner {
                conn,
                scripts,
                prefix,
                command_timeout,
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

    fn keys(&self, scope: &Scope) -> ScopeKeys {
        ScopeKeys::new(&self.inner.prefix, scope)
    }

    fn count(&self) {
        self.inner.commands.fetch_add(1, Relaxed);
    }
}

/// Milliseconds for PX / PEXPIRE: at least 1.
fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

impl RemoteTier for RedisTier {
    async fn claim(
        &self,
        scope: &Scope,
        fingerprint: Fingerprint,
        lease: Duration,
        owner: OwnerId,
    ) -> Result<ClaimOutcome, Status> {
        let k = self.keys(scope);
        let inner = &*self.inner;
        // The fence counter outlives any record of the scope: a lease, then a TTL at most. It is
        // refreshed by every claim (see the crate docs on fencing).
        let fence_ttl = lease * 2 + Duration::from_secs(24 * 3600);
        let mut inv = inner.scripts.claim.prepare_invoke();
        inv.key(&k.record)
            .key(&k.fence)
            .arg(fingerprint.to_string())
            .arg(ms(lease))
            .arg(ms(fence_ttl))
            .arg(owner.to_string());
        self.count();
        let v = inner.conn.invoke(&inv, inner.command_timeout).await?;
        Ok(
            match claim_reply(v).ok_or_else(|| protocol("claim script"))? {
                ClaimReply::Claimed { token, reclaimed } => ClaimOutcome::Claimed {
                    token: FencingToken::new(token),
                    reclaimed,
                },
                ClaimReply::InFlight { holder, pttl_ms } => ClaimOutcome::InFlightElsewhere {
                    holder: FencingToken::new(holder),
                    lease_left: Duration::from_millis(u64::try_from(pttl_ms).unwrap_or(0)),
                },
                ClaimReply::Completed(v) => ClaimOutcome::Completed(v),
                ClaimReply::Conflict => ClaimOutcome::Conflict,
            },
        )
    }

    async fn complete(
        &self,
        claim: Claim<'_>,
        value: Vec<u8>,
        ttl: Duration,
    ) -> Result<Commit, Status> {
        let k = self.keys(claim.scope);
        let inner = &*self.inner;
        let mut inv = inner.scripts.complete.prepare_invoke();
        inv.key(&k.record)
            .key(&k.fence)
            .arg(claim.token.get())
            .arg(claim.owner.to_string())
            .arg(value)
            .arg(ms(ttl))
            .arg(&k.channel)
            .arg(claim.fingerprint.to_string());
        self.count();
        let v = inner.conn.invoke(&inv, inner.command_timeout).await?;
        match complete_reply(v).ok_or_else(|| protocol("complete script"))? {
            Ok(()) => Ok(Commit::Committed),
            Err(_current) => Ok(Commit::FencedOut),
        }
    }

    async fn release(&self, claim: Claim<'_>) -> Result<Commit, Status> {
        let k = self.keys(claim.scope);
        let inner = &*self.inner;
        let mut inv = inner.scripts.release.prepare_invoke();
        inv.key(&k.record).arg(claim.token.get()).arg(&k.channel);
        self.count();
        let v: redis::Value = inner.conn.invoke(&inv, inner.command_timeout).await?;
        match v {
            redis::Value::Int(1) => Ok(Commit::Committed),
            redis::Value::Int(0) => Ok(Commit::FencedOut),
            _ => Err(protocol("release script")),
        }
    }

    async fn wait(
        &self,
        scope: &Scope,
        holder: FencingToken,
        at_most: Duration,
    ) -> Result<(), Status> {
        let k = self.keys(scope);
        let inner = &*self.inner;
        let watch = inner.notifier.watch(k.tag);
        let mut notified = pin!(watch.notify.notified());
        notified.as_mut().enable();
        // Registered: now a completion cannot slip by unseen. Did one happen since the claim?
        let mut cmd = Cmd::new();
        cmd.arg("HMGET").arg(&k.record).arg("st").arg("tok");
        self.count();
        let (st, tok): (Option<String>, Option<u64>) =
            inner.conn.query(&cmd, inner.command_timeout).await?;
        if st.as_deref() != Some("run") || tok != Some(holder.get()) {
            return Ok(());
        }
        tokio::select! {
            _ = notified => {}
            _ = TokioScheduler.sleep(at_most) => {}
        }
        Ok(())
    }

    async fn lookup(&self, scope: &Scope) -> Result<Option<RemoteRecord>, Status> {
        let k = self.keys(scope);
        let inner = &*self.inner;
        let mut pipe = redis::pipe();
        pipe.cmd("HMGET")
            .arg(&k.record)
            .arg("st")
            .arg("tok")
            .cmd("PTTL")
            .arg(&k.record);
        self.count();
        let ((st, tok), pttl): ((Option<String>, Option<u64>), i64) =
            inner.conn.query_pipe(&pipe, inner.command_timeout).await?;
        let expires_in = u64::try_from(pttl).ok().map(Duration::from_millis);
        Ok(match st.as_deref() {
            Some("run") => Some(RemoteRecord {
                state: RecordState::InFlight {
                    holder: FencingToken::new(tok.unwrap_or(0)),
                },
                expires_in,
            }),
            Some("done") => Some(RemoteRecord {
                state: RecordState::Completed,
                expires_in,
            }),
            _ => None,
        })
    }

    async fn forget(&self, scope: &Scope) -> Result<bool, Status> {
        let k = self.keys(scope);
        let inner = &*self.inner;
        let mut inv = inner.scripts.forget.prepare_invoke();
        inv.key(&k.record).arg(&k.channel);
        self.count();
        let v: redis::Value = inner.conn.invoke(&inv, inner.command_timeout).await?;
        match v {
            redis::Value::Int(n) => Ok(n > 0),
            _ => Err(protocol("forget script")),
        }
    }
}
