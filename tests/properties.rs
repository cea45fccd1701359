//! Properties of the text and stream handling every request goes through, checked on generated
//! inputs (proptest): masking is undone exactly by restoring, the event-stream restorer gives
//! the same bytes however the stream is chunked, PII spans are ordered, disjoint and on
//! character boundaries, and no rule signal panics on any text.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers fail loudly"
)]

use mom_router::config::compile_str;
use mom_router::engine::answer::pii_mask::{Masker, SseRestorer};
use mom_router::engine::{self, Services};
use mom_router::llm::Headers;
use mom_router::signals::pii_patterns::spans;
use proptest::prelude::*;
use serde_json::json;
use std::sync::Arc;

/// Text that mixes personal data, brackets, digits and non-ASCII with ordinary words.
fn texty() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("jane.doe@example.com".to_owned()),
        Just("+44 20 7946 0958".to_owned()),
        Just("4111 1111 1111 1111".to_owned()),
        Just("GB82 WEST 1234 5698 7654 32".to_owned()),
        Just("123-45-6789".to_owned()),
        Just("10.0.0.1".to_owned()),
        Just("GB३३".to_owned()),
        Just("[EMAIL_1]".to_owned()),
        "[a-z]{1,8}",
        "[0-9 ]{1,12}",
        "\\PC{1,6}",
    ];
    prop::collection::vec(piece, 0..24).prop_map(|pieces| pieces.join(" "))
}

fn mask(text: &str) -> (String, Masker) {
    let mut object = json!({"messages": [{"role": "user", "content": text}]});
    let masker = Masker::mask(object.as_object_mut().unwrap(), |_| true);
    let masked = object["messages"][0]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    (masked, masker)
}

fn events(pieces: &[String]) -> Vec<u8> {
    let mut body = String::new();
    for piece in pieces {
        let chunk =
            json!({"choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": null}]});
        body.push_str(&format!("data: {chunk}\n\n"));
    }
    body.push_str("data: [DONE]\n\n");
    body.into_bytes()
}

fn restored(masker: &Arc<Masker>, body: &[u8], cuts: &[usize]) -> Vec<u8> {
    let mut restorer = SseRestorer::new(Arc::clone(masker));
    let mut out = Vec::new();
    let mut at = 0;
    for &cut in cuts {
        let end = (at + cut).min(body.len());
        out.extend(restorer.push(&body[at..end]));
        at = end;
    }
    out.extend(restorer.push(&body[at..]));
    out.extend(restorer.finish());
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn spans_are_ordered_disjoint_and_on_character_boundaries(text in texty()) {
        let mut end = 0;
        for (_, range) in spans(&text) {
            prop_assert!(range.start >= end && range.start < range.end);
            prop_assert!(text.is_char_boundary(range.start) && text.is_char_boundary(range.end));
            end = range.end;
        }
    }

    #[test]
    fn restoring_undoes_masking(text in texty()) {
        let (masked, masker) = mask(&text);
        // Text already holding a placeholder of its own is the one case that cannot round-trip.
        prop_assume!(!text.contains("[EMAIL_"));
        prop_assert_eq!(masker.restore(&masked), text);
    }

    #[test]
    fn the_stream_restorer_ignores_how_the_stream_is_cut(
        text in texty(),
        split in prop::collection::vec(1usize..12, 1..40),
        cuts in prop::collection::vec(1usize..64, 0..40),
    ) {
        let (masked, masker) = mask(&text);
        prop_assume!(!text.contains("[EMAIL_"));
        // The masked text streamed back in pieces of the generated sizes.
        let chars: Vec<char> = masked.chars().collect();
        let mut pieces = Vec::new();
        let mut at = 0;
        for size in split.iter().cycle() {
            if at >= chars.len() {
                break;
            }
            let end = (at + size).min(chars.len());
            pieces.push(chars[at..end].iter().collect::<String>());
            at = end;
        }
        let body = events(&pieces);
        let masker = Arc::new(masker);
        let whole = restored(&masker, &body, &[]);
        prop_assert_eq!(&restored(&masker, &body, &cuts), &whole);
        prop_assert_eq!(mom_router::llm::usage::streamed_text(&whole), text);
    }
}

/// A rule-only policy with every signal that needs no model.
const POLICY: &str = include_str!("fixtures/rule-signals.yaml");

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn no_rule_signal_panics_on_any_text(text in texty(), raw in "\\PC{0,64}") {
        let snapshot = compile_str(POLICY).unwrap();
        let services = Services::offline(&snapshot);
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        for content in [text.clone(), raw.clone(), format!("{text}\n{raw}")] {
            let body = json!({"model": "mom/auto", "messages": [
                {"role": "system", "content": raw},
                {"role": "user", "content": content},
            ]})
            .to_string();
            let routed = runtime.block_on(engine::on_request_body(
                &snapshot, &services, &Headers::default(), body.as_bytes(),
            ));
            prop_assert!(matches!(routed.action, engine::Action::Forward(_)), "{:?}", routed.action);
        }
    }
}

/// A keyword signal from a small vocabulary (so signals share terms), with every operator,
/// case and word-boundary setting and every scope.
fn keyword_signal() -> impl Strategy<Value = String> {
    let words = prop::sample::subsequence(
        vec!["sql", "SQL", "tide", "Tide", "é", "naïve", "q3", "a b"],
        0..4,
    );
    let patterns = prop::sample::subsequence(vec![r"\d+", r"(?i)tide\w*", r"ab+c", r"^hi"], 0..3);
    let operator = prop::sample::select(vec!["any", "all", "none"]);
    let scope = prop::sample::select(vec!["lastUser", "allUser", "all"]);
    (words, patterns, operator, any::<bool>(), any::<bool>(), scope).prop_filter_map(
        "a keyword signal needs a term",
        |(words, patterns, operator, case_sensitive, whole_words, scope)| {
            if words.is_empty() && patterns.is_empty() {
                return None;
            }
            let quote = |items: &[&str]| {
                let quoted: Vec<String> = items.iter().map(|t| format!("'{t}'")).collect();
                format!("[{}]", quoted.join(", "))
            };
            Some(format!(
                "{{type: keyword, keywords: {}, patterns: {}, operator: {operator}, caseSensitive: {case_sensitive}, wholeWords: {whole_words}, scope: {scope}}}",
                quote(&words),
                quote(&patterns)
            ))
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn the_combined_keyword_matcher_finds_what_each_signal_finds_alone(
        signals in prop::collection::vec(keyword_signal(), 1..8),
        texts in prop::collection::vec(texty(), 1..4),
        extra in prop::sample::subsequence(vec!["SQL", "tide", "Tidewater", "naïve", "q3", "a b", "abbc", "hi"], 0..5),
    ) {
        let mut yaml = String::from("models: [{name: m, providerModel: p}]\nidentities: [{name: mom/auto, defaultModel: m}]\nsignals:\n");
        for (i, signal) in signals.iter().enumerate() {
            let named = signal.replacen('{', &format!("{{name: k{i}, "), 1);
            yaml.push_str(&format!("  - {named}\n"));
        }
        let snapshot = compile_str(&yaml).unwrap_or_else(|e| panic!("{e}\n{yaml}"));
        let mut messages: Vec<serde_json::Value> = texts
            .iter()
            .enumerate()
            .map(|(i, t)| json!({"role": if i % 2 == 0 { "user" } else { "assistant" }, "content": t}))
            .collect();
        messages.push(json!({"role": "user", "content": format!("{} {}", texts[0], extra.join(" "))}));
        let body = json!({"model": "mom/auto", "messages": messages}).to_string();
        let request = mom_router::llm::ChatRequest::parse(body.as_bytes()).unwrap();
        let combined = mom_router::signals::Neural {
            keywords: Some(snapshot.keywords.hits(&request)),
            ..Default::default()
        };
        let alone = mom_router::signals::Neural::default();
        for signal in &snapshot.signals {
            let together = signal.evaluate(&request, &Headers::default(), &combined, &|_| None);
            let by_itself = signal.evaluate(&request, &Headers::default(), &alone, &|_| None);
            prop_assert_eq!(together, by_itself, "{}", yaml);
        }
    }
}
