//! The shop as a tonic server behind the idem layer, on a free loopback port.

use std::net::SocketAddr;
use std::sync::Arc;

use idem_dedup::{Deduplicator, Engine};
use idem_tower::{IdemLayer, StoredResponse, Writes};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::auth::BearerTenantLayer;
use crate::faults::{StatusFaultCounts, StatusFaultLayer, StatusFaults};
use crate::pb::shop_server::ShopServer;
use crate::{Shop, WRITES};

/// A running gRPC shop. Dropping it stops the server.
#[derive(Debug)]
pub struct RunningGrpc<D = Engine<StoredResponse>> {
    /// Where it listens (127.0.0.1).
    pub addr: SocketAddr,
    /// The shop (its orders per intent).
    pub shop: Shop,
    /// The deduplicator behind the idem layer (its stats): an [`Engine`], or a tiered engine.
    pub engine: D,
    /// Server-side faults injected so far.
    pub faults: Arc<StatusFaultCounts>,
    shutdown: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl<D> RunningGrpc<D> {
    /// Stops accepting and waits for the server task.
    pub async fn stop(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl<D> Drop for RunningGrpc<D> {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

/// The layer stack every shop server uses: server-side faults (outermost, like a load shedder),
/// the toy bearer-token auth (tenant extension), then the idem layer with the shop's writes.
pub fn idem_layer<D: Deduplicator<Value = StoredResponse>>(engine: &D) -> IdemLayer<D> {
    IdemLayer::builder(engine.clone())
        .writes(Writes::paths(WRITES))
        .build()
        .expect("the shop's layer settings are fixed and valid")
}

/// Serves `shop` over gRPC on `127.0.0.1:0` behind [`StatusFaultLayer`] → [`BearerTenantLayer`]
/// → [`IdemLayer`] (the shop's writes).
///
/// # Errors
///
/// Binding the listener failed.
pub async fn serve<D: Deduplicator<Value = StoredResponse>>(
    shop: Shop,
    engine: D,
    faults: StatusFaults,
) -> std::io::Result<RunningGrpc<D>> {
    serve_with(shop, engine, faults, idem_layer).await
}

/// As [`serve`], with the idem layer built by `make_layer` (other settings, for tests).
///
/// # Errors
///
/// Binding the listener failed.
pub async fn serve_with<D: Deduplicator<Value = StoredResponse>>(
    shop: Shop,
    engine: D,
    faults: StatusFaults,
    make_layer: impl FnOnce(&D) -> IdemLayer<D>,
) -> std::io::Result<RunningGrpc<D>> {
    serve_on(
        TcpListener::bind("127.0.0.1:0").await?,
        shop,
        engine,
        faults,
        make_layer,
    )
    .await
}

/// As [`serve_with`], on a listener of the caller's (a fixed `--addr`).
///
/// # Errors
///
/// Reading the listener's address failed.
pub async fn serve_on<D: Deduplicator<Value = StoredResponse>>(
    listener: TcpListener,
    shop: Shop,
    engine: D,
    faults: StatusFaults,
    make_layer: impl FnOnce(&D) -> IdemLayer<D>,
) -> std::io::Result<RunningGrpc<D>> {
    let addr = listener.local_addr()?;
    let fault_layer = StatusFaultLayer::new(faults);
    let counts = fault_layer.counts();
    let stack = tower::ServiceBuilder::new()
        .layer(fault_layer)
        .layer(BearerTenantLayer)
        .layer(make_layer(&engine))
        .into_inner();
    let (tx, rx) = oneshot::channel::<()>();
    let service = ShopServer::new(shop.clone());
    let task = tokio::spawn(async move {
        let incoming = tonic::transport::server::TcpIncoming::from(listener);
        let _ = tonic::transport::Server::builder()
            .layer(stack)
            .add_service(service)
            .serve_with_incoming_shutdown(incoming, async {
                let _ = rx.await;
            })
            .await;
    });
    Ok(RunningGrpc {
        addr,
        shop,
        engine,
        faults: counts,
        shutdown: Some(tx),
        task: Some(task),
    })
}
