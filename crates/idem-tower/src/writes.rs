//! Which requests are writes, and which are reads even when they carry a key.

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
/// HTTP `POST` and `PATCH` requests. No gRPC method is listed by default (every gRPC call is a
/// `POST`): list yours with [`Writes::paths`].
///
/// On the server a key is a declaration of intent: a request that carries the idempotency key
/// header is deduplicated as a write even where this rule does not list it, so a write that the
/// rule forgot still runs once per key. Only requests declared [`Reads`] (and HTTP's safe methods
/// `GET`, `HEAD`, `OPTIONS`, `TRACE`) pass through with a key, and they are counted.
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
    Nothing,
    Everything,
    Paths(Arc<HashSet<String>>),
    Routes(Arc<HashSet<(Method, String)>>),
    Predicate(Arc<Predicate>),
}

impl Rule {
    fn paths<I, S>(paths: I) -> Rule
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Rule::Paths(Arc::new(paths.into_iter().map(Into::into).collect()))
    }

    fn routes<I, S>(routes: I) -> Rule
    where
        I: IntoIterator<Item = (Method, S)>,
        S: Into<String>,
    {
        Rule::Routes(Arc::new(
            routes.into_iter().map(|(m, p)| (m, p.into())).collect(),
        ))
    }

    fn covers(&self, method: &Method, path: &str, protocol: Protocol) -> bool {
        match self {
            Rule::UnsafeHttp => {
                protocol == Protocol::Http && (method == Method::POST || method == Method::PATCH)
            }
            Rule::Nothing => false,
            Rule::Everything => true,
            Rule::Paths(p) => p.contains(path),
            Rule::Routes(r) => r.contains(&(method.clone(), path.to_owned())),
            Rule::Predicate(f) => f(method, path),
        }
    }

    fn fmt(&self, name: &str, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rule::UnsafeHttp => write!(f, "{name}(HTTP POST, PATCH)"),
            Rule::Nothing => write!(f, "{name}(none)"),
            Rule::Everything => write!(f, "{name}(all)"),
            Rule::Paths(p) => {
                let mut v: Vec<_> = p.iter().collect();
                v.sort();
                f.debug_tuple(name).field(&v).finish()
            }
            Rule::Routes(r) => {
                let mut v: Vec<_> = r.iter().map(|(m, p)| format!("{m} {p}")).collect();
                v.sort();
                f.debug_tuple(name).field(&v).finish()
            }
            Rule::Predicate(_) => write!(f, "{name}(<predicate>)"),
        }
    }
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
        Writes(Rule::paths(paths))
    }

    /// Exactly the requests whose (method, path) is in `routes`.
    pub fn routes<I, S>(routes: I) -> Self
    where
        I: IntoIterator<Item = (Method, S)>,
        S: Into<String>,
    {
        Writes(Rule::routes(routes))
    }

    /// The requests for which `f(method, path)` is true.
    pub fn predicate(f: impl Fn(&Method, &str) -> bool + Send + Sync + 'static) -> Self {
        Writes(Rule::Predicate(Arc::new(f)))
    }

    /// Whether a request is a write.
    pub fn is_write(&self, method: &Method, path: &str, protocol: Protocol) -> bool {
        self.0.covers(method, path, protocol)
    }
}

impl Default for Writes {
    fn default() -> Self {
        Writes(Rule::UnsafeHttp)
    }
}

impl fmt::Debug for Writes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt("Writes", f)
    }
}

/// Requests that the server layer passes through as reads even when they carry an idempotency
/// key ([`IdemLayerBuilder::reads`](crate::IdemLayerBuilder::reads)).
///
/// A key is a declaration of intent — a client that sends one means "do this once" — so by
/// default the server layer deduplicates every keyed request, whether or not [`Writes`] lists
/// it: a write the rule forgot runs once per key instead of once per retry. Declare here the
/// routes where a keyed request is nevertheless a read (a client library that keys every call,
/// say). The [`Writes`] rule comes first: a request it lists is a write, whatever this says.
///
/// Every keyed request let through as a read is counted in
/// [`KEYED_PASSTHROUGH_TOTAL`](crate::metrics::KEYED_PASSTHROUGH_TOTAL) and logged at `DEBUG`, so one
/// that should have been a write shows. HTTP's safe methods (`GET`, `HEAD`, `OPTIONS`,
/// `TRACE`) are reads by definition and always pass, counted the same way.
///
/// # Default
///
/// [`Reads::none`]: no declared reads.
///
/// ```
/// use idem_tower::{Protocol, Reads};
/// use http::Method;
///
/// let reads = Reads::paths(["/shop.v1.Shop/GetBook"]);
/// assert!(reads.is_read(&Method::POST, "/shop.v1.Shop/GetBook", Protocol::Grpc));
/// assert!(!reads.is_read(&Method::POST, "/shop.v1.Shop/CreateOrder", Protocol::Grpc));
/// assert!(!Reads::default().is_read(&Method::POST, "/shop.v1.Shop/GetBook", Protocol::Grpc));
/// ```
#[derive(Clone)]
pub struct Reads(Rule);

impl Reads {
    /// No declared reads: every keyed request the write rule does not list is deduplicated
    /// (but HTTP's safe methods). The default.
    pub fn none() -> Self {
        Reads(Rule::Nothing)
    }

    /// Every request the write rule does not list: keys there are ignored (counted, logged).
    /// Only for a service whose [`Writes`] rule lists every write; a write it forgot runs again
    /// on every retry.
    pub fn all() -> Self {
        Reads(Rule::Everything)
    }

    /// Exactly the requests whose path is in `paths`, whatever their HTTP method (for gRPC,
    /// the methods' paths).
    pub fn paths<I, S>(paths: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Reads(Rule::paths(paths))
    }

    /// Exactly the requests whose (method, path) is in `routes`.
    pub fn routes<I, S>(routes: I) -> Self
    where
        I: IntoIterator<Item = (Method, S)>,
        S: Into<String>,
    {
        Reads(Rule::routes(routes))
    }

    /// The requests for which `f(method, path)` is true.
    pub fn predicate(f: impl Fn(&Method, &str) -> bool + Send + Sync + 'static) -> Self {
        Reads(Rule::Predicate(Arc::new(f)))
    }

    /// Whether a request is declared a read.
    pub fn is_read(&self, method: &Method, path: &str, protocol: Protocol) -> bool {
        self.0.covers(method, path, protocol)
    }
}

impl Default for Reads {
    fn default() -> Self {
        Reads::none()
    }
}

impl fmt::Debug for Reads {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt("Reads", f)
    }
}
