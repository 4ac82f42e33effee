//! A 3-master Redis Cluster of the test's own (with replicas if asked), killed on drop.

use std::process::Child;
use std::time::Duration;

use tempfile::TempDir;

use super::{free_cluster_port, raw, spawn_server, wait_for_ping, Options};

/// A Redis Cluster on free loopback ports: 3 masters, optionally with replicas.
#[derive(Debug)]
pub struct RedisCluster {
    ports: Vec<u16>,
    _dirs: Vec<TempDir>,
    children: Vec<Option<Child>>,
}

impl RedisCluster {
    /// 3 masters, no replicas, no persistence.
    pub async fn start() -> Self {
        Self::start_with(0, Options::volatile(), 15_000).await
    }

    /// Starts `3 * (1 + replicas)` `--cluster-enabled` servers with `opts` and the given
    /// `cluster-node-timeout`, joins them with `redis-cli --cluster create`, and waits for
    /// `cluster_state:ok` on every node (and every replica's link to its master).
    pub async fn start_with(replicas: usize, opts: Options, node_timeout_ms: u32) -> Self {
        let mut ports = Vec::new();
        let mut dirs = Vec::new();
        let mut children = Vec::new();
        for _ in 0..3 * (1 + replicas) {
            let mut port = free_cluster_port();
            while ports.contains(&port) {
                port = free_cluster_port();
            }
            let dir = tempfile::tempdir().expect("temp dir");
            let mut child = spawn_server(port, &dir, Some(node_timeout_ms), &opts);
            wait_for_ping(port, &mut child).await;
            ports.push(port);
            dirs.push(dir);
            children.push(Some(child));
        }
        let mut c = RedisCluster {
            ports,
            _dirs: dirs,
            children,
        };
        let nodes: Vec<String> = c.ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
        let out = tokio::process::Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&nodes)
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .output()
            .await
            .unwrap_or_else(|e| panic!("cannot run `redis-cli --cluster create` ({e}): install redis-tools/redis-server"));
        assert!(
            out.status.success(),
            "redis-cli --cluster create failed: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        for _ in 0..2000 {
            let mut ok = 0;
            for &p in &c.ports {
                let state = raw(p, "CLUSTER INFO").await.unwrap_or_default();
                let repl = raw(p, "INFO replication").await.unwrap_or_default();
                let linked = !repl.contains("role:slave") || repl.contains("master_link_status:up");
                if state.contains("cluster_state:ok") && linked {
                    ok += 1;
                }
            }
            if ok == c.ports.len() {
                return c;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        c.kill();
        panic!("cluster did not reach cluster_state:ok within 20 s");
    }

    /// The node URLs.
    pub fn urls(&self) -> Vec<String> {
        self.ports
            .iter()
            .map(|p| format!("redis://127.0.0.1:{p}/"))
            .collect()
    }

    /// The ports of the nodes that are masters now, as a living node sees them.
    pub async fn master_ports(&self) -> Vec<u16> {
        let nodes = self.nodes().await;
        nodes
            .iter()
            .filter(|n| n.flags.contains("master") && !n.flags.contains("fail"))
            .map(|n| n.port)
            .collect()
    }

    /// Kills the node on `port` (SIGKILL).
    pub fn kill_node(&mut self, port: u16) {
        let i = self.ports.iter().position(|&p| p == port).expect("a node");
        if let Some(mut c) = self.children[i].take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts the node on `port` again (same dir and settings: with an append-only file it
    /// rejoins, as a replica of whoever took over its slots).
    pub async fn restart_node(&mut self, port: u16, opts: &Options, node_timeout_ms: u32) {
        let i = self.ports.iter().position(|&p| p == port).expect("a node");
        self.kill_node(port);
        let mut child = spawn_server(port, &self._dirs[i], Some(node_timeout_ms), opts);
        wait_for_ping(port, &mut child).await;
        self.children[i] = Some(child);
    }

    /// Waits until a replica of the killed master `port` took over: every living node reports
    /// `cluster_state:ok` and 3 masters, none of them `port`. Panics after `limit`.
    pub async fn wait_for_failover(&self, port: u16, limit: Duration) {
        let until = tokio::time::Instant::now() + limit;
        while tokio::time::Instant::now() < until {
            let mut good = true;
            for (i, &p) in self.ports.iter().enumerate() {
                if self.children[i].is_none() {
                    continue;
                }
                let info = raw(p, "CLUSTER INFO").await.unwrap_or_default();
                good &= info.contains("cluster_state:ok");
            }
            let masters = self.master_ports().await;
            if good && masters.len() == 3 && !masters.contains(&port) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("no replica took over from the master on port {port} within {limit:?}");
    }

    async fn nodes(&self) -> Vec<Node> {
        for (i, &p) in self.ports.iter().enumerate() {
            if self.children[i].is_none() {
                continue;
            }
            let Ok(text) = raw(p, "CLUSTER NODES").await else {
                continue;
            };
            let nodes: Vec<Node> = text
                .lines()
                .filter_map(|l| {
                    let mut f = l.split(' ');
                    let _id = f.next()?;
                    let addr = f.next()?;
                    let flags = f.next()?.to_owned();
                    let port = addr
                        .split(['@', ','])
                        .next()?
                        .rsplit(':')
                        .next()?
                        .parse()
                        .ok()?;
                    Some(Node { port, flags })
                })
                .collect();
            if !nodes.is_empty() {
                return nodes;
            }
        }
        Vec::new()
    }

    fn kill(&mut self) {
        for c in self.children.iter_mut().flatten() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

struct Node {
    port: u16,
    flags: String,
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        self.kill();
    }
}
