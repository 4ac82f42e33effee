//! A PostgreSQL cluster of a test's own, for tests that stop or restart the server: `initdb` +
//! `pg_ctl` from `/usr/lib/postgresql/15/bin` (or `IDEM_PG_BIN`) on a free loopback port in a
//! temp dir, stopped when dropped.
//!
//! A test that cannot get its server fails with the reason: it never passes silently.

use std::path::{Path, PathBuf};
use std::process::Command;

use tempfile::TempDir;

use crate::free_port;

/// Where `initdb` and `pg_ctl` live.
fn bin(tool: &str) -> PathBuf {
    let dir = std::env::var("IDEM_PG_BIN").unwrap_or_else(|_| "/usr/lib/postgresql/15/bin".into());
    let p = Path::new(&dir).join(tool);
    assert!(
        p.exists(),
        "{} not found: tests that restart PostgreSQL need its server binaries \
         (Debian: apt-get install postgresql-15; or set IDEM_PG_BIN)",
        p.display()
    );
    p
}

/// The uid and gid of the `postgres` user, when these tests run as root (initdb refuses to
/// run as root, so the cluster is made and run as `postgres`).
fn run_as() -> Option<(u32, u32)> {
    let uid = Command::new("id").arg("-u").output().expect("run `id -u`");
    if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
        return None;
    }
    let id = |flag: &str| {
        let out = Command::new("id")
            .args([flag, "postgres"])
            .output()
            .expect("run `id`");
        assert!(
            out.status.success(),
            "these tests run as root, and initdb refuses to run as root: they need a \
             `postgres` user to run the cluster as (Debian's postgresql package makes one)"
        );
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse::<u32>()
            .unwrap()
    };
    Some((id("-u"), id("-g")))
}

fn command(tool: &str, as_user: Option<(u32, u32)>) -> Command {
    match as_user {
        Some(_) => {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(bin(tool));
            c
        }
        None => Command::new(bin(tool)),
    }
}

/// A PostgreSQL cluster of the test's own: `initdb` in a temp dir, `pg_ctl start` on a free
/// loopback port (fsync off: the tests stop it with `-m immediate`, which is a crash, but the
/// data dir is thrown away after). Stopped on drop.
#[derive(Debug)]
pub struct PgCluster {
    dir: TempDir,
    port: u16,
    as_user: Option<(u32, u32)>,
    running: bool,
}

impl PgCluster {
    /// Makes and starts a cluster; its database `postgres` is ready when this returns.
    pub fn start() -> Self {
        let as_user = run_as();
        let dir = tempfile::tempdir().expect("temp dir");
        if let Some((uid, gid)) = as_user {
            std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid))
                .expect("give the temp dir to the postgres user");
        }
        let data = dir.path().join("data");
        let out = command("initdb", as_user)
            .arg("-D")
            .arg(&data)
            .args(["-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8"])
            .output()
            .unwrap_or_else(|e| panic!("cannot run initdb ({e})"));
        assert!(
            out.status.success(),
            "initdb failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let mut c = PgCluster {
            dir,
            port: free_port(),
            as_user,
            running: false,
        };
        c.start_again();
        c
    }

    /// `postgres://postgres@127.0.0.1:<port>/postgres`.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    fn pg_ctl(&self, args: &[&str]) -> std::process::Output {
        command("pg_ctl", self.as_user)
            .arg("-D")
            .arg(self.dir.path().join("data"))
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("cannot run pg_ctl ({e})"))
    }

    /// Stops the server at once (`pg_ctl stop -m immediate`: every backend is killed, as in a
    /// crash; open transactions are lost).
    pub fn stop(&mut self) {
        if self.running {
            let _ = self.pg_ctl(&["stop", "-m", "immediate", "-w"]);
            self.running = false;
        }
    }

    /// Starts the (stopped) server again on the same port and waits until it accepts
    /// connections.
    pub fn start_again(&mut self) {
        let opts = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200",
            self.port,
            self.dir.path().display()
        );
        let log = self.dir.path().join("server.log");
        let out = self.pg_ctl(&[
            "start",
            "-w",
            "-t",
            "60",
            "-l",
            log.to_str().unwrap(),
            "-o",
            &opts,
        ]);
        assert!(
            out.status.success(),
            "pg_ctl start failed: {}{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        self.running = true;
    }
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        self.stop();
    }
}
