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
/// // HTTP routes: method and path, so `GET /orders` stays a read.
/// let routes = Writes::routes([(Method::POST, "/orders"), (Method::PUT, "/carts")]);
/// assert!(routes.is_write(&Method::POST, "/orders", Protocol::Http));
/// assert!(!routes.is_write(&Method::GET, "/orders", Protocol::Http));
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
    Routes(Arc<HashSet<(Method, String)>>),
    Predicate(Arc<Predicate>),
}

impl Writes {
    /// Exactly the requests whose path is in `paths`, whatever their HTTP method: right for gRPC
    /// (every call is a `POST` to its method's path); for HTTP routes where a `GET` shares the
    /// path of a `POST`, use [`routes`](Self::routes).
    pub fn paths<I, S>(paths: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Writes(Rule::Paths(Arc::new(
            paths.into_iter().map(Into::into).collect(),
        )))
    }

    /// Exactly the requests whose (method, path) is in `routes`.
    pub fn routes<I, S>(routes: I) -> Self
    where
        I: IntoIterator<Item = (Method, S)>,
        S: Into<String>,
    {
        Writes(Rule::Routes(Arc::new(
            routes.into_iter().map(|(m, p)| (m, p.into())).collect(),
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
            Rule::Routes(r) => r.contains(&(method.clone(), path.to_owned())),
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
            Rule::Routes(r) => {
                let mut v: Vec<_> = r.iter().map(|(m, p)| format!("{m} {p}")).collect();
                v.sort();
                f.debug_tuple("Writes").field(&v).finish()
            }
            Rule::Predicate(_) => f.write_str("Writes(<predicate>)"),
        }
    }
}
