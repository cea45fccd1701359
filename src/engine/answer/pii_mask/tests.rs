//! Masking, restoring and the stream restorers, including hostile streams and replies.
use super::*;

fn masked(text: &str) -> (Map<String, Value>, Masker) {
    let mut object = json!({"messages": [{"role": "user", "content": text}]})
        .as_object()
        .cloned()
        .unwrap_or_default();
    let masker = Masker::mask(&mut object, |_| true);
    (object, masker)
}

#[test]
fn the_same_value_gets_the_same_placeholder_and_comes_back() {
    let (object, masker) =
        masked("Mail jane.doe@example.com, cc bob@example.org, then jane.doe@example.com again");
    assert_eq!(
        object["messages"][0]["content"],
        "Mail [EMAIL_1], cc [EMAIL_2], then [EMAIL_1] again"
    );
    assert_eq!(masker.label(), "[EMAIL_1] [EMAIL_2]");
    assert_eq!(
        masker.restore("Sent to [EMAIL_2] and [EMAIL_1]."),
        "Sent to bob@example.org and jane.doe@example.com."
    );
}

#[test]
fn tool_call_arguments_are_masked_and_restored_in_json_and_events() {
    let mut object = json!({"messages": [
        {"role": "user", "content": "Mail the report"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
            "function": {"name": "send", "arguments": "{\"to\":\"jane.doe@example.com\"}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "sent to jane.doe@example.com"}]})
    .as_object()
    .cloned()
    .unwrap_or_default();
    let masker = Arc::new(Masker::mask(&mut object, |_| true));
    let arguments = &object["messages"][1]["tool_calls"][0]["function"]["arguments"];
    assert_eq!(arguments, "{\"to\":\"[EMAIL_1]\"}");
    assert_eq!(object["messages"][2]["content"], "sent to [EMAIL_1]");

    let reply = json!({"choices": [{"index": 0, "message": {"role": "assistant", "content": null,
        "tool_calls": [{"id": "c2", "type": "function",
            "function": {"name": "send", "arguments": "{\"cc\":\"[EMAIL_1]\"}"}}]}}]});
    let restored: Value =
        serde_json::from_slice(&masker.restore_body(reply.to_string().as_bytes()))
            .unwrap_or_default();
    let arguments = &restored["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"];
    assert_eq!(arguments, "{\"cc\":\"jane.doe@example.com\"}");

    // Streamed: the placeholder split across two argument deltas.
    let delta = |arguments: &str| {
        let call = json!({"index": 0, "function": {"arguments": arguments}});
        format!(
            "data: {}\n\n",
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [call]}, "finish_reason": null}]})
        )
    };
    let finish = json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]});
    let body = [
        delta("{\"cc\":\"[EMA"),
        delta("IL_1]\"}"),
        format!("data: {finish}\n\ndata: [DONE]\n\n"),
    ]
    .concat();
    let out = masker.restore_body(body.as_bytes());
    let joined = crate::llm::sse::assemble(&out).unwrap_or_default();
    let arguments = &joined["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"];
    assert_eq!(arguments, "{\"cc\":\"jane.doe@example.com\"}");
}

#[test]
fn a_placeholder_split_across_pieces_is_held_then_restored() {
    let (_, masker) = masked("write to jane.doe@example.com");
    let mut stream = StreamRestorer::new(Arc::new(masker));
    let pieces = [
        "Writing to [EM",
        "AIL",
        "_1] now [",
        "sic] and [EMAIL_",
        "1]",
    ];
    let out: Vec<String> = pieces.iter().map(|p| stream.push(p)).collect();
    assert_eq!(
        out,
        [
            "Writing to ",
            "",
            "jane.doe@example.com now ",
            "[sic] and ",
            "jane.doe@example.com"
        ]
    );
    assert_eq!(stream.push("[EMA"), "");
    assert_eq!(stream.flush(), "[EMA");
}

#[test]
fn server_sent_events_are_rewritten_across_chunk_and_line_boundaries() {
    let (_, masker) = masked("call +44 20 7946 0958");
    let masker = Arc::new(masker);
    let event = |text: &str| {
        format!(
            "data: {}\n\n",
            json!({"id": "x", "object": "chat.completion.chunk",
                   "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": null}]})
        )
    };
    let body = [
        event("Calling [PHO"),
        event("NE_1] now [PH"),
        "data: [DONE]\n\n".to_owned(),
    ]
    .concat();
    // Cut the body mid-line too.
    let (a, b) = body.as_bytes().split_at(body.len() / 2);
    let mut sse = SseRestorer::new(Arc::clone(&masker));
    let mut out = sse.push(a);
    out.extend(sse.push(b));
    out.extend(sse.finish());
    let text = crate::llm::usage::streamed_text(&out);
    assert_eq!(text, "Calling +44 20 7946 0958 now [PH");
    let out = String::from_utf8(out).unwrap_or_default();
    assert!(out.ends_with("data: [DONE]\n\n"), "{out}");
    assert_eq!(masker.restore_body(body.as_bytes()), out.as_bytes());
}

#[test]
fn many_distinct_values_number_restore_and_label_correctly() {
    let emails: Vec<String> = (0..20_000)
        .map(|i| format!("user{i}@example.com"))
        .collect();
    let (object, masker) = masked(&emails.join(" "));
    let masked = object["messages"][0]["content"]
        .as_str()
        .unwrap_or_default();
    assert!(
        masked.starts_with("[EMAIL_1] [EMAIL_2] "),
        "{}",
        &masked[..40]
    );
    assert!(masked.ends_with("[EMAIL_20000]"));
    assert_eq!(masker.restore(masked), emails.join(" "));
    assert_eq!(
        masker.label(),
        "[EMAIL_1] [EMAIL_2] [EMAIL_3] [EMAIL_4] [EMAIL_5] [EMAIL_6] [EMAIL_7] [EMAIL_8] \
         (+19992 more)"
    );
    // Brackets that are not placeholders, and one that opens inside another, stay.
    assert_eq!(
        masker.restore("[[EMAIL_2]] [EMAIL_0] [EMAIL_20001] [EMAIL_"),
        "[user1@example.com] [EMAIL_0] [EMAIL_20001] [EMAIL_"
    );
    let mut stream = StreamRestorer::new(Arc::new(masker));
    assert_eq!(stream.push("to [EMAIL_19"), "to ");
    assert_eq!(
        stream.push("999] and [EMAIL_3"),
        "user19998@example.com and "
    );
    assert_eq!(stream.push("0001"), "[EMAIL_30001");
}

#[test]
fn hostile_event_streams_stay_bounded() {
    let (_, masker) = masked("mail jane.doe@example.com");
    let masker = Arc::new(masker);
    let chunk = |index: u64, text: &str| {
        format!(
            "data: {}\n\n",
            json!({"choices": [{"index": index, "delta": {"content": text}, "finish_reason": null}]})
        )
    };
    // A giant choice index is followed like any other, without allocating up to it.
    let mut sse = SseRestorer::new(Arc::clone(&masker));
    let mut out = sse.push(chunk(u64::MAX, "to [EMAIL").as_bytes());
    out.extend(sse.push(chunk(u64::MAX, "_1]").as_bytes()));
    out.extend(sse.finish());
    let text = String::from_utf8(out).unwrap_or_default();
    assert!(text.contains("jane.doe@example.com"), "{text}");
    // Past the followed choices, text is still restored piece by piece.
    let mut sse = SseRestorer::new(Arc::clone(&masker));
    let mut out = Vec::new();
    for index in 0..(MAX_FOLLOWED as u64 + 5) {
        out.extend(sse.push(chunk(index, "[EMAIL_1]").as_bytes()));
    }
    let text = String::from_utf8(out).unwrap_or_default();
    assert_eq!(
        text.matches("jane.doe@example.com").count(),
        MAX_FOLLOWED + 5
    );
    // No newline: held up to the bound, then passed on as it is.
    let mut sse = SseRestorer::new(masker);
    let piece = vec![b'x'; 64 * 1024];
    let mut passed = 0;
    for _ in 0..(MAX_SSE_LINE / piece.len() + 2) {
        passed += sse.push(&piece).len();
        assert!(sse.partial.len() <= MAX_SSE_LINE);
    }
    passed += sse.finish().len();
    assert_eq!(passed, piece.len() * (MAX_SSE_LINE / piece.len() + 2));
}

#[test]
fn replies_and_chunks_of_any_json_shape_pass_without_a_panic() {
    // Found by the `sse` fuzz target: a reply body `0` made restoring index into a number.
    let (_, masker) = masked("mail jane.doe@example.com");
    let masker = Arc::new(masker);
    for body in [
        &b"0"[..],
        b"[]",
        b"\"text\"",
        b"{\"choices\": 5}",
        b"{\"choices\": [1, {\"message\": 2}, {\"message\": {\"content\": 3, \"tool_calls\": [7, {\"function\": 1}]}}]}",
        b"data: 5\n\ndata: [1]\n\ndata: {\"choices\": [null, {\"delta\": 3}, {\"delta\": {\"content\": \"[EMAIL_1]\", \"tool_calls\": [1, {\"function\": []}]}}]}\n\ndata: [DONE]\n\n",
    ] {
        let restored = masker.restore_body(body);
        assert!(!restored.is_empty() || body.is_empty());
    }
    let mut object = json!({"messages": [1, "x", {"content": 5}, {"content": "a@b.co", "tool_calls": [3, {"function": null}]}]});
    let masker = Masker::mask(
        object.as_object_mut().unwrap_or_else(|| unreachable!()),
        |_| true,
    );
    assert_eq!(masker.label(), "[EMAIL_1]");
}
