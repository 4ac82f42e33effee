//! `?` in a tonic handler (feature `tonic`): the errors of this crate as `tonic::Status`es.
//!
//! A handler behind the server layer finds the run's [`PgTransaction`](crate::PgTransaction) in
//! its request's extensions. Both of the errors its statements meet convert with `?`:
//! [`TransactionClosed`] directly, and a `sqlx::Error` through [`sqlx_status`](crate::sqlx_status),
//! whose [`Status`] becomes a `tonic::Status` with its reason as a
//! `google.rpc.ErrorInfo` (and, where it has one, its retry-after as a `RetryInfo`).
//!
//! ```
//! use idem_postgres::{sqlx_status, TransactionClosed};
//!
//! // A statement that failed because PostgreSQL went away, and a transaction that has ended.
//! fn insert_order(up: bool) -> Result<i64, sqlx::Error> {
//!     if up { Ok(7) } else { Err(sqlx::Error::PoolTimedOut) }
//! }
//! fn lock(open: bool) -> Result<(), TransactionClosed> {
//!     if open { Ok(()) } else { Err(TransactionClosed) }
//! }
//!
//! fn create_order(up: bool, open: bool) -> Result<tonic::Response<i64>, tonic::Status> {
//!     lock(open)?;
//!     let id = insert_order(up).map_err(sqlx_status)?;
//!     Ok(tonic::Response::new(id))
//! }
//!
//! let down = create_order(false, true).unwrap_err();
//! assert_eq!(down.code(), tonic::Code::Unavailable);
//! assert_eq!(down.metadata().get("idem-reason").unwrap(), "UPSTREAM_UNAVAILABLE");
//! let closed = create_order(true, false).unwrap_err();
//! assert_eq!(closed.code(), tonic::Code::Internal);
//! assert!(closed.message().contains("statements must run inside the action"));
//! assert_eq!(create_order(true, true).unwrap().into_inner(), 7);
//! ```

use idem_core::Status;

use crate::TransactionClosed;

/// `INTERNAL`, saying that statements must run inside the action, before it returns.
impl From<TransactionClosed> for tonic::Status {
    fn from(e: TransactionClosed) -> tonic::Status {
        tonic::Status::from(Status::from(e))
    }
}
