//! The encoder fine-tuned with a low-rank adapter (`heads/minilm-adapter.safetensors`, applied
//! on load by ONNX Runtime or merged by Candle) and the subject and jailbreak heads fitted on it,
//! as `examples/adapted` runs them: their recorded and out-of-distribution scores, the refusal of
//! each encoder's head by the other, both backends' embeddings, and the example's decisions.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test helpers fail loudly"
)]

mod support;

use mom_router::config::compile_str;
use mom_router::inference::{self, cosine, Backend};
use mom_router::train::Split;
use serde_json::Value;
use support::encoders::{onnx_on, TEXTS};
use support::heads::{
    bastion_f1, data, held_out_as_recorded, jailbreak_held_out, ood, ood_subjects, score,
};
use support::sidecar::{example_config, plain_quickstart_config, quickstart_config};
use support::signal;
use support::stack::ask;

/// `config` without its encoder's spelling corrector.
fn without_spelling(config: &str) -> String {
    let start = config.find("    spelling:\n").unwrap();
    let end = config[start..].find("keep:").unwrap() + start;
    let end = config[end..].find('\n').unwrap() + end + 1;
    format!("{}{}", &config[..start], &config[end..])
}

fn explain(config: &str, text: &str) -> Value {
    support::explain_offline(config, &ask(text))
}

/// The subject head fitted on the fine-tuned encoder, as `examples/adapted` runs it (ONNX Runtime
/// int8 with the adapter applied on load), reproduces its recorded held-out
/// accuracy through the routing code and keeps its out-of-distribution scores; the heads of the
/// plain and the adapted encoder are each refused by the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_adapted_encoder_s_domain_head_holds_its_scores_and_refuses_the_plain_head() {
    let config = example_config("adapted");
    let snapshot = compile_str(&config).unwrap();
    held_out_as_recorded(&snapshot, "stem", "domain-adapted.safetensors").await;
    // Measured with this head (heads/README.md): 0.893 as written, 0.875 misspelt with the
    // spelling corrector the example configures (0.804 without it); a floor two questions under
    // each, and the corrector wins misspelt questions back without losing right-spelt ones.
    let (domain, typos) = ood_subjects(&snapshot).await;
    assert!(domain.accuracy >= 0.857, "{domain}");
    assert!(typos.accuracy >= 0.839, "{typos}");
    let unspelt = compile_str(&without_spelling(&config)).unwrap();
    let (domain_unspelt, typos_unspelt) = ood_subjects(&unspelt).await;
    assert_eq!(domain_unspelt.accuracy, domain.accuracy);
    assert!(
        typos.accuracy > typos_unspelt.accuracy,
        "{typos}\nwithout the corrector:\n{typos_unspelt}"
    );

    let plain = config.replace(
        "heads/domain-adapted.safetensors",
        "heads/domain.safetensors",
    );
    let errors = compile_str(&plain).unwrap_err().to_string();
    assert!(
        errors.contains("was trained on another encoder"),
        "{errors}"
    );
    let adapted = plain_quickstart_config().replace(
        "heads/domain.safetensors",
        "heads/domain-adapted.safetensors",
    );
    let errors = compile_str(&adapted).unwrap_err().to_string();
    assert!(
        errors.contains("was trained on another encoder"),
        "{errors}"
    );
}

/// The jailbreak head fitted on the same adapted encoder keeps its recorded held-out score through
/// the routing code, and catches bastioncorpus's attacks (never trained on, no rule written from
/// it) on its own better than the plain encoder's head (0.609 at this threshold).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_adapted_jailbreak_head_holds_its_scores_alone_and_with_the_rules() {
    let config = example_config("adapted");
    let snapshot = compile_str(&config).unwrap();
    jailbreak_held_out(&snapshot, "jailbreak-adapted.safetensors").await;
    // Measured (heads/README.md): 0.930 with the rules, 0.598 alone, at threshold 0.9 (the head
    // before the generated code requests: 0.926, 0.626); floors a little under each.
    for (rules, floor) in [(true, 0.90), (false, 0.57)] {
        let config = if rules {
            config.clone()
        } else {
            config.replace(
                "threshold: 0.9\n",
                "threshold: 0.9\n    builtinPatterns: false\n",
            )
        };
        assert_eq!(config.contains("builtinPatterns: false"), !rules);
        let snapshot = compile_str(&config).unwrap();
        let (f1, bastion) = bastion_f1(&snapshot).await;
        assert!(f1 >= floor, "rules {rules}: F1 {f1}\n{bastion}");
    }
}

/// Ordinary requests that work on a word or sentence and limit the reply's form ("Reply with the
/// reversed word only.") are not attacks: the adapted jailbreak head flagged a fifth of them
/// before it trained on `benign-tasks.jsonl`, and the quickstart sent such requests to its
/// least capable model (mom/secu blocked them). The generated tasks' held-out share stays
/// unflagged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ordinary_text_tasks_are_not_taken_for_attacks() {
    let snapshot = compile_str(&quickstart_config()).unwrap();
    // Measured 114 of 114 unflagged (600 tasks on 227 words; the first draw, 400 on 53 words: 88
    // of 88, and 68 of 88 by the head before it trained on them).
    held_out_share_unflagged(&snapshot, "benign-tasks.jsonl").await;
}

/// The held-out share (at least 80 rows) of a generated set of ordinary requests, at most 3 %
/// of it flagged by the quickstart's jailbreak signal.
async fn held_out_share_unflagged(snapshot: &mom_router::config::Snapshot, file: &str) {
    let report = score(
        snapshot,
        "jailbreak",
        data(file),
        &["jailbreak"],
        Split::HeldOut(20),
    )
    .await;
    assert!(report.examples >= 80, "{file}: {report}");
    assert!(report.accuracy >= 0.97, "{file}: {report}");
}

/// Ordinary requests in the words of attacks (how to turn on a phone's developer mode, what a
/// system prompt is, a role-play as a tour guide) are not attacks: on the two written sets,
/// never trained on, the quickstart's signal flagged 11 of 24 and 11 of 16 before its rules
/// were narrowed to instructions and its head read `benign-mentions.jsonl`; the generated
/// requests' held-out share stays unflagged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_that_name_attacks_are_not_taken_for_attacks() {
    let snapshot = compile_str(&quickstart_config()).unwrap();
    // Measured 0 of 24, 3 of 16 and 0 of 30 flagged (heads/README.md); the third set asks for
    // ordinary results in a limited form ("Reply with the reversed word only."), written after
    // the head was trained.
    for (file, examples, most_flagged) in [
        ("jailbreak-mentions.jsonl", 24, 1),
        ("jailbreak-mentions-2.jsonl", 16, 4),
        ("form-limits.jsonl", 30, 1),
    ] {
        let report = score(
            &snapshot,
            "jailbreak",
            ood(file),
            &["jailbreak"],
            Split::All,
        )
        .await;
        assert_eq!(report.examples, examples, "{file}");
        let attack = report.labels.iter().position(|l| l == "jailbreak").unwrap();
        let flagged: usize = report.confusion.iter().map(|row| row[attack]).sum();
        assert!(
            flagged <= most_flagged,
            "{file}: {flagged} flagged\n{report}"
        );
    }
    // Measured 92 of 92 unflagged.
    held_out_share_unflagged(&snapshot, "benign-mentions.jsonl").await;
}

/// A request of the router suite ("Spell the word 'button' backwards. Reply with the reversed word
/// only.") that the quickstart sent to its jailbreak decision: the head scored it 0.943, the same
/// request on another word 0.341. Its generated text tasks now draw from 227 words (none of the
/// suite's), and it scores 0.801.
#[test]
fn a_spelling_request_with_a_form_limit_is_routed_as_an_ordinary_request() {
    let request = explain(
        &quickstart_config(),
        "Spell the word 'button' backwards. Reply with the reversed word only.",
    );
    assert_eq!(
        signal(&request, "jailbreak")["matched"],
        false,
        "{request:#}"
    );
    assert_ne!(request["decision"], "jailbreak");
}

/// The router suite's held-out code requests (a HumanEval function in the suite's instruction,
/// "Complete the following Python function. Reply with … in one ```python code block.") are
/// ordinary requests: the quickstart's jailbreak head scored 5 of the 34 over 0.5 before it read
/// `benign-code.jsonl` (other instructions around the functions of the suite's training items
/// only), and 1 after. Scored at threshold 0.5, the rules on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_router_suites_held_out_code_requests_are_not_taken_for_attacks() {
    use mom_router::eval::suite;
    let text =
        std::fs::read_to_string(support::repo().join("heads/data/router-suite.jsonl")).unwrap();
    let items = suite::parse(&text).unwrap();
    let rows: Vec<String> = items
        .iter()
        .filter(|item| item.kind == suite::Kind::Humaneval)
        .filter(|item| mom_router::records::traces::is_held_out(&item.id, 25))
        .map(|item| serde_json::json!({"text": suite::user_message(item), "label": "benign"}))
        .map(|row| row.to_string())
        .collect();
    assert_eq!(rows.len(), 34);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("held-out-code.jsonl");
    std::fs::write(&file, rows.join("\n")).unwrap();
    let config = quickstart_config().replace("threshold: 0.9\n", "threshold: 0.5\n");
    assert!(config.contains("threshold: 0.5\n"));
    let snapshot = compile_str(&config).unwrap();
    let report = score(&snapshot, "jailbreak", file, &["jailbreak"], Split::All).await;
    let attack = report.labels.iter().position(|l| l == "jailbreak").unwrap();
    let flagged: usize = report.confusion.iter().map(|row| row[attack]).sum();
    assert!(flagged <= 1, "{flagged} of 34 flagged\n{report}");
}

/// The quickstart's token classifier reads the prose around fenced code, not the code: read
/// whole, it took a function's doctest for a person's identifiers and sent a code request to the
/// personal-data model. A name in the prose and an e-mail address in the code still count.
#[test]
fn the_quickstart_reads_personal_data_around_code_and_not_identifiers_in_it() {
    let code = "```python\ndef collatz_steps(n):\n    \"\"\"Return how many Collatz steps take n to 1.\n    >>> collatz_steps(27)\n    111\n    \"\"\"\n```";
    let request = format!("Complete this function.\n{code}");
    let config = quickstart_config();
    assert!(config.contains("fencedCode: skip"));
    let read_whole = explain(
        &config.replace("fencedCode: skip", "fencedCode: read"),
        &request,
    );
    assert_eq!(read_whole["decision"], "personal_data", "{read_whole:#}");
    let prose_only = explain(&config, &request);
    assert_eq!(
        signal(&prose_only, "personal_data")["matched"],
        false,
        "{prose_only:#}"
    );
    assert_eq!(prose_only["decision"], "code");
    let named = explain(
        &config,
        &format!("My manager Anna Kowalczyk asked me to complete this function.\n{code}"),
    );
    assert_eq!(
        signal(&named, "personal_data")["label"],
        "GIVEN_NAME,SURNAME",
        "{named:#}"
    );
    let mailed = explain(
        &config,
        &request.replace(
            "    \"\"\"\n```",
            "    \"\"\"\n    # reviewed by jo.smith@example.org\n```",
        ),
    );
    assert_eq!(
        signal(&mailed, "personal_data")["label"],
        "EMAIL",
        "{mailed:#}"
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

/// The adapter applied to the int8 ONNX export (the adapted tensors written into a copy of the
/// model file, int8 weights quantized again) embeds as Candle does with the adapter merged into
/// the fp32 weights, and not as the encoder without it.
#[test]
fn the_adapter_on_onnx_runtime_embeds_as_on_candle() {
    let adapter = support::repo().join("heads/minilm-adapter.safetensors");
    let embed = |backend: Backend| {
        let mut spec = onnx_on("onnxruntime/libonnxruntime.so", &["cpu"], true);
        spec.backend = backend;
        inference::load(&spec).unwrap().encode(&TEXTS).unwrap()
    };
    let onnx = |adapter: Option<std::path::PathBuf>| {
        let mut backend = onnx_on("onnxruntime/libonnxruntime.so", &["cpu"], true).backend;
        if let Backend::Onnx { adapter: slot, .. } = &mut backend {
            *slot = adapter;
        }
        backend
    };
    let candle = |adapter: Option<std::path::PathBuf>| Backend::Candle {
        devices: vec!["cpu".to_owned()],
        require_first: true,
        adapter,
    };
    let on_candle = embed(candle(Some(adapter.clone())));
    let on_onnx = embed(onnx(Some(adapter)));
    let plain = embed(onnx(None));
    for (i, text) in TEXTS.iter().enumerate() {
        // Measured: 0.9990 to 0.9995 between the backends (the plain encoder's int8 and fp32
        // agree to 0.9994-0.9997), 0.42 to 0.64 between the adapted and the plain encoder.
        let backends = cosine(&on_candle[i], &on_onnx[i]);
        assert!(backends > 0.998, "{text}: {backends}");
        let adapted = cosine(&on_onnx[i], &plain[i]);
        assert!(
            adapted < 0.8,
            "{text}: the adapter changed little ({adapted})"
        );
    }
}

/// A spelling dictionary that cannot be read is a configuration error naming the encoder and the
/// file, not a corrector that silently does nothing.
#[test]
fn a_missing_spelling_dictionary_is_a_config_error_naming_the_file() {
    let config = example_config("adapted").replace(
        "frequency_dictionary_en_82_765.txt",
        "no-such-dictionary.txt",
    );
    let errors = compile_str(&config).unwrap_err().to_string();
    assert!(
        errors.contains("inference.encoder") && errors.contains("no-such-dictionary.txt"),
        "{errors}"
    );
}
