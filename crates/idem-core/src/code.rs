//! The 17 gRPC status codes and their HTTP mapping, both ways.

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
    /// Follows `google.rpc.Code`'s mapping, with idem's idempotency refinements: a
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

    /// The code an HTTP status stands for: what a client reads from an HTTP answer, so that it
    /// retries an HTTP failure by the same rules as a gRPC one.
    ///
    /// The inverse of [`http_status`](Self::http_status) where that is one to one, and a
    /// conservative choice elsewhere:
    ///
    /// | HTTP status | code |
    /// |---|---|
    /// | 2xx | `OK` |
    /// | 400, 413 | `INVALID_ARGUMENT` |
    /// | 401 | `UNAUTHENTICATED` |
    /// | 403 | `PERMISSION_DENIED` |
    /// | 404 | `NOT_FOUND` |
    /// | 408, 504 | `DEADLINE_EXCEEDED` |
    /// | 409 | `ABORTED` (an in-flight duplicate, or a version conflict) |
    /// | 412, 422 | `FAILED_PRECONDITION` (422: the key was reused with another payload) |
    /// | 429 | `RESOURCE_EXHAUSTED` |
    /// | 499 | `CANCELLED` |
    /// | 501 | `UNIMPLEMENTED` |
    /// | 502, 503 | `UNAVAILABLE` |
    /// | any other 4xx | `INVALID_ARGUMENT`: a client error, never retried |
    /// | anything else (other 5xx, 1xx, 3xx, past 599) | `INTERNAL`: retried only where the caller declared it transient |
    ///
    /// `500` is `INTERNAL`, not `UNKNOWN`: both are retried on the same terms.
    ///
    /// ```
    /// use idem_core::Code;
    /// assert_eq!(Code::from_http_status(201), Code::Ok);
    /// assert_eq!(Code::from_http_status(409), Code::Aborted);
    /// assert_eq!(Code::from_http_status(422), Code::FailedPrecondition);
    /// assert_eq!(Code::from_http_status(429), Code::ResourceExhausted);
    /// assert_eq!(Code::from_http_status(503), Code::Unavailable);
    /// assert_eq!(Code::from_http_status(418), Code::InvalidArgument);
    /// // Where `http_status` is one to one, this is its inverse.
    /// assert_eq!(Code::from_http_status(Code::Unauthenticated.http_status()), Code::Unauthenticated);
    /// ```
    pub const fn from_http_status(status: u16) -> Code {
        match status {
            200..=299 => Code::Ok,
            400 | 413 => Code::InvalidArgument,
            401 => Code::Unauthenticated,
            403 => Code::PermissionDenied,
            404 => Code::NotFound,
            408 | 504 => Code::DeadlineExceeded,
            409 => Code::Aborted,
            412 | 422 => Code::FailedPrecondition,
            429 => Code::ResourceExhausted,
            499 => Code::Cancelled,
            501 => Code::Unimplemented,
            502 | 503 => Code::Unavailable,
            400..=499 => Code::InvalidArgument,
            _ => Code::Internal,
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

/// A set of [`Code`]s, for rules declared by status code (which failures are cached, say).
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

    /// The codes a client retries whatever the call (when the call may be retried at all):
    /// `UNAVAILABLE`, `RESOURCE_EXHAUSTED`, `DEADLINE_EXCEEDED` and `ABORTED`. A server never
    /// stores a failure with one of them, since the client's retry must run again rather than
    /// get the stored failure back: the engine's and the server layer's builders refuse them
    /// among the failures to store.
    ///
    /// ```
    /// use idem_core::{Code, CodeSet};
    /// assert!(CodeSet::RETRYABLE.contains(Code::Unavailable));
    /// assert!(!CodeSet::RETRYABLE.contains(Code::FailedPrecondition));
    /// let asked = CodeSet::EMPTY.with(Code::NotFound).with(Code::Aborted);
    /// assert!(asked.intersects(CodeSet::RETRYABLE));
    /// ```
    pub const RETRYABLE: CodeSet = CodeSet::EMPTY
        .with(Code::Unavailable)
        .with(Code::ResourceExhausted)
        .with(Code::DeadlineExceeded)
        .with(Code::Aborted);

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

    /// Whether the two sets have a code in common.
    pub const fn intersects(self, other: CodeSet) -> bool {
        self.0 & other.0 != 0
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

#[cfg(test)]
mod tests {
    use super::Code;

    /// Reading back the status a server answers with gives the code it answered for, wherever
    /// the mapping is one to one (two codes share 400, 409 and 500).
    #[test]
    fn e12_from_http_status_inverts_http_status() {
        for code in Code::ALL {
            let back = Code::from_http_status(code.http_status());
            match code {
                Code::OutOfRange => assert_eq!(back, Code::InvalidArgument),
                Code::AlreadyExists => assert_eq!(back, Code::Aborted),
                Code::Unknown | Code::DataLoss => assert_eq!(back, Code::Internal),
                _ => assert_eq!(back, code, "{code}"),
            }
        }
    }

    #[test]
    fn e12_from_http_status_classes() {
        for s in 200..=299 {
            assert_eq!(Code::from_http_status(s), Code::Ok, "{s}");
        }
        for s in [402, 405, 406, 410, 414, 415, 418, 451] {
            assert_eq!(Code::from_http_status(s), Code::InvalidArgument, "{s}");
        }
        for s in [0, 100, 101, 301, 304, 500, 505, 511, 599, 600, u16::MAX] {
            assert_eq!(Code::from_http_status(s), Code::Internal, "{s}");
        }
        assert_eq!(Code::from_http_status(408), Code::DeadlineExceeded);
        assert_eq!(Code::from_http_status(412), Code::FailedPrecondition);
        assert_eq!(Code::from_http_status(413), Code::InvalidArgument);
        assert_eq!(Code::from_http_status(499), Code::Cancelled);
        assert_eq!(Code::from_http_status(501), Code::Unimplemented);
        assert_eq!(Code::from_http_status(502), Code::Unavailable);
        assert_eq!(Code::from_http_status(504), Code::DeadlineExceeded);
    }
}
