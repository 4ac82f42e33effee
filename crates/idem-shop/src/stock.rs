//! The order service's link to a separate stock service: CreateOrder deducts the order's stock
//! there, through idem's client layer and without setting a key, before it records the order.
//!
//! Inside the order's deduplicated run the layer derives the deduction's key from the order's
//! intent, so a re-run of the intent (after a run lost between the deduction and the order)
//! sends the same key, and the stock service replays the first deduction instead of taking the
//! stock again. The link can also lose a share of the runs right after their deduction: the run
//! answers `UNAVAILABLE` (reason `RUN_LOST`) and records nothing, as a run that died there would,
//! and the client's retry runs the intent again.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use idem_tower::RetryService;
use tonic::transport::Channel;

use crate::pb::shop_client::ShopClient;
use crate::pb::{CreateOrderRequest, DeductStockRequest};
use crate::rng::Rng;
use crate::status_with_reason;

/// The reason of a run lost after its stock call.
pub const RUN_LOST: &str = "RUN_LOST";

/// A stock service to deduct from, and how often a run is lost after its deduction.
#[derive(Debug)]
pub struct StockLink {
    client: ShopClient<RetryService<Channel>>,
    lose: f64,
    rng: Rng,
    lost: AtomicU64,
}

impl StockLink {
    /// Deducts through `client` (a channel to the stock service behind idem's `RetryLayer`); loses
    /// each run after its deduction with probability `lose_after_stock` (dice seeded by `seed`).
    pub fn new(client: RetryService<Channel>, lose_after_stock: f64, seed: u64) -> Self {
        StockLink {
            client: ShopClient::new(client),
            lose: lose_after_stock,
            rng: Rng::new(seed),
            lost: AtomicU64::new(0),
        }
    }

    /// Runs lost after their deduction so far.
    pub fn lost(&self) -> u64 {
        self.lost.load(Relaxed)
    }

    /// Deducts `order`'s stock (no key set: the layer derives it), then maybe loses the run.
    pub(crate) async fn deduct(&self, order: &CreateOrderRequest) -> Result<(), tonic::Status> {
        let mut req = tonic::Request::new(DeductStockRequest {
            sku: order.sku.clone(),
            quantity: order.quantity,
            expected_version: 0,
            intent_id: order.intent_id.clone(),
        });
        let bearer = "Bearer order-service".parse().expect("ascii");
        req.metadata_mut().insert("authorization", bearer);
        self.client.clone().deduct_stock(req).await?;
        if self.rng.next_f64() < self.lose {
            self.lost.fetch_add(1, Relaxed);
            return Err(status_with_reason(
                tonic::Code::Unavailable,
                "the order's run was lost after its stock call, before its order",
                RUN_LOST,
            ));
        }
        Ok(())
    }
}
