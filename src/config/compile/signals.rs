//! Signals, rules and decisions: raw entries compiled against the model and signal tables.

use super::algorithms::compile_algorithm;
use super::contracts::compile_contract;
use super::heads;
use super::known_names;
use super::loopers::compile_looper;
use super::plugins::{compile_plugins, PluginTables};
use crate::config::error::Errors;
use crate::config::raw::{
    RawAggregate, RawDecision, RawExemplar, RawKeywordOperator, RawOnError, RawRule, RawScope,
    RawSignal,
};
use crate::config::snapshot::NameIndex;
use crate::config::snapshot::{Decision, Model};
use crate::decision::Rule;
use crate::inference::{EncoderHandle, TokenClassifierHandle};
use crate::selection::Candidate;
use crate::signals::text::FencedCode;
use crate::signals::{
    exemplar_sets, Aggregate, AuthzSignal, ConversationSignal, EmbeddingSignal, ExemplarSignal,
    KeywordOperator, KeywordSignal, Label, LanguageSignal, MetadataSignal, OnError, PiiSignal,
    RolesSource, Scope, Signal, SignalError, SignalKind, TokenRange,
};
use std::sync::Arc;

fn scope(raw: RawScope) -> Scope {
    match raw {
        RawScope::LastUser => Scope::LastUser,
        RawScope::AllUser => Scope::AllUser,
        RawScope::All => Scope::All,
    }
}

/// The models neural signals may use.
pub(super) struct Models<'a> {
    /// The sentence encoder.
    pub encoder: Option<&'a Arc<EncoderHandle>>,
    /// The token classifier.
    pub ner: Option<&'a CompiledNer>,
    /// Directory relative paths (head files) are resolved against.
    pub base: &'a std::path::Path,
}

/// A loaded token classifier and what it reports.
pub(super) struct CompiledNer {
    /// The running classifier.
    pub handle: Arc<TokenClassifierHandle>,
    /// Entity types it reports.
    pub types: Vec<String>,
    /// Minimum token probability for an entity to count.
    pub min_score: f32,
    /// What it reads of fenced code blocks.
    pub fenced_code: FencedCode,
}

fn compile_signal(raw: &RawSignal, models: &Models) -> Result<Signal, Vec<SignalError>> {
    let one = |e: SignalError| vec![e];
    let (name, kind) = match raw {
        RawSignal::Keyword {
            name,
            keywords,
            patterns,
            operator,
            case_sensitive,
            whole_words,
            scope: s,
        } => {
            let operator = match operator {
                RawKeywordOperator::Any => KeywordOperator::Any,
                RawKeywordOperator::All => KeywordOperator::All,
                RawKeywordOperator::None => KeywordOperator::None,
            };
            let signal = KeywordSignal::new(
                keywords,
                patterns,
                operator,
                *case_sensitive,
                *whole_words,
                scope(*s),
            )?;
            (name, SignalKind::Keyword(signal))
        }
        RawSignal::Budget { name, below } => (
            name,
            SignalKind::Budget(crate::signals::BudgetSignal::new(*below).map_err(one)?),
        ),
        RawSignal::ContextLength {
            name,
            min_tokens,
            max_tokens,
        } => (
            name,
            SignalKind::ContextLength(TokenRange::new(*min_tokens, *max_tokens).map_err(one)?),
        ),
        RawSignal::Conversation {
            name,
            min_turns,
            max_turns,
            has_tools,
            has_images,
        } => (
            name,
            SignalKind::Conversation(
                ConversationSignal::new(*min_turns, *max_turns, *has_tools, *has_images)
                    .map_err(one)?,
            ),
        ),
        RawSignal::Language {
            name,
            languages,
            min_confidence,
            scope: s,
        } => (
            name,
            SignalKind::Language(LanguageSignal::new(languages, *min_confidence, scope(*s))?),
        ),
        RawSignal::Authz {
            name,
            header,
            metadata,
            roles,
        } => {
            let source = match (header, metadata) {
                (Some(_), Some(_)) => {
                    return Err(one(SignalError::new(
                        "metadata",
                        "set either header or metadata, not both",
                    )))
                }
                (_, Some(m)) => RolesSource::Metadata {
                    namespace: m.namespace.clone(),
                    path: m.path.clone(),
                },
                (header, None) => RolesSource::Header(
                    header
                        .clone()
                        .unwrap_or_else(|| "x-mom-user-roles".to_owned()),
                ),
            };
            (
                name,
                SignalKind::Authz(AuthzSignal::new(source, roles).map_err(one)?),
            )
        }
        RawSignal::Embedding {
            name,
            candidates,
            threshold,
            aggregate,
            on_error,
        } => {
            let Some(encoder) = models.encoder else {
                return Err(one(SignalError::new(
                    "type",
                    "an embedding signal needs an encoder; configure inference.encoder",
                )));
            };
            let vectors = encoder.embed_blocking(candidates).map_err(|e| {
                one(SignalError::new(
                    "candidates",
                    format!("cannot embed the candidates: {e}"),
                ))
            })?;
            let aggregate = match aggregate {
                RawAggregate::Max => Aggregate::Max,
                RawAggregate::Mean => Aggregate::Mean,
            };
            let on_error = on_error_of(*on_error);
            let candidates = candidates.iter().cloned().zip(vectors).collect();
            (
                name,
                SignalKind::Embedding(
                    EmbeddingSignal::new(candidates, *threshold, aggregate, on_error)
                        .map_err(one)?,
                ),
            )
        }
        RawSignal::Domain(raw) => heads::domain(raw, models)?,
        RawSignal::Jailbreak(raw) => heads::jailbreak(raw, models)?,
        RawSignal::Complexity(raw) => exemplar("complexity", raw, models)?,
        RawSignal::Preference(raw) => exemplar("preference", raw, models)?,
        RawSignal::FactCheck(raw) => exemplar("fact_check", raw, models)?,
        RawSignal::UserFeedback(raw) => exemplar("user_feedback", raw, models)?,
        RawSignal::Modality(raw) => exemplar("modality", raw, models)?,
        RawSignal::Pii {
            name,
            entities,
            allow,
            scope: s,
            on_error,
        } => (
            name,
            SignalKind::Pii(PiiSignal::new(
                entities,
                allow,
                scope(*s),
                models.ner.map(|n| n.types.as_slice()),
                models.ner.map_or(0.5, |n| n.min_score),
                guard_on_error(*on_error),
            )?),
        ),
        RawSignal::Metadata {
            name,
            header,
            equals,
            pattern,
            present,
        } => (
            name,
            SignalKind::Metadata(
                MetadataSignal::new(header, equals.as_deref(), pattern.as_deref(), *present)
                    .map_err(one)?,
            ),
        ),
    };
    if name.trim().is_empty() {
        return Err(vec![SignalError::new("name", "give the signal a name")]);
    }
    Ok(Signal {
        name: name.as_str().into(),
        kind,
    })
}

/// Compiles an exemplar signal: built-in phrases for `task`, replaced label by label by the
/// configured ones, all embedded by the shared encoder.
fn exemplar<'a>(
    task: &'static str,
    raw: &'a RawExemplar,
    models: &Models,
) -> Result<(&'a String, SignalKind), Vec<SignalError>> {
    let Some(encoder) = models.encoder else {
        return Err(vec![SignalError::new(
            "type",
            format!("a {task} signal needs an encoder; configure inference.encoder"),
        )]);
    };
    let mut labels: Vec<(String, Vec<String>)> = exemplar_sets::builtin(task)
        .into_iter()
        .map(|(label, phrases)| {
            (
                label.to_owned(),
                phrases.iter().map(|p| (*p).to_owned()).collect(),
            )
        })
        .collect();
    for (label, phrases) in &raw.exemplars {
        match labels.iter_mut().find(|(name, _)| name == label) {
            Some((_, existing)) => existing.clone_from(phrases),
            None if task == "preference" => labels.push((label.clone(), phrases.clone())),
            None => {
                let known: Vec<&str> = labels.iter().map(|(n, _)| n.as_str()).collect();
                return Err(vec![SignalError::new(
                    format!("exemplars.{label}"),
                    format!(
                        "{task} has no label {label:?}; labels: {}",
                        known.join(", ")
                    ),
                )]);
            }
        }
    }
    let mut compiled = Vec::with_capacity(labels.len());
    for (name, phrases) in labels {
        let examples = encoder.embed_blocking(&phrases).map_err(|e| {
            vec![SignalError::new(
                format!("exemplars.{name}"),
                format!("cannot embed the examples: {e}"),
            )]
        })?;
        compiled.push(Label { name, examples });
    }
    let signal = ExemplarSignal::new(
        task,
        compiled,
        &raw.matching,
        raw.min_confidence,
        on_error_of(raw.on_error),
    )?;
    Ok((&raw.name, SignalKind::Exemplar(signal)))
}

/// A guard signal's (`jailbreak`, `pii`) `onError`: unset, it fails closed.
pub(super) fn guard_on_error(raw: Option<RawOnError>) -> OnError {
    raw.map_or(OnError::Fail, on_error_of)
}

pub(super) fn on_error_of(raw: RawOnError) -> OnError {
    match raw {
        RawOnError::NoMatch => OnError::NoMatch,
        RawOnError::Match => OnError::Match,
        RawOnError::Fail => OnError::Fail,
    }
}

/// One entry per parsed signal, `None` where the signal is invalid.
pub(super) fn compile_signals(
    raw: &[(usize, RawSignal)],
    models: &Models,
    errors: &mut Errors,
) -> Vec<Option<Signal>> {
    let mut signals = Vec::new();
    for (i, signal) in raw {
        match compile_signal(signal, models) {
            Ok(signal) => signals.push(Some(signal)),
            Err(problems) => {
                for problem in problems {
                    errors.push(format!("signals[{i}].{}", problem.field), problem.message);
                }
                signals.push(None);
            }
        }
    }
    signals
}

pub(super) fn signal_name(raw: &RawSignal) -> &str {
    match raw {
        RawSignal::Keyword { name, .. }
        | RawSignal::ContextLength { name, .. }
        | RawSignal::Budget { name, .. }
        | RawSignal::Conversation { name, .. }
        | RawSignal::Language { name, .. }
        | RawSignal::Authz { name, .. }
        | RawSignal::Embedding { name, .. }
        | RawSignal::Pii { name, .. }
        | RawSignal::Metadata { name, .. } => name,
        RawSignal::Complexity(raw)
        | RawSignal::Preference(raw)
        | RawSignal::FactCheck(raw)
        | RawSignal::UserFeedback(raw)
        | RawSignal::Modality(raw) => &raw.name,
        RawSignal::Domain(raw) => &raw.name,
        RawSignal::Jailbreak(raw) => &raw.name,
    }
}

fn compile_rule(
    raw: &RawRule,
    path: &str,
    signals: &NameIndex,
    errors: &mut Errors,
) -> Option<Rule> {
    let RawRule {
        signal,
        all,
        any,
        not,
    } = raw;
    let set = [
        signal.is_some(),
        all.is_some(),
        any.is_some(),
        not.is_some(),
    ];
    if set.iter().filter(|s| **s).count() != 1 {
        errors.push(
            path,
            "a rule sets exactly one of `signal`, `all`, `any` or `not`",
        );
        return None;
    }
    if let Some(name) = signal {
        return match signals.get(name) {
            Some(index) => Some(Rule::Signal(*index)),
            None => {
                errors.push(
                    format!("{path}.signal"),
                    format!(
                        "unknown signal {name:?}; known signals: {}",
                        known_names(signals)
                    ),
                );
                None
            }
        };
    }
    if let Some(child) = not {
        return compile_rule(child, &format!("{path}.not"), signals, errors)
            .map(|c| Rule::Not(Box::new(c)));
    }
    let (key, children) = match (all, any) {
        (Some(children), _) => ("all", children),
        (_, Some(children)) => ("any", children),
        (None, None) => return None,
    };
    if children.is_empty() {
        errors.push(format!("{path}.{key}"), "list at least one rule");
        return None;
    }
    let compiled: Vec<Option<Rule>> = children
        .iter()
        .enumerate()
        .map(|(j, child)| compile_rule(child, &format!("{path}.{key}[{j}]"), signals, errors))
        .collect();
    let compiled: Vec<Rule> = compiled.into_iter().collect::<Option<_>>()?;
    Some(if key == "all" {
        Rule::All(compiled)
    } else {
        Rule::Any(compiled)
    })
}

pub(super) fn compile_decisions(
    raw: &[(usize, RawDecision)],
    models: &NameIndex,
    compiled_models: &[Option<Model>],
    signals: &NameIndex,
    signal_table: &[Option<Signal>],
    neural: &Models,
    errors: &mut Errors,
) -> Vec<Option<Decision>> {
    let encoder = neural.encoder;
    let mut decisions = Vec::new();
    for (i, decision) in raw {
        let path = format!("decisions[{i}]");
        let rule = compile_rule(&decision.rules, &format!("{path}.rules"), signals, errors);
        if decision.model_refs.is_empty() {
            errors.push(format!("{path}.modelRefs"), "list at least one model");
        }
        let mut candidates = Vec::new();
        for (j, model_ref) in decision.model_refs.iter().enumerate() {
            let Some(&model) = models.get(&model_ref.model) else {
                errors.push(
                    format!("{path}.modelRefs[{j}].model"),
                    format!(
                        "unknown model {:?}; known models: {}",
                        model_ref.model,
                        known_names(models)
                    ),
                );
                continue;
            };
            if !model_ref.weight.is_finite() || model_ref.weight <= 0.0 {
                errors.push(
                    format!("{path}.modelRefs[{j}].weight"),
                    format!("must be a positive number, got {}", model_ref.weight),
                );
                continue;
            }
            candidates.push(Candidate {
                model,
                weight: model_ref.weight,
            });
        }
        let complete = candidates.len() == decision.model_refs.len() && !candidates.is_empty();
        let algorithm = complete
            .then(|| {
                compile_algorithm(
                    &decision.algorithm,
                    &path,
                    &candidates,
                    compiled_models,
                    encoder,
                    neural.base,
                    errors,
                )
            })
            .flatten();
        let looper = match &decision.looper {
            Some(raw) if complete => {
                match compile_looper(raw, &path, &candidates, compiled_models, errors) {
                    Some(looper) => Some(looper),
                    None => {
                        decisions.push(None);
                        continue;
                    }
                }
            }
            _ => None,
        };
        let contract = match &decision.output_contract {
            Some(raw) => match compile_contract(raw, &path, errors) {
                Some(contract) => Some(contract),
                None => {
                    decisions.push(None);
                    continue;
                }
            },
            None => None,
        };
        let plugin_tables = PluginTables {
            signal_index: signals,
            signals: signal_table,
            models,
            encoder: encoder.is_some(),
        };
        let Some(plugins) = compile_plugins(
            &decision.plugins,
            &format!("{path}.plugins"),
            &plugin_tables,
            errors,
        ) else {
            decisions.push(None);
            continue;
        };
        let Some((algorithm, vectors)) = algorithm else {
            decisions.push(None);
            continue;
        };
        decisions.push(rule.map(|rule| Decision {
            name: decision.name.as_str().into(),
            description: decision.description.clone(),
            priority: decision.priority,
            rule,
            candidates,
            algorithm,
            vectors,
            looper,
            contract,
            plugins,
        }));
    }
    decisions
}
