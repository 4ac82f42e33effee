//! The 17 gRPC status codes and their HTTP mapping (E12).

use std::fmt;

/// A gRPC status code. Every idem error carries one (`code()`), so a server answers gRPC and HTTP
/// correctly with one `match`, written once: [`Code::http_status`].
///
/// ```
/// use idem_core::Code;
/// assert_eq!(Code::from_i32(14), Some(Code::Unavailable));
/// assert_eq!(Code::Unavailable.as_str(), "UNAVAILABLE");
/// assert_eq!(Code::ResourceExhausted.http_status(), 429);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(i32)]
pub enum Code {
    /// Not an error.
    Ok = 0,
    /// The operation was cancelled, typically by the caller.
    Cancelled = 1,
    /// Unknown error.
    Unknown = 2,
    /// The client gave an invalid argument.
    InvalidArgument = 3,
    /// The deadline expired before the operation could complete.
    DeadlineExceeded = 4,
    /// Some requested entity was not found.
    NotFound = 5,
    /// The entity a client tried to create already exists.
    AlreadyExists = 6,
    /// The caller may not execute the operation.
    PermissionDenied = 7,
    /// Some resource has been exhausted (quota, capacity).
    ResourceExhausted = 8,
    /// The system is not in a state required for the operation.
    FailedPrecondition = 9,
    /// The operation was aborted (typically a concurrency conflict).
    Aborted = 10,
    /// The operation was attempted past the valid range.
    OutOfRange = 11,
    /// The operation is not implemented.
    Unimplemented = 12,
    /// Internal error: an invariant broke.
    Internal = 13,
    /// The service is currently unavailable; usually transient.
    Unavailable = 14,
    /// Unrecoverable data loss or corruption.
    DataLoss = 15,
    /// The request has no valid authentication credentials.
    Unauthenticated = 16,
}

impl Code {
    /// All 17 codes, in numeric order.
    pub const ALL: [Code; 17] = [
        Code::Ok,
        Code::Cancelled,
        Code::Unknown,
        Code::InvalidArgument,
        Code::DeadlineExceeded,
        Code::NotFound,
        Code::AlreadyExists,
        Code::PermissionDenied,
        Code::ResourceExhausted,
        Code::FailedPrecondition,
        Code::Aborted,
        Code::OutOfRange,
        Code::Unimplemented,
        Code::Internal,
        Code::Unavailable,
        Code::DataLoss,
        Code::Unauthenticated,
    ];

    /// The code with this number, if it is one of the 17.
    pub const fn from_i32(v: i32) -> Option<Code> {
        if v >= 0 && v < 17 {
            Some(Code::ALL[v as usize])
        } else {
            None
        }
    }

    /// The numeric value sent on the wire (`grpc-status`).
    pub const fn as_i32(self) -> i32 {
        self as i32
    }

    /// The canonical upper-case name, as in `UNAVAILABLE`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Code::Ok => "OK",
            Code::Cancelled => "CANCELLED",
            Code::Unknown => "UNKNOWN",
            Code::InvalidArgument => "INVALID_ARGUMENT",
            Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
            Code::NotFound => "NOT_FOUND",
            Code::AlreadyExists => "ALREADY_EXISTS",
            Code::PermissionDenied => "PERMISSION_DENIED",
            Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
            Code::FailedPrecondition => "FAILED_PRECONDITION",
            Code::Aborted => "ABORTED",
            Code::OutOfRange => "OUT_OF_RANGE",
            Code::Unimplemented => "UNIMPLEMENTED",
            Code::Internal => "INTERNAL",
            Code::Unavailable => "UNAVAILABLE",
            Code::DataLoss => "DATA_LOSS",
            Code::Unauthenticated => "UNAUTHENTICATED",
        }
    }

    /// The HTTP status an HTTP front end answers with.
    ///
    /// Follows `google.rpc.Code`'s mapping, with the idempotency refinements of T2: a
    /// fingerprint conflict (`FAILED_PRECONDITION`) is 422 and an in-flight duplicate (`ABORTED`) is
    /// 409, as the IETF Idempotency-Key draft says.
    pub const fn http_status(self) -> u16 {
        match self {
            Code::Ok => 200,
            Code::Cancelled => 499,
            Code::Unknown => 500,
            Code::InvalidArgument => 400,
            Code::DeadlineExceeded => 504,
            Code::NotFound => 404,
            Code::AlreadyExists => 409,
            Code::PermissionDenied => 403,
            Code::ResourceExhausted => 429,
            Code::FailedPrecondition => 422,
            Code::Aborted => 409,
            Code::OutOfRange => 400,
            Code::Unimplemented => 501,
            Code::Internal => 500,
            Code::Unavailable => 503,
            Code::DataLoss => 500,
            Code::Unauthenticated => 401,
        }
    }

    /// A bit for this code, for compact code sets (`1 << code`).
    pub const fn bit(self) -> u32 {
        1u32 << (self as u32)
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A set of [`Code`]s, for rules declared by status code (E13: which failures are cached).
///
/// ```
/// use idem_core::{Code, CodeSet};
/// let permanent = CodeSet::EMPTY.with(Code::FailedPrecondition).with(Code::InvalidArgument);
/// assert!(permanent.contains(Code::InvalidArgument));
/// assert!(!permanent.contains(Code::Unavailable));
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct CodeSet(u32);

impl CodeSet {
    /// No codes.
    pub const EMPTY: CodeSet = CodeSet(0);

    /// This set plus `code`.
    pub const fn with(self, code: Code) -> CodeSet {
        CodeSet(self.0 | code.bit())
    }

    /// This set without `code`.
    pub const fn without(self, code: Code) -> CodeSet {
        CodeSet(self.0 & !code.bit())
    }

    /// Whether `code` is in the set.
    pub const fn contains(self, code: Code) -> bool {
        self.0 & code.bit() != 0
    }

    /// Whether the set is empty.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }
}

impl FromIterator<Code> for CodeSet {
    fn from_iter<I: IntoIterator<Item = Code>>(iter: I) -> Self {
        iter.into_iter().fold(CodeSet::EMPTY, CodeSet::with)
    }
}

impl fmt::Debug for CodeSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set()
            .entries(Code::ALL.iter().filter(|c| self.contains(**c)))
            .finish()
    }
}
