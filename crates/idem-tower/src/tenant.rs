//! Where the tenant of a request comes from.

use std::fmt;
use std::sync::Arc;

use http::HeaderName;

/// The authenticated tenant of a request, put in the request's extensions by your authentication
/// layer. The server layer files every stored result under it, so one tenant can never
/// replay another's response by guessing or deriving its key.
///
/// The authentication must run *before* the server layer, as a layer outside it: the server
/// layer reads the tenant when the request reaches it. On tonic, add it to `Server::builder()`
/// before the [`IdemLayer`](crate::IdemLayer) — [`SetTenantLayer`](crate::SetTenantLayer) sets
/// the tenant from the call's metadata with a closure — not as an interceptor on the service
/// (`with_interceptor`), which runs inside the server layer, too late.
///
/// ```
/// use idem_tower::Tenant;
/// let mut req = http::Request::new(());
/// req.extensions_mut().insert(Tenant::new("tenant-0042"));
/// assert_eq!(req.extensions().get::<Tenant>().unwrap().as_str(), "tenant-0042");
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Tenant(Arc<str>);

impl Tenant {
    /// A tenant id (validated when the scope is built: non-empty, length-limited).
    pub fn new(id: impl Into<Arc<str>>) -> Self {
        Tenant(id.into())
    }

    /// The tenant id.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Tenant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Tenant({})", self.0)
    }
}

/// Where the server layer finds the tenant. A write with no tenant is refused
/// (`UNAUTHENTICATED` / 401), never filed under a shared default.
///
/// # Default
///
/// [`TenantSource::Extension`]: the [`Tenant`] your authentication layer inserted.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum TenantSource {
    /// The [`Tenant`] request extension, set by an authentication layer. The default.
    #[default]
    Extension,
    /// A request header (for example [`headers::TENANT`](crate::headers::TENANT)). Opt in only
    /// behind a trusted gateway that sets it and strips it from client requests: otherwise any
    /// client could claim any tenant.
    Header(HeaderName),
}

impl TenantSource {
    /// The tenant of a request, if it has one (an empty header counts as none).
    pub(crate) fn tenant(&self, parts: &http::request::Parts) -> Option<Tenant> {
        match self {
            TenantSource::Extension => parts.extensions.get::<Tenant>().cloned(),
            TenantSource::Header(name) => {
                let mut all = parts.headers.get_all(name).iter();
                let v = all.next()?;
                if all.next().is_some() {
                    return None;
                }
                let s = v.to_str().ok()?.trim();
                (!s.is_empty()).then(|| Tenant::new(s))
            }
        }
        .filter(|t| !t.as_str().is_empty())
    }
}
