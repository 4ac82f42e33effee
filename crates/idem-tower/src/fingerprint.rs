//! The server layer's request fingerprint: the whole request, not just its body.
//! See [`request_fingerprint`] for what it covers and how it is encoded.

use http::{HeaderMap, HeaderName, Method, Uri};
use idem_core::Fingerprint;

/// The fingerprint of a request as the server layer computes it, for middleware of your own
/// that must agree with it.
///
/// A key names one operation. If the fingerprint covered the body alone, `POST
/// /orders?dry_run=true` with a key and body already used by a real `POST /orders` would replay
/// the real order as the dry run's answer. So the fingerprint covers, in this order:
///
/// 1. the HTTP method,
/// 2. the path and query exactly as sent (`/orders?dry_run=true`),
/// 3. each header the user named ([`IdemLayerBuilder::fingerprint_headers`](crate::IdemLayerBuilder::fingerprint_headers)),
///    in the order named, with all its values in the order sent (an absent header counts as
///    zero values),
/// 4. the body.
///
/// Canonical bytes: the text `idem-request-v1`, then every part above as a big-endian `u64`
/// length followed by its bytes (a header as its lower-case name, then its value count as a
/// `u64`, then each value), then the body's bytes; the fingerprint is XXH3-128 of them
/// ([`Fingerprint`]). The lengths make the encoding injective: no two different requests give the
/// same bytes.
///
/// ```
/// use idem_tower::request_fingerprint;
/// let headers = http::HeaderMap::new();
/// let real = request_fingerprint(&http::Method::POST, &"/orders".parse().unwrap(), &headers, &[], b"{}");
/// let dry = request_fingerprint(&http::Method::POST, &"/orders?dry_run=true".parse().unwrap(), &headers, &[], b"{}");
/// assert_ne!(real, dry); // same key, other request: a conflict, not a replay
/// ```
pub fn request_fingerprint(
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    named: &[HeaderName],
    body: &[u8],
) -> Fingerprint {
    let mut b = Fingerprint::builder();
    b.update(b"idem-request-v1");
    let mut part = |bytes: &[u8]| {
        b.update(&(bytes.len() as u64).to_be_bytes());
        b.update(bytes);
    };
    part(method.as_str().as_bytes());
    part(
        uri.path_and_query()
            .map_or(uri.path(), |pq| pq.as_str())
            .as_bytes(),
    );
    for name in named {
        part(name.as_str().as_bytes());
        let values: Vec<&[u8]> = headers.get_all(name).iter().map(|v| v.as_bytes()).collect();
        part(&(values.len() as u64).to_be_bytes());
        for v in values {
            part(v);
        }
    }
    b.update(body);
    b.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fp(
        method: Method,
        uri: &str,
        headers: &HeaderMap,
        named: &[HeaderName],
        body: &[u8],
    ) -> Fingerprint {
        request_fingerprint(&method, &uri.parse().unwrap(), headers, named, body)
    }

    #[test]
    fn k6_every_part_of_the_request_counts() {
        let none = HeaderMap::new();
        let base = fp(Method::POST, "/orders", &none, &[], b"{}");
        assert_eq!(base, fp(Method::POST, "/orders", &none, &[], b"{}"));
        assert_ne!(base, fp(Method::PUT, "/orders", &none, &[], b"{}"));
        assert_ne!(
            base,
            fp(Method::POST, "/orders?dry_run=true", &none, &[], b"{}")
        );
        assert_ne!(base, fp(Method::POST, "/orders/", &none, &[], b"{}"));
        assert_ne!(base, fp(Method::POST, "/orders", &none, &[], b"{ }"));
        // Headers count only when named.
        let mut h = HeaderMap::new();
        h.insert("x-currency", "EUR".parse().unwrap());
        assert_eq!(base, fp(Method::POST, "/orders", &h, &[], b"{}"));
        let named = [HeaderName::from_static("x-currency")];
        let eur = fp(Method::POST, "/orders", &h, &named, b"{}");
        assert_ne!(eur, fp(Method::POST, "/orders", &none, &named, b"{}"));
        h.insert("x-currency", "USD".parse().unwrap());
        assert_ne!(eur, fp(Method::POST, "/orders", &h, &named, b"{}"));
    }

    #[test]
    fn k6_the_encoding_is_injective_across_part_boundaries() {
        // Bytes moved between path and body must not give the same fingerprint.
        let none = HeaderMap::new();
        assert_ne!(
            fp(Method::POST, "/ab", &none, &[], b"c"),
            fp(Method::POST, "/a", &none, &[], b"bc")
        );
        let named = [HeaderName::from_static("x-a")];
        let mut one = HeaderMap::new();
        one.append("x-a", "1,2".parse().unwrap());
        let mut two = HeaderMap::new();
        two.append("x-a", "1".parse().unwrap());
        two.append("x-a", "2".parse().unwrap());
        assert_ne!(
            fp(Method::POST, "/a", &one, &named, b""),
            fp(Method::POST, "/a", &two, &named, b"")
        );
    }
}
