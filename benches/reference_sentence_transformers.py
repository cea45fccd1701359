"""The reference a user would otherwise pick: all-MiniLM-L6-v2 through PyTorch
sentence-transformers, on the same model files and inputs as mom-router's encoder bench.

usage: reference_sentence_transformers.py MODEL_DIR [--golden OUT.json] [--device cuda]

Prints p50/p99 latency and throughput at batch 1/8/32 for 64- and 256-token inputs on one CPU
thread (as `cargo bench --bench encoder` runs Candle and ONNX Runtime), and with --golden writes
the embeddings of the texts tests/inference.rs checks, as the golden reference. --device cuda
runs it on GPU 0 instead (scripts/gpu-check.sh does, beside mom-router's own encoders).
Needs: pip install torch==2.15.0 sentence-transformers==6.2.0 (not part of the test command).
"""

import json
import statistics
import sys
import time

import torch
from sentence_transformers import SentenceTransformer, models

TEXTS = [
    "This is a test sentence.",
    "How do I reverse a linked list in Rust?",
    "The weather in Lisbon is sunny today.",
]


def main():
    model_dir = sys.argv[1]
    torch.set_num_threads(1)
    bert = models.Transformer(model_dir, max_seq_length=256)
    pooling = models.Pooling(bert.get_word_embedding_dimension(), pooling_mode="mean")
    device = sys.argv[sys.argv.index("--device") + 1] if "--device" in sys.argv else "cpu"
    model = SentenceTransformer(modules=[bert, pooling, models.Normalize()], device=device)
    if "--golden" in sys.argv:
        out = sys.argv[sys.argv.index("--golden") + 1]
        vectors = model.encode(TEXTS, batch_size=8, convert_to_numpy=True)
        golden = {
            "produced_by": f"sentence-transformers {__import__('sentence_transformers').__version__}, "
                           f"torch {torch.__version__}, {device.upper()} fp32, mean pooling + L2 norm, "
                           "benches/reference_sentence_transformers.py",
            "texts": TEXTS,
            "embeddings": [[round(float(x), 7) for x in v] for v in vectors],
        }
        with open(out, "w") as f:
            json.dump(golden, f, indent=1)
        print(f"wrote {out}", file=sys.stderr)
    print(f"pytorch {device}")
    print(f"{'case':<22}{'p50 ms':>10}{'p99 ms':>10}{'texts/s':>10}")
    for tokens in (64, 256):
        text = "word " * (tokens - 2)
        for batch in (1, 8, 32):
            texts = [text] * batch
            model.encode(texts, batch_size=batch)  # warm-up
            times = []
            deadline = time.time() + 4
            while time.time() < deadline or len(times) < 10:
                start = time.perf_counter()
                model.encode(texts, batch_size=batch)
                times.append(time.perf_counter() - start)
            times.sort()
            p50 = statistics.median(times) * 1000
            p99 = times[min(len(times) - 1, int(len(times) * 0.99))] * 1000
            print(f"{f'{tokens}tok batch{batch}':<22}{p50:>10.1f}{p99:>10.1f}{batch / (p50 / 1000):>10.1f}")


if __name__ == "__main__":
    main()
