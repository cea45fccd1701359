//! Plugins in the request phase, once the decision is made: the identity's, then the winning
//! decision's, in their declared order. Guards read their signal's result and refuse the request
//! or reroute it before any upstream call; rewrites change the request every later step sends
//! (sub-requests and the forwarded request alike) or the headers of the forwarded request.

use crate::config::{CacheRule, Contract, GroundingRule, Plugin, Snapshot};
use crate::engine::answer::pii_mask::Masker;
use crate::engine::HeaderEdits;
use crate::engine::PluginOutcome::{Blocked, Masked, Passed, Rerouted};
use crate::engine::RouteError;
use crate::engine::{PluginAction, PluginOutcome, Trace};
use crate::llm::ChatRequest;
use crate::signals::pii_patterns::PiiKind;
use serde_json::{json, Value};
use std::sync::Arc;

/// What the plugins left for the rest of the request.
#[derive(Debug, Default)]
pub(in crate::engine) struct Applied {
    /// The model a guard rerouted to.
    pub reroute: Option<usize>,
    /// The placeholders masked in the request, to restore in the answer.
    pub masker: Option<Arc<Masker>>,
    /// Tools to keep when a tool_selection plugin runs (it needs the encoder: run by the
    /// caller).
    pub tool_top_k: Option<usize>,
}

/// Plugins the caller runs around the request rather than on it (the first of each kind).
#[derive(Debug, Default)]
pub(in crate::engine) struct Deferred<'p> {
    /// The semantic cache: looked up before any model call, fed by the answer.
    pub cache: Option<&'p CacheRule>,
    /// A response_validation contract (when the decision has none of its own).
    pub contract: Option<&'p Contract>,
    /// The jailbreak signal a guard runs on the answer too.
    pub answer_guard: Option<usize>,
    /// The grounding check of the answer.
    pub grounding: Option<&'p GroundingRule>,
}

impl<'p> Deferred<'p> {
    /// Finds them among `plugins`.
    pub(in crate::engine) fn of(plugins: impl Iterator<Item = &'p Plugin>) -> Self {
        let mut deferred = Self::default();
        for plugin in plugins {
            match plugin {
                Plugin::SemanticCache(rule) => {
                    deferred.cache.get_or_insert(rule);
                }
                Plugin::ResponseValidation(contract) => {
                    deferred.contract.get_or_insert(contract);
                }
                Plugin::JailbreakGuard {
                    signal,
                    response: true,
                    ..
                } => {
                    deferred.answer_guard.get_or_insert(*signal);
                }
                Plugin::Grounding(rule) => {
                    deferred.grounding.get_or_insert(rule);
                }
                _ => {}
            }
        }
        deferred
    }
}

/// Runs `plugins` on `request`. Each plugin's action is added to `trace.plugins`.
pub(in crate::engine) fn apply<'p>(
    snapshot: &Snapshot,
    plugins: impl Iterator<Item = &'p Plugin>,
    request: &mut ChatRequest,
    edits: &mut HeaderEdits,
    trace: &mut Trace,
) -> Result<Applied, RouteError> {
    let mut reroute = None;
    let mut masker: Option<Arc<Masker>> = None;
    let mut tool_top_k = None;
    for plugin in plugins {
        if let Plugin::ToolSelection { top_k } = plugin {
            tool_top_k = Some(*top_k);
            continue;
        }
        let action = match plugin {
            Plugin::JailbreakGuard {
                signal,
                reroute: to,
                ..
            } => {
                let name = &snapshot.signals[*signal].name;
                let matched = trace.signals.iter().any(|r| &r.name == name && r.matched);
                match (matched, to) {
                    (false, _) => PluginAction::plain(plugin.name(), Passed),
                    (true, None) => {
                        trace
                            .plugins
                            .push(PluginAction::plain(plugin.name(), Blocked));
                        return Err(RouteError::JailbreakBlocked {
                            signal: name.to_string(),
                        });
                    }
                    (true, Some(model)) => {
                        reroute = Some(*model);
                        let to = format!("to {}", snapshot.models[*model].name);
                        PluginAction::new(plugin.name(), Rerouted, to)
                    }
                }
            }
            Plugin::PiiBlock {
                signal,
                deny,
                allow,
            } => {
                let name = &snapshot.signals[*signal].name;
                let found: Vec<String> = trace
                    .signals
                    .iter()
                    .filter(|r| &r.name == name)
                    .filter_map(|r| r.label.as_deref())
                    .flat_map(|label| label.split(','))
                    .filter(|t| !allow.iter().any(|a| a == t))
                    .filter(|t| deny.is_empty() || deny.iter().any(|d| d == t))
                    .map(str::to_owned)
                    .collect();
                if !found.is_empty() {
                    trace
                        .plugins
                        .push(PluginAction::plain(plugin.name(), Blocked));
                    return Err(RouteError::PiiBlocked { types: found });
                }
                PluginAction::plain(plugin.name(), Passed)
            }
            Plugin::PiiMask {
                signal,
                deny,
                allow,
            } => {
                let name = &snapshot.signals[*signal].name;
                let matched = trace.signals.iter().any(|r| &r.name == name && r.matched);
                let masks = |kind: PiiKind| {
                    let kind = kind.name();
                    !allow.iter().any(|a| a == kind)
                        && (deny.is_empty() || deny.iter().any(|d| d == kind))
                };
                if !matched || masker.is_some() {
                    PluginAction::plain(plugin.name(), Passed)
                } else {
                    let masked = Masker::mask(request.object_mut(), masks);
                    if masked.is_empty() {
                        PluginAction::plain(plugin.name(), Passed)
                    } else {
                        let action = PluginAction::new(plugin.name(), Masked, masked.label());
                        masker = Some(Arc::new(masked));
                        action
                    }
                }
            }
            // Run by the caller: tool selection needs the encoder, the cache the state, the
            // grounding check the answer.
            Plugin::ToolSelection { .. }
            | Plugin::SemanticCache(_)
            | Plugin::Grounding(_)
            | Plugin::ResponseValidation(_) => continue,
            Plugin::SystemPrompt { prompt, replace } => {
                system_prompt(request, prompt, *replace);
                let said = if *replace { "replaced" } else { "inserted" };
                PluginAction::new(plugin.name(), PluginOutcome::Applied, said)
            }
            Plugin::RequestParams {
                max_tokens,
                max_n,
                strip,
            } => {
                let changed = request_params(request, *max_tokens, *max_n, strip);
                PluginAction::new(plugin.name(), PluginOutcome::Applied, changed)
            }
            Plugin::HeaderMutation { set, remove } => {
                edits.set.extend(set.iter().cloned());
                edits.remove.extend(remove.iter().cloned());
                let said = format!("{} set {} removed", set.len(), remove.len());
                PluginAction::new(plugin.name(), PluginOutcome::Applied, said)
            }
        };
        trace.plugins.push(action);
    }
    Ok(Applied {
        reroute,
        masker,
        tool_top_k,
    })
}

fn system_prompt(request: &mut ChatRequest, prompt: &str, replace: bool) {
    let object = request.object_mut();
    let mut messages: Vec<Value> = object
        .get("messages")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if replace {
        messages.retain(|m| m["role"] != "system" && m["role"] != "developer");
    }
    messages.insert(0, json!({"role": "system", "content": prompt}));
    object.insert("messages".to_owned(), Value::Array(messages));
}

/// Caps `max_tokens`/`max_completion_tokens` and `n`, strips parameters; says what changed.
fn request_params(
    request: &mut ChatRequest,
    max_tokens: Option<u64>,
    max_n: Option<u64>,
    strip: &[String],
) -> String {
    let object = request.object_mut();
    let mut changed = Vec::new();
    if let Some(cap) = max_tokens {
        let mut capped = false;
        for key in ["max_tokens", "max_completion_tokens"] {
            if let Some(asked) = object.get(key).and_then(Value::as_u64) {
                if asked > cap {
                    object.insert(key.to_owned(), json!(cap));
                    capped = true;
                }
            }
        }
        let absent =
            !object.contains_key("max_tokens") && !object.contains_key("max_completion_tokens");
        if absent {
            object.insert("max_tokens".to_owned(), json!(cap));
            capped = true;
        }
        if capped {
            changed.push(format!("max_tokens<={cap}"));
        }
    }
    if let Some(cap) = max_n {
        if object
            .get("n")
            .and_then(Value::as_u64)
            .is_some_and(|n| n > cap)
        {
            object.insert("n".to_owned(), json!(cap));
            changed.push(format!("n<={cap}"));
        }
    }
    for param in strip {
        if object.remove(param).is_some() {
            changed.push(format!("-{param}"));
        }
    }
    if changed.is_empty() {
        "unchanged".to_owned()
    } else {
        changed.join(" ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(body: Value) -> ChatRequest {
        ChatRequest::parse(body.to_string().as_bytes()).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn request_params_cap_and_strip_and_say_what_changed() {
        let mut asked = request(json!({"model": "m", "max_tokens": 4000, "n": 5,
            "logit_bias": {"1": 2}, "messages": [{"role": "user", "content": "hi"}]}));
        let changed = request_params(&mut asked, Some(512), Some(1), &["logit_bias".to_owned()]);
        assert_eq!(changed, "max_tokens<=512 n<=1 -logit_bias");
        assert_eq!(asked.object()["max_tokens"], 512);
        assert_eq!(asked.object()["n"], 1);
        assert!(!asked.object().contains_key("logit_bias"));
        let mut modest = request(json!({"model": "m", "max_completion_tokens": 100,
            "messages": [{"role": "user", "content": "hi"}]}));
        assert_eq!(
            request_params(&mut modest, Some(512), Some(1), &[]),
            "unchanged"
        );
        let mut silent =
            request(json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]}));
        assert_eq!(
            request_params(&mut silent, Some(64), None, &[]),
            "max_tokens<=64"
        );
    }

    #[test]
    fn a_system_prompt_is_inserted_first_or_replaces_the_clients() {
        let body = json!({"model": "m", "messages": [
            {"role": "system", "content": "be rude"}, {"role": "user", "content": "hi"}]});
        let mut inserted = request(body.clone());
        system_prompt(&mut inserted, "be kind", false);
        let roles: Vec<&str> = inserted.object()["messages"]
            .as_array()
            .map(|m| m.iter().filter_map(|m| m["content"].as_str()).collect())
            .unwrap_or_default();
        assert_eq!(roles, ["be kind", "be rude", "hi"]);
        let mut replaced = request(body);
        system_prompt(&mut replaced, "be kind", true);
        let roles: Vec<&str> = replaced.object()["messages"]
            .as_array()
            .map(|m| m.iter().filter_map(|m| m["content"].as_str()).collect())
            .unwrap_or_default();
        assert_eq!(roles, ["be kind", "hi"]);
    }
}
