//! The binary's subcommands as a user runs them: `explain` prints the pipeline's outcome as
//! JSON, and `serve` stops cleanly on SIGTERM.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test helpers fail loudly"
)]

mod support;

use serde_json::Value;
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn explain(body: &[u8], extra: &[&str]) -> Value {
    let config = support::repo().join("examples/quickstart/config.yaml");
    let mut child = Command::new(env!("CARGO_BIN_EXE_mom-router"))
        .arg("explain")
        .arg("--config")
        .arg(config)
        .args(extra)
        .arg("-")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(body).unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success());
    serde_json::from_slice(&output.stdout).unwrap()
}

#[test]
fn explain_shows_signals_decision_and_the_upstream_request() {
    let out = explain(
        br#"{"model":"mom/auto","messages":[{"role":"user","content":"Solve 3 * 4"}]}"#,
        &[],
    );
    assert_eq!(out["identity"], "mom/auto");
    assert_eq!(out["decision"], "math");
    assert_eq!(out["algorithm"], "static");
    assert_eq!(out["model"], "qwen2.5-coder-0.5b");
    assert_eq!(out["provider_model"], "Qwen2.5-Coder-0.5B-Instruct");
    assert_eq!(out["action"], "forward");
    assert_eq!(
        out["upstream"]["body"]["model"],
        "Qwen2.5-Coder-0.5B-Instruct"
    );
    let math = out["signals"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "math")
        .unwrap();
    assert_eq!(math["type"], "keyword");
    assert_eq!(math["matched"], true);
    assert_eq!(math["confidence"], 1.0);
    assert_eq!(math["label"], "solve");
}

#[test]
fn explain_names_the_pii_types_found_never_the_values() {
    let out = explain(
        br#"{"model":"mom/auto","messages":[{"role":"user","content":"Call me on +44 20 7946 0958 or mail a.b@example.org"}]}"#,
        &[],
    );
    assert_eq!(out["decision"], "personal_data");
    let pii = out["signals"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["type"] == "pii")
        .unwrap();
    assert_eq!(pii["matched"], true);
    assert_eq!(pii["label"], "EMAIL,PHONE");
    assert!(!out["signals"].to_string().contains("example.org"));
}

#[test]
fn explain_uses_headers_for_header_signals() {
    let out = explain(
        br#"{"model":"mom/auto","messages":[{"role":"user","content":"hello"}]}"#,
        &[
            "--metadata",
            r#"envoy.filters.http.jwt_authn={"jwt_payload":{"roles":["staff","premium"]}}"#,
            "--header",
            "x-mom-canary:true",
            "--header",
            "x-request-id: fixed-1",
        ],
    );
    assert_eq!(out["decision"], "premium_canary");
    assert_eq!(out["algorithm"], "weighted");
    assert_eq!(out["scores"].as_array().unwrap().len(), 2);
    // The quickstart reads roles from verified claims: the header alone counts for nothing.
    let claimed = explain(
        br#"{"model":"mom/auto","messages":[{"role":"user","content":"hello"}]}"#,
        &[
            "--header",
            "x-mom-user-roles: premium",
            "--header",
            "x-mom-canary:true",
        ],
    );
    assert_eq!(claimed["decision"], "balanced");
}

#[test]
fn explain_gives_the_same_error_the_sidecar_gives() {
    let out = explain(b"{\"model\":\"mom/auto\",\"messages\":[", &[]);
    assert_eq!(out["action"], "respond");
    assert_eq!(out["status"], 400);
    assert_eq!(out["body"]["error"]["code"], "invalid_json");
    assert_eq!(out["decision"], Value::Null);
    let models = explain(b"", &["--method", "GET", "--path", "/v1/models"]);
    assert_eq!(models["status"], 200);
    assert_eq!(models["body"]["data"][0]["id"], "mom/auto");
}

#[test]
fn serve_refuses_an_invalid_config_and_stops_cleanly_on_sigterm() {
    let bad = support::repo().join("tests/fixtures/bad-config/unknown-model-in-decision.yaml");
    let refused = Command::new(env!("CARGO_BIN_EXE_mom-router"))
        .args(["serve", "--config"])
        .arg(&bad)
        .output()
        .unwrap();
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("unknown model \"qwen-7b\""));

    let (grpc, admin) = (support::free_port(), support::free_port());
    let mut child = Command::new(env!("CARGO_BIN_EXE_mom-router"))
        .args(["serve", "--config"])
        .arg(support::repo().join("examples/quickstart/config.yaml"))
        .args(["--grpc-listen", &format!("127.0.0.1:{grpc}")])
        .args(["--admin-listen", &format!("127.0.0.1:{admin}")])
        .args(["--worker-threads", "1"])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let get = |path: &str| -> Option<String> {
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", admin)).ok()?;
        let request = format!("GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).ok()?;
        let mut reply = String::new();
        std::io::Read::read_to_string(&mut stream, &mut reply).ok()?;
        Some(reply)
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    let live = loop {
        if let Some(reply) = get("/live") {
            break reply;
        }
        assert!(Instant::now() < deadline, "admin never listened");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(live.starts_with("HTTP/1.1 200"), "{live}");
    let metrics = get("/metrics").unwrap();
    assert!(
        metrics.contains("\nmom_runtime_worker_threads 1\n"),
        "--worker-threads 1: {metrics}"
    );
    let ready = get("/ready").unwrap();
    assert!(
        ready.starts_with("HTTP/1.1 200") && ready.contains("\"draining\":false"),
        "{ready}"
    );
    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    // Draining: not ready, still serving, for the grace period (2 s by default).
    let deadline = Instant::now() + Duration::from_secs(2);
    let draining = loop {
        let reply = get("/ready").unwrap_or_default();
        if reply.starts_with("HTTP/1.1 503") || Instant::now() > deadline {
            break reply;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(draining.contains("\"draining\":true"), "{draining}");
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            child.kill().unwrap();
            panic!("serve did not stop within 10 s of SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "exit status {status}");
}

#[test]
fn serve_refuses_zero_worker_threads_naming_the_flag() {
    let output = Command::new(env!("CARGO_BIN_EXE_mom-router"))
        .args(["serve", "--config", "c.yaml", "--worker-threads", "0"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--worker-threads"), "{stderr}");
    assert!(stderr.contains("1..=1024"), "{stderr}");
}

#[test]
fn train_refuses_a_holdout_outside_1_to_90_instead_of_changing_it() {
    let output = Command::new(env!("CARGO_BIN_EXE_mom-router"))
        .args([
            "train",
            "--config",
            "c.yaml",
            "--data",
            "d.jsonl",
            "--task",
            "domain",
            "--out",
            "h.safetensors",
            "--holdout",
            "95",
        ])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--holdout"), "{stderr}");
    assert!(stderr.contains("1..=90"), "{stderr}");
}
