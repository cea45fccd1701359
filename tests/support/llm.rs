//! A real llama.cpp server (`scripts/llm_backend.py` with a GGUF model, both installed by
//! `./scripts/test.sh`) for the tests that run real models.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A llama.cpp server, stopped on drop.
pub struct Llm(Child);

impl Drop for Llm {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts llama.cpp on `port` serving `.cache/models/FILE` under the model id `alias`.
pub fn start_llm(port: u16, file: &str, alias: &str) -> Llm {
    let cache = super::repo().join(".cache");
    let python = cache.join("llm-venv/bin/python");
    let gguf = cache.join("models").join(file);
    assert!(
        python.exists() && gguf.exists(),
        "{} or {} missing: run ./scripts/test.sh (it installs llama.cpp and the models)",
        python.display(),
        gguf.display()
    );
    let child = Command::new(python)
        .arg(super::repo().join("scripts/llm_backend.py"))
        .arg(port.to_string())
        .arg(gguf)
        .arg(alias)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    Llm(child)
}

/// Waits (at most a minute) until the server on `port` answers its health check.
pub async fn wait_healthy(client: &reqwest::Client, port: u16) {
    let ready = super::eventually(Duration::from_secs(60), async || {
        let url = format!("http://127.0.0.1:{port}/health");
        let ok = client.get(url).send().await.ok()?.status().is_success();
        ok.then_some(())
    })
    .await;
    assert!(
        ready.is_some(),
        "llama.cpp on {port} did not become healthy"
    );
}

/// mom-router on `policy` (its internal URL pointed at Envoy's internal listener) behind a real
/// Envoy whose three backend clusters, in `envoy::BACKENDS` order, go to `backends` (`None`: a
/// free port nothing listens on). The sidecar must outlive the Envoy.
pub async fn behind_envoy(
    policy: &str,
    backends: [Option<u16>; 3],
) -> (super::sidecar::Sidecar, super::envoy::Envoy) {
    use super::envoy;
    let mut ports = std::collections::HashMap::new();
    for fixed in [envoy::PUBLIC, envoy::INTERNAL, envoy::ADMIN] {
        ports.insert(fixed, super::free_port());
    }
    for ((cluster, _), port) in envoy::BACKENDS.iter().zip(backends) {
        ports.insert(*cluster, port.unwrap_or_else(super::free_port));
    }
    let internal = format!("http://127.0.0.1:{}", ports[&envoy::INTERNAL]);
    let policy = policy.replace("http://127.0.0.1:10001", &internal);
    let sidecar = super::sidecar::Sidecar::start(&policy, 0).await;
    ports.insert(envoy::SIDECAR, sidecar.grpc_port());
    (sidecar, envoy::Envoy::start(ports).await)
}
