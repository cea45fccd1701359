//! Raw sections → [`Snapshot`]. Checks every cross-reference and every value, collecting all
//! errors; each names its path and says what would fix it.

use super::error::Errors;
use super::parse::RawConfig;
use super::raw::{
    RawAggregate, RawAlgorithm, RawBackend, RawDecision, RawEncoder, RawExemplar, RawIdentity,
    RawKeywordOperator, RawModel, RawNer, RawOnError, RawRule, RawScope, RawSignal,
};
use super::snapshot::{Decision, Identity, Listen, Model, Pricing, Server, Snapshot};
use crate::decision::Rule;
use crate::inference::{
    self, Backend, BatchSettings, EncoderHandle, EncoderSpec, TokenClassifierHandle,
    TokenClassifierSpec,
};
use crate::selection::{Algorithm, Candidate};
use crate::signals::{
    exemplar_sets, Aggregate, AuthzSignal, ConversationSignal, EmbeddingSignal, ExemplarSignal,
    KeywordOperator, KeywordSignal, Label, LanguageSignal, MetadataSignal, OnError, PiiSignal,
    Scope, Signal, SignalError, SignalKind, TokenRange,
};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// Default ext_proc address.
pub const DEFAULT_GRPC_LISTEN: &str = "127.0.0.1:50051";
/// Default admin address.
pub const DEFAULT_ADMIN_LISTEN: &str = "127.0.0.1:9190";
/// Default request body limit (1 MiB).
pub const DEFAULT_MAX_BODY_BYTES: u64 = 1024 * 1024;

/// Compiles the raw document. `hash` is the hex SHA-256 of the source text; relative paths are
/// resolved against `base`. Loads (or reuses) the encoder when `inference.encoder` is set.
pub fn compile(raw: RawConfig, hash: &str, base: &Path, errors: &mut Errors) -> Option<Snapshot> {
    let server = compile_server(&raw, errors);
    let encoder = raw
        .inference
        .as_ref()
        .and_then(|inference| inference.encoder.as_ref())
        .and_then(|encoder| compile_encoder(encoder, base, errors));
    let ner = raw
        .inference
        .as_ref()
        .and_then(|inference| inference.ner.as_ref())
        .and_then(|ner| compile_ner(ner, base, errors));
    let neural_models = Models {
        encoder: encoder.as_ref(),
        ner: ner.as_ref(),
    };
    // Names index every parsed entry, valid or not, so one bad entry does not turn each
    // reference to it into a second, misleading "unknown" error.
    let model_index = index_by_name(
        raw.models.iter().map(|(i, m)| (*i, m.name.as_str())),
        "models",
        &raw.broken,
        errors,
    );
    let models = compile_models(&raw.models, errors);
    let signal_index = index_by_name(
        raw.signals.iter().map(|(i, s)| (*i, signal_name(s))),
        "signals",
        &raw.broken,
        errors,
    );
    let signals = compile_signals(&raw.signals, &neural_models, errors);
    let decision_index = index_by_name(
        raw.decisions.iter().map(|(i, d)| (*i, d.name.as_str())),
        "decisions",
        &raw.broken,
        errors,
    );
    let decisions = compile_decisions(&raw.decisions, &model_index, &signal_index, errors);
    let identities = compile_identities(
        &raw.identities,
        &model_index,
        &decision_index,
        &decisions,
        &signals,
        errors,
    );
    if raw.identities.is_empty() && errors.is_empty() {
        errors.push(
            "identities",
            "declare at least one identity (e.g. mom/auto) with a defaultModel",
        );
    }
    let identity_index = index_by_name(
        identities.iter().map(|(i, d)| (*i, d.name.as_str())),
        "identities",
        &raw.broken,
        errors,
    );
    for (i, identity) in &identities {
        if model_index.contains_key(&identity.name) {
            errors.push(
                format!("identities[{i}].name"),
                format!(
                    "{:?} is also a model name; an identity and a model cannot share a name",
                    identity.name
                ),
            );
        }
    }
    let label = raw.version.unwrap_or_else(|| "unversioned".to_owned());
    let server = server?;
    if !errors.is_empty() {
        return None;
    }
    Some(Snapshot {
        version: format!("{label}@{}", &hash[..12.min(hash.len())]),
        server,
        models: models.into_iter().collect::<Option<_>>()?,
        identities: identities.into_iter().map(|(_, i)| i).collect(),
        signals: signals.into_iter().collect::<Option<_>>()?,
        decisions: decisions.into_iter().collect::<Option<_>>()?,
        encoder,
        ner: ner.map(|n| n.handle),
        model_index,
        identity_index,
    })
}

/// Maps names to positions in the compiled list; duplicates are errors.
/// Names of entries that failed to parse map to this position, which no list holds.
const BROKEN: usize = usize::MAX;

fn index_by_name<'a>(
    names: impl Iterator<Item = (usize, &'a str)>,
    section: &'static str,
    broken: &[(&'static str, String)],
    errors: &mut Errors,
) -> HashMap<String, usize> {
    let mut index = HashMap::new();
    for (position, (raw_index, name)) in names.enumerate() {
        if index.insert(name.to_owned(), position).is_some() {
            errors.push(
                format!("{section}[{raw_index}].name"),
                format!("duplicate name {name:?}; names in {section} must be unique"),
            );
        }
    }
    for (_, name) in broken.iter().filter(|(s, _)| *s == section) {
        index.entry(name.clone()).or_insert(BROKEN);
    }
    index
}

fn compile_server(raw: &RawConfig, errors: &mut Errors) -> Option<Server> {
    let server = raw.server.as_ref();
    let grpc = server
        .and_then(|s| s.grpc_listen.clone())
        .unwrap_or_else(|| DEFAULT_GRPC_LISTEN.to_owned());
    let admin = server
        .and_then(|s| s.admin_listen.clone())
        .unwrap_or_else(|| DEFAULT_ADMIN_LISTEN.to_owned());
    let max_body_bytes = server
        .and_then(|s| s.max_body_bytes)
        .unwrap_or(DEFAULT_MAX_BODY_BYTES);
    let grpc_listen = match grpc.strip_prefix("unix:") {
        Some(path) if !path.is_empty() => Some(Listen::Unix(path.into())),
        Some(_) => {
            errors.push("server.grpcListen", "give a socket path after `unix:`");
            None
        }
        None => parse_addr(&grpc, "server.grpcListen", errors).map(Listen::Tcp),
    };
    let admin_listen = parse_addr(&admin, "server.adminListen", errors);
    if max_body_bytes == 0 {
        errors.push("server.maxBodyBytes", "must be greater than 0");
    }
    Some(Server {
        grpc_listen: grpc_listen?,
        admin_listen: admin_listen?,
        max_body_bytes,
        list_models: server.and_then(|s| s.list_models).unwrap_or(true),
    })
}

fn parse_addr(text: &str, path: &str, errors: &mut Errors) -> Option<std::net::SocketAddr> {
    match text.parse() {
        Ok(addr) => Some(addr),
        Err(_) => {
            errors.push(
                path,
                format!("{text:?} is not an IP:PORT address (e.g. 127.0.0.1:50051)"),
            );
            None
        }
    }
}

fn is_route_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | ':' | '/'))
}

/// One entry per parsed model, `None` where the model is invalid.
fn compile_models(raw: &[(usize, RawModel)], errors: &mut Errors) -> Vec<Option<Model>> {
    let mut models = Vec::new();
    for (i, model) in raw {
        let path = format!("models[{i}]");
        let mut ok = true;
        if !is_route_name(&model.name) {
            errors.push(
                format!("{path}.name"),
                format!(
                    "{:?} is not a valid route name; use letters, digits and . _ - : /",
                    model.name
                ),
            );
            ok = false;
        } else if model.name.starts_with("mom/") {
            errors.push(
                format!("{path}.name"),
                "names starting with mom/ are reserved for identities; rename the model",
            );
            ok = false;
        }
        if model.provider_model.trim().is_empty() {
            errors.push(
                format!("{path}.providerModel"),
                "give the model id the upstream server expects",
            );
            ok = false;
        }
        if let Some(p) = &model.pricing {
            for (field, value) in [
                ("inputPerMillion", p.input_per_million),
                ("outputPerMillion", p.output_per_million),
            ] {
                if !value.is_finite() || value < 0.0 {
                    errors.push(
                        format!("{path}.pricing.{field}"),
                        format!("must be a non-negative number, got {value}"),
                    );
                    ok = false;
                }
            }
        }
        models.push(ok.then(|| Model {
            name: model.name.clone(),
            provider_model: model.provider_model.clone(),
            description: model.description.clone(),
            context_window: model.context_window,
            pricing: model.pricing.as_ref().map(|p| Pricing {
                input_per_million: p.input_per_million,
                output_per_million: p.output_per_million,
            }),
            capabilities: model.capabilities.clone(),
        }));
    }
    models
}

fn scope(raw: RawScope) -> Scope {
    match raw {
        RawScope::LastUser => Scope::LastUser,
        RawScope::AllUser => Scope::AllUser,
        RawScope::All => Scope::All,
    }
}

/// The models neural signals may use.
struct Models<'a> {
    encoder: Option<&'a Arc<EncoderHandle>>,
    ner: Option<&'a CompiledNer>,
}

/// A loaded token classifier and what it reports.
struct CompiledNer {
    handle: Arc<TokenClassifierHandle>,
    types: Vec<String>,
    min_score: f32,
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
            roles,
        } => (
            name,
            SignalKind::Authz(AuthzSignal::new(header, roles).map_err(one)?),
        ),
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
                on_error_of(*on_error),
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
        name: name.clone(),
        kind,
    })
}

/// One entry per parsed signal, `None` where the signal is invalid.
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

fn on_error_of(raw: RawOnError) -> OnError {
    match raw {
        RawOnError::NoMatch => OnError::NoMatch,
        RawOnError::Match => OnError::Match,
        RawOnError::Fail => OnError::Fail,
    }
}

fn compile_signals(
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

fn signal_name(raw: &RawSignal) -> &str {
    match raw {
        RawSignal::Keyword { name, .. }
        | RawSignal::ContextLength { name, .. }
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
    }
}

fn compile_rule(
    raw: &RawRule,
    path: &str,
    signals: &HashMap<String, usize>,
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

fn compile_decisions(
    raw: &[(usize, RawDecision)],
    models: &HashMap<String, usize>,
    signals: &HashMap<String, usize>,
    errors: &mut Errors,
) -> Vec<Option<Decision>> {
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
        let algorithm = match decision.algorithm {
            RawAlgorithm::Static => Algorithm::Static,
            RawAlgorithm::Weighted => Algorithm::Weighted,
        };
        let complete = candidates.len() == decision.model_refs.len() && !candidates.is_empty();
        decisions.push(rule.filter(|_| complete).map(|rule| Decision {
            name: decision.name.clone(),
            description: decision.description.clone(),
            priority: decision.priority,
            rule,
            candidates,
            algorithm,
        }));
    }
    decisions
}

fn known_names(index: &HashMap<String, usize>) -> String {
    let mut names: Vec<(&usize, &str)> = index.iter().map(|(n, i)| (i, n.as_str())).collect();
    names.sort_unstable();
    let names: Vec<&str> = names.into_iter().map(|(_, n)| n).collect();
    if names.is_empty() {
        "(none declared)".to_owned()
    } else {
        names.join(", ")
    }
}

fn compile_identities(
    raw: &[(usize, RawIdentity)],
    models: &HashMap<String, usize>,
    decision_index: &HashMap<String, usize>,
    decisions: &[Option<Decision>],
    compiled_signals: &[Option<Signal>],
    errors: &mut Errors,
) -> Vec<(usize, Identity)> {
    let mut identities = Vec::new();
    for (i, identity) in raw {
        let path = format!("identities[{i}]");
        let mut ok = true;
        if !is_route_name(&identity.name) {
            errors.push(
                format!("{path}.name"),
                format!(
                    "{:?} is not a valid identity name; use letters, digits and . _ - : / (e.g. mom/auto)",
                    identity.name
                ),
            );
            ok = false;
        }
        let default_model = models.get(&identity.default_model).copied();
        if default_model.is_none() {
            errors.push(
                format!("{path}.defaultModel"),
                format!(
                    "unknown model {:?}; known models: {}",
                    identity.default_model,
                    known_names(models)
                ),
            );
            ok = false;
        }
        let selected: Vec<usize> = match &identity.decisions {
            None => (0..decisions.len()).collect(),
            Some(names) => names
                .iter()
                .enumerate()
                .filter_map(|(j, name)| {
                    let found = decision_index.get(name).copied();
                    if found.is_none() {
                        ok = false;
                        errors.push(
                            format!("{path}.decisions[{j}]"),
                            format!(
                                "unknown decision {name:?}; known decisions: {}",
                                known_names(decision_index)
                            ),
                        );
                    }
                    found
                })
                .collect(),
        };
        let mut signals = Vec::new();
        for decision in selected.iter().filter_map(|&d| decisions.get(d)?.as_ref()) {
            decision.rule.collect_signals(&mut signals);
        }
        signals.sort_unstable();
        let uses = |test: fn(&SignalKind) -> bool| {
            signals.iter().any(|&s| {
                compiled_signals
                    .get(s)
                    .and_then(Option::as_ref)
                    .is_some_and(|signal| test(&signal.kind))
            })
        };
        let needs_embedding = uses(SignalKind::needs_embedding);
        let needs_entities = uses(SignalKind::needs_entities);
        if let (true, Some(default_model)) = (ok, default_model) {
            identities.push((
                *i,
                Identity {
                    name: identity.name.clone(),
                    version: identity.version.clone(),
                    description: identity.description.clone(),
                    default_model,
                    decisions: selected,
                    signals,
                    needs_embedding,
                    needs_entities,
                },
            ));
        }
    }
    identities
}

/// Providers `executionProviders` may name.
const PROVIDERS: &[&str] = &["cuda", "rocm", "openvino", "cpu"];

/// The configured providers (default `[cpu]`), or `None` after reporting a bad one.
fn providers(raw: Option<&Vec<String>>, path: &str, errors: &mut Errors) -> Option<Vec<String>> {
    let providers = raw.cloned().unwrap_or_else(|| vec!["cpu".to_owned()]);
    let mut ok = true;
    for (i, provider) in providers.iter().enumerate() {
        if !PROVIDERS.contains(&provider.as_str()) {
            errors.push(
                format!("{path}.executionProviders[{i}]"),
                format!(
                    "unknown provider {provider:?}; use one of: {}",
                    PROVIDERS.join(", ")
                ),
            );
            ok = false;
        }
    }
    if providers.is_empty() {
        errors.push(
            format!("{path}.executionProviders"),
            "list at least one provider, e.g. cpu",
        );
        ok = false;
    }
    ok.then_some(providers)
}

/// `runtimeLibrary` resolved against `base`, or `$ORT_DYLIB_PATH`.
fn runtime_library(raw: Option<&str>, base: &Path) -> Option<std::path::PathBuf> {
    raw.map(|p| base.join(p))
        .or_else(|| std::env::var_os("ORT_DYLIB_PATH").map(Into::into))
}

fn compile_ner(raw: &RawNer, base: &Path, errors: &mut Errors) -> Option<CompiledNer> {
    let path = "inference.ner";
    let providers = providers(raw.execution_providers.as_ref(), path, errors);
    let Some(runtime_library) = runtime_library(raw.runtime_library.as_deref(), base) else {
        errors.push(
            format!("{path}.runtimeLibrary"),
            "the token classifier needs libonnxruntime.so: set runtimeLibrary or ORT_DYLIB_PATH",
        );
        return None;
    };
    let min_score = raw.min_score.unwrap_or(0.5);
    if !(0.0..=1.0).contains(&min_score) {
        errors.push(
            format!("{path}.minScore"),
            format!("must be between 0 and 1, got {min_score}"),
        );
        return None;
    }
    let spec = TokenClassifierSpec {
        model: base.join(&raw.onnx_model),
        model_dir: base.join(&raw.model_dir),
        runtime_library,
        providers: providers?,
        require_first: raw.require_first_provider,
        max_tokens: raw.max_tokens.unwrap_or(256).clamp(16, 512),
        threads: raw.threads.unwrap_or(1).max(1),
    };
    let settings = BatchSettings {
        max_batch: raw.max_batch.unwrap_or(16).max(1),
        max_wait: Duration::from_millis(raw.max_wait_ms.unwrap_or(2)),
        queue: raw.queue.unwrap_or(256).max(1),
        cache_entries: raw.cache_entries.unwrap_or(10_000),
    };
    let loaded = inference::labels_of(&spec.model_dir.join("config.json")).and_then(|labels| {
        let handle = inference::shared_token_classifier(&spec, settings)?;
        Ok((labels, handle))
    });
    match loaded {
        Ok((labels, handle)) => {
            let mut types: Vec<String> = labels
                .iter()
                .filter_map(|l| l.strip_prefix("B-").map(str::to_owned))
                .collect();
            types.dedup();
            Some(CompiledNer {
                handle,
                types,
                min_score,
            })
        }
        Err(e) => {
            errors.push(
                path,
                format!("{e}; check the model paths (fetch them with ./scripts/fetch-models.sh)"),
            );
            None
        }
    }
}

fn compile_encoder(
    raw: &RawEncoder,
    base: &Path,
    errors: &mut Errors,
) -> Option<Arc<EncoderHandle>> {
    let path = "inference.encoder";
    let resolve = |p: &str| base.join(p);
    let model_dir = resolve(&raw.model_dir);
    let providers = providers(raw.execution_providers.as_ref(), path, errors);
    let ok = providers.is_some();
    let providers = providers.unwrap_or_default();
    let backend = match raw.backend {
        RawBackend::Candle => Backend::Candle,
        RawBackend::Onnx => {
            let model = raw.onnx_model.as_deref().map(resolve);
            let library = runtime_library(raw.runtime_library.as_deref(), base);
            match (model, library) {
                (Some(model), Some(runtime_library)) => Backend::Onnx {
                    model,
                    runtime_library,
                    providers,
                    require_first: raw.require_first_provider,
                },
                (None, _) => {
                    errors.push(
                        format!("{path}.onnxModel"),
                        "backend onnx needs the path of the .onnx file",
                    );
                    return None;
                }
                (_, None) => {
                    errors.push(
                        format!("{path}.runtimeLibrary"),
                        "backend onnx needs libonnxruntime.so: set runtimeLibrary or ORT_DYLIB_PATH",
                    );
                    return None;
                }
            }
        }
    };
    let spec = EncoderSpec {
        backend,
        model_dir,
        max_tokens: raw.max_tokens.unwrap_or(256).clamp(8, 512),
        threads: raw.threads.unwrap_or(1).max(1),
        batch: BatchSettings {
            max_batch: raw.max_batch.unwrap_or(16).max(1),
            max_wait: Duration::from_millis(raw.max_wait_ms.unwrap_or(2)),
            queue: raw.queue.unwrap_or(256).max(1),
            cache_entries: raw.cache_entries.unwrap_or(10_000),
        },
    };
    if !ok {
        return None;
    }
    match inference::shared_encoder(&spec) {
        Ok(handle) => Some(handle),
        Err(e) => {
            errors.push(
                path,
                format!("{e}; check the model paths (fetch them with ./scripts/fetch-models.sh)"),
            );
            None
        }
    }
}
