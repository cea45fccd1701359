//! The binary's subcommands as a user runs them: `explain` prints the pipeline's outcome as
//! JSON, `serve` stops cleanly on SIGTERM and holds only the memory it uses.
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

/// `serve` on the quickstart's configuration, on free ports; returns the child and its admin port.
fn serve_quickstart(worker_threads: &str, stderr: Stdio) -> (std::process::Child, u16) {
    let (grpc, admin) = (support::free_port(), support::free_port());
    let child = Command::new(env!("CARGO_BIN_EXE_mom-router"))
        .args(["serve", "--config"])
        .arg(support::repo().join("examples/quickstart/config.yaml"))
        .args(["--grpc-listen", &format!("127.0.0.1:{grpc}")])
        .args(["--admin-listen", &format!("127.0.0.1:{admin}")])
        .args(["--worker-threads", worker_threads])
        .env("NO_COLOR", "1")
        .stderr(stderr)
        .spawn()
        .unwrap();
    (child, admin)
}

/// One plain HTTP/1.1 GET on the admin port; `None` while nothing listens.
fn admin_get(admin: u16, path: &str) -> Option<String> {
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", admin)).ok()?;
    let request = format!("GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).ok()?;
    let mut reply = String::new();
    std::io::Read::read_to_string(&mut stream, &mut reply).ok()?;
    Some(reply)
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

    let (mut child, admin) = serve_quickstart("1", Stdio::null());
    let get = |path: &str| admin_get(admin, path);
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

/// Loading the quickstart (the adapted encoder patched in memory, the NER model, the heads) builds
/// large buffers that are freed before `/ready`; `serve` hands their pages back, so the sidecar
/// holds what it uses. Without the release it sat at 278 MB.
#[test]
fn serve_returns_freed_start_up_memory_and_holds_the_quickstart_under_250_mb() {
    use mom_router::observability::memory;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("serve.log");
    let (mut child, admin) =
        serve_quickstart("2", Stdio::from(std::fs::File::create(&log).unwrap()));
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if admin_get(admin, "/ready").is_some_and(|reply| reply.starts_with("HTTP/1.1 200")) {
            break;
        }
        if Instant::now() > deadline {
            child.kill().unwrap();
            panic!(
                "not ready within 60 s: {}",
                std::fs::read_to_string(&log).unwrap()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let resident = memory::resident_bytes_of(child.id());
    let peak = memory::peak_resident_bytes_of(child.id());
    child.kill().unwrap();
    child.wait().unwrap();
    let rss_kb = resident.unwrap() / 1024;
    let peak_kb = peak.unwrap() / 1024;
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(
        logged.contains("freed memory returned to the system"),
        "{logged}"
    );
    assert!(rss_kb < 250_000, "resident {rss_kb} kB once ready");
    // Loading never held more either: the int8 word table is looked up before it is dequantized,
    // so ONNX Runtime folds no float copy of it (the peak was 284 MB).
    assert!(
        peak_kb < 250_000,
        "peak resident {peak_kb} kB while loading"
    );
}

/// `eval-signal --by-language` scores each detected language apart: a keyword signal written in
/// English finds every English code request and no German one, which the overall score hides.
#[test]
fn eval_signal_by_language_shows_a_signal_right_in_english_and_wrong_in_german() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("requests.jsonl");
    let rows = [
        (
            "code",
            "Write a python function that reverses a list of numbers and returns it.",
        ),
        (
            "code",
            "Please write a function that counts the vowels in a sentence, in python.",
        ),
        (
            "code",
            "Schreibe bitte ein kleines Programm, das eine Liste von Zahlen umkehrt und ausgibt.",
        ),
        (
            "code",
            "Wie kann ich in meinem Programm alle Dateien eines Ordners nacheinander einlesen?",
        ),
        (
            "chat",
            "What is the capital city of France, and why is it so famous around the world?",
        ),
        (
            "chat",
            "Could you tell me a little about the history of the old harbour in this town?",
        ),
        (
            "chat",
            "Was ist die Hauptstadt von Frankreich und warum ist sie auf der ganzen Welt berühmt?",
        ),
        (
            "chat",
            "Kannst du mir etwas über die Geschichte des alten Hafens in dieser Stadt erzählen?",
        ),
    ];
    let lines: Vec<String> = rows
        .iter()
        .map(|(label, text)| serde_json::json!({"text": text, "label": label}).to_string())
        .collect();
    std::fs::write(&data, lines.join("\n")).unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_mom-router"))
        .args([
            "eval-signal",
            "--signal",
            "code",
            "--positive",
            "code",
            "--by-language",
        ])
        .arg("--config")
        .arg(support::repo().join("tests/fixtures/rule-signals.yaml"))
        .arg("--data")
        .arg(&data)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        stdout.starts_with("examples 8  accuracy 0.7500"),
        "{stdout}"
    );
    assert!(
        stdout.contains("\n  eng  examples 4  accuracy 1.0000  F1 of code 1.0000 (2 of them)\n"),
        "{stdout}"
    );
    assert!(
        stdout.contains("\n  deu  examples 4  accuracy 0.5000  F1 of code 0.0000 (2 of them)\n"),
        "{stdout}"
    );
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
