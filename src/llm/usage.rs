//! Token usage read from an upstream response as it passes: the `usage` object of a JSON reply,
//! or, for server-sent events, the `usage` the events report (the last report of each count
//! wins) and the number of content-carrying chunks otherwise. Chat Completions' counts and the
//! Messages / Responses ones a natively answering backend sends are both read. Bounded: a body
//! or line beyond the limit stops the reading (usage unknown) rather than growing memory.

use serde_json::Value;

/// Largest JSON body or SSE line kept for reading.
pub const MAX_READ_BYTES: usize = 4 * 1024 * 1024;

/// Tokens an upstream reported (or, for completion tokens of a stream without usage, counted).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// Prompt tokens.
    pub prompt_tokens: Option<u64>,
    /// Completion tokens.
    pub completion_tokens: Option<u64>,
}

impl Usage {
    /// Prompt and completion tokens, 0 where unreported.
    pub fn counted(self) -> (u64, u64) {
        (
            self.prompt_tokens.unwrap_or(0),
            self.completion_tokens.unwrap_or(0),
        )
    }
}

/// Reads usage from response body chunks.
#[derive(Debug)]
pub struct UsageScanner {
    sse: bool,
    pending: Vec<u8>,
    overflow: bool,
    content_chunks: u64,
    reported: Usage,
    finish_reason: Option<String>,
}

impl UsageScanner {
    /// A scanner for a server-sent-events body (`sse`) or a JSON one.
    pub fn new(sse: bool) -> Self {
        Self {
            sse,
            pending: Vec::new(),
            overflow: false,
            content_chunks: 0,
            reported: Usage::default(),
            finish_reason: None,
        }
    }

    /// Reads one chunk.
    pub fn push(&mut self, chunk: &[u8]) {
        if self.overflow {
            return;
        }
        let over = if self.sse {
            let mut pending = std::mem::take(&mut self.pending);
            let over = super::lines::split_lines(&mut pending, chunk, MAX_READ_BYTES, |line| {
                self.read_event_line(line)
            });
            self.pending = pending;
            over.is_some()
        } else {
            self.pending.extend_from_slice(chunk);
            self.pending.len() > MAX_READ_BYTES
        };
        if over {
            self.overflow = true;
            self.pending = Vec::new();
        }
    }

    /// The usage and why the answer ended (its last finish reason), once the body has ended.
    pub fn finish(mut self) -> (Usage, Option<String>) {
        if self.overflow {
            return (Usage::default(), None);
        }
        if self.sse {
            let rest = std::mem::take(&mut self.pending);
            self.read_event_line(&rest);
            let counted = (self.content_chunks > 0).then_some(self.content_chunks);
            let usage = Usage {
                prompt_tokens: self.reported.prompt_tokens,
                completion_tokens: self.reported.completion_tokens.or(counted),
            };
            return (usage, self.finish_reason);
        }
        serde_json::from_slice::<Value>(&self.pending)
            .map(|reply| {
                (
                    usage_of(&reply),
                    finish_reason_of(&reply).map(str::to_owned),
                )
            })
            .unwrap_or_default()
    }

    fn read_event_line(&mut self, line: &[u8]) {
        let Some(data) = line.trim_ascii().strip_prefix(b"data:") else {
            return;
        };
        let data = data.trim_ascii();
        if data == b"[DONE]" {
            return;
        }
        let Ok(event) = serde_json::from_slice::<Value>(data) else {
            return;
        };
        // A Messages stream reports input tokens at its start and output tokens at its end.
        let usage = usage_of(&event);
        if let Some(reason) = finish_reason_of(&event) {
            self.finish_reason = Some(reason.to_owned());
        }
        self.reported = Usage {
            prompt_tokens: usage.prompt_tokens.or(self.reported.prompt_tokens),
            completion_tokens: usage.completion_tokens.or(self.reported.completion_tokens),
        };
        let has_content = event["choices"].as_array().is_some_and(|choices| {
            choices.iter().any(|c| {
                c["delta"]["content"]
                    .as_str()
                    .is_some_and(|text| !text.is_empty())
            })
        });
        if has_content {
            self.content_chunks += 1;
        }
    }
}

/// The `usage` a JSON answer or one event reports: a chat completion's
/// `usage.{prompt,completion}_tokens`, or the `usage.{input,output}_tokens` of a Messages or
/// Responses answer, at the top or inside `message` (`message_start`) or `response`
/// (`response.completed`).
pub fn usage_of(reply: &Value) -> Usage {
    let usage = [
        &reply["usage"],
        &reply["message"]["usage"],
        &reply["response"]["usage"],
    ]
    .into_iter()
    .find(|usage| usage.is_object())
    .unwrap_or(&Value::Null);
    let count = |chat: &str, other: &str| usage[chat].as_u64().or_else(|| usage[other].as_u64());
    Usage {
        prompt_tokens: count("prompt_tokens", "input_tokens"),
        completion_tokens: count("completion_tokens", "output_tokens"),
    }
}

/// Why an answer (or the event that ends it) stopped: a chat completion's
/// `choices[0].finish_reason`, a Messages answer's `stop_reason` (at the top or in a
/// `message_delta`'s `delta`), or a Responses answer's `status` once it is final.
pub fn finish_reason_of(reply: &Value) -> Option<&str> {
    let chat = reply["choices"]
        .as_array()
        .and_then(|choices| choices.iter().find_map(|c| c["finish_reason"].as_str()));
    let messages = reply["stop_reason"]
        .as_str()
        .or_else(|| reply["delta"]["stop_reason"].as_str());
    let responses = [&reply["status"], &reply["response"]["status"]]
        .into_iter()
        .filter_map(Value::as_str)
        .find(|status| !matches!(*status, "in_progress" | "queued"));
    chat.or(messages).or(responses)
}

/// The answer text of a server-sent-events body: every chunk's `choices[0].delta.content`, in
/// order.
pub fn streamed_text(body: &[u8]) -> String {
    let mut text = String::new();
    for line in body.split(|b| *b == b'\n') {
        let Some(data) = line.strip_prefix(b"data:") else {
            continue;
        };
        let Ok(chunk) = serde_json::from_slice::<Value>(data.trim_ascii()) else {
            continue;
        };
        if let Some(piece) = chunk["choices"][0]["delta"]["content"].as_str() {
            text.push_str(piece);
        }
    }
    text
}

#[cfg(test)]
mod tests {
    #[test]
    fn streamed_text_joins_the_content_deltas() {
        let body = b"data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"ANS\"}}]}\n\ndata: {\"choices\":[{\"delta\":{\"content\":\"WER: B\"}}]}\n\ndata: [DONE]\n\n";
        assert_eq!(super::streamed_text(body), "ANSWER: B");
    }

    use super::*;

    #[test]
    fn json_reply_usage_is_read_across_chunks() {
        let body = br#"{"choices":[{"finish_reason":"length"}],"usage":{"prompt_tokens":12,"completion_tokens":34}}"#;
        let mut scanner = UsageScanner::new(false);
        scanner.push(&body[..20]);
        scanner.push(&body[20..]);
        let usage = Usage {
            prompt_tokens: Some(12),
            completion_tokens: Some(34),
        };
        assert_eq!(scanner.finish(), (usage, Some("length".to_owned())));
    }

    #[test]
    fn stream_counts_content_chunks_unless_usage_is_reported() {
        let events = "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\"}}]}\n\n\
                      data: {\"choices\":[{\"delta\":{\"content\":\"Hel\"}}]}\n\n\
                      data: {\"choices\":[{\"delta\":{\"content\":\"lo\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n";
        let mut scanner = UsageScanner::new(true);
        // Split inside an event: lines are joined before reading.
        for piece in events.as_bytes().chunks(7) {
            scanner.push(piece);
        }
        let (usage, reason) = scanner.finish();
        assert_eq!(
            (usage.completion_tokens, reason.as_deref()),
            (Some(2), Some("stop"))
        );
        let with_usage = format!(
            "{events}data: {{\"choices\":[],\"usage\":{{\"prompt_tokens\":5,\"completion_tokens\":9}}}}\n\n"
        );
        let mut scanner = UsageScanner::new(true);
        scanner.push(with_usage.as_bytes());
        let usage = Usage {
            prompt_tokens: Some(5),
            completion_tokens: Some(9),
        };
        assert_eq!(scanner.finish(), (usage, Some("stop".to_owned())));
    }

    #[test]
    fn native_messages_and_responses_usage_is_read() {
        let messages = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":7,\"output_tokens\":1}}}\n\n\
                        event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":15}}\n\n";
        let mut scanner = UsageScanner::new(true);
        scanner.push(messages.as_bytes());
        let expected = Usage {
            prompt_tokens: Some(7),
            completion_tokens: Some(15),
        };
        assert_eq!(scanner.finish(), (expected, Some("end_turn".to_owned())));
        let completed = "event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"status\":\"completed\",\"usage\":{\"input_tokens\":7,\"output_tokens\":15}}}\n\n";
        let mut scanner = UsageScanner::new(true);
        scanner.push(completed.as_bytes());
        assert_eq!(scanner.finish(), (expected, Some("completed".to_owned())));
        let json = br#"{"type":"message","stop_reason":"max_tokens","usage":{"input_tokens":7,"output_tokens":15}}"#;
        let mut scanner = UsageScanner::new(false);
        scanner.push(json);
        assert_eq!(scanner.finish(), (expected, Some("max_tokens".to_owned())));
    }

    #[test]
    fn oversize_bodies_give_no_usage() {
        let mut scanner = UsageScanner::new(false);
        scanner.push(&vec![b' '; MAX_READ_BYTES + 1]);
        scanner.push(br#"{"usage":{"prompt_tokens":1}}"#);
        assert_eq!(scanner.finish(), (Usage::default(), None));
    }
}
