//! mom-router started in-process on loopback ports, with its configuration in a temp file so
//! tests can rewrite it and watch the hot reload.

use mom_router::app::{self, Running, ServeOptions};
use mom_router::config::Source;
use std::path::PathBuf;
use std::time::Duration;

/// A running sidecar and the file it reloads from.
pub struct Sidecar {
    /// The running servers.
    pub running: Running,
    /// The configuration file (the binding, for a bundle).
    pub config: PathBuf,
    _dir: tempfile::TempDir,
}

impl Sidecar {
    /// Starts mom-router with `config_text` on `grpc_port` (0 for any).
    pub async fn start(config_text: &str, grpc_port: u16) -> Self {
        Self::start_on(config_text, &format!("127.0.0.1:{grpc_port}")).await
    }

    /// Starts mom-router with its ext_proc server on `listen` (`IP:PORT` or `unix:/path`).
    pub async fn start_on(config_text: &str, listen: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("config.yaml");
        std::fs::write(&config, config_text).unwrap();
        Self::start_source(Source::File(config.clone()), None, listen, config, dir).await
    }

    /// Starts mom-router serving the bundle folder `bundle`, bound by `binding_text` (written to
    /// `binding.yaml`, the file [`Self::rewrite_config`] then replaces), writing its resolution
    /// lock to `lock.json` in the same temp folder.
    pub async fn start_bundle(bundle: &std::path::Path, binding_text: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let binding = dir.path().join("binding.yaml");
        std::fs::write(&binding, binding_text).unwrap();
        let source = Source::Bundle {
            bundle: bundle.to_owned(),
            binding: Some(binding.clone()),
        };
        let lock = dir.path().join("lock.json");
        Self::start_source(source, Some(lock), "127.0.0.1:0", binding, dir).await
    }

    async fn start_source(
        source: Source,
        lock: Option<PathBuf>,
        listen: &str,
        config: PathBuf,
        dir: tempfile::TempDir,
    ) -> Self {
        let running = app::start(ServeOptions {
            source,
            lock,
            grpc_listen: Some(listen.to_owned()),
            admin_listen: Some("127.0.0.1:0".to_owned()),
            reload_interval: Duration::from_millis(50),
            drain: app::Drain {
                grace: Duration::ZERO,
                limit: Duration::from_secs(10),
            },
        })
        .await
        .unwrap();
        Self {
            running,
            config,
            _dir: dir,
        }
    }

    /// The ext_proc port.
    pub fn grpc_port(&self) -> u16 {
        self.running.grpc_addr.unwrap().port()
    }

    /// The admin base URL.
    pub fn admin_url(&self) -> String {
        format!("http://{}", self.running.admin_addr)
    }

    /// Replaces the configuration file atomically (write + rename, as editors and Kubernetes do).
    pub fn rewrite_config(&self, text: &str) {
        let staging = self.config.with_extension("staging");
        std::fs::write(&staging, text).unwrap();
        std::fs::rename(&staging, &self.config).unwrap();
    }

    /// The admin `/metrics` text.
    pub async fn metrics(&self) -> String {
        reqwest::get(format!("{}/metrics", self.admin_url()))
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    /// Drains and stops it, as SIGTERM does; true when everything finished within the limit.
    pub async fn shutdown(self) -> bool {
        self.running.shutdown().await
    }

    /// The live configuration version.
    pub fn version(&self) -> String {
        self.running.store.snapshot().version.to_string()
    }
}

/// The model call deadline tests run under (`callTimeoutMs`; the quickstart's 1800 ms protects
/// a served Envoy, but the test binaries run many sidecars at once on two cores, where a long
/// text's forward passes can wait that long). Tests of the deadline itself set their own.
pub const TEST_CALL_TIMEOUT: &str = "callTimeoutMs: 8000";

/// The quickstart policy shipped in `examples/`, with its model paths made absolute for a
/// config in a temp dir, under [`TEST_CALL_TIMEOUT`].
pub fn quickstart_config() -> String {
    let text =
        std::fs::read_to_string(super::repo().join("examples/quickstart/config.yaml")).unwrap();
    assert_eq!(text.matches("callTimeoutMs: 1800").count(), 2);
    text.replace(
        "../../.cache",
        &super::repo().join(".cache").display().to_string(),
    )
    .replace(
        "../../heads",
        &super::repo().join("heads").display().to_string(),
    )
    .replace("callTimeoutMs: 1800", TEST_CALL_TIMEOUT)
}

/// The quickstart policy on the plain encoder (no adapter) with the heads trained on it
/// (`heads/domain.safetensors`, `jailbreak.safetensors`, `router.safetensors`).
pub fn plain_quickstart_config() -> String {
    let adapted = quickstart_config();
    let plain = [
        ("domain-adapted.safetensors", "domain.safetensors"),
        ("jailbreak-adapted.safetensors", "jailbreak.safetensors"),
        ("router-adapted.safetensors", "router.safetensors"),
    ]
    .iter()
    .fold(adapted, |text, (from, to)| {
        assert!(text.contains(from), "{from}");
        text.replace(from, to)
    });
    let adapter = plain
        .lines()
        .find(|line| line.trim_start().starts_with("adapter:"))
        .unwrap();
    plain.replace(&format!("{adapter}\n"), "")
}

/// The neural example policy, with its model paths made absolute for a config in a temp dir.
pub fn semantic_config() -> String {
    example_config("semantic")
}

/// `examples/NAME/config.yaml`, with its model and head paths made absolute for a config in a
/// temp dir.
pub fn example_config(name: &str) -> String {
    let path = super::repo().join(format!("examples/{name}/config.yaml"));
    let text = std::fs::read_to_string(path).unwrap();
    text.replace(
        "../../.cache",
        &super::repo().join(".cache").display().to_string(),
    )
    .replace(
        "../../heads",
        &super::repo().join("heads").display().to_string(),
    )
}
