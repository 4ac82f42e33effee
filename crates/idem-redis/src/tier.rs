//! [`RedisTier`]: the [`RemoteTier`] on Redis or Redis Cluster (D1–D3).

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
use redis::{Cmd, Value};

use crate::config::{RedisTierBuilder, TierSettings};
use crate::conn::{protocol, unavailable, Lua};
use crate::keys::{channel_pattern, ScopeKeys};
use crate::link::Link;
use crate::metrics::UNREPLICATED_TOTAL;
use crate::notifier::{self, Notifier};
use crate::persistence::Persistence;
use crate::scripts::{claim_reply, complete_reply, ClaimReply, Scripts};

/// The Redis tier: claims, completions and waits on one Redis server or one Redis Cluster
/// (D1–D3). Cheap to clone (clones share the connections).
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

/// Milliseconds for PX / PEXPIRE: at least 1.
fn ms(d: Duration) -> u64 {
    idem_core::whole_millis(d).max(1)
}

/// How long a scope's fence counter lives: past any record of the scope (a lease, then a TTL at
/// most); refreshed by every claim (see the crate docs on fencing).
fn fence_ttl(lease: Duration) -> Duration {
    lease * 2 + Duration::from_secs(24 * 3600)
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
        let (fp, lease_ms, fence_ms, owner_id) = (
            fingerprint.to_string(),
            ms(lease).to_string(),
            ms(fence_ttl(lease)).to_string(),
            owner.to_string(),
        );
        let keys = [k.record.as_str(), k.fence.as_str()];
        let args: [&[u8]; 4] = [
            fp.as_bytes(),
            lease_ms.as_bytes(),
            fence_ms.as_bytes(),
            owner_id.as_bytes(),
        ];
        let script = &self.inner.scripts.claim;
        let parse = |v: Value| claim_reply(v).ok_or_else(|| protocol("claim script"));
        let reply = match self.inner.wait_replicas {
            None => parse(self.eval(script, &keys, &args).await?)?,
            // D5: a claim a failover could lose would let another instance run the action
            // too, so with `wait_replicas` the action runs only once replicas have the claim.
            Some((replicas, wait)) => {
                let inner = &*self.inner;
                inner.commands.fetch_add(1, Relaxed);
                let r = inner
                    .link
                    .get()
                    .eval_and_wait(script, &keys, &args, replicas, wait, inner.command_timeout)
                    .await;
                inner.link.note(&r);
                let (v, acked) = r?;
                let reply = parse(v)?;
                if let ClaimReply::Claimed { token, .. } = reply {
                    if acked < i64::from(replicas) {
                        metrics::counter!(UNREPLICATED_TOTAL).increment(1);
                        // Give the scope back (best effort: otherwise it lapses with its lease).
                        let taken = Claim {
                            scope,
                            fingerprint,
                            token: FencingToken::new(token),
                            owner,
                        };
                        let _released = self.release(taken).await;
                        return Err(unavailable(format!(
                            "the claim was taken, but only {acked} of {replicas} replicas \
                             confirmed it within {} ms; the action did not run, so a failover \
                             cannot make it run twice",
                            wait.as_millis()
                        )));
                    }
                }
                reply
            }
        };
        Ok(match reply {
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
        })
    }

    async fn complete(
        &self,
        claim: Claim<'_>,
        value: Vec<u8>,
        ttl: Duration,
    ) -> Result<Commit, Status> {
        let k = self.keys(claim.scope);
        let inner = &*self.inner;
        let (token, owner, ttl_ms, fp) = (
            claim.token.get().to_string(),
            claim.owner.to_string(),
            ms(ttl).to_string(),
            claim.fingerprint.to_string(),
        );
        let keys = [k.record.as_str(), k.fence.as_str()];
        let args: [&[u8]; 6] = [
            token.as_bytes(),
            owner.as_bytes(),
            &value,
            ttl_ms.as_bytes(),
            k.channel.as_bytes(),
            fp.as_bytes(),
        ];
        let script = &inner.scripts.complete;
        let Some((replicas, wait)) = inner.wait_replicas else {
            let v = self.eval(script, &keys, &args).await?;
            return match complete_reply(v).ok_or_else(|| protocol("complete script"))? {
                Ok(()) => Ok(Commit::Committed),
                Err(_current) => Ok(Commit::FencedOut),
            };
        };
        inner.commands.fetch_add(1, Relaxed);
        let r = inner
            .link
            .get()
            .eval_and_wait(script, &keys, &args, replicas, wait, inner.command_timeout)
            .await;
        inner.link.note(&r);
        let (v, acked) = r?;
        match complete_reply(v).ok_or_else(|| protocol("complete script"))? {
            Err(_current) => Ok(Commit::FencedOut),
            Ok(()) if acked >= i64::from(replicas) => Ok(Commit::Committed),
            Ok(()) => {
                metrics::counter!(UNREPLICATED_TOTAL).increment(1);
                Err(unavailable(format!(
                    "the result was stored, but only {acked} of {replicas} replicas confirmed it \
                     within {} ms; a failover could still lose it",
                    wait.as_millis()
                )))
            }
        }
    }

    async fn release(&self, claim: Claim<'_>) -> Result<Commit, Status> {
        let k = self.keys(claim.scope);
        let token = claim.token.get().to_string();
        let v = self
            .eval(
                &self.inner.scripts.release,
                &[&k.record],
                &[token.as_bytes(), k.channel.as_bytes()],
            )
            .await?;
        match v {
            Value::Int(1) => Ok(Commit::Committed),
            Value::Int(0) => Ok(Commit::FencedOut),
            _ => Err(protocol("release script")),
        }
    }

    /// One script, without `WAIT` even with `wait_replicas`: a renewal a failover loses leaves
    /// the lease running from the renewal before it.
    async fn renew(&self, claim: Claim<'_>, lease: Duration) -> Result<Commit, Status> {
        let k = self.keys(claim.scope);
        let (token, lease_ms, fp, owner, fence_ms) = (
            claim.token.get().to_string(),
            ms(lease).to_string(),
            claim.fingerprint.to_string(),
            claim.owner.to_string(),
            ms(fence_ttl(lease)).to_string(),
        );
        let v = self
            .eval(
                &self.inner.scripts.renew,
                &[&k.record, &k.fence],
                &[
                    token.as_bytes(),
                    lease_ms.as_bytes(),
                    fp.as_bytes(),
                    owner.as_bytes(),
                    fence_ms.as_bytes(),
                ],
            )
            .await?;
        match v {
            Value::Int(1) => Ok(Commit::Committed),
            Value::Int(0) => Ok(Commit::FencedOut),
            _ => Err(protocol("renew script")),
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
        let mut notified = pin!(watch.notified());
        notified.as_mut().enable();
        // Registered: now a completion cannot slip by unseen. Did one happen since the claim?
        let mut cmd = Cmd::new();
        cmd.arg("HMGET").arg(&k.record).arg("st").arg("tok");
        inner.commands.fetch_add(1, Relaxed);
        let r = inner.link.get().query(&cmd, inner.command_timeout).await;
        inner.link.note(&r);
        let (st, tok): (Option<String>, Option<u64>) = r?;
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
        inner.commands.fetch_add(1, Relaxed);
        let r = inner
            .link
            .get()
            .query_pipe(&pipe, inner.command_timeout)
            .await;
        inner.link.note(&r);
        let ((st, tok), pttl): ((Option<String>, Option<u64>), i64) = r?;
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
        let v = self
            .eval(
                &self.inner.scripts.forget,
                &[&k.record],
                &[k.channel.as_bytes()],
            )
            .await?;
        match v {
            Value::Int(n) => Ok(n > 0),
            _ => Err(protocol("forget script")),
        }
    }
}
