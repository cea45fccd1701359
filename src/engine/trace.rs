//! The evidence behind one routing outcome, shown by `explain`, response headers, Envoy dynamic
//! metadata and metrics.

use super::{Fault, LooperTrace, SessionTrace};
use crate::config::{Name, Snapshot};
use crate::signals::SignalResult;
use std::borrow::Cow;

/// Why a request went where it went.
#[derive(Debug, Clone, PartialEq)]
pub struct Trace {
    /// The identity (or the concrete model name for pass-through), when known.
    pub identity: Option<Name>,
    /// The identity's contract version.
    pub identity_version: Option<Name>,
    /// Computed signals, in configuration order.
    pub signals: Vec<SignalResult>,
    /// The winning decision, if any matched.
    pub decision: Option<Name>,
    /// Confidence of the winning decision (1 for defaults and pass-through).
    pub confidence: f64,
    /// Selection algorithm (`static`, `weighted`, `passthrough`), empty for refusals.
    pub algorithm: &'static str,
    /// Score per candidate model.
    pub scores: Vec<(Name, f64)>,
    /// Why the algorithm chose as it did, in one line.
    pub selection_reason: Cow<'static, str>,
    /// The id outcomes refer to, once the request was forwarded.
    pub run_id: Option<crate::state::RunId>,
    /// What session continuity did, when the request named a session.
    pub session: Option<SessionTrace>,
    /// What a looper did, when the decision ran one.
    pub looper: Option<LooperTrace>,
    /// The output contract's kind and outcome, once the answer was checked.
    pub contract: Option<(&'static str, super::answer::contract::ContractOutcome)>,
    /// Plugins run, with what each did.
    pub plugins: Vec<PluginAction>,
    /// The grounding check's outcome on the answer (`grounded 3/3 min=0.71`, …).
    pub grounding: Option<super::answer::grounding::Grounded>,
    /// The upstream response failed and a looper's fallback answer was sent instead.
    pub fallback_used: bool,
    /// The failover's attempt chain, when the forwarded model failed
    /// (`qwen2.5-coder-0.5b 503 -> smollm2-135m`).
    pub failover: Option<String>,
    /// Each looper sub-call handed from a failed model to the next (the forwarded request's
    /// own hand-overs are counted where its failover runs).
    pub handovers: Vec<crate::engine::failover::Handover>,
    /// Logical model chosen.
    pub model: Option<Name>,
    /// Provider model id written into the body.
    pub provider_model: Option<Name>,
    /// Version of the snapshot that decided.
    pub config_version: Name,
    /// Error code and fault, for refusals.
    pub error: Option<(&'static str, Fault)>,
    /// How a request in another protocol than Chat Completions reached its model.
    pub translation: Option<crate::protocol::Translation>,
    /// The tenant the request came from, admitted or refused, when tenants are configured.
    pub tenant: Option<String>,
    /// The tenant's admission: what it drew on, its `x-ratelimit-*` headers.
    pub admission: Option<super::request::admission::Admission>,
}

/// What a plugin did, as its metric counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PluginOutcome {
    /// It looked and let the request through.
    Passed,
    /// It refused the request.
    Blocked,
    /// It sent the request to its designated model.
    Rerouted,
    /// It replaced personal data with placeholders.
    Masked,
    /// The cache answered.
    Hit,
    /// The cache did not answer.
    Miss,
    /// The cache was skipped.
    Bypassed,
    /// The answer was kept from the client.
    Withheld,
    /// It rewrote the request (a system prompt, parameters, headers, the tools).
    Applied,
}

impl PluginOutcome {
    /// The outcome as headers, records and metrics name it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Passed => "passed",
            Self::Blocked => "blocked",
            Self::Rerouted => "rerouted",
            Self::Masked => "masked",
            Self::Hit => "hit",
            Self::Miss => "miss",
            Self::Bypassed => "bypassed",
            Self::Withheld => "withheld",
            Self::Applied => "applied",
        }
    }
}

/// One plugin's action: its outcome and what it says about it (`to qwen`, `EMAIL x2`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginAction {
    /// The plugin (`jailbreak_guard`, `semantic_cache`, …).
    pub plugin: &'static str,
    /// What it did.
    pub outcome: PluginOutcome,
    /// The particulars, possibly empty.
    pub detail: String,
}

impl PluginAction {
    /// `plugin` did `outcome`, with `detail`.
    pub fn new(plugin: &'static str, outcome: PluginOutcome, detail: impl Into<String>) -> Self {
        Self {
            plugin,
            outcome,
            detail: detail.into(),
        }
    }

    /// `plugin` did `outcome`, nothing more to say.
    pub fn plain(plugin: &'static str, outcome: PluginOutcome) -> Self {
        Self::new(plugin, outcome, String::new())
    }

    /// The action in words (`passed`, `rerouted to qwen`, `hit exact`); a rewrite says what it
    /// changed (`inserted`, `max_tokens<=512`).
    pub fn label(&self) -> String {
        match (self.outcome, self.detail.is_empty()) {
            (PluginOutcome::Applied, _) => self.detail.clone(),
            (outcome, true) => outcome.name().to_owned(),
            (outcome, false) => format!("{} {}", outcome.name(), self.detail),
        }
    }
}

impl Trace {
    /// A trace with nothing decided yet.
    pub fn empty(snapshot: &Snapshot) -> Self {
        Self {
            identity: None,
            identity_version: None,
            signals: Vec::new(),
            decision: None,
            confidence: 1.0,
            algorithm: "",
            scores: Vec::new(),
            selection_reason: Cow::Borrowed(""),
            run_id: None,
            session: None,
            looper: None,
            contract: None,
            plugins: Vec::new(),
            grounding: None,
            fallback_used: false,
            failover: None,
            handovers: Vec::new(),
            model: None,
            provider_model: None,
            config_version: snapshot.version.clone(),
            error: None,
            translation: None,
            tenant: None,
            admission: None,
        }
    }

    /// The `x-mom-*` headers describing this outcome; `path` is how the response was made. Values are plain ASCII (HTTP clients garble
    /// anything else): `−` becomes `-`, `×` `x`, `≥` `>=`, other non-ASCII characters `?`.
    pub fn response_headers(&self, path: ResponsePath) -> Vec<(&'static str, String)> {
        let mut headers = Vec::with_capacity(24);
        headers.push(("x-mom-response-path", path.name().to_owned()));
        headers.push(("x-mom-config-version", self.config_version.to_string()));
        if let Some(identity) = &self.identity {
            headers.push(("x-mom-identity", identity.to_string()));
        }
        if let Some(version) = &self.identity_version {
            headers.push(("x-mom-identity-version", version.to_string()));
        }
        if let Some(model) = &self.model {
            headers.push(("x-mom-decision", self.decision_label().to_owned()));
            headers.push(("x-mom-model", model.to_string()));
            headers.push(("x-mom-algorithm", self.algorithm.to_owned()));
            headers.push(("x-mom-confidence", self.confidence_label()));
            if !self.scores.is_empty() {
                headers.push(("x-mom-scores", self.scores_label()));
                headers.push(("x-mom-selection-reason", self.selection_reason.to_string()));
            }
        }
        if let Some(session) = &self.session {
            headers.push(("x-mom-session", session.status.to_owned()));
            headers.push(("x-mom-session-reason", session.reason.clone()));
        }
        if let Some(looper) = &self.looper {
            headers.push(("x-mom-looper", looper.kind.to_owned()));
            headers.push(("x-mom-looper-calls", looper.steps.len().to_string()));
            headers.push(("x-mom-looper-steps", self.looper_label()));
            headers.push((
                "x-mom-looper-usage",
                format!(
                    "prompt_tokens={},completion_tokens={},cost={:.8},energy_j={:.3},wall_ms={:.1}",
                    looper.usage.0,
                    looper.usage.1,
                    looper.cost,
                    looper.energy_joules,
                    looper.wall_ms
                ),
            ));
            if self.fallback_used {
                headers.push(("x-mom-looper-fallback", "evidence".to_owned()));
            }
        }
        if let Some(contract) = self.contract_label() {
            headers.push(("x-mom-contract", contract));
        }
        if !self.plugins.is_empty() {
            headers.push(("x-mom-plugins", self.plugins_label()));
        }
        if let Some(grounding) = &self.grounding {
            headers.push(("x-mom-grounding", grounding.label()));
        }
        if let Some(chain) = &self.failover {
            headers.push(("x-mom-fallback", chain.clone()));
        }
        if let Some(run_id) = &self.run_id {
            headers.push(("x-mom-run-id", run_id.to_string()));
        }
        if let Some(translation) = &self.translation {
            headers.push(("x-mom-translation", translation.label()));
        }
        if let Some(tenant) = &self.tenant {
            headers.push(("x-mom-tenant", tenant.clone()));
        }
        if let Some(admission) = &self.admission {
            headers.extend(admission.headers.iter().cloned());
        }
        for (_, value) in &mut headers {
            if !value.is_ascii() {
                *value = ascii(value);
            }
        }
        headers
    }

    /// The confidence with three decimals, as the `x-mom-confidence` header carries it.
    pub fn confidence_label(&self) -> String {
        super::decimal::fixed(self.confidence, 3)
    }

    /// `model=score` pairs, comma-separated, as the `x-mom-scores` header carries them.
    pub fn scores_label(&self) -> String {
        let mut label = String::with_capacity(self.scores.len() * 24);
        self.push_scores_label(&mut label);
        label
    }

    /// [`Trace::scores_label`] written at the end of `out`.
    pub fn push_scores_label(&self, out: &mut String) {
        for (i, (model, score)) in self.scores.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(model);
            out.push('=');
            super::decimal::push_fixed(out, *score, 4);
        }
    }

    /// [`Trace::confidence_label`] written at the end of `out`.
    pub fn push_confidence_label(&self, out: &mut String) {
        super::decimal::push_fixed(out, self.confidence, 3);
    }

    /// `model:outcome[:confidence]` per tentative call, comma-separated.
    pub fn looper_label(&self) -> String {
        let Some(looper) = &self.looper else {
            return String::new();
        };
        let steps: Vec<String> = looper
            .steps
            .iter()
            .map(|s| match s.confidence {
                Some(c) => format!("{}:{}:{c:.3}", s.model, s.outcome),
                None => format!("{}:{}", s.model, s.outcome),
            })
            .collect();
        steps.join(",")
    }

    /// `plugin:action` per plugin run, comma-separated.
    pub fn plugins_label(&self) -> String {
        let pairs: Vec<String> = self
            .plugins
            .iter()
            .map(|action| format!("{}:{}", action.plugin, action.label()))
            .collect();
        pairs.join(",")
    }

    /// The grounding check's label (`grounded 3/3 min=0.71`, `…;fallback`), once checked.
    pub fn grounding_label(&self) -> Option<String> {
        self.grounding
            .as_ref()
            .map(super::answer::grounding::Grounded::label)
    }

    /// The contract's `kind:outcome`, once the answer was checked.
    pub fn contract_label(&self) -> Option<String> {
        self.contract
            .as_ref()
            .map(|(kind, outcome)| format!("{kind}:{}", outcome.name()))
    }

    /// The decision name, or `none` when no decision matched.
    pub fn decision_label(&self) -> &str {
        self.decision.as_deref().unwrap_or("none")
    }

    /// The decision name, or `none` when no decision matched, as a shared name (for labels and
    /// runs).
    pub fn decision_name(&self) -> Name {
        static NONE: std::sync::LazyLock<Name> = std::sync::LazyLock::new(|| Name::from("none"));
        self.decision.clone().unwrap_or_else(|| NONE.clone())
    }
}

/// How the client's response was made: the `x-mom-response-path` header and the record's
/// `response_path`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResponsePath {
    /// The forwarded request's upstream answered.
    Upstream,
    /// mom-router answered itself (a refusal, a cache hit, a looper's answer).
    Immediate,
    /// Another model answered after the forwarded one failed.
    Fallback,
}

impl ResponsePath {
    /// `upstream`, `immediate` or `fallback`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Upstream => "upstream",
            Self::Immediate => "immediate",
            Self::Fallback => "fallback",
        }
    }
}

/// `text` in plain ASCII, for a header value.
fn ascii(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            c if c.is_ascii() => out.push(c),
            '−' | '–' | '—' => out.push('-'),
            '×' => out.push('x'),
            '≥' => out.push_str(">="),
            '≤' => out.push_str("<="),
            '→' => out.push_str("->"),
            '≈' => out.push('~'),
            _ => out.push('?'),
        }
    }
    out
}

#[cfg(test)]
mod ascii_tests {
    #[test]
    fn header_values_are_plain_ascii() {
        assert_eq!(
            super::ascii("largest utility 0.667 = P(correct) 0.68 − 0.0085 × 1.01 s, ≥ 2 → ok é"),
            "largest utility 0.667 = P(correct) 0.68 - 0.0085 x 1.01 s, >= 2 -> ok ?"
        );
    }
}
