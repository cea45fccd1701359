//! Any bytes as a chat request body through the whole offline request phase (what `explain`
//! runs): parsing, every rule signal, the decision, plugins, and the upstream rewrite. The
//! answer is a route or an OpenAI-style error, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mom_router::engine::{self, Action};
use mom_router::llm::Headers;

#[path = "fixture.rs"]
mod fixture;
use fixture::fixture;

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
