//! What a stream learns from its response as it passes: the time to the first chunk, the usage
//! and finish reason, a response-phase refusal — into the run record, the model's statistics,
//! the GenAI metrics and the stream's spans.

use super::{Body, Exchange, Step};
use crate::engine::{ReplyCode, ResponsePath, Trace};
use crate::state::{now_ms, Observation, Timing};
use std::time::Instant;

impl Exchange {
    /// Times the first chunk and feeds the usage scanner; records the response when it ends.
    pub(super) fn observe_body(&mut self, message: &Body) {
        let mut finished = None;
        if let Some(forwarded) = &mut self.forwarded {
            if forwarded.first_chunk.is_none() {
                forwarded.first_chunk = Some(Instant::now());
                self.metrics
                    .first_chunk_seconds
                    .observe(forwarded.at.elapsed().as_secs_f64());
            }
            if let Some(scanner) = &mut forwarded.scanner {
                scanner.push(&message.bytes);
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
    pub(super) fn note_refusal(&mut self, step: &Step) {
        let (Some(record), Step::Reply { reply, .. }) = (&mut self.record, step) else {
            return;
        };
        if reply.code == ReplyCode::Answer {
            // An answer (another model's after a failover), not a refusal.
            return;
        }
        record.status = u32::from(reply.status);
        reply.code.label().clone_into(&mut record.error);
        ResponsePath::Immediate
            .name()
            .clone_into(&mut record.response_path);
    }

    /// Settles the tenant's admission of `trace` (once, whoever asks again): its reserved
    /// tokens corrected to what the call that answered (`usage` on `model`) and any looper calls
    /// used, their cost charged. A call that failed used nothing.
    pub(super) fn settle_admission(
        &self,
        trace: &Trace,
        answered: Option<(&str, crate::llm::Usage)>,
    ) {
        let Some(admission) = &trace.admission else {
            return;
        };
        let (mut tokens, mut cost) = trace.looper.as_ref().map_or((0.0, 0.0), |looper| {
            ((looper.usage.0 + looper.usage.1) as f64, looper.cost)
        });
        if let Some((model, usage)) = answered {
            // A prompt the upstream did not count is taken as estimated.
            let prompt = usage.prompt_tokens.unwrap_or(admission.reserved as u64);
            let completion = usage.completion_tokens.unwrap_or(0);
            tokens += (prompt + completion) as f64;
            cost += self
                .snapshot
                .model(model)
                .map_or(0.0, |m| m.cost(prompt, completion));
        }
        if admission.settle(&self.services.state, tokens, cost) {
            self.metrics.observe_tenant(&admission.tenant, tokens, cost);
        }
    }

    /// Adds the finished response's timings and usage to the model's statistics.
    pub(super) fn record(&mut self, forwarded_at: Instant, usage: crate::llm::Usage) {
        let Some(forwarded) = &self.forwarded else {
            return;
        };
        let succeeded = (200..300).contains(&forwarded.status);
        let answered = succeeded.then_some((&*forwarded.model, usage));
        self.settle_admission(&forwarded.trace, answered);
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
