//! E9/T4: `/metrics`, scraped over HTTP while requests are in flight, shows a non-zero in-flight
//! gauge, with a `# HELP` line (E15).

use std::time::Duration;

use idem_dedup::Engine;
use idem_shop::faults::StatusFaults;
use idem_shop::pb::shop_client::ShopClient;
use idem_shop::pb::CreateOrderRequest;
use idem_shop::{grpc, metrics, Shop};
use tonic::transport::Channel;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t4_metrics_scrape_during_in_flight_requests_shows_in_flight_gauge() {
    let handle = metrics::recorder(); // before the engine, so its gauges register here
    let metrics_addr = metrics::serve(handle).await.unwrap();
    let engine = Engine::builder().shards(2).build().unwrap();
    let server = grpc::serve(
        Shop::with_work(Duration::from_millis(600)),
        engine.clone(),
        StatusFaults::default(),
    )
    .await
    .unwrap();
    let channel = Channel::from_shared(format!("http://{}", server.addr))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let calls: Vec<_> = (0..8)
        .map(|i| {
            let mut client = ShopClient::new(channel.clone());
            tokio::spawn(async move {
                let mut r = tonic::Request::new(CreateOrderRequest {
                    intent_id: format!("metrics-{i}"),
                    sku: "book-1".into(),
                    quantity: 1,
                });
                r.metadata_mut()
                    .insert("authorization", "Bearer t-1".parse().unwrap());
                r.metadata_mut().insert(
                    "x-idempotency-key",
                    format!("metrics-key-{i:04}").parse().unwrap(),
                );
                client.create_order(r).await
            })
        })
        .collect();
    while engine.stats().in_flight == 0 {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let text = metrics::scrape(metrics_addr).await.unwrap();
    let in_flight = metrics::sum(&text, idem_dedup::metrics::IN_FLIGHT);
    assert!(in_flight > 0.0, "no in-flight gauge above zero in:\n{text}");
    assert!(
        text.contains("idem_dedup_in_flight{engine=\"default\",shard=\"0\"}"),
        "{text}"
    );
    // E15: every series the engine registered says what it counts.
    assert!(
        text.contains(&format!("# HELP {} ", idem_dedup::metrics::IN_FLIGHT)),
        "no HELP line for the in-flight gauge in:\n{text}"
    );
    for c in calls {
        c.await.unwrap().unwrap();
    }
}
