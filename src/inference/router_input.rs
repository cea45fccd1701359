//! What the router head reads of a request. Two stages: the request's *kind* (the suite's
//! grading kinds, e.g. code, short facts, exact format, numbers) is classified from the shared
//! sentence embedding plus a few cheap text features; each model's P(correct) and cost then read
//! the kind probabilities crossed with those cheap features. The crossing is what lets a head
//! trained on a few hundred traces generalise: within a kind a model's chance of success moves
//! with a handful of measurable things (how long a programming task is, whether a format is
//! asked for), while the raw embedding would let it memorise which items it got right.

/// The cheap features of a request, in input order. A head records the list it was
/// trained with; a head with another list is refused.
pub const ROUTER_FEATURES: [&str; 8] = [
    "prompt_tokens_log",
    "code_fence",
    "code_signature",
    "format_marker",
    "digit_share",
    "short_answer_asked",
    "code_spec_length",
    "worked_examples",
];

/// The cheap features of a user message, each in 0..=1 (see [`ROUTER_FEATURES`]). Bounded work:
/// only the first 16 KiB are scanned.
pub fn cheap_features(text: &str) -> [f32; ROUTER_FEATURES.len()] {
    let mut end = text.len().min(16 * 1024);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let scanned = &text[..end];
    let lower = scanned.to_ascii_lowercase();
    let tokens = text.len() as f32 / 4.0;
    let digits = scanned.bytes().filter(u8::is_ascii_digit).count() as f32;
    let has = |needles: &[&str]| f32::from(u8::from(needles.iter().any(|n| lower.contains(n))));
    let code = has(&["```"]).max(has(&["def ", "fn ", "function ", "return ", "class "]));
    // A long programming task is a hard one for a small model: its length, 0 at 100 tokens and
    // 1 at 400, counts only where the text asks for code.
    let spec_length = code * ((tokens - 100.0) / 300.0).clamp(0.0, 1.0);
    let examples = scanned.matches(">>>").count() as f32;
    [
        ((1.0 + tokens).ln() / 10.0).min(1.0),
        has(&["```"]),
        has(&["def ", "fn ", "function ", "return ", "class "]),
        has(&[
            "json",
            "exactly",
            "capital letters",
            "nothing else",
            "backwards",
        ]),
        (digits / scanned.len().max(1) as f32 * 4.0).min(1.0),
        has(&[
            "one word",
            "number only",
            "only the",
            "symbol only",
            "word only",
        ]),
        spec_length,
        (examples / 6.0).min(1.0),
    ]
}

/// Width of the kind classifier's input over `dims`-wide embeddings.
pub fn kind_input_width(dims: usize) -> usize {
    dims + ROUTER_FEATURES.len()
}

/// The kind classifier's input: the embedding followed by the cheap features of `text`.
pub fn kind_input(embedding: &[f32], text: &str) -> Vec<f32> {
    joined(embedding, &cheap_features(text))
}

/// The embedding followed by already computed cheap features.
pub(super) fn joined(embedding: &[f32], features: &[f32]) -> Vec<f32> {
    let mut x = Vec::with_capacity(embedding.len() + features.len());
    x.extend_from_slice(embedding);
    x.extend_from_slice(features);
    x
}

/// Width of the model heads' input over `kinds` kinds.
pub fn crossed_width(kinds: usize) -> usize {
    kinds * (1 + ROUTER_FEATURES.len())
}

/// The model heads' input: per kind, its probability and then its probability times each cheap
/// feature, so every kind has its own intercept and its own feature weights.
pub fn crossed(kind_probabilities: &[f32], features: &[f32]) -> Vec<f32> {
    let mut x = Vec::with_capacity(kind_probabilities.len() * (1 + features.len()));
    for &p in kind_probabilities {
        x.push(p);
        x.extend(features.iter().map(|f| p * f));
    }
    x
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crossing_gives_every_kind_its_own_weights() {
        let x = crossed(&[0.25, 0.75], &[1.0, 0.5]);
        assert_eq!(x, vec![0.25, 0.25, 0.125, 0.75, 0.75, 0.375]);
        assert_eq!(crossed_width(3), 3 * (1 + ROUTER_FEATURES.len()));
        let input = kind_input(&[0.6, 0.8], "Reply with one word only.");
        assert_eq!(input.len(), kind_input_width(2));
        assert_eq!(&input[..2], &[0.6, 0.8]);
        assert_eq!(input[2 + 5], 1.0, "short_answer_asked: {input:?}");
    }

    #[test]
    fn cheap_features_read_format_and_code_markers() {
        let code = cheap_features("Complete this:\n```python\ndef f(x):\n```");
        assert_eq!((code[1], code[2]), (1.0, 1.0));
        let fact = cheap_features("What is the capital of Peru? Answer with one word only.");
        assert_eq!((fact[1], fact[2], fact[5]), (0.0, 0.0, 1.0));
        let spec = format!(
            "def f(x):\n    \"\"\"{}\n    >>> f(1)\n    2\n    \"\"\"",
            "word ".repeat(400)
        );
        let spec = cheap_features(&spec);
        assert!(
            spec[6] > 0.9 && (spec[7] - 1.0 / 6.0).abs() < 1e-6,
            "{spec:?}"
        );
        assert_eq!(cheap_features(&"word ".repeat(400))[6], 0.0);
        assert!(fact.iter().all(|v| (0.0..=1.0).contains(v)));
        // Non-ASCII text and a cut inside a character are fine.
        let long = "३".repeat(10_000);
        assert!(cheap_features(&long).iter().all(|v| v.is_finite()));
    }
}
