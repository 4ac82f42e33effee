//! Connecting a [`RedisTier`]: one server, a cluster, or a connection you already have; then
//! the persistence check and the start of the subscriber.

use redis::aio::ConnectionManager;
use redis::cluster::{ClusterClient, ClusterClientBuilder};

use crate::config::{check_url, RedisTierBuilder, TierSettings};
use crate::conn::Conn;
use crate::error::ConnectError;
use crate::link::{Dial, Link};
use crate::metrics::VOLATILE;
use crate::persistence::Persistence;
use crate::probe::{seeds, Found};
use crate::RedisTier;

impl RedisTierBuilder {
    /// Connects to one Redis server (`redis://host:port/db`, or `rediss://` with the `tls`
    /// feature) through a reconnecting `ConnectionManager`, checks the server's persistence
    /// settings, and starts the pub/sub subscriber. Must be called inside a tokio runtime.
    ///
    /// # Errors
    ///
    /// [`ConnectError`]: a bad setting or URL, no connection within the startup timeout, or a
    /// volatile Redis without [`allow_volatile`](Self::allow_volatile).
    pub async fn connect(self, url: &str) -> Result<RedisTier, ConnectError> {
        self.validate()?;
        check_url(url)?;
        let client = redis::Client::open(url)?;
        self.connect_client(client).await
    }

    /// As [`connect`](Self::connect), with a `redis::Client` you built yourself (for instance
    /// with your own TLS certificates, credentials or protocol version).
    ///
    /// # Errors
    ///
    /// As [`connect`](Self::connect).
    pub async fn connect_client(self, client: redis::Client) -> Result<RedisTier, ConnectError> {
        self.validate()?;
        let address = client.get_connection_info().addr().to_string();
        let dial = Dial::Single(client.clone(), self.manager_config());
        let (conn, (node, persistence)) = self.dial_until_ready(&dial, Some(&address)).await?;
        // One server: the node is the server the client dialled.
        let persistence = (node.or(Some(address)), persistence);
        let link = Link::new(conn, dial, self.connect_timeout, self.window());
        self.finish(link, vec![client], persistence).await
    }

    /// A tier over a `ConnectionManager` you already have (shared with the rest of your
    /// service). `pubsub` is the client the completion notices are received with; without one,
    /// waits for another instance fall back to polling. The connection is never replaced by the
    /// health check (the manager reconnects by itself); the persistence check runs over it.
    ///
    /// # Errors
    ///
    /// A bad setting, the persistence check failing until the startup timeout, or a volatile
    /// Redis without [`allow_volatile`](Self::allow_volatile).
    pub async fn from_connection_manager(
        self,
        manager: ConnectionManager,
        pubsub: Option<redis::Client>,
    ) -> Result<RedisTier, ConnectError> {
        self.validate()?;
        let conn = Conn::Single(manager);
        let persistence = self.read_until_ready(&conn).await?;
        let link = Link::new(conn, Dial::Fixed, self.connect_timeout, None);
        self.finish(link, pubsub.into_iter().collect(), persistence)
            .await
    }

    /// Connects to a Redis Cluster given some of its nodes (the client discovers the rest and
    /// follows slot moves). Completion notices are received from one node at a time (classic
    /// pub/sub messages reach every node of a cluster). The persistence check reads every
    /// primary. Must be called inside a tokio runtime.
    ///
    /// # Errors
    ///
    /// As [`connect`](Self::connect).
    pub async fn connect_cluster(self, nodes: &[&str]) -> Result<RedisTier, ConnectError> {
        self.validate()?;
        if nodes.is_empty() {
            return Err(ConnectError::Invalid(
                "connect_cluster needs at least one node",
            ));
        }
        for n in nodes {
            check_url(n)?;
        }
        let client = ClusterClientBuilder::new(nodes.to_vec())
            .connection_timeout(self.connect_timeout)
            .response_timeout(self.command_timeout)
            .retries(2)
            .build()?;
        let pubsub = nodes
            .iter()
            .map(|n| redis::Client::open(*n))
            .collect::<Result<Vec<_>, _>>()?;
        self.connect_cluster_client(client, pubsub).await
    }

    /// As [`connect_cluster`](Self::connect_cluster), with a `ClusterClient` you built yourself
    /// (TLS, credentials, timeouts). `pubsub` are clients of some of the cluster's nodes, tried
    /// in turn for completion notices (without any, waits fall back to polling). The health check
    /// replaces a stalled connection with a fresh one from `client`.
    ///
    /// # Errors
    ///
    /// As [`connect`](Self::connect).
    pub async fn connect_cluster_client(
        self,
        client: ClusterClient,
        pubsub: Vec<redis::Client>,
    ) -> Result<RedisTier, ConnectError> {
        self.validate()?;
        let dial = Dial::Cluster(client);
        let at = (!pubsub.is_empty()).then(|| seeds(&pubsub));
        let (conn, persistence) = self.dial_until_ready(&dial, at.as_deref()).await?;
        let link = Link::new(conn, dial, self.connect_timeout, self.window());
        self.finish(link, pubsub, persistence).await
    }

    async fn finish(
        self,
        link: std::sync::Arc<Link>,
        pubsub: Vec<redis::Client>,
        (node, persistence): Found,
    ) -> Result<RedisTier, ConnectError> {
        crate::metrics::describe();
        if persistence.is_volatile() {
            if !self.allow_volatile {
                return Err(ConnectError::Volatile { node, persistence });
            }
            metrics::gauge!(VOLATILE).set(1.0);
            tracing::warn!(
                node = node.as_deref(),
                persistence = %persistence,
                "redis keeps no append-only file: a restart of it loses acknowledged results, so \
                 an intent may run a second time (accepted with allow_volatile)"
            );
        } else {
            metrics::gauge!(VOLATILE).set(0.0);
            match persistence {
                Persistence::Unknown => tracing::warn!(
                    "cannot read redis' persistence settings (CONFIG GET is not allowed): make \
                     sure it keeps an append-only file, or a restart may lose acknowledged results"
                ),
                Persistence::AofAlways => {}
                _ => tracing::info!(
                    node = node.as_deref(),
                    persistence = %persistence,
                    "redis fsyncs its append-only file lazily: a crash of the machine (not of \
                     redis alone) may lose the last acknowledged results"
                ),
            }
        }
        Ok(RedisTier::start(
            link,
            pubsub,
            TierSettings {
                prefix: self.prefix,
                command_timeout: self.command_timeout,
                connect_timeout: self.connect_timeout,
                wait_replicas: self.wait_replicas,
                persistence,
            },
        )
        .await)
    }
}
