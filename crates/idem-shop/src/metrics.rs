//! A Prometheus `/metrics` endpoint over the `metrics` facade, and a scraper for it.

use std::net::SocketAddr;
use std::sync::OnceLock;

use axum::routing::get;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tokio::net::TcpListener;

/// Installs the process-wide Prometheus recorder once and returns its handle.
///
/// # Panics
///
/// If another recorder was installed first.
pub fn recorder() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            PrometheusBuilder::new()
                .install_recorder()
                .expect("no other metrics recorder is installed")
        })
        .clone()
}

/// Serves `GET /metrics` on `127.0.0.1:0` and returns its address.
///
/// # Errors
///
/// Binding the listener failed.
pub async fn serve(handle: PrometheusHandle) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let app = axum::Router::new().route("/metrics", get(move || async move { handle.render() }));
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok(addr)
}

/// Fetches `http://{addr}/metrics` (HTTP/1.1) and returns the text.
///
/// # Errors
///
/// Connection or HTTP errors.
pub async fn scrape(addr: SocketAddr) -> Result<String, Box<dyn std::error::Error + Send + Sync>> {
    use http_body_util::{BodyExt, Empty};
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<Empty<bytes::Bytes>>();
    let uri: http::Uri = format!("http://{addr}/metrics").parse()?;
    let resp = client.get(uri).await?;
    let body = resp.into_body().collect().await?.to_bytes();
    Ok(String::from_utf8_lossy(&body).into_owned())
}

/// Sums the values of every sample of `metric` (all label sets) in Prometheus text.
pub fn sum(text: &str, metric: &str) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| {
            l.strip_prefix(metric)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}
