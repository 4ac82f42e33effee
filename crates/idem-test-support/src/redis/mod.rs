//! Real Redis servers for the tests and benches: one `redis-server` on a free loopback port, or a
//! 3-master Redis Cluster (with replicas if asked), started by the tests and killed on drop (as
//! redis-rs's own suite does).
//!
//! If `redis-server` or `redis-cli` is missing the helpers panic with the reason: a test that
//! cannot run must fail loudly, never pass silently (CI installs Debian's `redis-server`).

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tempfile::TempDir;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::free_port;

/// A free loopback port whose cluster-bus port (port + 10000, where cluster nodes also listen) is
/// free too.
fn free_cluster_port() -> u16 {
    loop {
        let port = free_port();
        if port < 55_000 && TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok() {
            return port;
        }
    }
}

/// How a test server keeps its data.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// `--appendonly yes --appendfsync always` (else `--appendonly no`).
    pub aof: bool,
    /// More `--name value` settings.
    pub extra: Vec<(&'static str, String)>,
}

impl Options {
    /// No persistence at all (`--save "" --appendonly no`).
    pub fn volatile() -> Self {
        Options::default()
    }

    /// An append-only file fsynced before every reply.
    pub fn aof_always() -> Self {
        Options {
            aof: true,
            extra: Vec::new(),
        }
    }
}

fn spawn_server(port: u16, dir: &TempDir, cluster: Option<u32>, opts: &Options) -> Child {
    let mut cmd = Command::new("redis-server");
    cmd.arg("--port")
        .arg(port.to_string())
        .arg("--bind")
        .arg("127.0.0.1")
        .arg("--save")
        .arg("")
        .arg("--enable-debug-command")
        .arg("yes")
        .arg("--dir")
        .arg(dir.path());
    if opts.aof {
        cmd.args(["--appendonly", "yes", "--appendfsync", "always"]);
    } else {
        cmd.args(["--appendonly", "no"]);
    }
    for (name, value) in &opts.extra {
        cmd.arg(format!("--{name}")).arg(value);
    }
    if let Some(node_timeout_ms) = cluster {
        cmd.arg("--cluster-enabled")
            .arg("yes")
            .arg("--cluster-config-file")
            .arg(dir.path().join("nodes.conf"))
            .arg("--cluster-node-timeout")
            .arg(node_timeout_ms.to_string())
            .arg("--cluster-replica-validity-factor")
            .arg("0");
    }
    cmd.stdout(Stdio::null()).stderr(Stdio::null());
    cmd.spawn().unwrap_or_else(|e| {
        panic!(
            "cannot start `redis-server` ({e}): these tests need redis-server and redis-cli on \
             PATH (Debian: apt-get install redis-server); .ci/run installs them"
        )
    })
}

/// Sends one inline command and returns the raw reply (a status, an error, an integer or a
/// whole bulk string).
pub async fn raw(port: u16, command: &str) -> std::io::Result<String> {
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
    s.write_all(format!("{command}\r\n").as_bytes()).await?;
    let mut buf = Vec::with_capacity(16 * 1024);
    let mut chunk = vec![0u8; 16 * 1024];
    loop {
        let n = tokio::time::timeout(Duration::from_secs(3), s.read(&mut chunk))
            .await
            .map_err(|_| std::io::Error::other("timeout"))??;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
        let Some(eol) = buf.windows(2).position(|w| w == b"\r\n") else {
            continue;
        };
        if buf[0] != b'$' {
            break;
        }
        let len: i64 = String::from_utf8_lossy(&buf[1..eol]).parse().unwrap_or(-1);
        if len < 0 || buf.len() >= eol + 2 + len as usize + 2 {
            break;
        }
    }
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

async fn wait_for_ping(port: u16, child: &mut Child) {
    for _ in 0..1000 {
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
    panic!("redis-server on port {port} did not answer PING within 10 s");
}

/// One `redis-server` on a free loopback port, in a temp dir (no persistence unless asked).
#[derive(Debug)]
pub struct RedisServer {
    port: u16,
    dir: TempDir,
    opts: Options,
    child: Option<Child>,
}

impl RedisServer {
    /// Starts a server without persistence and waits until it answers PING.
    pub async fn start() -> Self {
        Self::start_with(Options::volatile()).await
    }

    /// Starts a server with `opts` and waits until it answers PING.
    pub async fn start_with(opts: Options) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let port = free_port();
        let mut s = RedisServer {
            port,
            dir,
            opts,
            child: None,
        };
        s.restart().await;
        s
    }

    /// `redis://127.0.0.1:<port>/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Kills the server (SIGKILL) and reaps it.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts the server again on the same port and dir (with an append-only file it reads its
    /// data back; without, it starts empty) and waits until it answers PING.
    pub async fn restart(&mut self) {
        self.restart_nowait();
        let mut child = self.child.take().unwrap();
        wait_for_ping(self.port, &mut child).await;
        self.child = Some(child);
    }

    /// As [`restart`](Self::restart), without waiting.
    pub fn restart_nowait(&mut self) {
        self.kill();
        self.child = Some(spawn_server(self.port, &self.dir, None, &self.opts));
    }

    /// Changes the settings used by the next restart.
    pub fn set_options(&mut self, opts: Options) {
        self.opts = opts;
    }

    /// `CLIENT PAUSE ms ALL`: the server holds every client's commands for `ms`, then runs them.
    pub async fn pause(&self, ms: u64) {
        let r = raw(self.port, &format!("CLIENT PAUSE {ms} ALL"))
            .await
            .expect("CLIENT PAUSE");
        assert!(r.starts_with("+OK"), "CLIENT PAUSE: {r}");
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

mod cluster;

pub use cluster::RedisCluster;
