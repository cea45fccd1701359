use super::*;

fn chat(body: Value) -> Value {
    let translated = to_chat(body.to_string().as_bytes()).unwrap();
    serde_json::from_slice(&translated.body).unwrap()
}

fn refused(body: Value) -> String {
    to_chat(body.to_string().as_bytes()).unwrap_err().message
}

#[test]
fn a_string_input_with_instructions_becomes_two_messages() {
    let out = chat(
        json!({"model": "mom/auto", "input": "Hi", "instructions": "Be brief.",
        "max_output_tokens": 32, "stream": true,
        "text": {"format": {"type": "json_schema", "name": "r", "schema": {"type": "object"}, "strict": true}}}),
    );
    assert_eq!(
        out["messages"][0],
        json!({"role": "system", "content": "Be brief."})
    );
    assert_eq!(out["messages"][1], json!({"role": "user", "content": "Hi"}));
    assert_eq!(out["max_tokens"], 32);
    assert_eq!(out["stream_options"]["include_usage"], true);
    assert_eq!(out["response_format"]["type"], "json_schema");
    assert_eq!(out["response_format"]["json_schema"]["strict"], true);
}

#[test]
fn items_with_a_function_call_round_trip_become_tool_messages() {
    let out = chat(json!({"model": "mom/auto",
    "tools": [{"type": "function", "name": "weather", "parameters": {"type": "object"}}],
    "tool_choice": {"type": "function", "name": "weather"},
    "input": [
        {"role": "developer", "content": "Use tools."},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Oslo?"},
            {"type": "input_image", "image_url": "https://example.org/a.png"}]},
        {"type": "function_call", "call_id": "call_1", "name": "weather", "arguments": "{\"city\":\"Oslo\"}"},
        {"type": "function_call_output", "call_id": "call_1", "output": "-3 C"}
    ]}));
    let messages = out["messages"].as_array().unwrap();
    assert_eq!(
        messages[0],
        json!({"role": "system", "content": "Use tools."})
    );
    assert_eq!(
        messages[1]["content"][1]["image_url"]["url"],
        "https://example.org/a.png"
    );
    assert_eq!(
        messages[2]["tool_calls"][0]["function"]["arguments"],
        "{\"city\":\"Oslo\"}"
    );
    assert_eq!(
        messages[3],
        json!({"role": "tool", "tool_call_id": "call_1", "content": "-3 C"})
    );
    assert_eq!(out["tools"][0]["function"]["name"], "weather");
    assert_eq!(out["tool_choice"]["function"]["name"], "weather");
}

#[test]
fn bad_requests_are_refused_naming_the_field() {
    assert!(refused(json!({"model": "m", "input": 7})).contains("input: must be"));
    assert!(refused(json!({"model": "m"})).contains("input: a string"));
    assert!(refused(json!({"input": "hi"})).contains("model"));
    assert!(
        refused(json!({"model": "m", "input": "hi", "previous_response_id": "resp_1"}))
            .contains("previous_response_id")
    );
    let orphan = json!([{"type": "function_call_output", "call_id": "x", "output": "1"}]);
    assert!(refused(json!({"model": "m", "input": orphan}))
        .contains("input[0]: function_call_output for \"x\""));
    assert!(
        refused(json!({"model": "m", "input": "hi", "max_output_tokens": -1}))
            .contains("max_output_tokens")
    );
    let dropped = to_chat(br#"{"model":"m","input":"hi","reasoning":{"effort":"low"}}"#).unwrap();
    assert_eq!(dropped.dropped, ["reasoning"]);
}

#[test]
fn a_completion_becomes_a_response() {
    let completion = json!({"id": "c1", "model": "qwen", "choices": [{"index": 0,
        "finish_reason": "length", "message": {"role": "assistant", "content": "Sure",
        "tool_calls": [{"id": "call_1", "type": "function",
            "function": {"name": "weather", "arguments": "{}"}}]}}],
        "usage": {"prompt_tokens": 11, "completion_tokens": 7}});
    let out: Value =
        serde_json::from_slice(&from_chat(completion.to_string().as_bytes()).unwrap()).unwrap();
    assert_eq!(out["object"], "response");
    assert_eq!(out["id"], "resp_c1");
    assert_eq!(out["status"], "incomplete");
    assert_eq!(out["output"][0]["content"][0]["text"], "Sure");
    assert_eq!(out["output"][1]["type"], "function_call");
    assert_eq!(out["output"][1]["call_id"], "call_1");
    assert_eq!(out["usage"]["total_tokens"], 18);
}
