//! Which requests are writes: the ones that get an idempotency key.

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;

use reqwest::{Method, Url};

/// Decides which requests are writes. A write gets an idempotency key (the caller's, or one the
/// middleware makes) and is retried with it; every other request is retried as an idempotent
/// read, without a key.
///
/// # Default
///
/// `POST` and `PATCH` requests, the methods HTTP does not define as idempotent. `PUT` and
/// `DELETE` are idempotent by HTTP's definition and are retried as reads; list them
/// ([`Writes::methods`]) if your downstream service deduplicates them by key too.
///
/// # Examples
///
/// ```
/// use idem_reqwest::Writes;
/// use reqwest::{Method, Url};
///
/// let url = |path: &str| Url::parse(&format!("http://payments.internal{path}")).unwrap();
///
/// let default = Writes::default();
/// assert!(default.is_write(&Method::POST, &url("/v1/charges")));
/// assert!(!default.is_write(&Method::GET, &url("/v1/charges/ch_42")));
///
/// let with_put = Writes::methods([Method::POST, Method::PATCH, Method::PUT]);
/// assert!(with_put.is_write(&Method::PUT, &url("/v1/carts/7")));
///
/// // Routes: method and path, so `POST /v1/search` stays a read.
/// let routes = Writes::routes([(Method::POST, "/v1/charges"), (Method::POST, "/v1/refunds")]);
/// assert!(routes.is_write(&Method::POST, &url("/v1/charges")));
/// assert!(!routes.is_write(&Method::POST, &url("/v1/search")));
///
/// let custom = Writes::predicate(|method, url| {
///     method == Method::POST && url.path().starts_with("/v1/")
/// });
/// assert!(custom.is_write(&Method::POST, &url("/v1/transfers")));
/// ```
#[derive(Clone)]
pub struct Writes(Rule);

type Predicate = dyn Fn(&Method, &Url) -> bool + Send + Sync;

#[derive(Clone)]
enum Rule {
    Methods(Arc<[Method]>),
    Routes(Arc<HashSet<(Method, String)>>),
    Predicate(Arc<Predicate>),
}

impl Writes {
    /// Every request with one of `methods`, whatever its path. `Writes::methods([])` makes every
    /// request a read.
    pub fn methods(methods: impl IntoIterator<Item = Method>) -> Self {
        Writes(Rule::Methods(methods.into_iter().collect()))
    }

    /// Exactly the requests whose (method, URL path) is in `routes`. The path is compared as
    /// sent, without the query.
    pub fn routes<I, S>(routes: I) -> Self
    where
        I: IntoIterator<Item = (Method, S)>,
        S: Into<String>,
    {
        Writes(Rule::Routes(Arc::new(
            routes.into_iter().map(|(m, p)| (m, p.into())).collect(),
        )))
    }

    /// The requests for which `f(method, url)` is true.
    pub fn predicate(f: impl Fn(&Method, &Url) -> bool + Send + Sync + 'static) -> Self {
        Writes(Rule::Predicate(Arc::new(f)))
    }

    /// Whether a request with this method and URL is a write.
    pub fn is_write(&self, method: &Method, url: &Url) -> bool {
        match &self.0 {
            Rule::Methods(m) => m.contains(method),
            Rule::Routes(r) => r.contains(&(method.clone(), url.path().to_owned())),
            Rule::Predicate(f) => f(method, url),
        }
    }
}

impl Default for Writes {
    /// `POST` and `PATCH`.
    fn default() -> Self {
        Writes::methods([Method::POST, Method::PATCH])
    }
}

impl fmt::Debug for Writes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Rule::Methods(m) => f
                .debug_tuple("Writes")
                .field(&m.iter().map(Method::as_str).collect::<Vec<_>>())
                .finish(),
            Rule::Routes(r) => {
                let mut v: Vec<_> = r.iter().map(|(m, p)| format!("{m} {p}")).collect();
                v.sort();
                f.debug_tuple("Writes").field(&v).finish()
            }
            Rule::Predicate(_) => f.write_str("Writes(<predicate>)"),
        }
    }
}
