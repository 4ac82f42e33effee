//! The checks a write passes before its body is read: a tenant, one well-formed key, a valid
//! scope, a declared length within the limit; and how the layer answers a write it refuses.

use std::borrow::Cow;

use http::{Response, StatusCode};
use http_body::Body;
use http_body_util::Either;
use idem_core::{Code, Reason, Scope, Status};

use crate::body::ResponseBody;
use crate::server::{refused, ServerConfig};
use crate::{key_from_headers, reject, Protocol, TenantSource};

/// A refusal made by the layer (counted by reason and status), as the service's response.
pub(super) fn refusal<B>(
    protocol: Protocol,
    status: &Status,
    http: Option<StatusCode>,
) -> Response<ResponseBody<B>> {
    let response = reject::render(protocol, status, http);
    refused::count(status, &response);
    response.map(|b| Either::Right(Either::Left(b)))
}

/// The checks a write passes before its body is read: a tenant, one well-formed
/// key, a valid scope, a declared length within the limit. Returns the scope, or the refusal.
// The refusal is the response itself, handed straight back; boxing it would only add an
// allocation to each refused request.
#[allow(clippy::result_large_err)]
pub(super) fn admit<B: Body, ResB>(
    cfg: &ServerConfig,
    protocol: Protocol,
    parts: &http::request::Parts,
    body: &B,
) -> Result<Scope, Response<ResponseBody<ResB>>> {
    let refuse = |status: Status, http: Option<StatusCode>| refusal(protocol, &status, http);
    let Some(tenant) = cfg.tenant.tenant(parts) else {
        return Err(refuse(missing_tenant(&cfg.tenant), None));
    };
    let key_header = cfg.key_header(protocol);
    let key = match key_from_headers(&parts.headers, key_header) {
        Ok(Some(key)) => key,
        Ok(None) => {
            return Err(refuse(
                Status::new(
                    Code::InvalidArgument,
                    format!(
                        "this request changes data and needs an idempotency key: send the \
                         `{key_header}` header with 8-64 characters of A-Z a-z 0-9 _ -, the same \
                         on every retry"
                    ),
                )
                .with_reason(Reason::MISSING_IDEMPOTENCY_KEY),
                None,
            ))
        }
        Err(e) => {
            return Err(refuse(
                Status::new(Code::InvalidArgument, e.to_string())
                    .with_reason(Reason::INVALID_IDEMPOTENCY_KEY),
                None,
            ))
        }
    };
    // A tenant or path over its limit is the scope's fault, not the key's (INVALID_SCOPE).
    let scope = Scope::new(tenant.as_str(), parts.uri.path(), &key)
        .map_err(|e| refuse(Status::from(e), None))?;
    // T2: refuse oversized bodies without buffering them.
    let limit = cfg.max_body_bytes;
    let declared = parts
        .headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) || body.size_hint().lower() > limit as u64 {
        let (status, http) = reject::too_large(limit);
        return Err(refuse(status, http));
    }
    Ok(scope)
}

/// The refusal of a write without a tenant: `UNAUTHENTICATED`, reason `MISSING_TENANT`, saying
/// where the layer looked, so a server whose authentication runs too late (inside the layer, as
/// a tonic interceptor on the service does) learns why from the first refused call.
fn missing_tenant(source: &TenantSource) -> Status {
    let message: Cow<'static, str> = match source {
        TenantSource::Extension => "this request changes data and needs an authenticated tenant, \
            and none was found: if it carried credentials, the server's authentication did not \
            put a `Tenant` in the request's extensions before the idempotency layer ran (it must \
            be a layer outside the idempotency layer; a tonic interceptor on the service runs \
            inside it, too late)"
            .into(),
        TenantSource::Header(name) => format!(
            "this request changes data and needs an authenticated tenant, and none was found: \
             the `{name}` header, which the gateway in front of this server sets, is missing, \
             empty or repeated"
        )
        .into(),
    };
    Status::new(Code::Unauthenticated, message).with_reason(Reason::MISSING_TENANT)
}
