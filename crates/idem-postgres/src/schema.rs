//! The schema shipped with the crate, its name, and [`migrate`] (D4).

use std::fmt;
use std::time::Duration;

use sqlx::PgPool;

use crate::db::{probe, Unreachable};

/// How long the diagnosis of a pool that timed out at set-up may try to connect.
const PROBE: Duration = Duration::from_secs(1);

/// The schema's SQL (`sql/schema.sql` in the crate), with `__SCHEMA__` where the schema's quoted
/// name goes. [`migrate`] applies it; [`schema_sql`] gives it ready to run, for deployments
/// that apply DDL with their own migration tool.
pub const SCHEMA_SQL: &str = include_str!("../sql/schema.sql");

/// The version of [`SCHEMA_SQL`] (recorded in the schema's `schema_version` table).
pub const SCHEMA_VERSION: i32 = 1;

/// The schema idem's table, sequence and functions live in, unless configured: `idem`.
pub const DEFAULT_SCHEMA: &str = "idem";

/// The advisory lock key that serializes concurrent migrations (any constant; this one spells
/// "idem" and the schema version).
const MIGRATE_LOCK: i64 = 0x6964_656d_0000_0001;

/// Why a tier or engine could not be set up, or the schema not applied.
///
/// Each variant's message says everything it knows once: an error inside (a `sqlx::Error`)
/// is a field to match on, not also a [`source`](std::error::Error::source), so a report that
/// prints the chain does not repeat it.
///
/// ```
/// use idem_postgres::SetupError;
///
/// let e = SetupError::Unreachable {
///     address: "127.0.0.1:5999".into(),
///     reason: "connection refused".into(),
/// };
/// assert_eq!(e.to_string(), "cannot connect to PostgreSQL at 127.0.0.1:5999: connection refused");
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum SetupError {
    /// A setting is out of range; the message names the rule.
    Invalid(&'static str),
    /// The database refused or failed.
    Database(sqlx::Error),
    /// No connection to the database opened: nothing listens at the address (the connection
    /// was refused), the server is starting or stopping, or the network failed. The pool says
    /// only that it timed out; a direct connection attempt found this.
    Unreachable {
        /// Where the pool connects: `host:port`, or the Unix socket's path.
        address: String,
        /// What the attempt met, in words: `connection refused`, ...
        reason: String,
    },
    /// The database did not answer within this long.
    Timeout(Duration),
    /// `build()` was called outside a tokio runtime; the local engine and the sweeper need one.
    NoRuntime,
}

impl fmt::Display for SetupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SetupError::Invalid(rule) => write!(f, "invalid idem-postgres setting: {rule}"),
            SetupError::Database(e) => write!(f, "PostgreSQL failed: {e}"),
            SetupError::Unreachable { address, reason } => {
                write!(f, "cannot connect to PostgreSQL at {address}: {reason}")
            }
            SetupError::Timeout(d) => {
                write!(f, "PostgreSQL did not answer within {} ms", d.as_millis())
            }
            SetupError::NoRuntime => f.write_str(
                "the PostgreSQL engine must be built inside a tokio runtime (its local engine \
                 and sweeper are tasks)",
            ),
        }
    }
}

/// No source: the message already holds the inner error's text (see the type's docs).
impl std::error::Error for SetupError {}

impl From<sqlx::Error> for SetupError {
    fn from(e: sqlx::Error) -> Self {
        SetupError::Database(e)
    }
}

impl From<Unreachable> for SetupError {
    fn from(u: Unreachable) -> Self {
        SetupError::Unreachable {
            address: u.address,
            reason: u.reason,
        }
    }
}

/// Checks a schema name: 1 to 48 characters, lower-case ASCII letters, digits and `_`, not
/// starting with a digit (so it needs no quoting rules beyond the plain ones, and the
/// notification channel `<schema>.done` stays within PostgreSQL's 63-byte identifiers).
pub(crate) fn check_schema(name: &str) -> Result<(), SetupError> {
    let ok = !name.is_empty()
        && name.len() <= 48
        && !name.as_bytes()[0].is_ascii_digit()
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(SetupError::Invalid(
            "the schema name must be 1 to 48 characters of a-z, 0-9 and _, not starting with a digit",
        ))
    }
}

/// [`SCHEMA_SQL`] for the schema `schema`, ready to run (one implicit transaction if sent as one
/// simple query, as [`migrate`] does).
///
/// # Errors
///
/// [`SetupError::Invalid`] if `schema` is not a valid name (see [`migrate`]).
///
/// ```
/// let sql = idem_postgres::schema_sql("shop_idem")?;
/// assert!(sql.contains(r#"CREATE TABLE IF NOT EXISTS "shop_idem".records"#));
/// assert!(idem_postgres::schema_sql("Shop; DROP").is_err());
/// # Ok::<(), idem_postgres::SetupError>(())
/// ```
pub fn schema_sql(schema: &str) -> Result<String, SetupError> {
    check_schema(schema)?;
    Ok(SCHEMA_SQL.replace("__SCHEMA__", &format!("\"{schema}\"")))
}

/// Creates or updates idem's schema `schema` in the database: the `records` table, its expiry
/// index, the `fence` sequence and the functions (D4). Idempotent, and safe to run from every
/// instance at start-up at once (an advisory lock serializes them). The builders of
/// [`PgTier`](crate::PgTier) and the transactional engine call it unless told not to.
///
/// The schema name is 1 to 48 characters of `a-z`, `0-9` and `_`, not starting with a digit.
///
/// # Errors
///
/// [`SetupError::Invalid`] for a bad name; [`SetupError::Database`] if PostgreSQL refuses (for
/// example the role may not create schemas: then apply [`schema_sql`] as a role that may);
/// [`SetupError::Unreachable`] if no connection opens.
///
/// ```no_run
/// # async fn demo(pool: sqlx::PgPool) -> Result<(), idem_postgres::SetupError> {
/// idem_postgres::migrate(&pool, "idem").await?;
/// idem_postgres::migrate(&pool, "idem").await?; // again: nothing changes
/// # Ok(()) }
/// ```
pub async fn migrate(pool: &PgPool, schema: &str) -> Result<(), SetupError> {
    let body = schema_sql(schema)?;
    // One simple query = one implicit transaction: the lock is held to its end.
    let sql = format!("SELECT pg_advisory_xact_lock({MIGRATE_LOCK});\n{body}");
    match sqlx::raw_sql(&sql).execute(pool).await {
        Ok(_) => Ok(()),
        Err(sqlx::Error::PoolTimedOut) => {
            Err(unreachable_or(pool, SetupError::Database(sqlx::Error::PoolTimedOut)).await)
        }
        Err(e) => Err(SetupError::Database(e)),
    }
}

/// `otherwise`, unless a connection attempt finds that no connection opens: then why.
pub(crate) async fn unreachable_or(pool: &PgPool, otherwise: SetupError) -> SetupError {
    match probe(pool, PROBE).await {
        Some(u) => u.into(),
        None => otherwise,
    }
}
