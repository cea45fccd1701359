//! A real `redis-server` on a free loopback port, without persistence, stopped on drop.
//! `$MOM_REDIS_BIN` names the binary; otherwise `redis-server` on PATH (`./scripts/test.sh`
//! installs it).

use super::free_port;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running Redis server.
pub struct Redis {
    child: Child,
    /// Its port.
    pub port: u16,
}

impl Redis {
    /// Starts a server and waits (at most 10 s) until it accepts connections.
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// A server that refuses every command until `AUTH password`.
    pub fn start_with_password(password: &str) -> Self {
        Self::start_with(&["--requirepass", password])
    }

    fn start_with(extra: &[&str]) -> Self {
        let binary = std::env::var("MOM_REDIS_BIN").unwrap_or_else(|_| "redis-server".to_owned());
        let port = free_port();
        let child = Command::new(&binary)
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--loglevel", "warning"])
            .args(extra)
            .stdout(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {binary}: {e}; install redis-server"));
        let redis = Self { child, port };
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "redis-server did not start on {port}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        redis
    }

    /// The `redis://` URL.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
