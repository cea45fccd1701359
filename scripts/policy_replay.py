"""Exact offline replay of one identity of a policy over the router suite's held-out items.

usage: policy_replay.py CONFIG [IDENTITY] [HELD_OUT_PERCENT]
       (defaults: mom/auto, 25 — the split `mom-router eval --held-out 25` scores)

For each held-out item of heads/data/router-suite.jsonl, `mom-router explain` routes the request
the suite would send; the identity's answer is then the recorded answer of the chosen model in
heads/data/router-traces.jsonl (passed or not, its latency). Prints the quality and the summed
recorded latency, the best single model's on the same items, and where the items went. Needs the
release build and ./scripts/fetch-models.sh. Not a test: a live run (scripts/router_eval.sh)
checks a sample of what this predicts.
"""
import collections
import concurrent.futures
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET = os.environ.get("CARGO_TARGET_DIR", "/var/cache/mom-router-target")


def held_out(key, percent):
    """The FNV-1a split of src/records/traces.rs::is_held_out."""
    h = 0xCBF29CE484222325
    for b in key.encode():
        h = ((h ^ b) * 0x100000001B3) % (1 << 64)
    return h % 100 < percent


def user_message(item):
    """What src/eval/suite.rs::user_message sends for the suite's kinds (no `choice` items)."""
    if item["kind"] == "humaneval":
        return ("Complete the following Python function. Reply with the complete function, including "
                "its signature and any imports it needs, in one ```python code block.\n\n```python\n"
                + item["prompt"] + "```")
    if item["kind"] == "choice":
        sys.exit(f"{item['id']}: choice items are not replayed")
    return item["prompt"]


def main():
    if not 2 <= len(sys.argv) <= 4:
        sys.exit(__doc__)
    config = sys.argv[1]
    identity = sys.argv[2] if len(sys.argv) > 2 else "mom/auto"
    percent = int(sys.argv[3]) if len(sys.argv) > 3 else 25
    with open(f"{ROOT}/heads/data/router-suite.jsonl", encoding="utf-8") as lines:
        items = [json.loads(line) for line in lines if line.strip()]
    items = [item for item in items if held_out(item["id"], percent)]
    traces = collections.defaultdict(dict)
    with open(f"{ROOT}/heads/data/router-traces.jsonl", encoding="utf-8") as lines:
        for line in lines:
            row = json.loads(line)
            traces[row["item"]][row["model"]] = row
    env = dict(os.environ, RUST_LOG="warn", NO_COLOR="1")
    env.setdefault("ORT_DYLIB_PATH", f"{ROOT}/.cache/onnxruntime/libonnxruntime.so")

    def route(item):
        body = json.dumps({"model": identity, "temperature": 0,
                           "max_tokens": item.get("max_tokens", 384),
                           "messages": [{"role": "user", "content": user_message(item)}]})
        done = subprocess.run([f"{TARGET}/release/mom-router", "explain", "--config", config, "-"],
                              input=body.encode(), capture_output=True, env=env, cwd=ROOT, check=True)
        explained = json.loads(done.stdout)
        return item["id"], explained["decision"], explained["model"]

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        routed = list(pool.map(route, items))
    n = len(routed)
    quality = sum(traces[i][model]["passed"] for i, _, model in routed) / n
    latency = sum(traces[i][model]["latencyMs"] for i, _, model in routed) / 1000
    print(f"{identity} of {config}: {n} held-out items, quality {quality:.3f}, "
          f"recorded latency {latency:.1f} s")
    models = sorted({m for i, _, _ in routed for m in traces[i]})
    for model in models:
        q = sum(traces[i][model]["passed"] for i, _, _ in routed) / n
        s = sum(traces[i][model]["latencyMs"] for i, _, _ in routed) / 1000
        print(f"  {model} alone: quality {q:.3f}, recorded latency {s:.1f} s")
    for (decision, model), count in collections.Counter((d, m) for _, d, m in routed).most_common():
        print(f"  decision {decision} -> {model}: {count}")


if __name__ == "__main__":
    main()
