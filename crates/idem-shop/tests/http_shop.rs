//! Issue 16, item 8: the HTTP shop writes valid JSON whatever a value holds (serde_json), accepts
//! the `Bearer` scheme in any case and answers 401 with `WWW-Authenticate` (RFC 9110).

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use idem_dedup::Engine;
use idem_shop::http::serve;
use idem_shop::Shop;

async fn post(
    addr: std::net::SocketAddr,
    auth: Option<&str>,
    key: &str,
    body: &str,
) -> (http::StatusCode, http::HeaderMap, String) {
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<Full<Bytes>>();
    let mut req = http::Request::post(format!("http://{addr}/orders"))
        .header("content-type", "application/x-www-form-urlencoded")
        .header("idempotency-key", key);
    if let Some(a) = auth {
        req = req.header("authorization", a);
    }
    let resp = client
        .request(req.body(Full::new(Bytes::from(body.to_owned()))).unwrap())
        .await
        .unwrap();
    let (parts, body) = resp.into_parts();
    let body = body.collect().await.unwrap().to_bytes();
    (
        parts.status,
        parts.headers,
        String::from_utf8(body.to_vec()).unwrap(),
    )
}

#[tokio::test]
async fn shop_json_stays_valid_for_quotes_backslashes_newlines_and_tabs() {
    let addr = serve(Shop::new(), Engine::builder().build().unwrap())
        .await
        .unwrap();
    // intent_id = a"b\c<newline>d<tab>e, form-encoded.
    let body = "intent_id=a%22b%5Cc%0Ad%09e&sku=book-1&quantity=1";
    for round in ["executed", "replayed"] {
        let (status, headers, text) =
            post(addr, Some("Bearer tenant-1"), "json-key-00001", body).await;
        assert_eq!(status, 201, "{round}: {text}");
        assert_eq!(headers["content-type"], "application/json");
        let v: serde_json::Value =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{round}: {e}: {text}"));
        assert_eq!(v["intent_id"], "a\"b\\c\nd\te", "{round}");
    }
}

#[tokio::test]
async fn shop_bearer_is_case_insensitive_and_401_carries_a_challenge() {
    let addr = serve(Shop::new(), Engine::builder().build().unwrap())
        .await
        .unwrap();
    let body = "intent_id=i-1&sku=book-1&quantity=1";
    let (status, _, text) = post(addr, Some("bearer tenant-1"), "auth-key-00001", body).await;
    assert_eq!(status, 201, "{text}");
    let (status, _, _) = post(addr, Some("BEARER tenant-1"), "auth-key-00001", body).await;
    assert_eq!(status, 201, "the same tenant: a replay");
    let (status, headers, text) = post(addr, None, "auth-key-00002", body).await;
    assert_eq!(status, 401, "{text}");
    assert_eq!(headers["www-authenticate"], "Bearer realm=\"shop\"");
}
