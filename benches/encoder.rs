//! Raw encoder cost, Candle (fp32) vs ONNX Runtime (int8), each as fetched and with the shipped
//! low-rank adapter applied, at batch 1, 8 and 32 for 64- and 256-token inputs. Needs
//! `./scripts/fetch-models.sh`. `cargo bench --bench encoder`.
//!
//! A process loads one ONNX Runtime library. `MOM_BENCH_OPENVINO=1` loads the OpenVINO build
//! (`.cache/onnxruntime-openvino/`) instead of the default one and adds the OpenVINO execution
//! provider's lines beside its CPU provider's.
#![allow(
    clippy::expect_used,
    reason = "a benchmark without its models should stop loudly"
)]
#![allow(
    missing_docs,
    reason = "criterion_group! generates an undocumented function"
)]

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use mom_router::inference::{self, Backend, BatchSettings, EncoderSpec};
use std::path::PathBuf;
use std::time::Duration;

fn spec(backend: Backend) -> EncoderSpec {
    EncoderSpec {
        backend,
        model_dir: cache("models/all-MiniLM-L6-v2"),
        max_tokens: 256,
        threads: 1,
        batch: BatchSettings {
            max_batch: 32,
            max_wait: Duration::ZERO,
            queue: 64,
            cache_entries: 0,
        },
        spelling: None,
    }
}

fn cache(path: &str) -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from)
        .join(".cache")
        .join(path)
}

fn onnx(runtime: &str, provider: &str) -> Backend {
    Backend::Onnx {
        model: cache("models/all-MiniLM-L6-v2-int8/model.onnx"),
        runtime_library: cache(runtime),
        providers: vec![provider.to_owned()],
        require_first: true,
        adapter: None,
    }
}

fn encoders(c: &mut Criterion) {
    let candle = Backend::Candle {
        devices: vec!["cpu".to_owned()],
        require_first: true,
        adapter: None,
    };
    let adapted = Backend::Candle {
        devices: vec!["cpu".to_owned()],
        require_first: true,
        adapter: Some(cache("../heads/minilm-adapter.safetensors")),
    };
    let mut backends = vec![("candle_fp32", candle), ("candle_fp32_adapted", adapted)];
    if std::env::var_os("MOM_BENCH_OPENVINO").is_some() {
        let runtime = "onnxruntime-openvino/libonnxruntime.so";
        backends.push(("onnx_int8_ort1.24_cpu", onnx(runtime, "cpu")));
        backends.push(("onnx_int8_ort1.24_openvino", onnx(runtime, "openvino")));
    } else {
        let runtime = "onnxruntime/libonnxruntime.so";
        backends.push(("onnx_int8", onnx(runtime, "cpu")));
        let mut adapted = onnx(runtime, "cpu");
        if let Backend::Onnx { adapter, .. } = &mut adapted {
            *adapter = Some(cache("../heads/minilm-adapter.safetensors"));
        }
        backends.push(("onnx_int8_adapted", adapted));
    }
    for (name, backend) in backends {
        let mut encoder = inference::load(&spec(backend)).expect("run ./scripts/fetch-models.sh");
        let mut group = c.benchmark_group(format!("encoder_{name}"));
        group
            .sample_size(10)
            .measurement_time(Duration::from_secs(4));
        for tokens in [64usize, 256] {
            // "word" is one token; [CLS] and [SEP] make up the rest.
            let text = "word ".repeat(tokens - 2);
            for batch in [1usize, 8, 32] {
                let texts: Vec<&str> = vec![text.as_str(); batch];
                group.throughput(Throughput::Elements(batch as u64));
                group.bench_function(format!("{tokens}tok_batch{batch}"), |b| {
                    b.iter(|| encoder.encode(&texts).expect("forward"))
                });
            }
        }
        group.finish();
    }
}

criterion_group!(benches, encoders);
criterion_main!(benches);
