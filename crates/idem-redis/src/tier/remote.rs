//! How [`RedisTier`] answers the [`RemoteTier`] calls: one script or pipeline per call, waits on
//! the completion notices with a bounded sleep behind them.

use std::pin::pin;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use idem_core::{Fingerprint, Scope, Status};
use idem_dedup::remote::{
    Claim, ClaimOutcome, Commit, FencingToken, OwnerId, RecordState, RemoteRecord, RemoteTier,
};
use redis::{Cmd, Value};

use crate::conn::{protocol, unavailable};
use crate::metrics::UNREPLICATED_TOTAL;
use crate::scripts::{claim_reply, complete_reply, ClaimReply};
use crate::RedisTier;

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
            _ = tokio::time::sleep(at_most) => {}
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
