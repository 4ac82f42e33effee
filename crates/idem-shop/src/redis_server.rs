//! A `redis-server` of the examples' own, on a free loopback port in a temp dir, stopped on drop.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, Command};

/// How the server keeps its data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Persistence {
    /// Nothing on disk (`--save "" --appendonly no`): a restart loses every record.
    Volatile,
    /// Every write is appended and fsynced before it is acknowledged (`--appendonly yes
    /// --appendfsync always`): a restart loses nothing acknowledged.
    AofAlways,
}

/// A running `redis-server` started by this process; killed (and its dir removed) on drop.
#[derive(Debug)]
pub struct OwnRedis {
    child: Child,
    dir: PathBuf,
    port: u16,
}

impl OwnRedis {
    /// Starts one and waits (up to 10 s) until it answers `PING`.
    ///
    /// # Errors
    ///
    /// `redis-server` is not installed, or did not start in time; the message says which.
    pub async fn start(persistence: Persistence) -> Result<OwnRedis, String> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| format!("no free loopback port: {e}"))?
            .port();
        let dir = std::env::temp_dir().join(format!("idem-redis-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {dir:?}: {e}"))?;
        let mut cmd = Command::new("redis-server");
        cmd.args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
        ]);
        match persistence {
            Persistence::Volatile => cmd.args(["--appendonly", "no"]),
            Persistence::AofAlways => cmd.args(["--appendonly", "yes", "--appendfsync", "always"]),
        };
        let child = cmd
            .arg("--dir")
            .arg(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| {
                format!("cannot start redis-server ({e}): install it, or pass the URL of a Redis")
            })?;
        let own = OwnRedis { child, dir, port };
        for _ in 0..500 {
            if ping(port).await {
                return Ok(own);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Err(format!(
            "redis-server on port {port} did not answer within 10 s"
        ))
    }

    /// `redis://127.0.0.1:<port>/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }
}

/// One `PING`, with short time limits.
async fn ping(port: u16) -> bool {
    let attempt = async {
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
        s.write_all(b"PING\r\n").await?;
        let mut buf = [0u8; 16];
        let n = s.read(&mut buf).await?;
        Ok::<bool, std::io::Error>(buf[..n].starts_with(b"+PONG"))
    };
    matches!(
        tokio::time::timeout(Duration::from_millis(500), attempt).await,
        Ok(Ok(true))
    )
}

impl Drop for OwnRedis {
    fn drop(&mut self) {
        // `kill_on_drop` reaps the process; start the kill now so the port frees at once.
        let _ = self.child.start_kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
