//! Real Redis servers for the tests: one `redis-server` on a free loopback port, or a 3-master
//! Redis Cluster, started by the tests and killed on drop (as redis-rs's own suite does).
//!
//! If `redis-server` or `redis-cli` is missing the helpers panic with the reason: a test that
//! cannot run must fail loudly, never pass silently (CI installs Debian's `redis-server`).

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tempfile::TempDir;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn free_port(with_bus: bool) -> u16 {
    loop {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
        let port = l.local_addr().unwrap().port();
        if !with_bus {
            return port;
        }
        // Cluster nodes also listen on port + 10000 (the cluster bus).
        if port < 55_000 && TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok() {
            return port;
        }
    }
}

fn spawn_server(port: u16, dir: &TempDir, cluster: bool) -> Child {
    let mut cmd = Command::new("redis-server");
    cmd.arg("--port")
        .arg(port.to_string())
        .arg("--bind")
        .arg("127.0.0.1")
        .arg("--save")
        .arg("")
        .arg("--appendonly")
        .arg("no")
        .arg("--dir")
        .arg(dir.path());
    if cluster {
        cmd.arg("--cluster-enabled")
            .arg("yes")
            .arg("--cluster-config-file")
            .arg(dir.path().join("nodes.conf"));
    }
    cmd.stdout(Stdio::null()).stderr(Stdio::null());
    cmd.spawn().unwrap_or_else(|e| {
        panic!(
            "cannot start `redis-server` ({e}): these tests need redis-server and redis-cli on \
             PATH (Debian: apt-get install redis-server); .ci/run installs them"
        )
    })
}

/// Sends one inline command and returns the raw reply (a few hundred bytes at most).
pub async fn raw(port: u16, command: &str) -> std::io::Result<String> {
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
    s.write_all(format!("{command}\r\n").as_bytes()).await?;
    let mut buf = vec![0u8; 16 * 1024];
    let n = tokio::time::timeout(Duration::from_secs(1), s.read(&mut buf))
        .await
        .map_err(|_| std::io::Error::other("timeout"))??;
    Ok(String::from_utf8_lossy(&buf[..n]).into_owned())
}

async fn wait_for_ping(port: u16, child: &mut Child) {
    for _ in 0..500 {
        if let Ok(r) = raw(port, "PING").await {
            if r.starts_with("+PONG") {
                return;
            }
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!("redis-server on port {port} exited at start: {status}");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("redis-server on port {port} did not answer PING within 5 s");
}

/// One `redis-server` on a free loopback port (`--save "" --appendonly no`, a temp dir).
pub struct RedisServer {
    port: u16,
    dir: TempDir,
    child: Option<Child>,
}

impl RedisServer {
    /// Starts a server and waits until it answers PING.
    pub async fn start() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let port = free_port(false);
        let mut s = RedisServer {
            port,
            dir,
            child: None,
        };
        s.restart().await;
        s
    }

    /// `redis://127.0.0.1:<port>/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Kills the server (SIGKILL) and reaps it.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts the server again on the same port (empty: nothing is persisted).
    pub async fn restart(&mut self) {
        self.kill();
        let mut child = spawn_server(self.port, &self.dir, false);
        wait_for_ping(self.port, &mut child).await;
        self.child = Some(child);
    }

    /// The number of commands the server ran, from `INFO commandstats` (INFO itself excluded).
    pub async fn commands_processed(&self) -> u64 {
        let info = raw(self.port, "INFO commandstats").await.expect("INFO");
        info.lines()
            .filter(|l| l.starts_with("cmdstat_") && !l.starts_with("cmdstat_info:"))
            .filter_map(|l| {
                let calls = l.split("calls=").nth(1)?;
                calls.split(',').next()?.parse::<u64>().ok()
            })
            .sum()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A 3-master Redis Cluster on free loopback ports, no replicas.
pub struct RedisCluster {
    ports: Vec<u16>,
    _dirs: Vec<TempDir>,
    children: Vec<Child>,
}

impl RedisCluster {
    /// Starts 3 `--cluster-enabled` servers, joins them with `redis-cli --cluster create`, and
    /// waits for `cluster_state:ok` on every node.
    pub async fn start() -> Self {
        let mut ports = Vec::new();
        let mut dirs = Vec::new();
        let mut children = Vec::new();
        for _ in 0..3 {
            let mut port = free_port(true);
            while ports.contains(&port) {
                port = free_port(true);
            }
            let dir = tempfile::tempdir().expect("temp dir");
            let mut child = spawn_server(port, &dir, true);
            wait_for_ping(port, &mut child).await;
            ports.push(port);
            dirs.push(dir);
            children.push(child);
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
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .output()
            .await
            .unwrap_or_else(|e| panic!("cannot run `redis-cli --cluster create` ({e}): install redis-tools/redis-server"));
        assert!(
            out.status.success(),
            "redis-cli --cluster create failed: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        for _ in 0..1000 {
            let mut ok = 0;
            for &p in &c.ports {
                if let Ok(r) = raw(p, "CLUSTER INFO").await {
                    if r.contains("cluster_state:ok") {
                        ok += 1;
                    }
                }
            }
            if ok == c.ports.len() {
                return c;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        c.kill();
        panic!("cluster did not reach cluster_state:ok within 10 s");
    }

    /// The node URLs.
    pub fn urls(&self) -> Vec<String> {
        self.ports
            .iter()
            .map(|p| format!("redis://127.0.0.1:{p}/"))
            .collect()
    }

    fn kill(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        self.kill();
    }
}
