//! `mom-router finetune` on the real all-MiniLM-L6-v2: the encoder it writes loads on the Candle
//! backend, whole or as a low-rank adapter merged on load; with nothing learnt it embeds exactly
//! as the original, and training moves it.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test helpers fail loudly"
)]

mod support;

use mom_router::config::compile_str;
use mom_router::inference::{write_adapter, AdapterTensor, Backend, EncoderHandle, EncoderSpec};
use mom_router::train::{finetune, FinetuneOptions, FinetuneTask, Finetuned};
use std::path::{Path, PathBuf};
use support::encoders::{cache, settings};

fn examples(dir: &Path) -> PathBuf {
    let dishes = [
        "soup", "bread", "risotto", "curry", "pancakes", "salad", "stew", "pie",
    ];
    let tasks = [
        "parse JSON",
        "sort a list",
        "read a file",
        "merge two maps",
        "retry a call",
    ];
    let mut lines = Vec::new();
    for dish in dishes {
        for how in ["How long should I cook", "What spices go well in"] {
            let text = format!("{how} a {dish} for four people?");
            lines.push(serde_json::json!({"text": text, "label": "cooking"}).to_string());
        }
    }
    for task in tasks {
        for lang in ["Python", "Rust", "Go"] {
            let text = format!("Write a {lang} function to {task} with error handling.");
            lines.push(serde_json::json!({"text": text, "label": "code"}).to_string());
        }
    }
    let path = dir.join("examples.jsonl");
    std::fs::write(&path, lines.join("\n")).unwrap();
    path
}

fn options(dir: &Path, out: &str, learning_rate: f64, epochs: usize) -> FinetuneOptions {
    FinetuneOptions {
        encoder: cache("models/all-MiniLM-L6-v2"),
        tasks: vec![FinetuneTask {
            data: examples(dir),
            windowed: false,
            weight: 1.0,
        }],
        out: dir.join(out),
        layers: 1,
        rank: None,
        alpha: 16.0,
        epochs,
        batch_size: 8,
        learning_rate,
        head_learning_rate: 0.05,
        max_tokens: 64,
        holdout: 50,
        limit: None,
        seed: 7,
    }
}

fn embed(model_dir: PathBuf, texts: &[&str]) -> Vec<Vec<f32>> {
    embed_adapted(model_dir, None, texts)
}

fn embed_adapted(model_dir: PathBuf, adapter: Option<PathBuf>, texts: &[&str]) -> Vec<Vec<f32>> {
    let spec = EncoderSpec {
        backend: Backend::Candle {
            devices: vec!["cpu".to_owned()],
            require_first: true,
            adapter,
        },
        model_dir,
        max_tokens: 64,
        threads: 1,
        batch: settings(8, 1, 64),
        spelling: None,
    };
    let texts: Vec<String> = texts.iter().map(|t| (*t).to_owned()).collect();
    let embedded = EncoderHandle::spawn(spec).unwrap().embed_blocking(&texts);
    embedded.unwrap().iter().map(|v| v.to_vec()).collect()
}

fn worst(a: &[Vec<f32>], b: &[Vec<f32>]) -> f32 {
    a.iter()
        .flatten()
        .zip(b.iter().flatten())
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

const PROBES: [&str; 3] = [
    "How long should I cook a lasagne?",
    "Write a Python function to parse JSON.",
    "What is the capital of France?",
];

/// Four epochs of training lowered the loss, the first task's head learnt it, and the encoder
/// written to `model_dir` embeds [`PROBES`] away from the original; returns its embeddings.
fn assert_trained(done: &Finetuned, model_dir: PathBuf) -> Vec<Vec<f32>> {
    let (first, last) = (done.losses[0], done.losses[3]);
    assert!(last < first * 0.8, "loss {first} then {last}");
    assert!(done.tasks[0].held_out_accuracy >= 0.9, "{:?}", done.tasks);
    let original = embed(cache("models/all-MiniLM-L6-v2"), &PROBES);
    let written = embed(model_dir, &PROBES);
    assert!(worst(&original, &written) > 1e-3);
    written
}

#[test]
fn with_nothing_learnt_the_written_encoder_embeds_as_the_original() {
    let dir = tempfile::tempdir().unwrap();
    let done = finetune(&options(dir.path(), "same", 0.0, 1)).unwrap();
    assert!(done.tasks[0].trained > 0 && done.tasks[0].held_out > 0);
    let original = embed(cache("models/all-MiniLM-L6-v2"), &PROBES);
    let written = embed(dir.path().join("same"), &PROBES);
    assert!(worst(&original, &written) < 1e-6);
}

#[test]
fn training_lowers_the_loss_and_moves_the_embedding() {
    let dir = tempfile::tempdir().unwrap();
    let done = finetune(&options(dir.path(), "trained", 1e-3, 4)).unwrap();
    assert_eq!(done.losses.len(), 4);
    let written = assert_trained(&done, dir.path().join("trained"));
    for vector in &written {
        let norm: f32 = vector.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-4, "norm {norm}");
    }
}

#[test]
fn a_low_rank_adapter_starts_as_the_original_and_training_moves_it() {
    let dir = tempfile::tempdir().unwrap();
    let original = embed(cache("models/all-MiniLM-L6-v2"), &PROBES);
    let adapted = |name: &str, learning_rate: f64, epochs: usize| {
        let mut low_rank = options(dir.path(), name, learning_rate, epochs);
        low_rank.rank = Some(4);
        let done = finetune(&low_rank).unwrap();
        let vectors = embed_adapted(
            cache("models/all-MiniLM-L6-v2"),
            Some(dir.path().join(name)),
            &PROBES,
        );
        (done, vectors)
    };
    let (_, same) = adapted("same.safetensors", 0.0, 1);
    assert!(worst(&original, &same) < 1e-6);

    let (done, moved) = adapted("trained.safetensors", 1e-3, 4);
    let (first, last) = (done.losses[0], done.losses[3]);
    assert!(last < first * 0.8, "loss {first} then {last}");
    assert!(done.tasks[0].held_out_accuracy >= 0.9, "{:?}", done.tasks);
    assert!(worst(&original, &moved) > 1e-3);
    // One layer's rank-4 updates, biases and norms: a small file, not an encoder.
    let size = std::fs::metadata(dir.path().join("trained.safetensors"))
        .unwrap()
        .len();
    assert!(size < 200_000, "{size} bytes");
}

/// Requests long enough to be read in several windows, labelled by what they ask about.
fn long_requests(dir: &Path) -> PathBuf {
    let filler =
        "Please read the notes below carefully before you answer the question. ".repeat(12);
    let mut lines = Vec::new();
    for (topic, label) in [
        ("train timetable", "travel"),
        ("flight to Lisbon", "travel"),
    ]
    .into_iter()
    .chain([
        ("quarterly invoice", "billing"),
        ("refund for my order", "billing"),
    ]) {
        for n in 0..6 {
            let text = format!("{filler} Question {n}: what about the {topic}?");
            lines.push(serde_json::json!({"text": text, "label": label}).to_string());
        }
    }
    let path = dir.join("long.jsonl");
    std::fs::write(&path, lines.join("\n")).unwrap();
    path
}

#[test]
fn two_tasks_train_the_same_layers_each_with_its_own_head() {
    let dir = tempfile::tempdir().unwrap();
    let mut both = options(dir.path(), "both", 1e-3, 4);
    both.tasks.push(FinetuneTask {
        data: long_requests(dir.path()),
        windowed: true,
        weight: 1.0,
    });
    let done = finetune(&both).unwrap();
    assert_eq!(done.tasks.len(), 2, "{done:?}");
    assert!(done.tasks[1].trained > 0 && done.tasks[1].held_out > 0);
    assert_trained(&done, dir.path().join("both"));
}

/// A task's weight sets how hard it pulls the shared layers against the others: lighter, the
/// second task moves the written encoder elsewhere; alone, a task trains alike at any weight,
/// since AdamW scales each step by the gradients' recent size.
#[test]
fn a_task_s_weight_moves_the_balance_between_tasks_not_one_task_alone() {
    let dir = tempfile::tempdir().unwrap();
    let run = |name: &str, second: Option<f64>, first: f64| {
        let mut set = options(dir.path(), name, 1e-3, 2);
        set.tasks[0].weight = first;
        if let Some(weight) = second {
            set.tasks.push(FinetuneTask {
                data: long_requests(dir.path()),
                windowed: true,
                weight,
            });
        }
        finetune(&set).unwrap();
        embed(dir.path().join(name), &PROBES)
    };
    let alone = run("alone", None, 1.0);
    let alone_light = run("alone-light", None, 0.25);
    assert!(
        worst(&alone, &alone_light) < 1e-3,
        "{}",
        worst(&alone, &alone_light)
    );
    let even = run("even", Some(1.0), 1.0);
    let light = run("light", Some(0.05), 1.0);
    assert!(worst(&even, &light) > 1e-3, "{}", worst(&even, &light));

    let mut bad = options(dir.path(), "bad", 1e-3, 1);
    bad.tasks[0].weight = 0.0;
    let error = finetune(&bad).unwrap_err().to_string();
    assert!(
        error.contains("the weight must be a positive number, not 0"),
        "{error}"
    );
}

#[test]
fn a_task_with_nothing_held_out_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let one = dir.path().join("one.jsonl");
    std::fs::write(&one, r#"{"text": "only one", "label": "a"}"#).unwrap();
    let mut bad = options(dir.path(), "bad", 1e-3, 1);
    bad.tasks.push(FinetuneTask {
        data: one.clone(),
        windowed: false,
        weight: 1.0,
    });
    let error = finetune(&bad).unwrap_err().to_string();
    assert!(
        error.contains(&format!(
            "{}: nothing to train on or to score",
            one.display()
        )),
        "{error}"
    );
}

#[test]
fn layers_outside_the_encoder_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    for layers in [0, 7] {
        let mut bad = options(dir.path(), "bad", 1e-3, 1);
        bad.layers = layers;
        let error = finetune(&bad).unwrap_err().to_string();
        assert!(error.contains("--layers must be 1 to 6"), "{error}");
    }
}

#[test]
fn an_adapter_trained_on_other_weights_is_refused_on_candle() {
    let semantic = support::sidecar::semantic_config();
    let dir = tempfile::tempdir().unwrap();
    let adapter = dir.path().join("other.safetensors");
    let tensors = [AdapterTensor::new(
        "encoder.layer.5.output.LayerNorm.bias",
        vec![384],
        vec![0.0; 384],
    )];
    write_adapter(&adapter, &tensors, 1.0, "0123").unwrap();
    let candle = semantic.replace(
        "    backend: candle\n",
        &format!("    backend: candle\n    adapter: {}\n", adapter.display()),
    );
    let errors = compile_str(&candle).unwrap_err().to_string();
    assert!(errors.contains("inference.encoder: "), "{errors}");
    assert!(
        errors.contains("trained on the encoder weights with SHA-256 0123"),
        "{errors}"
    );
}

/// On ONNX Runtime an adapter is recognised by the largest value of each row of the weights it
/// was trained on, which the int8 export's scales reproduce: other values, or none recorded, are
/// refused when the configuration loads.
#[test]
fn an_adapter_on_onnx_must_record_the_weights_it_was_trained_on() {
    let dir = tempfile::tempdir().unwrap();
    let weight = "encoder.layer.5.attention.self.query.weight";
    let pair = |absmax: Option<f32>| {
        let mut tensors = vec![
            AdapterTensor::new(format!("{weight}.down"), vec![1, 384], vec![0.0; 384]),
            AdapterTensor::new(format!("{weight}.up"), vec![384, 1], vec![0.0; 384]),
        ];
        if let Some(absmax) = absmax {
            tensors.push(AdapterTensor::new(
                format!("{weight}.absmax"),
                vec![384],
                vec![absmax; 384],
            ));
        }
        let path = dir.path().join(format!("adapter-{absmax:?}.safetensors"));
        write_adapter(&path, &tensors, 1.0, "0123").unwrap();
        path
    };
    let adapted = support::sidecar::example_config("adapted");
    let shipped = support::repo().join("heads/minilm-adapter.safetensors");
    assert!(adapted.contains("backend: onnx"), "{adapted}");
    for (absmax, expected) in [
        (
            Some(1.0),
            "these are not the weights the adapter was trained on",
        ),
        (None, "no record of the weights it was trained on"),
    ] {
        let config = adapted.replace(
            &shipped.display().to_string(),
            &pair(absmax).display().to_string(),
        );
        let errors = compile_str(&config).unwrap_err().to_string();
        assert!(errors.contains("inference.encoder: "), "{errors}");
        assert!(
            errors.contains(&format!("{weight}: {expected}")),
            "{errors}"
        );
    }
}
