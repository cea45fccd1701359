//! The run record of an exchange, begun from its trace when the request is decided; the
//! response fields are filled as the response goes.

use super::super::{ResponsePath, Trace};
use crate::config::Snapshot;
use crate::records::{pb, RunRecord};

/// The record of what `trace` says, decided at `time_unix_ms`; the response fields are filled
/// as the response goes.
pub fn from_trace(
    snapshot: &Snapshot,
    trace: &Trace,
    time_unix_ms: u64,
    response_path: ResponsePath,
) -> RunRecord {
    let looper = trace.looper.as_ref().map(|looper| pb::LooperRecord {
        kind: looper.kind.to_owned(),
        calls: looper
            .steps
            .iter()
            .enumerate()
            .map(|(i, step)| {
                let (prompt_tokens, completion_tokens, cost) =
                    looper.step_usage.get(i).copied().unwrap_or_default();
                pb::CallRecord {
                    model: step.model.clone(),
                    outcome: step.outcome.clone(),
                    confidence: step.confidence,
                    latency_ms: step.latency_ms,
                    prompt_tokens,
                    completion_tokens,
                    cost,
                    energy_joules: looper.step_energy.get(i).copied().unwrap_or_default(),
                }
            })
            .collect(),
        prompt_tokens: looper.usage.0,
        completion_tokens: looper.usage.1,
        cost: looper.cost,
        energy_joules: looper.energy_joules,
    });
    let energy_joules = looper.as_ref().map_or(0.0, |l| l.energy_joules);
    let artifact = snapshot.artifact.as_ref();
    RunRecord {
        run_id: trace.run_id.map(|id| id.to_string()).unwrap_or_default(),
        time_unix_ms,
        config_version: trace.config_version.to_string(),
        identity: trace.identity.as_deref().unwrap_or_default().to_owned(),
        identity_version: trace
            .identity_version
            .as_deref()
            .unwrap_or_default()
            .to_owned(),
        signals: trace
            .signals
            .iter()
            .map(|s| pb::SignalRecord {
                name: s.name.to_string(),
                kind: s.kind.to_owned(),
                matched: s.matched,
                confidence: s.confidence,
                value: s.value,
                label: s.label.clone(),
                error: s.error.clone(),
            })
            .collect(),
        decision: trace.decision_label().to_owned(),
        confidence: trace.confidence,
        algorithm: trace.algorithm.to_owned(),
        scores: trace
            .scores
            .iter()
            .map(|(model, score)| pb::ModelScore {
                model: model.to_string(),
                score: *score,
            })
            .collect(),
        selection_reason: trace.selection_reason.to_string(),
        model: trace.model.as_deref().unwrap_or_default().to_owned(),
        provider_model: trace
            .provider_model
            .as_deref()
            .unwrap_or_default()
            .to_owned(),
        plugins: trace
            .plugins
            .iter()
            .map(|action| pb::PluginAction {
                plugin: action.plugin.to_owned(),
                action: action.label(),
            })
            .collect(),
        looper,
        response_path: response_path.name().to_owned(),
        fallback: trace.failover.clone().unwrap_or_default(),
        tenant: trace.tenant.clone().unwrap_or_default(),
        status: 0,
        error: trace
            .error
            .map(|(code, _)| code.to_owned())
            .unwrap_or_default(),
        ttft_ms: 0.0,
        total_ms: 0.0,
        prompt_tokens: None,
        completion_tokens: None,
        contract: trace.contract_label().unwrap_or_default(),
        grounding: trace.grounding_label().unwrap_or_default(),
        prompt: None,
        bundle_digest: artifact
            .map(|a| a.bundle_digest.clone())
            .unwrap_or_default(),
        binding_digest: artifact
            .map(|a| a.binding_digest.clone())
            .unwrap_or_default(),
        lock_digest: String::new(),
        outcome: None,
        energy_joules,
    }
}
