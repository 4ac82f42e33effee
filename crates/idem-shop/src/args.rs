//! The example servers' command line:
//! `[--serve] [--addr HOST:PORT] [--redis URL [--allow-volatile]] [--postgres URL]`.

use std::net::SocketAddr;

/// What an example server was asked to do.
#[derive(Debug, Clone, Default)]
pub struct ServerArgs {
    /// Keep serving after the walk-through (`--serve`).
    pub serve: bool,
    /// Listen here (`--addr`); a free loopback port otherwise.
    pub addr: Option<SocketAddr>,
    /// Deduplicate through a tiered engine on this Redis (`--redis`), so several instances
    /// share one record; the embedded engine otherwise.
    pub redis: Option<String>,
    /// Accept a Redis that keeps nothing on disk (`--allow-volatile`): idem refuses one by
    /// default, since its restart loses acknowledged records (a warning is logged instead).
    pub allow_volatile: bool,
    /// Deduplicate in PostgreSQL (`--postgres`), the record committed with the side effect.
    pub postgres: Option<String>,
}

impl ServerArgs {
    /// Parses `std::env::args()`; prints the usage and exits with status 2 on anything else.
    pub fn from_env(program: &str) -> ServerArgs {
        match Self::parse(std::env::args().skip(1)) {
            Ok(a) => a,
            Err(e) => {
                eprintln!(
                    "{e}\nusage: {program} [--serve] [--addr HOST:PORT] [--redis URL [--allow-volatile]] [--postgres URL]"
                );
                std::process::exit(2)
            }
        }
    }

    /// Parses arguments (without the program name).
    ///
    /// # Errors
    ///
    /// An unknown flag, a missing value, or an address that does not parse, in words.
    pub fn parse(args: impl IntoIterator<Item = String>) -> Result<ServerArgs, String> {
        let mut out = ServerArgs::default();
        let mut args = args.into_iter();
        while let Some(arg) = args.next() {
            match arg.as_str() {
                "--serve" => out.serve = true,
                "--addr" => {
                    let v = args.next().ok_or("--addr needs HOST:PORT")?;
                    out.addr = Some(
                        v.parse()
                            .map_err(|e| format!("--addr {v:?} is not HOST:PORT: {e}"))?,
                    );
                }
                "--redis" => out.redis = Some(args.next().ok_or("--redis needs a URL")?),
                "--allow-volatile" => out.allow_volatile = true,
                "--postgres" => out.postgres = Some(args.next().ok_or("--postgres needs a URL")?),
                other => return Err(format!("unknown argument {other:?}")),
            }
        }
        Ok(out)
    }

    /// A listener on `--addr`, or on a free loopback port.
    ///
    /// # Errors
    ///
    /// Binding failed.
    pub async fn listener(&self) -> std::io::Result<tokio::net::TcpListener> {
        let addr = self.addr.unwrap_or_else(|| ([127, 0, 0, 1], 0).into());
        tokio::net::TcpListener::bind(addr).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &[&str]) -> Result<ServerArgs, String> {
        ServerArgs::parse(s.iter().map(|s| s.to_string()))
    }

    #[test]
    fn flags_parse_and_bad_ones_say_why() {
        let a = parse(&[
            "--serve",
            "--addr",
            "127.0.0.1:50051",
            "--redis",
            "redis://x/",
        ])
        .unwrap();
        assert!(a.serve);
        assert_eq!(a.addr.unwrap().port(), 50051);
        assert_eq!(a.redis.as_deref(), Some("redis://x/"));
        assert!(parse(&["--addr", "nope"])
            .unwrap_err()
            .contains("HOST:PORT"));
        assert!(parse(&["--redis"]).unwrap_err().contains("URL"));
        assert!(parse(&["--what"]).unwrap_err().contains("unknown"));
    }
}
