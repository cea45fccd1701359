//! The encoder on each device it can run on, checked and timed for `scripts/gpu-check.sh`. For
//! every `BACKEND:DEVICE` named (`candle:cuda`, `candle:cpu`, `onnx:cuda`, `onnx:cpu`, ...):
//! - the reference embeddings (PyTorch sentence-transformers, `tests/fixtures/golden/`): the
//!   least cosine over the three texts, against 0.9999 for Candle's fp32 weights and 0.998 for
//!   the int8 ONNX export;
//! - one forward pass at batch 1, 8 and 32 of 64-token texts (p50 over `--rounds`);
//! - classification end to end, embedding then the domain head (`heads/domain.safetensors`), at
//!   the same batches, and how many of `--texts` questions (`.cache/data/domain.jsonl`) get
//!   the label the same backend gave on the CPU (name `BACKEND:cpu` before the others).
//!
//! `--text TEXT` also times one forward pass of that text alone at batch 1 (what a request with
//! that message costs the encoder; `scripts/load.sh` sends "Hi there! How are you today?").
//!
//! A device that cannot load is an error, never a silent fallback. A process loads one ONNX
//! Runtime library: `--runtime PATH` (default `$ORT_DYLIB_PATH`), e.g. onnxruntime-gpu's.
//! Exits 1 when a backend failed to load or missed its reference.
//!
//! `cargo run --release [--features cuda] --example encoder_check -- [--runtime PATH] [--rounds N]
//! [--texts N] [--text TEXT] BACKEND:DEVICE...`

#![allow(clippy::print_stdout, reason = "a check prints its report")]

use mom_router::inference::{self, cosine, Backend, BatchSettings, Encoder, EncoderSpec, Head};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

const BATCHES: [usize; 3] = [1, 8, 32];

struct Args {
    runtime: Option<PathBuf>,
    rounds: usize,
    texts: usize,
    text: Option<String>,
    targets: Vec<(String, String)>,
}

fn parse(mut args: impl Iterator<Item = String>) -> Result<Args, String> {
    let mut parsed = Args {
        runtime: std::env::var_os("ORT_DYLIB_PATH").map(PathBuf::from),
        rounds: 20,
        texts: 256,
        text: None,
        targets: Vec::new(),
    };
    while let Some(arg) = args.next() {
        let mut value = |name: &str| args.next().ok_or(format!("{name} needs a value"));
        match arg.as_str() {
            "--runtime" => parsed.runtime = Some(PathBuf::from(value("--runtime")?)),
            "--rounds" => parsed.rounds = number(&value("--rounds")?)?,
            "--texts" => parsed.texts = number(&value("--texts")?)?,
            "--text" => parsed.text = Some(value("--text")?),
            target => {
                let (backend, device) = target
                    .split_once(':')
                    .ok_or(format!("{target:?} is not BACKEND:DEVICE"))?;
                if !matches!(backend, "candle" | "onnx") {
                    return Err(format!("unknown backend {backend:?}: candle or onnx"));
                }
                parsed.targets.push((backend.to_owned(), device.to_owned()));
            }
        }
    }
    if parsed.targets.is_empty() {
        return Err("name at least one BACKEND:DEVICE, e.g. candle:cuda candle:cpu".to_owned());
    }
    Ok(parsed)
}

fn number(text: &str) -> Result<usize, String> {
    match text.parse() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(format!("{text:?} is not a positive number")),
    }
}

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

fn spec(backend: &str, device: &str, runtime: Option<&Path>) -> Result<EncoderSpec, String> {
    let devices = vec![device.to_owned()];
    let backend = match backend {
        "candle" => Backend::Candle {
            devices,
            require_first: true,
            adapter: None,
        },
        _ => Backend::Onnx {
            model: repo(".cache/models/all-MiniLM-L6-v2-int8/model.onnx"),
            runtime_library: runtime
                .ok_or("onnx needs --runtime or ORT_DYLIB_PATH")?
                .to_owned(),
            providers: devices,
            require_first: true,
            adapter: None,
        },
    };
    Ok(EncoderSpec {
        backend,
        model_dir: repo(".cache/models/all-MiniLM-L6-v2"),
        max_tokens: 256,
        threads: 1,
        batch: BatchSettings {
            max_batch: 32,
            max_wait: Duration::ZERO,
            queue: 64,
            cache_entries: 0,
        },
        spelling: None,
    })
}

/// The golden texts and their reference embeddings.
#[derive(serde::Deserialize)]
struct Golden {
    texts: Vec<String>,
    embeddings: Vec<Vec<f32>>,
}

fn golden() -> Result<Golden, String> {
    let path = repo("tests/fixtures/golden/minilm-sentence-transformers.json");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// Up to `count` question texts from the domain data.
fn questions(count: usize) -> Result<Vec<String>, String> {
    let path = repo(".cache/data/domain.jsonl");
    let text = std::fs::read_to_string(&path)
        .map_err(|e| format!("{}: {e} (run ./scripts/fetch-models.sh)", path.display()))?;
    text.lines()
        .take(count)
        .map(|line| {
            let row: serde_json::Value = serde_json::from_str(line).map_err(|e| e.to_string())?;
            row["text"]
                .as_str()
                .map(str::to_owned)
                .ok_or(format!("{}: a row without text", path.display()))
        })
        .collect()
}

/// The median of `rounds` timed calls of `f`, after two untimed ones.
fn p50(rounds: usize, mut f: impl FnMut() -> Result<(), String>) -> Result<Duration, String> {
    f()?;
    f()?;
    let mut times = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let started = Instant::now();
        f()?;
        times.push(started.elapsed());
    }
    times.sort();
    Ok(times[rounds / 2])
}

fn classify(encoder: &mut dyn Encoder, head: &Head, texts: &[&str]) -> Result<Vec<usize>, String> {
    let embeddings = encoder.encode(texts).map_err(|e| e.to_string())?;
    Ok(embeddings.iter().map(|e| head.predict(e).0).collect())
}

/// What every backend is checked against: the reference embeddings, the domain head and the
/// questions it labels.
struct Inputs {
    golden: Golden,
    head: Head,
    questions: Vec<String>,
}

/// Checks and times one backend; returns its labels of the questions.
fn check(
    name: &str,
    encoder: &mut dyn Encoder,
    inputs: &Inputs,
    args: &Args,
) -> Result<Vec<usize>, String> {
    let Inputs {
        golden,
        head,
        questions,
    } = inputs;
    let texts: Vec<&str> = golden.texts.iter().map(String::as_str).collect();
    let embedded = encoder.encode(&texts).map_err(|e| e.to_string())?;
    let least = embedded
        .iter()
        .zip(&golden.embeddings)
        .map(|(got, want)| cosine(got, want))
        .fold(f32::INFINITY, f32::min);
    let floor = if name.starts_with("candle") {
        0.9999
    } else {
        0.998
    };
    println!("{name}: runs as {:?}", encoder.describe());
    println!("{name}: reference embeddings, least cosine {least:.6} (floor {floor})");
    if least < floor {
        return Err(format!("{name}: reference cosine {least:.6} below {floor}"));
    }
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    if let Some(text) = &args.text {
        let forward = p50(args.rounds, || {
            encoder
                .encode(&[text.as_str()])
                .map(drop)
                .map_err(|e| e.to_string())
        })?;
        println!(
            "{name}: forward of --text, batch 1, p50 {:.2} ms",
            ms(forward)
        );
    }
    let word = "word ".repeat(62);
    for batch in BATCHES {
        let padded: Vec<&str> = vec![word.as_str(); batch];
        let forward = p50(args.rounds, || {
            encoder.encode(&padded).map(drop).map_err(|e| e.to_string())
        })?;
        let asked: Vec<&str> = questions.iter().take(batch).map(String::as_str).collect();
        let classified = p50(args.rounds, || classify(encoder, head, &asked).map(drop))?;
        println!(
            "{name}: batch {batch:>2}: forward (64 tokens) p50 {:>8.2} ms = {:>8.0} texts/s; \
             classification p50 {:>8.2} ms = {:>8.0} texts/s",
            ms(forward),
            batch as f64 / forward.as_secs_f64(),
            ms(classified),
            asked.len() as f64 / classified.as_secs_f64(),
        );
    }
    let mut labels = Vec::with_capacity(questions.len());
    for chunk in questions.chunks(32) {
        let chunk: Vec<&str> = chunk.iter().map(String::as_str).collect();
        labels.extend(classify(encoder, head, &chunk)?);
    }
    Ok(labels)
}

fn main() -> ExitCode {
    let args = match parse(std::env::args().skip(1)) {
        Ok(args) => args,
        Err(e) => {
            eprintln!("encoder_check: {e}");
            return ExitCode::from(2);
        }
    };
    let inputs = golden().and_then(|golden| {
        let head = Head::load(&repo("heads/domain.safetensors")).map_err(|e| e.to_string())?;
        let questions = questions(args.texts)?;
        Ok(Inputs {
            golden,
            head,
            questions,
        })
    });
    let inputs = match inputs {
        Ok(inputs) => inputs,
        Err(e) => {
            eprintln!("encoder_check: {e}");
            return ExitCode::from(2);
        }
    };
    let mut failed = false;
    // Each backend's labels on the CPU, which its other devices are compared with.
    let mut on_cpu: Vec<(String, Vec<usize>)> = Vec::new();
    for (backend, device) in &args.targets {
        let name = format!("{backend}:{device}");
        let checked = spec(backend, device, args.runtime.as_deref())
            .and_then(|spec| inference::load(&spec).map_err(|e| e.to_string()))
            .and_then(|mut encoder| check(&name, encoder.as_mut(), &inputs, &args));
        let labels = match checked {
            Ok(labels) => labels,
            Err(e) => {
                println!("{name}: FAILED: {e}");
                failed = true;
                continue;
            }
        };
        if device == "cpu" {
            on_cpu.push((backend.clone(), labels));
        } else if let Some((_, want)) = on_cpu.iter().find(|(b, _)| b == backend) {
            let agree = labels.iter().zip(want).filter(|(a, b)| a == b).count();
            println!(
                "{name}: domain labels agree with {backend}:cpu on {agree} of {} questions",
                want.len()
            );
        } else {
            println!("{name}: no {backend}:cpu before it to compare labels with");
        }
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
