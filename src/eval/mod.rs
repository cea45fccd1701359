//! `mom-router eval`: a suite run end to end through Envoy against identities and, for
//! comparison, against each fixed model (a model name sent as `model` is forwarded to that model
//! unchanged). Every answer is graded under its item's output contract; calls, tokens and cost
//! come from the response (a looper's own calls from `x-mom-looper-usage`, plus the forwarded
//! call's usage from the body priced with the configuration's prices); latency is measured by
//! the client, and energy estimated from the models' declared `powerWatts` × busy time (a
//! looper's calls as the sidecar reports them, the forwarded call as the client's wait after
//! the looper). [`score`] turns the outcomes into the scorecard that [`report`] writes as JSON,
//! Markdown and a PNG plot.

pub mod gate;
pub mod grade;
pub mod report;
pub mod sandbox;
pub mod score;
pub mod suite;

use crate::config::Pricing;
use crate::llm::logprobs;
use futures_util::StreamExt;
use score::Outcome;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::time::{Duration, Instant};
use suite::Item;

/// How a suite is run.
#[derive(Debug, Clone)]
pub struct Options {
    /// Envoy's public listener, e.g. `http://127.0.0.1:10000`.
    pub url: String,
    /// Identities to evaluate.
    pub identities: Vec<String>,
    /// Fixed models to compare with.
    pub fixed: Vec<String>,
    /// Prices by logical model.
    pub pricing: HashMap<String, Pricing>,
    /// Declared power while busy (watts) by logical model, for the energy estimate.
    pub power_watts: HashMap<String, f64>,
    /// `max_tokens` of every request.
    pub max_tokens: u32,
    /// Longest wait for one answer.
    pub timeout: Duration,
    /// Requests in flight at once.
    pub concurrency: usize,
    /// Where HumanEval code runs.
    pub sandbox: sandbox::Sandbox,
    /// Ask for streamed answers (`stream: true`, usage included) and time the first chunk.
    pub stream: bool,
    /// Ask for token log-probabilities (`logprobs: true`) and keep each answer's mean as its
    /// confidence (not with `stream`).
    pub logprobs: bool,
}

impl Options {
    /// Identities first, then fixed models.
    pub fn targets(&self) -> Vec<(String, bool)> {
        self.identities
            .iter()
            .map(|t| (t.clone(), false))
            .chain(self.fixed.iter().map(|t| (t.clone(), true)))
            .collect()
    }
}

/// Runs every target on every item (item by item); `tick` is called after each answer is
/// graded. Outcomes come back in target order, then item order.
pub async fn run(
    items: &[Item],
    options: &Options,
    tick: &(dyn Fn(&Outcome) + Sync),
) -> Vec<Outcome> {
    let http = reqwest::Client::new();
    // Item by item, every target on one item before the next: concurrent requests then reach
    // different backends.
    let targets = options.targets();
    let jobs: Vec<(usize, usize, String)> = (0..items.len())
        .flat_map(|i| {
            targets
                .iter()
                .enumerate()
                .map(move |(t, (target, _))| (t, i, target.clone()))
        })
        .collect();
    let mut done: Vec<(usize, usize, Outcome)> = futures_util::stream::iter(jobs)
        .map(|(t, i, target)| {
            let http = http.clone();
            async move {
                let outcome = ask(&http, &target, &items[i], options).await;
                tick(&outcome);
                (t, i, outcome)
            }
        })
        .buffer_unordered(options.concurrency.max(1))
        .collect()
        .await;
    done.sort_by_key(|(t, i, _)| (*t, *i));
    done.into_iter().map(|(_, _, outcome)| outcome).collect()
}

/// The whole body, and when its first chunk arrived (milliseconds after `started`). A body
/// cut short keeps what arrived.
async fn read_timed(mut response: reqwest::Response, started: Instant) -> (Vec<u8>, Option<f64>) {
    let mut body = Vec::new();
    let mut first = None;
    while let Ok(Some(chunk)) = response.chunk().await {
        if first.is_none() && !chunk.is_empty() {
            first = Some(started.elapsed().as_secs_f64() * 1000.0);
        }
        body.extend_from_slice(&chunk);
    }
    (body, first)
}

/// Sends one item to one target and grades the answer.
async fn ask(http: &reqwest::Client, target: &str, item: &Item, options: &Options) -> Outcome {
    let mut body = json!({
        "model": target,
        "messages": [{"role": "user", "content": suite::user_message(item)}],
        "max_tokens": item.max_tokens.unwrap_or(options.max_tokens),
        "temperature": 0,
    });
    if options.stream {
        body["stream"] = json!(true);
        body["stream_options"] = json!({"include_usage": true});
    }
    if options.logprobs {
        body["logprobs"] = json!(true);
    }
    let mut outcome = Outcome {
        target: target.to_owned(),
        item: item.id.clone(),
        ..Outcome::default()
    };
    let started = Instant::now();
    let url = format!("{}/v1/chat/completions", options.url.trim_end_matches('/'));
    let sent = http
        .post(url)
        .json(&body)
        .timeout(options.timeout)
        .send()
        .await;
    let response = match sent {
        Ok(response) => response,
        Err(e) => {
            outcome.latency_ms = started.elapsed().as_secs_f64() * 1000.0;
            outcome.detail = format!("no answer: {e}");
            return outcome;
        }
    };
    outcome.status = response.status().as_u16();
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    };
    outcome.model = header("x-mom-model");
    outcome.decision = header("x-mom-decision");
    outcome.config_version = header("x-mom-config-version");
    outcome.steps = header("x-mom-looper-steps");
    let looper_usage = header("x-mom-looper-usage");
    let looper_calls = header("x-mom-looper-calls");
    let cache_hit = header("x-mom-cache-hit") == "true";
    let forwarded = header("x-mom-response-path") == "upstream";
    let streamed = header("content-type").starts_with("text/event-stream");
    let (bytes, first) = read_timed(response, started).await;
    outcome.latency_ms = started.elapsed().as_secs_f64() * 1000.0;
    outcome.ttft_ms = first.unwrap_or(outcome.latency_ms);
    let answer: Value = if streamed {
        crate::llm::sse::assemble(&bytes).unwrap_or(Value::Null)
    } else {
        serde_json::from_slice(&bytes).unwrap_or(Value::Null)
    };
    if outcome.model.is_empty() {
        outcome.model = target.to_owned();
    }
    let mut looper_wall_ms = 0.0;
    if !looper_usage.is_empty() {
        // The calls a looper made itself (tentative answers, panel members, judges).
        let field = |name: &str| {
            looper_usage
                .split(',')
                .find_map(|pair| pair.strip_prefix(name)?.strip_prefix('='))
                .unwrap_or("0")
                .to_owned()
        };
        outcome.prompt_tokens = field("prompt_tokens").parse().unwrap_or(0);
        outcome.completion_tokens = field("completion_tokens").parse().unwrap_or(0);
        outcome.cost = field("cost").parse().unwrap_or(0.0);
        outcome.energy_joules = field("energy_j").parse().unwrap_or(0.0);
        looper_wall_ms = field("wall_ms").parse().unwrap_or(0.0);
        outcome.calls = looper_calls.parse().unwrap_or(0);
    }
    if forwarded && !cache_hit {
        // The call Envoy forwarded (a fixed model, a routed request, a looper's last step).
        let prompt = answer["usage"]["prompt_tokens"].as_u64().unwrap_or(0);
        let completion = answer["usage"]["completion_tokens"].as_u64().unwrap_or(0);
        outcome.prompt_tokens += prompt;
        outcome.completion_tokens += completion;
        outcome.cost += options.pricing.get(&outcome.model).map_or(0.0, |p| {
            (prompt as f64 * p.input_per_million + completion as f64 * p.output_per_million) / 1e6
        });
        // Its busy time is the client's wait less the looper's own time before it.
        let busy_ms = (outcome.latency_ms - looper_wall_ms).max(0.0);
        outcome.energy_joules += options
            .power_watts
            .get(&outcome.model)
            .map_or(0.0, |watts| watts * busy_ms / 1000.0);
        outcome.calls += 1;
    }
    if !(200..300).contains(&outcome.status) {
        outcome.detail = format!(
            "status {}: {}",
            outcome.status,
            answer["error"]["message"].as_str().unwrap_or_default()
        );
        return outcome;
    }
    outcome.finish_reason = answer["choices"][0]["finish_reason"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let content = answer["choices"][0]["message"]["content"]
        .as_str()
        .unwrap_or_default();
    outcome.answer = content.chars().take(4096).collect();
    if options.logprobs {
        outcome.confidence = logprobs::confidence(&answer, logprobs::Measure::AvgLogprob);
    }
    let graded = grade::grade(item, content, &options.sandbox).await;
    outcome.score = graded.score;
    outcome.detail = graded.detail;
    outcome
}
