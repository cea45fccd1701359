//! Workflows and ReMoM's breadth schedule through the real Envoy, with fake upstreams answering
//! from queues: a plan validated (and repaired once) before any worker runs, independent steps
//! in parallel, a verifier, and the finalizer's answer streamed through Envoy.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test helpers fail loudly"
)]

mod support;

use serde_json::{json, Value};
use support::stack::{header, Stack};

const POLICY: &str = r#"
version: workflows-test
server: {internalUrl: "http://127.0.0.1:10001"}
models:
  - {name: smollm2-135m, providerModel: SmolLM2-135M-Instruct, description: short facts, pricing: {inputPerMillion: 1, outputPerMillion: 2}}
  - {name: qwen2.5-coder-0.5b, providerModel: Qwen2.5-Coder-0.5B-Instruct}
  - {name: gemma3-270m, providerModel: gemma-3-270m}
identities:
  - {name: mom/auto, defaultModel: smollm2-135m}
signals:
  - {name: strict, type: keyword, keywords: [strict]}
  - {name: breadth, type: keyword, keywords: [breadth]}
  - {name: slow, type: keyword, keywords: [slow]}
  - {name: anything, type: context_length, minTokens: 0}
decisions:
  - name: strict_workflow
    priority: 20
    rules: {signal: strict}
    modelRefs: [{model: smollm2-135m}, {model: qwen2.5-coder-0.5b}, {model: gemma3-270m}]
    looper: {type: workflows, planner: gemma3-270m, finalizer: qwen2.5-coder-0.5b, workers: [smollm2-135m], onError: fail, perCallTimeoutMs: 3000}
  - name: slow_workflow
    priority: 18
    rules: {signal: slow}
    modelRefs: [{model: smollm2-135m}, {model: qwen2.5-coder-0.5b}, {model: gemma3-270m}]
    looper: {type: workflows, planner: gemma3-270m, finalizer: qwen2.5-coder-0.5b, workers: [smollm2-135m], perCallTimeoutMs: 300, totalTimeoutMs: 1000}
  - name: breadth
    priority: 15
    rules: {signal: breadth}
    modelRefs: [{model: smollm2-135m}, {model: qwen2.5-coder-0.5b}, {model: gemma3-270m}]
    looper: {type: remom, synthesizer: gemma3-270m, breadth: [4, 2], minSuccesses: 2, perCallTimeoutMs: 3000}
  - name: workflow
    rules: {signal: anything}
    modelRefs: [{model: smollm2-135m}, {model: qwen2.5-coder-0.5b}, {model: gemma3-270m}]
    looper: {type: workflows, planner: gemma3-270m, verifier: gemma3-270m, finalizer: qwen2.5-coder-0.5b, workers: [smollm2-135m], maxSteps: 3, maxParallel: 2, perCallTimeoutMs: 3000}
"#;

const PLAN: &str = r#"{"steps": [
  {"id": "facts", "worker": "smollm2-135m", "task": "list the facts"},
  {"id": "risks", "worker": "smollm2-135m", "task": "list the risks"},
  {"id": "merge", "worker": "smollm2-135m", "task": "merge them", "after": ["facts", "risks"]}]}"#;

fn ask(text: &str, stream: bool) -> Value {
    json!({"model": "mom/auto", "stream": stream,
           "messages": [{"role": "user", "content": text}]})
}

fn system_text(body: &Value) -> String {
    body["messages"][0]["content"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_valid_plan_runs_its_steps_then_the_finalizer_streams_through_envoy() {
    let stack = Stack::start_with_config(POLICY).await;
    let planner = &stack.backends["gemma3-270m"];
    planner.queue(&[
        PLAN,
        r#"{"ok": false, "issues": ["the merge misses a risk"]}"#,
    ]);
    stack.backends["smollm2-135m"].queue(&["fact one", "risk one", "merged"]);
    let mut response = stack.chat(&ask("plan a trip", true), "workflow").await;
    assert_eq!(response.status(), 200);
    assert_eq!(header(&response, "x-mom-response-path"), "upstream");
    assert_eq!(header(&response, "x-mom-looper"), "workflows");
    assert_eq!(header(&response, "x-mom-model"), "qwen2.5-coder-0.5b");
    let steps = header(&response, "x-mom-looper-steps");
    for expected in [
        "gemma3-270m (planner):planned 3 steps",
        "smollm2-135m (facts):done",
        "smollm2-135m (risks):done",
        "smollm2-135m (merge):done",
        "gemma3-270m (verifier):verified: not ok (1 issues)",
    ] {
        assert!(steps.contains(expected), "{expected} missing from {steps}");
    }
    // Five calls of 5 + 7 tokens; the three on the priced worker cost 3 × (5 × 1 + 7 × 2) / 1e6.
    // No model declares power, so no energy; the looper's own time comes last.
    let usage = header(&response, "x-mom-looper-usage");
    assert!(
        usage.starts_with(
            "prompt_tokens=25,completion_tokens=35,cost=0.00005700,energy_j=0.000,wall_ms="
        ),
        "{usage}"
    );
    let mut chunks = 0;
    while response.chunk().await.unwrap().is_some() {
        chunks += 1;
    }
    assert!(
        chunks >= 3,
        "the finalizer's answer arrived in {chunks} chunks"
    );

    // The planner saw the allowed worker; the workers got their tasks, the merge step the
    // results of the two it comes after; the verifier saw every result.
    let planner_calls = planner.bodies();
    assert_eq!(planner_calls.len(), 2);
    assert!(system_text(&planner_calls[0]).contains("- smollm2-135m: short facts"));
    assert!(system_text(&planner_calls[1]).starts_with("You check the work of others"));
    let worker_calls = stack.backends["smollm2-135m"].bodies();
    assert_eq!(worker_calls.len(), 3);
    let merge = worker_calls
        .iter()
        .find(|b| {
            b["messages"][1]["content"]
                .as_str()
                .unwrap()
                .contains("(merge)")
        })
        .unwrap();
    let merge_brief = system_text(merge);
    assert!(
        merge_brief.contains("Result of step facts:")
            && merge_brief.contains("Result of step risks:"),
        "{merge_brief}"
    );
    // The finalizer received the client's own request (streaming) with the results and the
    // verifier's issues in a first system message.
    let finalizer = stack.backends["qwen2.5-coder-0.5b"].bodies();
    assert_eq!(finalizer.len(), 1);
    assert_eq!(finalizer[0]["stream"], true);
    let brief = system_text(&finalizer[0]);
    assert!(
        brief.contains("[merge] merge them (smollm2-135m):\nmerged"),
        "{brief}"
    );
    assert!(brief.contains("- the merge misses a risk"), "{brief}");
    assert_eq!(finalizer[0]["messages"][1]["content"], "plan a trip");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_is_repaired_once_and_an_invalid_one_never_runs() {
    let stack = Stack::start_with_config(POLICY).await;
    let planner = &stack.backends["gemma3-270m"];
    let bad = r#"{"steps": [{"id": "a", "worker": "gpt-9", "task": "everything"}]}"#;
    let one_step = r#"{"steps": [{"id": "a", "worker": "smollm2-135m", "task": "answer"}]}"#;
    // Repaired: the second plan is valid and runs.
    planner.queue(&[bad, one_step, r#"{"ok": true, "issues": []}"#]);
    let response = stack.chat(&ask("repair me", false), "repaired").await;
    assert_eq!(response.status(), 200);
    let steps = header(&response, "x-mom-looper-steps");
    assert!(
        steps.contains(
            "invalid plan: steps[0].worker \"gpt-9\" is not an allowed worker (smollm2-135m)"
        ) && steps.contains("planned after repair 1 steps"),
        "{steps}"
    );
    let repair = &planner.bodies()[1];
    assert!(repair["messages"][3]["content"]
        .as_str()
        .unwrap()
        .starts_with("That plan is not valid"));
    assert_eq!(stack.backends["smollm2-135m"].bodies().len(), 1);

    // Still invalid after the repair: no worker runs, the finalizer answers alone.
    planner.queue(&["no plan here", bad]);
    let response = stack.chat(&ask("again", false), "invalid").await;
    assert_eq!(response.status(), 200);
    assert_eq!(header(&response, "x-mom-looper-calls"), "2");
    assert_eq!(stack.backends["smollm2-135m"].bodies().len(), 1);
    let finalizer = stack.backends["qwen2.5-coder-0.5b"].bodies();
    assert_eq!(
        system_text(finalizer.last().unwrap()),
        "Answer the user's last message."
    );

    // With onError: fail the request fails instead, before any worker or finalizer call.
    planner.queue(&[bad, bad]);
    let before = stack.backends["qwen2.5-coder-0.5b"].bodies().len();
    let response = stack.chat(&ask("strict please", false), "strict").await;
    assert_eq!(response.status(), 502);
    let error: Value = response.json().await.unwrap();
    assert_eq!(error["error"]["code"], "looper_failed");
    assert!(error["error"]["message"]
        .as_str()
        .unwrap()
        .contains("no valid plan"));
    assert_eq!(stack.backends["qwen2.5-coder-0.5b"].bodies().len(), before);
    assert_eq!(stack.backends["smollm2-135m"].bodies().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_breadth_schedule_runs_rounds_that_see_the_previous_answers() {
    let stack = Stack::start_with_config(POLICY).await;
    let response = stack.chat(&ask("breadth first", false), "breadth").await;
    assert_eq!(response.status(), 200);
    assert_eq!(header(&response, "x-mom-looper"), "remom");
    assert_eq!(header(&response, "x-mom-looper-calls"), "6");
    let steps = header(&response, "x-mom-looper-steps");
    assert!(
        steps.contains("smollm2-135m (round 1):answered")
            && steps.contains("qwen2.5-coder-0.5b (round 2):answered"),
        "{steps}"
    );
    // Four calls in round one spread over the two panel models, two in round two; every
    // round-two call carries round one's answers; distinct seeds throughout.
    let mut panel = stack.backends["smollm2-135m"].bodies();
    panel.extend(stack.backends["qwen2.5-coder-0.5b"].bodies());
    assert_eq!(panel.len(), 6);
    let second: Vec<&Value> = panel
        .iter()
        .filter(|b| system_text(b).starts_with("Answers to this request from an earlier round"))
        .collect();
    assert_eq!(second.len(), 2);
    assert!(system_text(second[0]).contains("[4] "));
    let mut seeds: Vec<u64> = panel.iter().map(|b| b["seed"].as_u64().unwrap()).collect();
    seeds.sort_unstable();
    seeds.dedup();
    assert_eq!(seeds.len(), 6);
    // The synthesizer got the last round's two answers.
    let synthesis = stack.backends["gemma3-270m"].bodies();
    assert_eq!(synthesis.len(), 1);
    let brief = system_text(&synthesis[0]);
    assert!(brief.contains("[2] ") && !brief.contains("[3] "), "{brief}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_steps_time_out_and_the_total_deadline_stops_the_plan() {
    let stack = Stack::start_with_config(POLICY).await;
    stack.backends["gemma3-270m"].queue(&[PLAN]);
    let worker = &stack.backends["smollm2-135m"];
    worker
        .delay_ms
        .store(700, std::sync::atomic::Ordering::Relaxed);
    let started = std::time::Instant::now();
    let response = stack.chat(&ask("slow plan", false), "slow").await;
    assert_eq!(response.status(), 200);
    // The two parallel steps each hit the 300 ms call deadline (skipped, the default); the
    // merge step reads their failure and times out too, or finds the 1 s total spent.
    let steps = header(&response, "x-mom-looper-steps");
    assert!(
        steps.contains("smollm2-135m (facts):error: no answer within 300 ms")
            && steps.contains("smollm2-135m (risks):error: no answer within 300 ms"),
        "{steps}"
    );
    assert!(
        steps.contains("smollm2-135m (merge):error: no answer within")
            || steps.contains("smollm2-135m (merge):skipped: total deadline spent"),
        "{steps}"
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(3));
    let finalizer = stack.backends["qwen2.5-coder-0.5b"].bodies();
    assert_eq!(finalizer.len(), 1);
    let brief = system_text(&finalizer[0]);
    assert!(
        brief.contains("[facts] list the facts (smollm2-135m):\n(this step failed)"),
        "{brief}"
    );
}
