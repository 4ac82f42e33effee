//! T6: a tonic handler returns idem's errors with `?` — a `Status` of its own code, a
//! `DedupError` — and a real tonic client over TCP reads the code, the message, the reason (a
//! `google.rpc.ErrorInfo` in idem's domain) and the retry-after (a `RetryInfo`).

use std::time::Duration;

use idem_core::{Code, Reason, Status};
use idem_dedup::DedupError;
use idem_shop::pb::shop_client::ShopClient;
use idem_shop::pb::shop_server::{Shop, ShopServer};
use idem_shop::pb::{Book, CreateOrderRequest, DeductStockRequest, GetBookRequest, Order, Stock};
use tokio::net::TcpListener;
use tonic::transport::server::TcpIncoming;
use tonic::{Request, Response};
use tonic_types::StatusExt;

/// A payment step that fails the way idem's code does: with an idem `Status`.
fn charge_card() -> Result<u64, Status> {
    Err(
        Status::new(Code::Unavailable, "the card network is not answering")
            .with_reason(Reason::UPSTREAM_UNAVAILABLE)
            .with_retry_after(Duration::from_millis(300)),
    )
}

struct Payments;

#[tonic::async_trait]
impl Shop for Payments {
    async fn get_book(
        &self,
        _req: Request<GetBookRequest>,
    ) -> Result<Response<Book>, tonic::Status> {
        Err(tonic::Status::unimplemented("not a bookshop"))
    }

    async fn create_order(
        &self,
        req: Request<CreateOrderRequest>,
    ) -> Result<Response<Order>, tonic::Status> {
        let order_id = charge_card()?;
        Ok(Response::new(Order {
            order_id,
            intent_id: req.into_inner().intent_id,
            ..Order::default()
        }))
    }

    async fn deduct_stock(
        &self,
        _req: Request<DeductStockRequest>,
    ) -> Result<Response<Stock>, tonic::Status> {
        Err(DedupError::InFlight {
            retry_after: Duration::from_millis(120),
        })?
    }
}

#[tokio::test]
async fn t6_question_mark_in_a_tonic_handler_keeps_reason_and_retry_info_for_the_client() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(ShopServer::new(Payments))
            .serve_with_incoming(TcpIncoming::from(listener)),
    );
    let mut client = ShopClient::connect(format!("http://{addr}")).await.unwrap();

    let e = client
        .create_order(CreateOrderRequest {
            intent_id: "pay-1".into(),
            sku: "card".into(),
            quantity: 1,
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unavailable);
    assert_eq!(e.message(), "the card network is not answering");
    let details = e.get_error_details();
    let info = details.error_info().expect("an ErrorInfo");
    assert_eq!(info.reason, "UPSTREAM_UNAVAILABLE");
    assert_eq!(info.domain, idem_core::ERROR_DOMAIN);
    assert_eq!(
        details.retry_info().expect("a RetryInfo").retry_delay,
        Some(Duration::from_millis(300))
    );
    assert_eq!(e.metadata().get("grpc-retry-pushback-ms").unwrap(), "300");
    // The client reads it back as idem's Status, as it was sent.
    assert_eq!(
        Status::from(e),
        Status::new(Code::Unavailable, "the card network is not answering")
            .with_reason(Reason::UPSTREAM_UNAVAILABLE)
            .with_retry_after(Duration::from_millis(300))
    );

    let e = client
        .deduct_stock(DeductStockRequest::default())
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::Aborted);
    let read = Status::from(e);
    assert_eq!(read.reason(), Some(&Reason::REQUEST_IN_FLIGHT));
    assert_eq!(read.retry_after(), Some(Duration::from_millis(120)));
    assert!(read.message().contains("still being processed"), "{read}");
    server.abort();
}
