//! Claims and completions that travel together: while earlier script calls are on the wire, the
//! claims and completions that runs start meanwhile queue up, and the next call carries all of
//! them (at most [`RedisTierBuilder::max_batch`](crate::RedisTierBuilder::max_batch)) in one
//! script, each run as its own script would run it.
//!
//! Redis spends most of a small script call on the call itself (reading it, starting the
//! script, writing the reply), so a call that carries several scopes costs Redis much less per
//! scope, and the client writes and reads once for all of them. A lone call is sent at once: a
//! batch forms only while [`IN_FLIGHT`] calls are already waiting for their replies.
//!
//! Only on one Redis server without `wait_replicas`: a script on Redis Cluster may touch one slot
//! only, and a `WAIT` answers for the whole connection, not for one scope.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use idem_core::Status;
use redis::Value;
use tokio::sync::{mpsc, oneshot, Semaphore};

use crate::conn::{failed, protocol, unavailable, Lua};
use crate::link::Link;

/// Script calls of batches on the wire at once; a caller that finds them all waiting joins the
/// next batch.
pub(crate) const IN_FLIGHT: usize = 2;

/// Queued calls the batcher holds before a caller waits for room (backpressure, not a limit
/// anyone reaches in practice: each run has at most one claim or completion queued).
const QUEUE: usize = 4_096;

/// Which script function a queued call runs.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Kind {
    Claim,
    Complete,
}

impl Kind {
    fn tag(self) -> &'static [u8] {
        match self {
            Kind::Claim => b"c",
            Kind::Complete => b"d",
        }
    }
}

struct Job {
    keys: [String; 2],
    kind: Kind,
    args: Vec<Vec<u8>>,
    reply: oneshot::Sender<Result<Value, Status>>,
}

/// The queue in front of the batch script; its task ends when the last tier clone is dropped.
pub(crate) struct Batcher {
    tx: mpsc::Sender<Job>,
}

impl Batcher {
    /// Starts the batcher's task (on the current runtime).
    pub(crate) fn start(
        link: Arc<Link>,
        script: Lua,
        limit: Duration,
        max: usize,
        commands: Arc<AtomicU64>,
    ) -> Self {
        let (tx, rx) = mpsc::channel(QUEUE);
        let send = Send {
            link,
            script,
            limit,
            commands,
        };
        tokio::spawn(collect(rx, Arc::new(send), max));
        Batcher { tx }
    }

    /// Runs one claim or completion (the record and fence keys of its scope, the arguments of its
    /// script) in the next batch, and returns its own reply.
    pub(crate) async fn call(
        &self,
        kind: Kind,
        keys: [String; 2],
        args: Vec<Vec<u8>>,
    ) -> Result<Value, Status> {
        let (reply, answer) = oneshot::channel();
        let job = Job {
            keys,
            kind,
            args,
            reply,
        };
        let gone = || unavailable("the redis tier has shut down".to_owned());
        self.tx.send(job).await.map_err(|_| gone())?;
        answer.await.map_err(|_| gone())?
    }
}

/// What a batch is sent with.
struct Send {
    link: Arc<Link>,
    script: Lua,
    limit: Duration,
    commands: Arc<AtomicU64>,
}

/// Takes what is queued, up to `max`, whenever fewer than [`IN_FLIGHT`] batches are on the wire.
async fn collect(mut rx: mpsc::Receiver<Job>, send: Arc<Send>, max: usize) {
    let room = Arc::new(Semaphore::new(IN_FLIGHT));
    let mut jobs = Vec::with_capacity(max);
    loop {
        let Ok(permit) = room.clone().acquire_owned().await else {
            return;
        };
        if rx.recv_many(&mut jobs, max).await == 0 {
            return; // every tier clone is gone
        }
        let batch = std::mem::replace(&mut jobs, Vec::with_capacity(max));
        let send = send.clone();
        tokio::spawn(async move {
            send.batch(batch).await;
            drop(permit);
        });
    }
}

/// The message of a call whose command failed inside the batch script (`{-1, message}`); the
/// others in the batch ran.
fn failed_inside(v: &Value) -> Option<String> {
    match v {
        Value::Array(items) => match items.as_slice() {
            [Value::Int(-1), Value::BulkString(m)] => Some(String::from_utf8_lossy(m).into_owned()),
            _ => None,
        },
        _ => None,
    }
}

impl Send {
    /// One script call for the batch; each caller gets its own reply, or the call's error.
    async fn batch(&self, batch: Vec<Job>) {
        let keys: Vec<&str> = batch
            .iter()
            .flat_map(|j| j.keys.iter().map(String::as_str))
            .collect();
        let mut args: Vec<&[u8]> = Vec::with_capacity(batch.iter().map(|j| j.args.len() + 1).sum());
        for j in &batch {
            args.push(j.kind.tag());
            args.extend(j.args.iter().map(Vec::as_slice));
        }
        self.commands.fetch_add(1, Relaxed);
        let r = self
            .link
            .get()
            .eval(&self.script, &keys, &args, self.limit)
            .await;
        self.link.note(&r);
        match r {
            Ok(Value::Array(replies)) if replies.len() == batch.len() => {
                for (job, v) in batch.into_iter().zip(replies) {
                    let v = match failed_inside(&v) {
                        Some(message) => Err(failed(message)),
                        None => Ok(v),
                    };
                    let _ = job.reply.send(v);
                }
            }
            Ok(_) => {
                for job in batch {
                    let _ = job.reply.send(Err(protocol("batch script")));
                }
            }
            Err(status) => {
                for job in batch {
                    let _ = job.reply.send(Err(status.clone()));
                }
            }
        }
    }
}
