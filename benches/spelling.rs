//! What the encoder's spelling corrector costs per text, beside a forward pass of the encoder
//! (`cargo bench --bench encoder`, 64 tokens): a right-spelt question (every word looked up
//! once), the same question misspelt (each unknown word's one-edit neighbours looked up) and a
//! question in another language (left whole after counting its function words). Needs
//! `./scripts/fetch-models.sh`. `cargo bench --bench spelling`.
#![allow(
    clippy::expect_used,
    reason = "a benchmark without its word lists should stop loudly"
)]
#![allow(
    missing_docs,
    reason = "criterion_group! generates an undocumented function"
)]

use criterion::{criterion_group, criterion_main, Criterion};
use mom_router::inference::{Speller, SpellingSpec};
use std::path::PathBuf;

fn root(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(path)
}

const TEXTS: [(&str, &str); 3] = [
    (
        "right_spelt",
        "How does the Treaty of Westphalia change the balance of power in Europe, and which \
         states gained the most from the settlement that ended the Thirty Years' War? Explain \
         the main clauses and why historians still argue about what the treaty meant.",
    ),
    (
        "misspelt",
        "how dose the treaty of westphlia change the balanse of power in europe, and wich \
         states ganied the most from the settlment that ended the thirty years' war? explain \
         the main clausses and why historans still argue about waht the treaty ment",
    ),
    (
        "other_language",
        "Wie hat der Westfälische Friede das Gleichgewicht der Mächte in Europa verändert, und \
         welche Staaten haben am meisten von der Regelung profitiert, die den Dreißigjährigen \
         Krieg beendete? Erkläre die wichtigsten Bestimmungen.",
    ),
];

fn spelling(c: &mut Criterion) {
    let spec = SpellingSpec {
        dictionary: root(".cache/models/spelling/frequency_dictionary_en_82_765.txt"),
        keep: vec![root("heads/spelling-keep.txt")],
    };
    let tokenizer =
        tokenizers::Tokenizer::from_file(root(".cache/models/all-MiniLM-L6-v2/tokenizer.json"))
            .expect("./scripts/fetch-models.sh fetches the encoder");
    let vocabulary = tokenizer.get_vocab(false);
    let speller = Speller::load(&spec, vocabulary.keys().map(String::as_str))
        .expect("./scripts/fetch-models.sh fetches the dictionary");
    let mut group = c.benchmark_group("spelling");
    for (name, text) in TEXTS {
        group.bench_function(name, |b| {
            b.iter(|| speller.correct(std::hint::black_box(text)))
        });
    }
    group.finish();
}

criterion_group!(benches, spelling);
criterion_main!(benches);
