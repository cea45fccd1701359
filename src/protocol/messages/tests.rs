use super::*;

fn chat(body: Value) -> Value {
    let translated = to_chat(body.to_string().as_bytes(), false).unwrap();
    serde_json::from_slice(&translated.body).unwrap()
}

fn refused(body: Value) -> String {
    to_chat(body.to_string().as_bytes(), false)
        .unwrap_err()
        .message
}

#[test]
fn a_request_becomes_the_same_chat_request() {
    let out = chat(json!({
        "model": "mom/auto", "max_tokens": 64, "stream": true, "temperature": 0.2,
        "system": [{"type": "text", "text": "Be brief."}],
        "stop_sequences": ["END"], "metadata": {"user_id": "u-7"},
        "messages": [
            {"role": "user", "content": "What is 2+2?"},
            {"role": "assistant", "content": [{"type": "text", "text": "4"}]},
            {"role": "user", "content": [
                {"type": "text", "text": "And this?"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}
            ]}
        ]
    }));
    assert_eq!(out["model"], "mom/auto");
    assert_eq!(out["max_tokens"], 64);
    assert_eq!(out["stream"], true);
    assert_eq!(out["stream_options"]["include_usage"], true);
    assert_eq!(out["temperature"], 0.2);
    assert_eq!(out["stop"], json!(["END"]));
    assert_eq!(out["user"], "u-7");
    let messages = out["messages"].as_array().unwrap();
    assert_eq!(
        messages[0],
        json!({"role": "system", "content": "Be brief."})
    );
    assert_eq!(
        messages[1],
        json!({"role": "user", "content": "What is 2+2?"})
    );
    assert_eq!(messages[2], json!({"role": "assistant", "content": "4"}));
    assert_eq!(
        messages[3]["content"][0],
        json!({"type": "text", "text": "And this?"})
    );
    assert_eq!(
        messages[3]["content"][1]["image_url"]["url"],
        "data:image/png;base64,AAAA"
    );
}

#[test]
fn tools_and_a_tool_round_trip_become_tool_calls_and_tool_messages() {
    let out = chat(json!({
        "model": "mom/auto", "max_tokens": 64,
        "tools": [{"name": "weather", "description": "Weather now",
            "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}],
        "tool_choice": {"type": "tool", "name": "weather", "disable_parallel_tool_use": true},
        "messages": [
            {"role": "user", "content": "Weather in Oslo?"},
            {"role": "assistant", "content": [
                {"type": "text", "text": "Checking."},
                {"type": "tool_use", "id": "tu_1", "name": "weather", "input": {"city": "Oslo"}}
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "tu_1", "content": [{"type": "text", "text": "-3 C"}]},
                {"type": "text", "text": "Thanks"}
            ]}
        ]
    }));
    assert_eq!(out["tools"][0]["function"]["name"], "weather");
    assert_eq!(out["tools"][0]["function"]["parameters"]["type"], "object");
    assert_eq!(out["tool_choice"]["function"]["name"], "weather");
    assert_eq!(out["parallel_tool_calls"], false);
    let messages = out["messages"].as_array().unwrap();
    let call = &messages[1]["tool_calls"][0];
    assert_eq!(call["id"], "tu_1");
    assert_eq!(call["function"]["arguments"], r#"{"city":"Oslo"}"#);
    assert_eq!(messages[1]["content"], "Checking.");
    assert_eq!(
        messages[2],
        json!({"role": "tool", "tool_call_id": "tu_1", "content": "-3 C"})
    );
    assert_eq!(messages[3]["content"][0]["text"], "Thanks");
}

#[test]
fn bad_requests_are_refused_naming_the_field() {
    let turn = json!([{"role": "user", "content": "hi"}]);
    assert!(refused(json!({"model": "m", "messages": turn})).contains("max_tokens: required"));
    assert!(
        refused(json!({"model": "m", "max_tokens": "9", "messages": turn}))
            .contains("max_tokens: must be")
    );
    assert!(refused(json!({"max_tokens": 9, "messages": turn})).contains("model"));
    assert!(refused(json!({"model": "m", "max_tokens": 9})).contains("messages"));
    let orphan = json!([{"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "nope", "content": "x"}]}]);
    assert!(
        refused(json!({"model": "m", "max_tokens": 9, "messages": orphan}))
            .contains("messages[0].content[0]: tool_result for \"nope\"")
    );
    let system_role = json!([{"role": "system", "content": "x"}]);
    assert!(
        refused(json!({"model": "m", "max_tokens": 9, "messages": system_role}))
            .contains("messages[0]: role")
    );
    assert!(to_chat(b"[1,", false)
        .unwrap_err()
        .message
        .contains("not valid JSON"));
    // The token-count endpoint needs no max_tokens.
    let count = json!({"model": "m", "messages": turn}).to_string();
    assert!(to_chat(count.as_bytes(), true).is_ok());
}

#[test]
fn what_chat_cannot_carry_is_named() {
    let body = json!({"model": "m", "max_tokens": 9, "top_k": 5,
        "messages": [{"role": "user", "content": "hi"}]});
    let translated = to_chat(body.to_string().as_bytes(), false).unwrap();
    assert_eq!(translated.dropped, ["top_k"]);
}

#[test]
fn a_completion_becomes_a_message_with_its_stop_reason_and_usage() {
    let completion = json!({"id": "c1", "model": "qwen", "choices": [{"index": 0,
        "finish_reason": "tool_calls", "message": {"role": "assistant", "content": "Sure.",
        "tool_calls": [{"id": "call_1", "type": "function",
            "function": {"name": "weather", "arguments": "{\"city\":\"Oslo\"}"}}]}}],
        "usage": {"prompt_tokens": 11, "completion_tokens": 7}});
    let message: Value =
        serde_json::from_slice(&from_chat(completion.to_string().as_bytes()).unwrap()).unwrap();
    assert_eq!(message["type"], "message");
    assert_eq!(message["id"], "msg_c1");
    assert_eq!(
        message["content"][0],
        json!({"type": "text", "text": "Sure."})
    );
    assert_eq!(message["content"][1]["type"], "tool_use");
    assert_eq!(message["content"][1]["input"]["city"], "Oslo");
    assert_eq!(message["stop_reason"], "tool_use");
    assert_eq!(
        message["usage"],
        json!({"input_tokens": 11, "output_tokens": 7})
    );
    assert_eq!(stop_reason(Some("length")), Some("max_tokens"));
    assert_eq!(stop_reason(Some("stop")), Some("end_turn"));
    assert!(from_chat(b"{}").is_none());
}

#[test]
fn errors_take_the_messages_shape() {
    let openai = br#"{"error":{"message":"too big","type":"invalid_request_error","code":"request_too_large"}}"#;
    let error: Value = serde_json::from_slice(&error_from(413, openai)).unwrap();
    assert_eq!(
        error,
        json!({"type": "error", "error": {"type": "request_too_large", "message": "too big"}})
    );
    let plain: Value = serde_json::from_slice(&error_from(503, b"upstream down")).unwrap();
    assert_eq!(plain["error"]["type"], "overloaded_error");
    assert_eq!(plain["error"]["message"], "upstream down");
}
