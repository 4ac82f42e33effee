//! T1: a replay is the stored response byte for byte — status, headers, body and trailers —
//! plus the two marks. Raw HTTP/2 (hyper) so nothing between the wire and the test interprets it.

use std::net::SocketAddr;

use bytes::{BufMut, Bytes, BytesMut};
use http::{HeaderMap, Request};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use idem_core::{Code, CodeSet};
use idem_dedup::Engine;
use idem_shop::faults::StatusFaults;
use idem_shop::pb::CreateOrderRequest;
use idem_shop::{grpc, Shop, WRITES};
use idem_tower::{ConfigError, IdemLayer, Writes};
use prost_like::encode;

mod prost_like {
    /// Protobuf encoding of `CreateOrderRequest` by hand (fields 1, 2: strings; 3: varint), so the
    /// test does not need prost as a dependency of its own.
    pub(crate) fn encode(m: &super::CreateOrderRequest) -> Vec<u8> {
        let mut out = Vec::new();
        for (tag, s) in [(1u8, &m.intent_id), (2, &m.sku)] {
            out.push(tag << 3 | 2);
            out.push(s.len() as u8);
            out.extend_from_slice(s.as_bytes());
        }
        out.push(3 << 3);
        out.push(m.quantity as u8);
        out
    }
}

struct Wire {
    status: u16,
    headers: HeaderMap,
    body: Bytes,
    trailers: Option<HeaderMap>,
}

async fn call(addr: SocketAddr, sku: &str) -> Wire {
    let client = Client::builder(TokioExecutor::new())
        .http2_only(true)
        .build_http::<Full<Bytes>>();
    let msg = encode(&CreateOrderRequest {
        intent_id: "intent-0001".into(),
        sku: sku.into(),
        quantity: 1,
    });
    let mut frame = BytesMut::new();
    frame.put_u8(0);
    frame.put_u32(msg.len() as u32);
    frame.put_slice(&msg);
    let req = Request::post(format!("http://{addr}/shop.v1.Shop/CreateOrder"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .header("authorization", "Bearer tenant-0042")
        .header("x-idempotency-key", "3f1c2b7e-9d4a-4c55-8e21-0b6f4a9d2c10")
        .body(Full::new(frame.freeze()))
        .unwrap();
    let resp = client.request(req).await.unwrap();
    let (parts, body) = resp.into_parts();
    let collected = body.collect().await.unwrap();
    let trailers = collected.trailers().cloned();
    Wire {
        status: parts.status.as_u16(),
        headers: parts.headers,
        body: collected.to_bytes(),
        trailers,
    }
}

fn without_marks(h: &HeaderMap) -> HeaderMap {
    let mut h = h.clone();
    for name in ["idempotent-replayed", "idempotent-expires-at", "date"] {
        h.remove(name);
    }
    h
}

async fn assert_replay_is_byte_for_byte(sku: &str, expect_code: &str) {
    let shop = Shop::new();
    let engine = Engine::builder().build().unwrap();
    let server = grpc::serve_with(shop.clone(), engine, StatusFaults::default(), |e| {
        IdemLayer::builder(e.clone())
            .writes(Writes::paths(WRITES))
            .store_failures(CodeSet::EMPTY.with(Code::NotFound))
            .build()
            .unwrap()
    })
    .await
    .unwrap();
    let first = call(server.addr, sku).await;
    let replay = call(server.addr, sku).await;
    assert_eq!(replay.headers["idempotent-replayed"], "true");
    assert!(first.headers.get("idempotent-replayed").is_none());
    assert_eq!(first.status, replay.status);
    assert_eq!(
        without_marks(&first.headers),
        without_marks(&replay.headers)
    );
    assert_eq!(first.body, replay.body);
    assert_eq!(first.trailers, replay.trailers);
    let grpc_status = first
        .trailers
        .as_ref()
        .and_then(|t| t.get("grpc-status"))
        .or_else(|| first.headers.get("grpc-status"))
        .unwrap();
    assert_eq!(grpc_status, expect_code);
}

#[tokio::test]
async fn t1_replay_of_a_success_matches_byte_for_byte_trailers_included() {
    assert_replay_is_byte_for_byte("book-42", "0").await;
}

#[tokio::test]
async fn t1_replay_of_a_stored_trailers_only_failure_matches_byte_for_byte() {
    // NOT_FOUND declared permanent (E13): stored and replayed, grpc-status in the headers.
    assert_replay_is_byte_for_byte("no-such-book", "5").await;
}

/// E13, T2: the server layer's builder refuses what it cannot honour, naming the rule: a
/// retryable code among the failures to store (the client's retry would get the stored failure
/// back), `OK` (always stored), a zero body or stored-bytes limit.
#[tokio::test]
async fn e13_layer_builder_refuses_retryable_codes_and_zero_limits() {
    let engine = Engine::builder().build().unwrap();
    let layer = || IdemLayer::builder(engine.clone());
    for code in [
        Code::Unavailable,
        Code::ResourceExhausted,
        Code::DeadlineExceeded,
        Code::Aborted,
    ] {
        let e = layer()
            .store_failures(CodeSet::EMPTY.with(Code::NotFound).with(code))
            .build()
            .unwrap_err();
        assert!(
            matches!(e, ConfigError::Invalid(rule) if rule.contains("retryable code")),
            "{code}: {e}"
        );
    }
    let e = layer()
        .store_failures(CodeSet::EMPTY.with(Code::Ok))
        .build()
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "invalid layer setting: store_failures must not contain OK: successes are always stored"
    );
    for e in [
        layer().max_body_bytes(0).build().unwrap_err(),
        layer().max_stored_bytes(0).build().unwrap_err(),
    ] {
        assert_eq!(
            e,
            ConfigError::Invalid("max_body_bytes and max_stored_bytes must be greater than zero")
        );
    }
    assert!(layer()
        .store_failures(
            CodeSet::EMPTY
                .with(Code::NotFound)
                .with(Code::FailedPrecondition)
        )
        .build()
        .is_ok());
}
