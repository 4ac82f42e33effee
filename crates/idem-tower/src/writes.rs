//! Which requests are writes.

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;

use http::Method;

use crate::Protocol;

/// Decides which requests are writes: the server layer deduplicates them, the client layer gives
/// them a key. Everything else passes through untouched (server) or is retried as an idempotent
/// read (client).
///
/// # Default
///
/// HTTP `POST` and `PATCH` requests. No gRPC method is a write by default (every gRPC call is a
/// `POST`): list yours with [`Writes::paths`].
///
/// ```
/// use idem_tower::{Protocol, Writes};
/// use http::Method;
///
/// let grpc = Writes::paths(["/shop.v1.Shop/CreateOrder", "/shop.v1.Shop/DeductStock"]);
/// assert!(grpc.is_write(&Method::POST, "/shop.v1.Shop/CreateOrder", Protocol::Grpc));
/// assert!(!grpc.is_write(&Method::POST, "/shop.v1.Shop/GetBook", Protocol::Grpc));
///
/// let http = Writes::default();
/// assert!(http.is_write(&Method::POST, "/orders", Protocol::Http));
/// assert!(!http.is_write(&Method::GET, "/books/42", Protocol::Http));
/// assert!(!http.is_write(&Method::POST, "/shop.v1.Shop/GetBook", Protocol::Grpc));
///
/// let custom = Writes::predicate(|method, path| method == Method::PUT && path.starts_with("/carts/"));
/// assert!(custom.is_write(&Method::PUT, "/carts/7", Protocol::Http));
/// ```
#[derive(Clone)]
pub struct Writes(Rule);

type Predicate = dyn Fn(&Method, &str) -> bool + Send + Sync;

#[derive(Clone)]
enum Rule {
    UnsafeHttp,
    Paths(Arc<HashSet<String>>),
    Predicate(Arc<Predicate>),
}

impl Writes {
    /// Exactly the requests whose path is in `paths` (any protocol, any HTTP method).
    pub fn paths<I, S>(paths: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Writes(Rule::Paths(Arc::new(
            paths.into_iter().map(Into::into).collect(),
        )))
    }

    /// The requests for which `f(method, path)` is true.
    pub fn predicate(f: impl Fn(&Method, &str) -> bool + Send + Sync + 'static) -> Self {
        Writes(Rule::Predicate(Arc::new(f)))
    }

    /// Whether a request is a write.
    pub fn is_write(&self, method: &Method, path: &str, protocol: Protocol) -> bool {
        match &self.0 {
            Rule::UnsafeHttp => {
                protocol == Protocol::Http && (method == Method::POST || method == Method::PATCH)
            }
            Rule::Paths(p) => p.contains(path),
            Rule::Predicate(f) => f(method, path),
        }
    }
}

impl Default for Writes {
    fn default() -> Self {
        Writes(Rule::UnsafeHttp)
    }
}

impl fmt::Debug for Writes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Rule::UnsafeHttp => f.write_str("Writes(HTTP POST, PATCH)"),
            Rule::Paths(p) => {
                let mut v: Vec<_> = p.iter().collect();
                v.sort();
                f.debug_tuple("Writes").field(&v).finish()
            }
            Rule::Predicate(_) => f.write_str("Writes(<predicate>)"),
        }
    }
}
