//! [`Operation`]: the handle a multi-step operation's handler runs its steps through.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use idem_core::run::{self, Run};
use idem_core::{Code, IdempotencyKey, Reason, Scope, Status};
use idem_dedup::remote::FencingToken;
use parking_lot::Mutex;

use super::output::StepOutput;
use crate::db::{ms, ms_i32, Db};
use crate::digest::ScopeDigest;
use crate::transaction::PgTransaction;

/// The target [`Operation::key_for`] derives a foreign step's key for (with the step's name):
/// `Run::key_for(STEP_TARGET, name)`.
pub const STEP_TARGET: &str = "idem.operation.step";

/// The longest step name, in bytes.
const MAX_NAME: usize = 128;

/// One run of a multi-step operation: its handler runs each step through it, and each step
/// either runs (and commits its recovery point) or, when an earlier run of the operation already
/// committed it, hands back what it returned then, without running. See
/// [`PgEngine::operation`](crate::PgEngine::operation) for the whole picture.
///
/// Cheap to clone (clones are the same run). A handler must call its steps in an order that
/// depends only on the request and on earlier steps' outputs, and give each step of a run its own
/// name: a name used twice in one run is refused, so a resumed run cannot mistake one step for
/// another.
#[derive(Clone)]
pub struct Operation(Arc<State>);

pub(crate) struct State {
    pub(crate) db: Arc<Db>,
    pub(crate) digest: ScopeDigest,
    pub(crate) scope: Scope,
    pub(crate) token: FencingToken,
    pub(crate) lease: Duration,
    pub(crate) lock_wait: Duration,
    pub(crate) run: Run,
    pub(crate) request: Arc<[u8]>,
    pub(crate) resumed: bool,
    /// Committed recovery points: loaded when the run began, and this run's own.
    pub(crate) committed: Mutex<HashMap<String, Vec<u8>>>,
    /// The names this run has asked for.
    pub(crate) used: Mutex<HashSet<String>>,
}

impl fmt::Debug for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Operation")
            .field("run", &self.0.run)
            .field("resumed", &self.0.resumed)
            .field("committed_steps", &self.0.committed.lock().len())
            .finish_non_exhaustive()
    }
}

impl Operation {
    pub(crate) fn new(state: State) -> Self {
        Operation(Arc::new(state))
    }

    /// The operation's scope: the intent it runs for.
    pub fn scope(&self) -> &Scope {
        &self.0.scope
    }

    /// The request the operation was first started with, as its caller gave it (a completer
    /// hands the stored one to the handler it drives the operation with).
    pub fn request(&self) -> &[u8] {
        &self.0.request
    }

    /// The fencing token of this run's claim.
    pub fn token(&self) -> FencingToken {
        self.0.token
    }

    /// The run (the scope, the token, whether it resumes, whether its claim was lost); it is
    /// also [`Run::current`] while the handler runs.
    pub fn run(&self) -> &Run {
        &self.0.run
    }

    /// Whether an earlier run began this operation (its committed steps are not run again).
    pub fn is_resumed(&self) -> bool {
        self.0.resumed
    }

    /// Whether the step `name` is committed (by this run or an earlier one).
    pub fn is_committed(&self, name: &str) -> bool {
        self.0.committed.lock().contains_key(name)
    }

    /// The key a foreign step named `name` is given: [`Run::key_for`] of [`STEP_TARGET`] and
    /// the name, the same in every run of the operation.
    pub fn key_for(&self, name: &str) -> IdempotencyKey {
        self.0.run.key_for(STEP_TARGET, name)
    }

    /// A local step: `step` gets a transaction of its own, and its writes commit together with
    /// the step's recovery point (its name and its output), fenced against this run's claim. A
    /// step an earlier run committed is not run: its stored output is returned.
    ///
    /// Inside the transaction, use [`PgTransaction::lock`] as in the transactional mode.
    ///
    /// # Errors
    ///
    /// - the step's own error (its writes roll back, nothing is recorded);
    /// - `INTERNAL` for an empty name, a name longer than 128 bytes or used twice in this run;
    /// - `UNAVAILABLE` / `FENCED_OUT` when another run holds the operation now (this run's lease
    ///   lapsed): the writes roll back;
    /// - `UNAVAILABLE` when the database fails (`UNKNOWN_OUTCOME` when the COMMIT got no
    ///   answer: a run that resumes finds out whether the step committed).
    pub async fn local<T, F, Fut>(&self, name: &str, step: F) -> Result<T, Status>
    where
        T: StepOutput,
        F: FnOnce(PgTransaction) -> Fut,
        Fut: Future<Output = Result<T, Status>>,
    {
        if let Some(bytes) = self.begin_step(name)? {
            return T::decode(&bytes);
        }
        let s = &self.0;
        let db = &s.db;
        let tx = db
            .query("begin", db.pool.begin())
            .await
            .map_err(|f| db.status(f))?;
        let handle = PgTransaction::new(tx, s.token, s.scope.clone());
        let result = step(handle.clone()).await;
        let Ok(Some(mut tx)) = tokio::time::timeout(db.query_timeout, handle.take()).await else {
            return Err(Status::new(
                Code::Internal,
                format!(
                    "the step \"{name}\" kept its transaction past its end: nothing was committed"
                ),
            ));
        };
        let bytes = result?.encode()?;
        let q = self.record(name, &bytes).fetch_one(&mut *tx);
        match db.timed("op_step", db.query_timeout, q).await {
            Ok(1) => {}
            Ok(_) => return Err(self.fenced(name)),
            Err(f) => return Err(db.status(f)),
        }
        match db.timed("commit", db.query_timeout, tx.commit()).await {
            Ok(()) => {}
            Err(f) if f.is_error_reply() => return Err(db.status(f)),
            Err(f) => {
                return Err(Status::new(
                    Code::Unavailable,
                    format!(
                    "the COMMIT of the step \"{name}\" got no answer ({f}): retry with the same \
                         key; the retry resumes after the step if it committed, and runs it if not"
                ),
                )
                .with_reason(Reason::UNKNOWN_OUTCOME))
            }
        }
        let value = T::decode(&bytes)?;
        s.committed.lock().insert(name.to_owned(), bytes);
        Ok(value)
    }

    /// A foreign step: a call to another service, given the key derived for this step
    /// ([`key_for`](Self::key_for)); its output is recorded once it returns, so a later run
    /// does not call again. A run that died after the call and before the record calls again
    /// with the same key, which the other service replays. Inside the call, idem's client layers
    /// derive the keys of writes sent without one from the step's name
    /// ([`idem_core::run::in_step`]), so those are stable across runs as well.
    ///
    /// # Errors
    ///
    /// - the call's own error (nothing is recorded; a retry calls again with the same key);
    /// - `INTERNAL` for an empty name, a name longer than 128 bytes or used twice in this run;
    /// - `UNAVAILABLE` / `FENCED_OUT` when another run holds the operation now: the output is
    ///   not recorded (that run calls again with the same key);
    /// - `UNAVAILABLE` when the record could not be written (the retry calls again with the
    ///   same key).
    pub async fn foreign<T, F, Fut>(&self, name: &str, call: F) -> Result<T, Status>
    where
        T: StepOutput,
        F: FnOnce(IdempotencyKey) -> Fut,
        Fut: Future<Output = Result<T, Status>>,
    {
        if let Some(bytes) = self.begin_step(name)? {
            return T::decode(&bytes);
        }
        let key = self.key_for(name);
        let value = run::in_step(name.to_owned(), call(key)).await?;
        let bytes = value.encode()?;
        let db = &self.0.db;
        let q = self.record(name, &bytes).fetch_one(&db.pool);
        match db.query("op_step", q).await {
            Ok(1) => {}
            Ok(_) => return Err(self.fenced(name)),
            Err(f) => return Err(db.status(f)),
        }
        self.0.committed.lock().insert(name.to_owned(), bytes);
        Ok(value)
    }

    /// The recovery point's statement: `op_step`, fenced on the token, renewing the lease.
    fn record<'q>(
        &'q self,
        name: &'q str,
        bytes: &'q [u8],
    ) -> sqlx::query::QueryScalar<'q, sqlx::Postgres, i16, sqlx::postgres::PgArguments> {
        let s = &self.0;
        sqlx::query_scalar::<_, i16>(&s.db.sql.op.step)
            .bind(s.digest.0)
            .bind(s.digest.lock_key())
            .bind(i64::try_from(s.token.get()).unwrap_or(i64::MAX))
            .bind(ms(s.lease))
            .bind(ms_i32(s.lock_wait))
            .bind(name)
            .bind(bytes)
    }

    /// Checks the name, marks it used, and gives the committed output if there is one. A step
    /// still to run needs the claim: refused once it is known lost.
    fn begin_step(&self, name: &str) -> Result<Option<Vec<u8>>, Status> {
        if name.is_empty() {
            return Err(Status::new(
                Code::Internal,
                "a step of an operation needs a name; an empty one was given",
            ));
        }
        if name.len() > MAX_NAME {
            return Err(Status::new(
                Code::Internal,
                format!(
                    "a step's name has at most {MAX_NAME} bytes; one of {} was given",
                    name.len()
                ),
            ));
        }
        if !self.0.used.lock().insert(name.to_owned()) {
            return Err(Status::new(
                Code::Internal,
                format!(
                    "the step name \"{name}\" is used twice in one operation: give each step its \
                     own name, so a resumed run can tell them apart"
                ),
            ));
        }
        if let Some(bytes) = self.0.committed.lock().get(name) {
            return Ok(Some(bytes.clone()));
        }
        if self.0.run.is_lease_lost() {
            return Err(self.fenced(name));
        }
        Ok(None)
    }

    /// Another run holds the operation now: this run's step was not recorded.
    fn fenced(&self, name: &str) -> Status {
        self.0.run.mark_lease_lost();
        Status::new(
            Code::Unavailable,
            format!(
                "another run took this operation over (this run's lease lapsed): the step \
                 \"{name}\" was not recorded; retry with the same key for that run's result"
            ),
        )
        .with_reason(Reason::FENCED_OUT)
    }
}
