#!/usr/bin/env bash
# Added latency of a translated Messages / Responses stream against a native one, on a real
# model: SmolLM2-135M under llama.cpp (which answers all three protocols itself), Envoy on the
# quickstart ports with both backend clusters pointed at that one server, mom-router with
# benches/protocols.yaml. The same greedy request goes, in turn, straight to llama.cpp, through
# Envoy to the model declared chat-only (translated both ways) and to the model declared native
# (forwarded untranslated). Prints medians: time to the first event, to the last, events per
# answer and the mean gap between events. Not a test.
#
#   ./scripts/protocol_latency.sh [ROUNDS]     (default 15)
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$MOM_ROOT"
ROUNDS=${1:-15}

export CARGO_TARGET_DIR="$(default_target_dir)"
install_envoy
install_llms
cargo build --release --quiet --bin mom-router
RUN="$MOM_CACHE/protocol-latency"
mkdir -p "$RUN"
stop_on_exit

sed 's/port_value: 8102 }/port_value: 8101 }/' envoy/quickstart.yaml >"$RUN/envoy.yaml"
"$MOM_CACHE/llm-venv/bin/python" scripts/llm_backend.py 8101 "$MOM_CACHE/models/smollm2-135m.gguf" \
  SmolLM2-135M-Instruct >"$RUN/smollm2.log" 2>&1 &
PIDS+=($!)
"$CARGO_TARGET_DIR/release/mom-router" serve --config benches/protocols.yaml >"$RUN/mom-router.log" 2>&1 &
PIDS+=($!)
"$MOM_ENVOY_BIN" -c "$RUN/envoy.yaml" --disable-hot-restart --concurrency 1 -l error \
  >/dev/null 2>"$RUN/envoy.log" &
PIDS+=($!)
for url in http://127.0.0.1:8101/health http://127.0.0.1:9190/ready http://127.0.0.1:9901/ready; do
  for _ in $(seq 1 240); do curl -sf -o /dev/null "$url" && break; sleep 0.5; done
done

python3 - "$ROUNDS" <<'PY'
import json, statistics, sys, time, urllib.request

PROMPT = "Write two sentences about the sea."
BODIES = {
    "/v1/messages": lambda model: {"model": model, "max_tokens": 48, "temperature": 0,
                                   "stream": True, "messages": [{"role": "user", "content": PROMPT}]},
    "/v1/responses": lambda model: {"model": model, "max_output_tokens": 48, "temperature": 0,
                                    "stream": True, "input": PROMPT},
}
TARGETS = [("llama.cpp direct", "http://127.0.0.1:8101", "SmolLM2-135M-Instruct"),
           ("Envoy + mom-router, native", "http://127.0.0.1:10000", "mom/flash"),
           ("Envoy + mom-router, translated", "http://127.0.0.1:10000", "mom/auto")]

def stream(base, path, model):
    body = json.dumps(BODIES[path](model)).encode()
    request = urllib.request.Request(base + path, data=body, headers={"content-type": "application/json"})
    start = time.perf_counter()
    arrivals, pending = [], b""
    with urllib.request.urlopen(request, timeout=300) as response:
        translation = response.headers.get("x-mom-translation", "-")
        while chunk := response.read1(65536):
            now = time.perf_counter() - start
            pending += chunk
            while b"\n\n" in pending:
                event, pending = pending.split(b"\n\n", 1)
                if b"data:" in event:
                    arrivals.append(now)
    return arrivals, translation

for path in BODIES:
    for _, base, model in TARGETS:
        stream(base, path, model)  # warm-up: the prompt is cached by neither (cache_prompt off)
    results = {label: [] for label, _, _ in TARGETS}
    for _ in range(int(sys.argv[1])):
        for label, base, model in TARGETS:
            results[label].append(stream(base, path, model))
    print(f"\n{path} stream, 48 tokens, {sys.argv[1]} rounds (medians)")
    print(f"| target | x-mom-translation | first event ms | last event ms | events | mean gap ms |")
    print("|---|---|---:|---:|---:|---:|")
    for label, runs in results.items():
        first = statistics.median(a[0] * 1000 for a, _ in runs)
        last = statistics.median(a[-1] * 1000 for a, _ in runs)
        events = statistics.median(len(a) for a, _ in runs)
        gap = statistics.median((a[-1] - a[0]) * 1000 / max(len(a) - 1, 1) for a, _ in runs)
        print(f"| {label} | {runs[0][1]} | {first:.1f} | {last:.1f} | {events:.0f} | {gap:.2f} |")
PY
