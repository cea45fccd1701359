//! The usage-only chunk taken out of a streamed chat completion: when mom-router asked the
//! upstream for `stream_options.include_usage` (a tenant's tokens are counted) and the client did
//! not, the final event with empty `choices` and a `usage` object is read and dropped, so the
//! client sees the stream it asked for. Events pass through whole, in order, split anywhere.

use serde_json::Value;

/// Longest event held while its end has not arrived; a longer one passes through unread.
const MAX_EVENT: usize = 1 << 20;

/// Drops usage-only events from a chat completion's event stream, chunk by chunk.
#[derive(Debug, Default)]
pub struct UsageStripper {
    pending: Vec<u8>,
}

/// Where the first event boundary (a blank line) in `bytes` ends.
fn boundary(bytes: &[u8]) -> Option<usize> {
    let lf = bytes.windows(2).position(|w| w == b"\n\n").map(|i| i + 2);
    let crlf = bytes
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| i + 4);
    match (lf, crlf) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// True for an event whose data is a chunk with no choices and a usage object.
fn usage_only(event: &[u8]) -> bool {
    let text = String::from_utf8_lossy(event);
    let data: String = text
        .lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .map(str::trim)
        .collect();
    let Ok(chunk) = serde_json::from_str::<Value>(&data) else {
        return false;
    };
    chunk["usage"].is_object() && chunk["choices"].as_array().is_some_and(Vec::is_empty)
}

impl UsageStripper {
    /// The bytes of `chunk` the client gets: every complete event but usage-only ones; an
    /// unfinished event waits for the next chunk (all of it at `end_of_stream`).
    pub fn push(&mut self, chunk: &[u8], end_of_stream: bool) -> Vec<u8> {
        self.pending.extend_from_slice(chunk);
        let mut out = Vec::with_capacity(self.pending.len());
        let mut rest = &self.pending[..];
        while let Some(end) = boundary(rest) {
            let (event, after) = rest.split_at(end);
            if !usage_only(event) {
                out.extend_from_slice(event);
            }
            rest = after;
        }
        if end_of_stream || rest.len() > MAX_EVENT {
            if !usage_only(rest) {
                out.extend_from_slice(rest);
            }
            rest = &[];
        }
        let consumed = self.pending.len() - rest.len();
        self.pending.drain(..consumed);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::UsageStripper;

    const STREAM: &str = concat!(
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
        "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":1}}\n\n",
        "data: [DONE]\n\n",
    );

    #[test]
    fn the_usage_chunk_is_dropped_however_the_stream_is_split() {
        let expected = STREAM.replace(
            "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":1}}\n\n",
            "",
        );
        for size in [1, 3, 7, 40, STREAM.len()] {
            let mut stripper = UsageStripper::default();
            let chunks: Vec<&[u8]> = STREAM.as_bytes().chunks(size).collect();
            let mut out = Vec::new();
            for (i, chunk) in chunks.iter().enumerate() {
                out.extend(stripper.push(chunk, i + 1 == chunks.len()));
            }
            assert_eq!(
                String::from_utf8(out).unwrap(),
                expected,
                "chunks of {size}"
            );
        }
    }

    #[test]
    fn usage_on_a_chunk_with_choices_and_crlf_events_pass_through() {
        let stream = "data: {\"choices\":[{\"delta\":{}}],\"usage\":{\"total_tokens\":3}}\r\n\r\ndata: [DONE]\r\n\r\n";
        let mut stripper = UsageStripper::default();
        assert_eq!(stripper.push(stream.as_bytes(), true), stream.as_bytes());
    }
}
