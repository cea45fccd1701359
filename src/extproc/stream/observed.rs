//! What a stream learns from its response as it passes: the time to the first chunk, the usage
//! and finish reason, a response-phase refusal — into the run record, the model's statistics,
//! the GenAI metrics and the stream's spans.

use super::StreamState;
use crate::state::{now_ms, Observation, Timing};
use envoy_types::pb::envoy::service::ext_proc::v3::{HttpBody, ProcessingResponse};
use std::time::Instant;

impl StreamState {
    /// Times the first chunk and feeds the usage scanner; records the response when it ends.
    pub(super) fn observe_body(&mut self, message: &HttpBody) {
        let mut finished = None;
        if let Some(forwarded) = &mut self.forwarded {
            if forwarded.first_chunk.is_none() {
                forwarded.first_chunk = Some(Instant::now());
                self.metrics
                    .first_chunk_seconds
                    .observe(forwarded.at.elapsed().as_secs_f64());
            }
            if let Some(scanner) = &mut forwarded.scanner {
                scanner.push(&message.body);
            }
            if message.end_of_stream {
                if let Some(scanner) = forwarded.scanner.take() {
                    finished = Some((forwarded.at, scanner.finish()));
                }
            }
        }
        if let Some((at, (usage, finish_reason))) = finished {
            if let Some(traced) = &mut self.traced {
                traced.answered(finish_reason);
            }
            self.record(at, usage);
        }
    }

    /// A response-phase refusal (a contract that fails, a withheld answer) is what the client
    /// got: the run record says so.
    pub(super) fn note_refusal(&mut self, response: &ProcessingResponse) {
        use envoy_types::pb::envoy::service::ext_proc::v3::processing_response::Response;
        let (Some(record), Some(Response::ImmediateResponse(reply))) =
            (&mut self.record, &response.response)
        else {
            return;
        };
        if reply.details == "mom_router_ok" {
            // An answer (another model's after a failover), not a refusal.
            return;
        }
        record.status = reply.status.as_ref().map_or(0, |s| s.code as u32);
        record.error = reply
            .details
            .strip_prefix("mom_router_")
            .unwrap_or(&reply.details)
            .to_owned();
        record.response_path = crate::engine::ResponsePath::Immediate.name().to_owned();
    }

    /// Adds the finished response's timings and usage to the model's statistics.
    pub(super) fn record(&mut self, forwarded_at: Instant, usage: crate::llm::Usage) {
        let Some(forwarded) = &self.forwarded else {
            return;
        };
        let ms = |d: std::time::Duration| d.as_secs_f64() * 1000.0;
        let total_ms = ms(forwarded_at.elapsed());
        let ttft_ms = forwarded
            .first_chunk
            .map_or(total_ms, |first| ms(first.duration_since(forwarded_at)));
        let identity = forwarded.trace.identity.as_deref().unwrap_or_default();
        let tokens = [usage.prompt_tokens, usage.completion_tokens];
        self.metrics
            .observe_call(identity, &forwarded.model, total_ms / 1000.0, tokens);
        if let Some(record) = &mut self.record {
            record.ttft_ms = ttft_ms;
            record.total_ms = total_ms;
            record.energy_joules += self
                .snapshot
                .model(&forwarded.model)
                .map_or(0.0, |model| model.energy_joules(total_ms));
            record.prompt_tokens = usage.prompt_tokens;
            record.completion_tokens = usage.completion_tokens;
        }
        self.services.state.observe(
            &forwarded.model,
            Observation {
                timing: Timing {
                    at_ms: now_ms(),
                    ttft_ms,
                    total_ms,
                },
                prompt_tokens: usage.prompt_tokens,
                completion_tokens: usage.completion_tokens,
                estimated_prompt_tokens: forwarded.estimated_prompt_tokens,
            },
        );
    }
}
