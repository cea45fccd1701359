//! Cross-model failover before the first byte. When an identity's forwarded request fails
//! upstream (a 5xx, a 429, a refused or reset connection, which Envoy answers as a 503) the
//! request is served by the next candidate of the same decision, in the order the algorithm
//! ranked them, then by the identity's other models. Each attempt goes through Envoy's
//! internal listener with the body rewritten for its model; attempts are bounded in number and
//! by one deadline, and a model that keeps failing is set aside for its cool-down.
//!
//! A plan is made when the request is forwarded ([`plan`]); [`fail_over`] runs it when the
//! failure is seen, from whichever ext_proc stream sees it.

use crate::config::{Decision, Failover, Identity, Name, Snapshot};
use crate::engine::Trace;
use crate::llm::client::Relayed;
use crate::llm::{CallError, LlmClient, SubReply};
use crate::protocol::Protocol;
use crate::state::{RunId, StateStore};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What a forwarded request needs to be served by another model.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// The identity called.
    pub identity: Name,
    /// Models in the order they are tried (indices into the snapshot's models); the first is
    /// the one the request was forwarded to.
    pub ranked: Vec<usize>,
    /// The chat body as forwarded to the first model.
    pub body: Vec<u8>,
    /// The client asked for server-sent events.
    pub stream: bool,
    /// The client's protocol, when it is not Chat Completions: the answer is translated back.
    pub protocol: Option<Protocol>,
    /// The identity's limits (shared with its configuration).
    pub policy: Arc<Failover>,
}

/// One upstream attempt that did not answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempt {
    /// The model tried.
    pub model: String,
    /// Why it did not answer: the status (`503`, `429`), `timeout` or `transport`.
    pub failure: String,
}

/// A call handed from a failed model to the next, as `mom_fallback_total` counts it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handover {
    /// The model that failed.
    pub from: String,
    /// The model tried next.
    pub to: String,
    /// The failure: the status (`503`, `429`), `timeout` or `transport`.
    pub reason: String,
}

/// How a failover ended.
#[derive(Debug, Clone)]
pub struct FailedOver {
    /// The attempts that failed, the first (forwarded) one included.
    pub failed: Vec<Attempt>,
    /// The model that answered and its answer, when one did.
    pub answered: Option<(usize, Relayed)>,
    /// Time from the failure until the answer (or the last failure).
    pub elapsed: Duration,
}

impl FailedOver {
    /// The attempt chain as the `x-mom-fallback` header shows it, plain ASCII:
    /// `qwen2.5-coder-0.5b 503 -> smollm2-135m`.
    pub fn label(&self, snapshot: &Snapshot) -> String {
        let answered = self.answered.as_ref().map(|(m, _)| &snapshot.models[*m]);
        chain(&self.failed, answered.map(|m| &*m.name))
    }
}

/// An attempt chain, plain ASCII: `qwen2.5-coder-0.5b 503 -> smollm2-135m`, or `... -> none
/// answered`.
fn chain(failed: &[Attempt], answered: Option<&str>) -> String {
    let mut label = String::new();
    for (i, attempt) in failed.iter().enumerate() {
        if i > 0 {
            label.push_str(" -> ");
        }
        label.push_str(&attempt.model);
        label.push(' ');
        label.push_str(&attempt.failure);
    }
    label.push_str(" -> ");
    label.push_str(answered.unwrap_or("none answered"));
    label
}

/// How a looper's sub-call ended.
#[derive(Debug)]
pub(in crate::engine) struct SubCall {
    /// The model that answered, or the last one tried (an index into the snapshot's models).
    pub model: usize,
    /// Its answer, or the last error.
    pub result: Result<SubReply, CallError>,
    /// The attempts that failed and handed the call on, in order.
    pub failed: Vec<Attempt>,
}

impl SubCall {
    /// The attempt chain when the call was handed on (`smollm2-135m 503 -> gemma3-270m`).
    pub fn label(&self, snapshot: &Snapshot) -> Option<String> {
        let answered = self
            .result
            .is_ok()
            .then(|| &*snapshot.models[self.model].name);
        (!self.failed.is_empty()).then(|| chain(&self.failed, answered))
    }

    /// Each hand-over from a failed model to the next.
    pub fn handovers(&self, snapshot: &Snapshot) -> Vec<Handover> {
        let next = self.failed.iter().skip(1).map(|a| a.model.clone()).chain(
            self.result
                .is_ok()
                .then(|| snapshot.models[self.model].name.to_string()),
        );
        self.failed
            .iter()
            .zip(next)
            .map(|(a, to)| Handover {
                from: a.model.clone(),
                to,
                reason: a.failure.clone(),
            })
            .collect()
    }
}

/// A looper's sub-call to `model` (an index into the snapshot's models) with `body`, answered
/// within `deadline`. With the identity's failover `policy` (and the `fallbacks` it allows), a 5xx or 429 (Envoy answers a
/// refused or reset connection with 503) hands the same body, rewritten for each model, to
/// `fallbacks` in order, skipping those set aside: `maxAttempts` attempts in all, the fallbacks
/// within the policy's deadline and the call's own. Model health counts every attempt.
pub(in crate::engine) async fn sub_call(
    snapshot: &Snapshot,
    client: &LlmClient,
    state: &StateStore,
    failover: Option<(&Failover, &[usize])>,
    model: usize,
    body: Vec<u8>,
    deadline: Duration,
) -> SubCall {
    let name = |m: usize| &*snapshot.models[m].name;
    let Some((policy, fallbacks)) = failover else {
        let result = client.chat(name(model), body, 1, deadline).await;
        return SubCall {
            model,
            result,
            failed: Vec::new(),
        };
    };
    let started = Instant::now();
    let health = &state.health;
    let tries = usize::try_from(policy.max_attempts).unwrap_or(usize::MAX);
    let mut failed = Vec::new();
    let mut current = model;
    let mut result = client.chat(name(model), body.clone(), 1, deadline).await;
    let mut fallbacks = fallbacks.iter().copied().filter(|&m| m != model);
    let mut handed_on_at = None;
    loop {
        let failure = match &result {
            Ok(_) => {
                health.succeeded(name(current));
                break;
            }
            Err(CallError::Status(status)) if *status >= 500 || *status == 429 => {
                status.to_string()
            }
            Err(_) => break,
        };
        let now = Instant::now();
        health.failed(name(current), policy.cool_down, now);
        failed.push(Attempt {
            model: name(current).to_owned(),
            failure,
        });
        let since = *handed_on_at.get_or_insert(now);
        let left = policy
            .deadline
            .saturating_sub(since.elapsed())
            .min(deadline.saturating_sub(started.elapsed()));
        if failed.len() >= tries || left.is_zero() {
            break;
        }
        let Some(next) = fallbacks.find(|&m| {
            health
                .set_aside(name(m), policy.eject_after, policy.cool_down, now)
                .is_none()
        }) else {
            break;
        };
        current = next;
        let body = body_for(&body, &snapshot.models[next].provider_model);
        result = client.chat(name(next), body, 1, left).await;
    }
    SubCall {
        model: current,
        result,
        failed,
    }
}

/// The failover plan of a request forwarded to `forwarded` for `identity` after `decision`
/// (none: the identity's default) ranked `scores` (model name, score; higher is better).
/// `None` when the identity declares no failover, or the decision keeps its requests on its
/// chosen model, or no other model could serve.
pub(in crate::engine) fn plan(
    snapshot: &Snapshot,
    identity: &Identity,
    decision: Option<&Decision>,
    scores: &[(Name, f64)],
    forwarded: usize,
    body: &[u8],
    stream: bool,
) -> Option<Box<Plan>> {
    let policy = identity.failover.as_ref()?;
    if decision.is_some_and(|d| policy.excepts(&d.name)) {
        return None;
    }
    let order = order(snapshot, policy, scores, forwarded);
    (order.len() > 1).then(|| {
        Box::new(Plan {
            identity: identity.name.clone(),
            ranked: order,
            body: body.to_vec(),
            stream,
            protocol: None,
            policy: Arc::clone(policy),
        })
    })
}

/// The models a request forwarded to `first` is tried on: `first`, the decision's candidates
/// by `scores` (highest first; equal scores keep the declared order), then the failover's own
/// models, each once.
fn order(
    snapshot: &Snapshot,
    policy: &Failover,
    scores: &[(Name, f64)],
    first: usize,
) -> Vec<usize> {
    // One vector: the scores' places, sorted by score (a stable sort: equal scores keep the
    // declared order), read as model indices, then `first` before them and the failover's own
    // models after, each kept once where it first appears.
    let mut order: Vec<usize> = Vec::with_capacity(1 + scores.len() + policy.models.len());
    order.push(first);
    order.extend(0..scores.len());
    order[1..].sort_by(|&a, &b| {
        let (a, b) = (scores[a].1, scores[b].1);
        b.partial_cmp(&a).unwrap_or(std::cmp::Ordering::Equal)
    });
    for at in &mut order[1..] {
        *at = snapshot.model_index(&scores[*at].0).unwrap_or(usize::MAX);
    }
    order.extend(policy.models.iter().copied());
    let mut kept = 0;
    for i in 0..order.len() {
        let model = order[i];
        if model != usize::MAX && !order[..kept].contains(&model) {
            order[kept] = model;
            kept += 1;
        }
    }
    order.truncate(kept);
    order
}

/// The model to forward to: `chosen`, unless failover set it aside (it kept failing) and a
/// later model of the same order is not; the selection reason then says so.
pub(in crate::engine) fn healthy(
    snapshot: &Snapshot,
    state: &StateStore,
    identity: &Identity,
    decision: Option<&Decision>,
    trace: &mut Trace,
    chosen: usize,
) -> usize {
    let Some(policy) = &identity.failover else {
        return chosen;
    };
    if decision.is_some_and(|d| policy.excepts(&d.name)) {
        return chosen;
    }
    let now = Instant::now();
    let aside = |m: usize| {
        let name = &snapshot.models[m].name;
        state
            .health
            .set_aside(name, policy.eject_after, policy.cool_down, now)
    };
    let Some((failures, left)) = aside(chosen) else {
        return chosen;
    };
    let order = order(snapshot, policy, &trace.scores, chosen);
    let Some(&next) = order.iter().skip(1).find(|&&m| aside(m).is_none()) else {
        return chosen;
    };
    trace.selection_reason = format!(
        "{} set aside after {failures} failures in a row (tried again in {} s), so {}; {}",
        snapshot.models[chosen].name,
        left.as_secs().max(1),
        snapshot.models[next].name,
        trace.selection_reason
    )
    .into();
    next
}

/// Serves `plan`'s request by its next models after the first failed with `failure`; counts
/// every failure and success in `state`'s model health.
pub async fn fail_over(
    snapshot: &Snapshot,
    client: &LlmClient,
    state: &StateStore,
    plan: &Plan,
    failure: String,
) -> FailedOver {
    let started = Instant::now();
    let health = &state.health;
    let first = &snapshot.models[plan.ranked[0]].name;
    health.failed(first, plan.policy.cool_down, started);
    let mut failed = vec![Attempt {
        model: first.to_string(),
        failure,
    }];
    let policy = &plan.policy;
    let tries = usize::try_from(policy.max_attempts).unwrap_or(usize::MAX);
    let mut answered = None;
    for &index in plan.ranked.iter().skip(1) {
        let left = policy.deadline.saturating_sub(started.elapsed());
        if failed.len() >= tries || left.is_zero() {
            break;
        }
        let model = &snapshot.models[index];
        let now = Instant::now();
        if health
            .set_aside(&model.name, policy.eject_after, policy.cool_down, now)
            .is_some()
        {
            continue;
        }
        let body = body_for(&plan.body, &model.provider_model);
        let _in_flight = model
            .max_concurrency
            .and_then(|_| state.pool.start(&model.name));
        let relayed = client.relay(&model.name, body, model.first_byte_timeout, left);
        let failure = match relayed.await {
            Ok(relayed) if (200..300).contains(&relayed.status) => {
                health.succeeded(&model.name);
                answered = Some((index, relayed));
                break;
            }
            Ok(relayed) => relayed.status.to_string(),
            Err(crate::llm::CallError::Timeout(_)) => "timeout".to_owned(),
            Err(_) => "transport".to_owned(),
        };
        health.failed(&model.name, policy.cool_down, Instant::now());
        failed.push(Attempt {
            model: model.name.to_string(),
            failure,
        });
    }
    FailedOver {
        failed,
        answered,
        elapsed: started.elapsed(),
    }
}

/// A forwarded request whose response phases Envoy skips, parked in case its upstream fails:
/// Envoy's failover filter opens a stream only for a failed response, and that stream finds
/// the request by its run id. (Such a request keeps no run record: records and spans watch
/// every response.)
#[derive(Debug)]
pub struct Waiting {
    /// How to serve it elsewhere.
    pub plan: Box<Plan>,
    /// The evidence behind it, for the fallback's `x-mom-*` headers (shared with the
    /// forwarding stream's).
    pub trace: Arc<Trace>,
    /// Its place in the forwarded model's in-flight count: ends when the request fails over or
    /// its stream ends.
    pub in_flight: Option<crate::state::InFlight>,
}

/// Parked requests by run id. An entry lives while its forwarding ext_proc stream does (Envoy
/// holds that stream open until the response ends), so the map holds requests in flight only.
#[derive(Debug, Default)]
pub struct Parked {
    /// Keyed by mom-router's own random run ids, so a fast hasher serves.
    waiting: Mutex<HashMap<RunId, Waiting, foldhash::fast::RandomState>>,
}

/// A parked request's place; dropping it (the forwarding stream ended) removes it.
#[derive(Debug)]
pub struct Ticket {
    parked: Arc<Parked>,
    run_id: RunId,
}

impl Parked {
    /// Parks `waiting` under `run_id` until the returned ticket is dropped.
    pub fn park(self: &Arc<Self>, run_id: RunId, waiting: Waiting) -> Ticket {
        if let Ok(mut map) = self.waiting.lock() {
            map.insert(run_id, waiting);
        }
        Ticket {
            parked: Arc::clone(self),
            run_id,
        }
    }

    /// Takes the request parked under `run_id`: a request fails over once.
    pub fn take(&self, run_id: RunId) -> Option<Waiting> {
        self.waiting.lock().ok()?.remove(&run_id)
    }

    /// Requests parked now.
    pub fn len(&self) -> usize {
        self.waiting.lock().map_or(0, |map| map.len())
    }

    /// True when none is parked.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if let Ok(mut map) = self.parked.waiting.lock() {
            map.remove(&self.run_id);
        }
    }
}

/// True for an upstream status that fails over: a 5xx or a 429.
pub fn fails_over(status: u16) -> bool {
    status == 429 || (500..600).contains(&status)
}

/// `body` with its `model` set to `provider_model` (unchanged if it is not a JSON object).
fn body_for(body: &[u8], provider_model: &str) -> Vec<u8> {
    match serde_json::from_slice::<serde_json::Value>(body) {
        Ok(serde_json::Value::Object(mut object)) => {
            object.insert("model".to_owned(), provider_model.into());
            serde_json::Value::Object(object).to_string().into_bytes()
        }
        _ => body.to_vec(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_body_names_each_attempts_provider_model() {
        let body = br#"{"model":"Qwen","messages":[{"role":"user","content":"hi"}],"stream":true}"#;
        let rewritten: serde_json::Value =
            serde_json::from_slice(&body_for(body, "SmolLM2")).unwrap();
        assert_eq!(rewritten["model"], "SmolLM2");
        assert_eq!(rewritten["stream"], true);
        assert_eq!(rewritten["messages"][0]["content"], "hi");
    }

    const POLICY: &str = r#"
version: failover-test
models:
  - { name: small, providerModel: small-v1 }
  - { name: coder, providerModel: coder-v3 }
  - { name: long, providerModel: long-v2 }
identities:
  - name: mom/auto
    defaultModel: small
    failover: { maxAttempts: 3, except: [private] }
signals:
  - { name: code, type: keyword, keywords: [python] }
  - { name: secret, type: keyword, keywords: [password] }
  - { name: chat, type: keyword, keywords: [hello] }
decisions:
  - { name: code, priority: 10, rules: { signal: code }, modelRefs: [{ model: coder }] }
  - { name: private, priority: 20, rules: { signal: secret }, modelRefs: [{ model: small }] }
  - name: chat
    priority: 5
    rules: { signal: chat }
    algorithm: { type: weighted }
    modelRefs: [{ model: long, weight: 3 }, { model: small, weight: 1 }]
"#;

    async fn routed(model: &str, text: &str) -> crate::engine::Routed {
        let snapshot = crate::config::compile_str(POLICY).unwrap();
        let services = crate::engine::Services::offline(&snapshot);
        let body =
            serde_json::json!({"model": model, "messages": [{"role": "user", "content": text}]});
        let headers = crate::llm::Headers::new([
            (":method".to_owned(), "POST".to_owned()),
            (":path".to_owned(), crate::engine::CHAT_PATH.to_owned()),
        ]);
        let body = body.to_string().into_bytes();
        crate::engine::on_request_body(&snapshot, &services, &headers, &body).await
    }

    fn plan_of(routed: &crate::engine::Routed) -> Option<&Plan> {
        match &routed.action {
            crate::engine::Action::Forward(forward) => forward.failover.as_deref(),
            crate::engine::Action::Respond(reply) => panic!("expected forward, got {reply:?}"),
        }
    }

    #[tokio::test]
    async fn the_plan_tries_the_decisions_ranking_then_the_identitys_other_models() {
        // One candidate: then the identity's models as declared.
        let code = routed("mom/auto", "a python question").await;
        assert_eq!(plan_of(&code).unwrap().ranked, vec![1, 0, 2]);
        // The weighted split ranks long (3) over small (1), whichever it drew.
        let chat = routed("mom/auto", "hello there").await;
        let plan = plan_of(&chat).unwrap();
        let first = plan.ranked[0];
        let rest: Vec<usize> = plan.ranked[1..].to_vec();
        let expected = if first == 2 { vec![0, 1] } else { vec![2, 1] };
        assert_eq!(rest, expected);
        // The body the fallback rewrites is the one forwarded.
        let sent: serde_json::Value = serde_json::from_slice(&plan.body).unwrap();
        assert_eq!(sent["messages"][0]["content"], "hello there");
    }

    #[tokio::test]
    async fn an_excepted_decision_and_a_concrete_model_never_fail_over() {
        assert!(plan_of(&routed("mom/auto", "my password is hunter2").await).is_none());
        assert!(plan_of(&routed("coder", "a python question").await).is_none());
    }

    #[test]
    fn a_parked_request_is_taken_once_and_leaves_with_its_ticket() {
        let snapshot = crate::config::compile_str(POLICY).unwrap();
        let parked = Arc::new(Parked::default());
        let waiting = || Waiting {
            plan: Box::new(Plan {
                identity: "mom/auto".into(),
                ranked: vec![0, 1],
                body: b"{}".to_vec(),
                stream: false,
                protocol: None,
                policy: Arc::new(Failover {
                    max_attempts: 2,
                    deadline: Duration::from_secs(1),
                    models: Vec::new(),
                    except: Vec::new(),
                    eject_after: 3,
                    cool_down: Duration::from_secs(1),
                }),
            }),
            trace: Arc::new(Trace::empty(&snapshot)),
            in_flight: None,
        };
        let (a, b, c) = (RunId::random(), RunId::random(), RunId::random());
        let ticket = parked.park(a, waiting());
        assert_eq!(parked.len(), 1);
        assert!(parked.take(b).is_none());
        assert!(parked.take(a).is_some());
        assert!(parked.take(a).is_none());
        drop(ticket);
        let ticket = parked.park(c, waiting());
        assert_eq!(parked.len(), 1);
        drop(ticket);
        assert!(parked.is_empty());
    }

    #[test]
    fn five_hundreds_and_429_fail_over_other_statuses_do_not() {
        for status in [500, 502, 503, 504, 429] {
            assert!(fails_over(status), "{status}");
        }
        for status in [200, 400, 401, 404, 413] {
            assert!(!fails_over(status), "{status}");
        }
    }
}
