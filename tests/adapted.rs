//! The encoder fine-tuned with a low-rank adapter (`heads/minilm-adapter.safetensors`, merged on
//! load by Candle) and the subject head fitted on it, as `examples/adapted` runs them: its
//! recorded and out-of-distribution scores, the refusal of each encoder's head by the other, and
//! the example's decisions.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test helpers fail loudly"
)]

mod support;

use mom_router::config::compile_str;
use mom_router::train::Split;
use serde_json::Value;
use support::heads::{held_out_as_recorded, ood, score};
use support::sidecar::{example_config, quickstart_config};
use support::signal;
use support::stack::ask;

fn explain(config: &str, text: &str) -> Value {
    support::explain_offline(config, &ask(text))
}

/// The subject head fitted on the fine-tuned encoder (`examples/adapted`: Candle with the
/// low-rank adapter merged on load) reproduces its recorded held-out accuracy through the routing
/// code and keeps its out-of-distribution scores; the heads of the plain and the adapted encoder
/// are each refused by the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_adapted_encoder_s_domain_head_holds_its_scores_and_refuses_the_plain_head() {
    let config = example_config("adapted");
    let snapshot = compile_str(&config).unwrap();
    held_out_as_recorded(&snapshot, "stem", "domain-adapted.safetensors").await;
    // Measured with this head (heads/README.md): 0.893 as written, 0.768 misspelt; a floor two
    // questions under each.
    let domain = score(&snapshot, "stem", ood("domain.jsonl"), &[], Split::All).await;
    assert_eq!(domain.examples, 56);
    assert!(domain.accuracy >= 0.857, "{domain}");
    let typos = score(
        &snapshot,
        "stem",
        ood("domain-typos.jsonl"),
        &[],
        Split::All,
    )
    .await;
    assert!(typos.accuracy >= 0.732, "{typos}");

    let plain = config.replace(
        "heads/domain-adapted.safetensors",
        "heads/domain.safetensors",
    );
    let errors = compile_str(&plain).unwrap_err().to_string();
    assert!(
        errors.contains("was trained on another encoder"),
        "{errors}"
    );
    let adapted = quickstart_config().replace(
        "heads/domain.safetensors",
        "heads/domain-adapted.safetensors",
    );
    let errors = compile_str(&adapted).unwrap_err().to_string();
    assert!(
        errors.contains("was trained on another encoder"),
        "{errors}"
    );
}

/// `examples/adapted`'s policy: a clear subject routed by the adapted encoder's head, an unclear
/// one (best guess under 0.5) routed on purpose as `abstain`.
#[test]
fn the_adapted_example_routes_clear_subjects_and_abstains_on_unclear_ones() {
    let config = example_config("adapted");
    let maths = explain(&config, "How do I find the eigenvalues of a 2x2 matrix?");
    assert_eq!(signal(&maths, "stem")["label"], "math", "{maths:#}");
    assert_eq!(maths["decision"], "stem");
    let vague = explain(&config, "Tell me about it.");
    assert_eq!(signal(&vague, "unsure")["label"], "abstain", "{vague:#}");
    assert_eq!(vague["decision"], "unsure");
    assert_eq!(vague["model"], "gemma3-270m");
}
