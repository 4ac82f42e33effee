//! The axum shop's `POST /orders` route as the user-level benches serve it, bare or behind
//! `IdemLayer` (`http_shop` over loopback with wrk, `layer_cost` in process).

use std::time::Duration;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use bytes::Bytes;
use http::StatusCode;
use idem_dedup::Engine;
use idem_shop::auth::BearerTenantLayer;
use idem_shop::{pb, Shop};
use idem_tower::{IdemLayer, StoredResponse};
use serde_json::json;

/// The form body of every request (one intent: the shop appends an order id per run).
pub const BODY: &str = "intent_id=bench-order&sku=book-1&quantity=1";
/// The tenant every request authenticates as.
pub const TENANT: &str = "tenant-bench";

/// The shop's `create_order` route as `idem_shop::http` serves it (that handler is private, so
/// this is a copy): the form's fields (split without percent-decoding, which this bench's body
/// does not need), the side effect, a JSON `201`.
async fn create_order(State(shop): State<Shop>, body: Bytes) -> Response {
    let text = std::str::from_utf8(&body).unwrap_or("");
    let field = |name: &str| {
        text.split('&')
            .find_map(|kv| kv.split_once('=').filter(|(k, _)| *k == name))
            .map(|(_, v)| v.to_owned())
            .unwrap_or_default()
    };
    let req = pb::CreateOrderRequest {
        intent_id: field("intent_id"),
        sku: field("sku"),
        quantity: field("quantity").parse().unwrap_or(0),
    };
    match shop.create_order(req).await {
        Ok(o) => (
            StatusCode::CREATED,
            [(http::header::CONTENT_TYPE, "application/json")],
            json!({
                "order_id": o.order_id, "intent_id": o.intent_id, "sku": o.sku,
                "quantity": o.quantity,
            })
            .to_string(),
        )
            .into_response(),
        Err(e) => (StatusCode::BAD_REQUEST, e.message().to_owned()).into_response(),
    }
}

fn routes(shop: Shop) -> axum::Router {
    axum::Router::new()
        .route("/orders", post(create_order))
        .with_state(shop)
}

/// The bare router and the layered one (its engine keeps results `ttl`), each with its own shop
/// and the shop's toy [`BearerTenantLayer`]; the layered one adds `IdemLayer` inside it, as
/// `idem_shop::http::router` stacks them. Must be called inside a tokio runtime (the engine
/// starts its shards there).
pub fn routers(ttl: Duration) -> (axum::Router, axum::Router, Engine<StoredResponse>) {
    let engine = Engine::<StoredResponse>::builder()
        .ttl(ttl)
        .max_entries(8_000_000)
        .build()
        .expect("engine");
    let bare = routes(Shop::new()).layer(BearerTenantLayer);
    let layered = routes(Shop::new()).layer(
        tower::ServiceBuilder::new()
            .layer(BearerTenantLayer)
            .layer(IdemLayer::new(engine.clone())),
    );
    (bare, layered, engine)
}
