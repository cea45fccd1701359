//! `plugins[]` of a decision or an identity → [`Plugin`]s: guards bound to a signal of the right
//! kind, reroute targets and header names checked, parameters that would break routing refused.

use crate::config::error::Errors;
use crate::config::plugin::Plugin;
use crate::config::raw::{RawGuardAction, RawPiiMode, RawPlugin, RawPromptMode};
use crate::config::snapshot::NameIndex;
use crate::signals::pii_patterns::PiiKind;
use crate::signals::{Signal, SignalKind};

/// Headers a plugin may not set or remove: routing, framing and mom-router's own.
const RESERVED_HEADERS: &[&str] = &[
    "x-selected-model",
    "content-length",
    "content-type",
    "transfer-encoding",
    "host",
    "x-mom-internal-token",
    "x-mom-depth",
];

/// Body fields a plugin may not strip.
const ESSENTIAL_PARAMS: &[&str] = &["model", "messages", "stream"];

/// What plugins are compiled against.
pub(super) struct PluginTables<'a> {
    pub signal_index: &'a NameIndex,
    pub signals: &'a [Option<Signal>],
    pub models: &'a NameIndex,
    /// An encoder is configured (tool selection embeds tools).
    pub encoder: bool,
}

/// Compiles `raw` at `path` (`decisions[0].plugins`); `None` when any plugin is wrong.
pub(super) fn compile_plugins(
    raw: &[RawPlugin],
    path: &str,
    tables: &PluginTables<'_>,
    errors: &mut Errors,
) -> Option<Vec<Plugin>> {
    let mut plugins = Vec::with_capacity(raw.len());
    let mut ok = true;
    for (i, plugin) in raw.iter().enumerate() {
        let path = format!("{path}[{i}]");
        match compile_plugin(plugin, &path, tables, errors) {
            Some(plugin) => plugins.push(plugin),
            None => ok = false,
        }
    }
    ok.then_some(plugins)
}

fn compile_plugin(
    raw: &RawPlugin,
    path: &str,
    tables: &PluginTables<'_>,
    errors: &mut Errors,
) -> Option<Plugin> {
    match raw {
        RawPlugin::ToolSelection { top_k } => {
            if *top_k == 0 {
                errors.push(format!("{path}.topK"), "must be greater than 0");
                return None;
            }
            if !tables.encoder {
                errors.push(
                    path.to_owned(),
                    "tool_selection compares tools with the request by meaning; configure inference.encoder",
                );
                return None;
            }
            Some(Plugin::ToolSelection { top_k: *top_k })
        }
        RawPlugin::SemanticCache(raw) => {
            super::answer_plugins::compile_cache(raw, path, tables, errors)
        }
        RawPlugin::Grounding(raw) => {
            super::answer_plugins::compile_grounding(raw, path, tables, errors)
        }
        RawPlugin::ResponseValidation {
            output_contract,
            repair,
        } => {
            let mut contract = super::contracts::compile_contract(output_contract, path, errors)?;
            contract.repair = *repair;
            Some(Plugin::ResponseValidation(contract))
        }
        RawPlugin::SystemPrompt { prompt, mode } => {
            if prompt.trim().is_empty() {
                errors.push(format!("{path}.prompt"), "must not be empty");
                return None;
            }
            Some(Plugin::SystemPrompt {
                prompt: prompt.clone(),
                replace: *mode == RawPromptMode::Replace,
            })
        }
        RawPlugin::HeaderMutation { set, remove } => {
            let mut ok = true;
            let names = set
                .keys()
                .map(|n| ("set", n))
                .chain(remove.iter().map(|n| ("remove", n)));
            for (field, name) in names {
                let lower = name.to_ascii_lowercase();
                if !is_header_name(&lower) {
                    errors.push(
                        format!("{path}.{field}"),
                        format!("{name:?} is not a header name (letters, digits, '-', '_')"),
                    );
                    ok = false;
                } else if RESERVED_HEADERS.contains(&lower.as_str()) {
                    errors.push(
                        format!("{path}.{field}"),
                        format!("{name:?} is set by mom-router or Envoy and cannot be changed by a plugin"),
                    );
                    ok = false;
                }
            }
            for (name, value) in set {
                if value.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0) {
                    errors.push(
                        format!("{path}.set.{name}"),
                        "a header value may not hold line breaks or NUL",
                    );
                    ok = false;
                }
            }
            ok.then(|| Plugin::HeaderMutation {
                set: set
                    .iter()
                    .map(|(k, v)| (k.to_ascii_lowercase(), v.clone()))
                    .collect(),
                remove: remove.iter().map(|n| n.to_ascii_lowercase()).collect(),
            })
        }
        RawPlugin::RequestParams {
            max_tokens,
            max_n,
            strip,
        } => {
            let mut ok = true;
            for (field, value) in [("maxTokens", max_tokens), ("maxN", max_n)] {
                if *value == Some(0) {
                    errors.push(format!("{path}.{field}"), "must be greater than 0");
                    ok = false;
                }
            }
            for (j, param) in strip.iter().enumerate() {
                if ESSENTIAL_PARAMS.contains(&param.as_str()) {
                    errors.push(
                        format!("{path}.strip[{j}]"),
                        format!("{param:?} carries the request itself and cannot be stripped"),
                    );
                    ok = false;
                }
            }
            ok.then(|| Plugin::RequestParams {
                max_tokens: *max_tokens,
                max_n: *max_n,
                strip: strip.clone(),
            })
        }
        RawPlugin::JailbreakGuard {
            signal,
            action,
            model,
            check_response,
        } => {
            let signal = guarded_signal(signal, "jailbreak", path, tables, errors, |k| {
                matches!(k, SignalKind::Jailbreak(_))
            });
            let reroute = match (action, model) {
                (RawGuardAction::Block, None) => Some(None),
                (RawGuardAction::Block, Some(_)) => {
                    errors.push(
                        format!("{path}.model"),
                        "only action: reroute sends the request to a model",
                    );
                    None
                }
                (RawGuardAction::Reroute, None) => {
                    errors.push(
                        format!("{path}.model"),
                        "action: reroute needs the model to send suspected attacks to",
                    );
                    None
                }
                (RawGuardAction::Reroute, Some(name)) => match tables.models.get(name) {
                    Some(&m) => Some(Some(m)),
                    None => {
                        errors.push(format!("{path}.model"), format!("unknown model {name:?}"));
                        None
                    }
                },
            };
            Some(Plugin::JailbreakGuard {
                signal: signal?,
                reroute: reroute?,
                response: *check_response,
            })
        }
        RawPlugin::Pii {
            signal,
            mode,
            deny,
            allow,
        } => {
            let signal = guarded_signal(signal, "pii", path, tables, errors, |k| {
                matches!(k, SignalKind::Pii(_))
            })?;
            if let Some(both) = deny.iter().find(|t| allow.contains(t)) {
                errors.push(
                    format!("{path}.allow"),
                    format!("{both:?} is both denied and allowed"),
                );
                return None;
            }
            if *mode == RawPiiMode::Mask {
                let unmaskable: Vec<&String> = deny
                    .iter()
                    .filter(|t| PiiKind::from_name(t).is_none())
                    .collect();
                if !unmaskable.is_empty() {
                    errors.push(
                        format!("{path}.deny"),
                        format!(
                            "mask replaces values it can locate; {} cannot be masked (maskable: {})",
                            unmaskable.iter().map(|t| t.as_str()).collect::<Vec<_>>().join(", "),
                            PiiKind::ALL.map(PiiKind::name).join(", ")
                        ),
                    );
                    return None;
                }
                return Some(Plugin::PiiMask {
                    signal,
                    deny: deny.clone(),
                    allow: allow.clone(),
                });
            }
            Some(Plugin::PiiBlock {
                signal,
                deny: deny.clone(),
                allow: allow.clone(),
            })
        }
    }
}

/// Letters, digits, `-` and `_`, at least one.
pub(super) fn is_header_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_".contains(&b))
}

/// The index of signal `name`, which must be of kind `kind`.
fn guarded_signal(
    name: &str,
    kind: &str,
    path: &str,
    tables: &PluginTables<'_>,
    errors: &mut Errors,
    is_kind: impl Fn(&SignalKind) -> bool,
) -> Option<usize> {
    let Some(&index) = tables.signal_index.get(name) else {
        errors.push(
            format!("{path}.signal"),
            format!("unknown signal {name:?}; declare a {kind} signal under signals"),
        );
        return None;
    };
    match tables.signals.get(index).and_then(Option::as_ref) {
        Some(signal) if is_kind(&signal.kind) => Some(index),
        Some(_) => {
            errors.push(
                format!("{path}.signal"),
                format!("signal {name:?} is not a {kind} signal"),
            );
            None
        }
        // The signal itself failed to compile; its own error names it.
        None => None,
    }
}
