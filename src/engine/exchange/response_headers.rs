//! The response-headers phase of a forwarded request: the `x-mom-*` headers, the fallback
//! evidence when a final step failed, and how the response body is read (not at all, chunk
//! by chunk, or whole).

use super::{BodyMode, Exchange, Head, Step};
use crate::engine::ResponsePath;
use crate::llm::UsageScanner;
use crate::observability::metrics::StatusLabels;
use std::sync::Arc;
use std::time::Instant;

impl Exchange {
    pub(super) fn on_response_headers(&mut self, message: Head) -> Step {
        let status = message.headers.get(":status").unwrap_or_default();
        let observe = self.snapshot.observe_responses;
        let Some(forwarded) = &mut self.forwarded else {
            return Step::pass_response_headers();
        };
        let class = match status.chars().next() {
            Some(c @ '1'..='5') => format!("{c}xx"),
            _ => "other".to_owned(),
        };
        self.metrics
            .upstream_status
            .get_or_create(&StatusLabels {
                model: forwarded.model.to_string(),
                class,
            })
            .inc();
        if let Some(record) = &mut self.record {
            record.status = status.parse().unwrap_or(0);
            record.ttft_ms = forwarded.at.elapsed().as_secs_f64() * 1000.0;
        }
        let success = status.starts_with('2');
        forwarded.status = status.parse().unwrap_or(0);
        let protocol = forwarded.obligations.translate;
        let translate = protocol.is_some();
        if !success || message.end_of_stream {
            // Only a complete 2xx answer is kept; waiting identical requests go upstream.
            forwarded.obligations.keep = None;
        }
        if !success {
            if let Some(mut fallback) = forwarded.fallback.take() {
                // The synthesis failed: answer with the best evidence instead.
                Arc::make_mut(&mut forwarded.trace).fallback_used = true;
                if let Some(record) = &mut self.record {
                    record.status = u32::from(fallback.status);
                    record.response_path = ResponsePath::Immediate.name().to_owned();
                }
                if let Some(protocol) = protocol {
                    crate::engine::in_protocol(&mut fallback, protocol);
                }
                return Step::reply(*fallback, &forwarded.trace, ResponsePath::Immediate);
            }
            // A failed response is not checked against the contract nor for grounding.
            forwarded.obligations.drop_checks();
        }
        if success && message.end_of_stream {
            if let Some(traced) = &mut self.traced {
                traced.answered(None);
            }
            forwarded.first_chunk = Some(Instant::now());
            let forwarded_at = forwarded.at;
            self.record(forwarded_at, crate::llm::Usage::default());
            return match &self.forwarded {
                Some(forwarded) => Step::response_headers(&forwarded.trace, BodyMode::Unchanged),
                None => Step::pass_response_headers(),
            };
        }
        let owed = &forwarded.obligations;
        let checked = owed.contract.is_some() || owed.restore.is_some();
        let grounded = owed.calls_models();
        // An error is translated into the client's protocol too. A stream nothing reads passes
        // through Envoy alone: reading it would cost a round trip per chunk.
        let watch_body =
            !message.end_of_stream && (translate || (success && (observe || owed.reads_answer())));
        if watch_body && observe && success {
            forwarded.scanner = Some(UsageScanner::new(forwarded.stream));
        }
        // The grounding check holds the whole answer, streamed or not: it may be replaced. A
        // JSON answer or an error is translated whole.
        let streams = forwarded.stream && success;
        let hold = grounded || (checked && !forwarded.stream) || (translate && !streams);
        forwarded.body_mode = match (watch_body, hold) {
            (false, _) => BodyMode::Unchanged,
            (true, true) => BodyMode::Buffered,
            (true, false) => BodyMode::Streamed,
        };
        let mut step = Step::response_headers(&forwarded.trace, forwarded.body_mode);
        let restore = &forwarded.obligations.restore;
        if let (true, false, Some(masker)) = (forwarded.stream, hold, restore) {
            forwarded.restorer = Some(crate::engine::answer::pii_mask::SseRestorer::new(
                Arc::clone(masker),
            ));
        }
        if let (true, Some(protocol), true, false) = (watch_body, protocol, streams, hold) {
            forwarded.translator = crate::protocol::StreamTranslator::new(protocol);
        }
        let asked = forwarded
            .trace
            .admission
            .as_ref()
            .is_some_and(|a| a.strip_usage);
        if let (true, true, None, false) = (watch_body, streams, protocol, hold || !asked) {
            // A translated stream carries usage in the client's own protocol.
            forwarded.stripper = Some(crate::llm::usage_strip::UsageStripper::default());
        }
        if forwarded.restorer.is_some()
            || forwarded.translator.is_some()
            || forwarded.stripper.is_some()
        {
            // Rewritten chunks change the body's length: an upstream's content-length would
            // no longer hold, and Envoy refuses the response rather than send a wrong one.
            if let Step::PassResponseHeaders { remove, .. } = &mut step {
                remove.push("content-length");
            }
        }
        step
    }
}
