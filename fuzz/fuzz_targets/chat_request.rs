//! Any bytes as a chat request body through the whole offline request phase (what `explain`
//! runs): parsing, every rule signal, the decision, plugins, and the upstream rewrite. The
//! answer is a route or an OpenAI-style error, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mom_router::config::{compile_str, Snapshot};
use mom_router::engine::{self, Action, Services};
use mom_router::llm::Headers;
use std::sync::OnceLock;

/// A rule-only policy with every kind of signal that needs no model.
const POLICY: &str = include_str!("../../tests/fixtures/rule-signals.yaml");

fn fixture() -> &'static (Snapshot, Services, tokio::runtime::Runtime) {
    static FIXTURE: OnceLock<(Snapshot, Services, tokio::runtime::Runtime)> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let snapshot = compile_str(POLICY).unwrap_or_else(|e| panic!("fuzz policy: {e}"));
        let services = Services::offline(&snapshot);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap_or_else(|e| panic!("{e}"));
        (snapshot, services, runtime)
    })
}

fuzz_target!(|body: &[u8]| {
    let (snapshot, services, runtime) = fixture();
    let headers = Headers::new(vec![
        (":method".to_owned(), "POST".to_owned()),
        (":path".to_owned(), "/v1/chat/completions".to_owned()),
    ]);
    let routed = runtime.block_on(engine::on_request_body(snapshot, services, &headers, body));
    if let Action::Respond(reply) = &routed.action {
        // Every refusal is JSON a client can read.
        assert!(serde_json::from_slice::<serde_json::Value>(&reply.body).is_ok());
    }
});
