//! The inference layer on the real all-MiniLM-L6-v2 (Candle, fp32) and its int8 ONNX export
//! (ONNX Runtime 1.31.1, CPU). Models come from `./scripts/fetch-models.sh`, which the test
//! command runs first.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test helpers fail loudly"
)]

mod support;

use mom_router::inference::{
    cosine, Backend, BatchSettings, EncoderHandle, EncoderSpec, InferenceError,
};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use support::encoders::{cache, golden, onnx_on, settings, texts};

fn candle(batch: BatchSettings) -> EncoderSpec {
    EncoderSpec {
        backend: Backend::Candle {
            devices: vec!["cpu".to_owned()],
            require_first: false,
            adapter: None,
        },
        model_dir: cache("models/all-MiniLM-L6-v2"),
        max_tokens: 256,
        threads: 1,
        batch,
        spelling: None,
    }
}

fn onnx(providers: &[&str], require_first: bool) -> EncoderSpec {
    onnx_on("onnxruntime/libonnxruntime.so", providers, require_first)
}

#[test]
fn candle_and_onnx_runtime_match_the_pytorch_reference_embeddings() {
    let golden = golden();
    let candle = EncoderHandle::spawn(candle(settings(8, 1, 64))).unwrap();
    assert_eq!(candle.describe(), "candle cpu");
    let ort = EncoderHandle::spawn(onnx(&["cpu"], false)).unwrap();
    let from_candle = candle.embed_blocking(&texts()).unwrap();
    let from_ort = ort.embed_blocking(&texts()).unwrap();
    for (i, want) in golden.iter().enumerate() {
        let got = &from_candle[i];
        assert_eq!(got.len(), 384);
        let norm: f32 = got.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-4, "norm {norm}");
        // fp32 on both sides: equal to the reference's seven printed digits, give or take.
        let worst = got
            .iter()
            .zip(want)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f32, f32::max);
        assert!(
            worst < 1e-5,
            "text {i}: Candle differs from PyTorch by {worst}"
        );
        // int8 weights: close in direction, not in digits.
        let similarity = cosine(&from_ort[i], want);
        assert!(
            similarity > 0.998,
            "text {i}: int8 vs PyTorch cosine {similarity}"
        );
    }
}

#[test]
fn candle_and_onnx_runtime_agree_on_the_same_model() {
    let candle = EncoderHandle::spawn(candle(settings(8, 1, 64))).unwrap();
    let ort = EncoderHandle::spawn(onnx(&["cpu"], false)).unwrap();
    assert_eq!(ort.describe(), "onnx cpu");
    let a = candle.embed_blocking(&texts()).unwrap();
    let b = ort.embed_blocking(&texts()).unwrap();
    for (i, (x, y)) in a.iter().zip(&b).enumerate() {
        let similarity = cosine(x, y);
        eprintln!("text {i}: candle fp32 vs onnx int8 cosine {similarity:.6}");
        assert!(
            similarity > 0.998,
            "text {i}: fp32 vs int8 cosine {similarity}"
        );
    }
    // Meaning, not bytes: the code question is closer to another code question than to weather.
    let query = candle
        .embed_blocking(&["My Rust program panics when I pop from an empty vector".to_owned()])
        .unwrap();
    assert!(cosine(&query[0], &a[1]) > cosine(&query[0], &a[2]) + 0.1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_callers_are_batched_and_each_gets_its_own_embedding() {
    let encoder = Arc::new(EncoderHandle::spawn(candle(settings(8, 20, 64))).unwrap());
    let prompts: Vec<String> = (0..24)
        .map(|i| format!("request number {i} about topic {}", i % 5))
        .collect();
    let expected = encoder.embed_blocking(&prompts).unwrap();
    let batches_before = encoder.stats().batches.load(Ordering::Relaxed);
    let calls: Vec<_> = prompts
        .iter()
        .map(|p| {
            let (encoder, p) = (encoder.clone(), p.clone());
            tokio::spawn(async move { encoder.embed(&p).await })
        })
        .collect();
    for (call, want) in calls.into_iter().zip(&expected) {
        let got = call.await.unwrap().unwrap();
        assert!(
            cosine(&got, want) > 0.9999,
            "a caller got another caller's embedding"
        );
    }
    let batches = encoder.stats().batches.load(Ordering::Relaxed) - batches_before;
    assert!(
        batches < 24,
        "24 calls ran in {batches} forward passes: no batching"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_queue_answers_overloaded_at_once_and_counts_it() {
    let encoder = Arc::new(EncoderHandle::spawn(candle(settings(1, 0, 1))).unwrap());
    let long = "word ".repeat(200);
    let calls: Vec<_> = (0..40)
        .map(|i| {
            let (encoder, text) = (encoder.clone(), format!("{long} {i}"));
            tokio::spawn(async move { encoder.embed(&text).await })
        })
        .collect();
    let mut overloaded = 0;
    for call in calls {
        match call.await.unwrap() {
            Ok(v) => assert_eq!(v.len(), 384),
            Err(InferenceError::Overloaded) => overloaded += 1,
            Err(other) => panic!("unexpected {other}"),
        }
    }
    assert!(
        overloaded > 0,
        "40 concurrent calls never filled a queue of 1"
    );
    assert_eq!(
        encoder.stats().overloaded.load(Ordering::Relaxed),
        overloaded
    );
}

#[test]
fn an_unavailable_provider_falls_back_and_says_why_or_fails_when_required() {
    let fallback = EncoderHandle::spawn(onnx(&["rocm", "cpu"], false)).unwrap();
    let described = fallback.describe().to_owned();
    eprintln!("{described}");
    assert!(
        described.starts_with("onnx cpu (rocm unavailable: "),
        "{described}"
    );
    assert!(!described.contains('\n'));
    let required = EncoderHandle::spawn(onnx(&["rocm", "cpu"], true)).unwrap_err();
    let InferenceError::Load(reason) = required else {
        panic!("expected a load error, got {required:?}");
    };
    assert!(reason.starts_with("rocm unavailable: "), "{reason}");
}

/// In a build without the `cuda` feature, a Candle encoder asked for `cuda` first says why it
/// runs on the CPU, gives the same embeddings, or fails when the GPU is required.
#[cfg(not(feature = "cuda"))]
#[test]
fn candle_without_its_cuda_feature_falls_back_to_the_cpu_and_says_why() {
    let mut spec = candle(settings(8, 1, 64));
    spec.backend = Backend::Candle {
        devices: vec!["cuda".to_owned(), "cpu".to_owned()],
        require_first: false,
        adapter: None,
    };
    let fallback = EncoderHandle::spawn(spec.clone()).unwrap();
    let described = fallback.describe().to_owned();
    assert!(
        described.starts_with("candle cpu (cuda unavailable: ") && described.contains("cuda"),
        "{described}"
    );
    assert!(!described.contains('\n'));
    let embedded = fallback.embed_blocking(&texts()).unwrap();
    for (i, want) in golden().iter().enumerate() {
        assert!(cosine(&embedded[i], want) > 0.99999, "text {i}");
    }
    spec.backend = Backend::Candle {
        devices: vec!["cuda".to_owned(), "cpu".to_owned()],
        require_first: true,
        adapter: None,
    };
    let required = EncoderHandle::spawn(spec).unwrap_err();
    let InferenceError::Load(reason) = required else {
        panic!("expected a load error, got {required:?}");
    };
    assert!(reason.starts_with("cuda unavailable: "), "{reason}");
}

#[test]
fn a_missing_model_is_a_load_error_naming_the_file() {
    let mut spec = candle(settings(1, 0, 1));
    spec.model_dir = PathBuf::from("/nonexistent/minilm");
    let error = EncoderHandle::spawn(spec).unwrap_err();
    assert!(
        error
            .to_string()
            .contains("/nonexistent/minilm/tokenizer.json"),
        "{error}"
    );
}

/// Loading the int8 export looks its word table up before dequantizing it
/// (`dequantize_after_lookup`): ONNX Runtime then keeps the table in int8 instead of folding a
/// float copy of it, and the hidden states are the exported graph's, bit for bit.
#[test]
fn looking_up_int8_rows_before_dequantizing_them_changes_no_hidden_state() {
    use ort::session::Session;
    use ort::value::Tensor;
    let model = cache("models/all-MiniLM-L6-v2-int8/model.onnx");
    let exported = bytes::Bytes::from(std::fs::read(&model).unwrap());
    let rewritten = mom_router::inference::dequantize_after_lookup(&exported)
        .unwrap()
        .expect("the export's word table is dequantized before its lookup");
    // Four nodes for three, two typed values fewer: the tensors are all the file's.
    assert!(rewritten.len().abs_diff(exported.len()) < 1024);
    let environment =
        mom_router::inference::onnx_environment(&cache("onnxruntime/libonnxruntime.so")).unwrap();
    let open = |bytes: &[u8]| {
        Session::builder(&environment)
            .unwrap()
            .commit_from_memory(bytes)
            .unwrap()
    };
    let (mut before, mut after) = (open(&exported), open(&rewritten));
    // Two texts' worth of token ids (with padding), and one long row reaching the table's end.
    let batches: [(usize, Vec<i64>, Vec<i64>); 2] = [
        (
            2,
            vec![101, 7592, 2088, 999, 102, 0, 101, 2129, 2079, 1045, 102, 0],
            vec![1, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1, 0],
        ),
        (1, (0..64).map(|i| 30521 - i * 477).collect(), vec![1; 64]),
    ];
    for (rows, ids, mask) in batches {
        let shape = [rows, ids.len() / rows];
        let hidden = |session: &mut Session| {
            let outputs = session
                .run(ort::inputs![
                    "input_ids" => Tensor::from_array((shape, ids.clone())).unwrap(),
                    "attention_mask" => Tensor::from_array((shape, mask.clone())).unwrap(),
                    "token_type_ids" => Tensor::from_array((shape, vec![0i64; ids.len()])).unwrap(),
                ])
                .unwrap();
            let (_, values) = outputs[0].try_extract_tensor::<f32>().unwrap();
            values.to_vec()
        };
        let (expected, found) = (hidden(&mut before), hidden(&mut after));
        assert_eq!(expected.len(), ids.len() * 384);
        assert!(expected == found, "hidden states differ for {shape:?}");
    }
}

fn rampart(max_tokens: usize) -> mom_router::inference::TokenClassifierSpec {
    mom_router::inference::TokenClassifierSpec {
        model: cache("models/rampart/model_q4.onnx"),
        model_dir: cache("models/rampart"),
        runtime_library: cache("onnxruntime/libonnxruntime.so"),
        providers: vec!["cpu".to_owned()],
        require_first: false,
        max_tokens,
        threads: 1,
    }
}

#[test]
fn the_pii_token_classifier_names_entity_types_even_past_the_first_window() {
    use mom_router::inference::{Batched, OnnxTokenClassifier};
    let mut ner = OnnxTokenClassifier::load(&rampart(64)).unwrap();
    assert_eq!(ner.describe(), "onnx cpu");
    assert!(ner.entity_types().contains(&"GIVEN_NAME".to_owned()));
    let filler = "The quarterly report covers revenue and costs in detail. ".repeat(20);
    let late =
        format!("{filler} Please send the invoice to John Smith at 42 Baker Street, London.");
    let texts = [
        "Hi, my name is Maria Garcia and I live in Springfield.",
        "What is the boiling point of water at sea level?",
        late.as_str(),
    ];
    let found = ner.run(&texts).unwrap();
    for (text, entities) in texts.iter().zip(&found) {
        eprintln!("{:?} -> {entities:?}", &text[..text.len().min(60)]);
    }
    let kinds = |i: usize| -> Vec<String> { found[i].iter().map(|e| e.kind.clone()).collect() };
    assert!(
        kinds(0).contains(&"GIVEN_NAME".to_owned()),
        "{:?}",
        found[0]
    );
    assert!(found[1].iter().all(|e| e.score < 0.5), "{:?}", found[1]);
    assert!(
        kinds(2).contains(&"STREET_NAME".to_owned()) && kinds(2).contains(&"SURNAME".to_owned()),
        "{:?}",
        found[2]
    );
}
