//! The OpenAI-style error body `{"error":{"message","type","code"}}`.

use serde_json::json;

/// Renders an OpenAI-compatible error document.
pub fn openai_error(message: &str, error_type: &str, code: &str) -> Vec<u8> {
    let body = json!({
        "error": { "message": message, "type": error_type, "code": code, "param": null }
    });
    body.to_string().into_bytes()
}
