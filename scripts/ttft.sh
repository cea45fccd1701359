#!/usr/bin/env bash
# Time to first token of a looper's streamed final step vs a buffered reply, on real models:
# SmolLM2-135M and Qwen2.5-Coder-0.5B under llama.cpp, Envoy on the quickstart ports, mom-router
# with benches/ttft.yaml (a cascade that always escalates to the coder). Prints the median time
# to the first chunk and to the complete reply, with stream true and false. Not a test.
#
#   ./scripts/ttft.sh [ROUNDS]     (default 5)
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$MOM_ROOT"
ROUNDS=${1:-5}

export CARGO_TARGET_DIR="$(default_target_dir)"
install_envoy
install_llms
cargo build --release --quiet --bin mom-router
RUN="$MOM_CACHE/ttft"
mkdir -p "$RUN"
stop_on_exit

"$MOM_CACHE/llm-venv/bin/python" scripts/llm_backend.py 8101 "$MOM_CACHE/models/smollm2-135m.gguf" \
  SmolLM2-135M-Instruct >"$RUN/smollm2.log" 2>&1 &
PIDS+=($!)
"$MOM_CACHE/llm-venv/bin/python" scripts/llm_backend.py 8102 "$MOM_CACHE/models/qwen2.5-coder-0.5b.gguf" \
  Qwen2.5-Coder-0.5B-Instruct >"$RUN/qwen.log" 2>&1 &
PIDS+=($!)
"$CARGO_TARGET_DIR/release/mom-router" serve --config benches/ttft.yaml >"$RUN/mom-router.log" 2>&1 &
PIDS+=($!)
"$MOM_ENVOY_BIN" -c envoy/quickstart.yaml --disable-hot-restart --concurrency 1 -l error \
  >/dev/null 2>"$RUN/envoy.log" &
PIDS+=($!)
for url in http://127.0.0.1:8101/health http://127.0.0.1:8102/health \
  http://127.0.0.1:9190/ready http://127.0.0.1:9901/ready; do
  for _ in $(seq 1 240); do curl -sf -o /dev/null "$url" && break; sleep 0.5; done
done

python3 - "$ROUNDS" <<'PY'
import json, statistics, sys, time, urllib.request

def call(stream):
    body = json.dumps({
        "model": "mom/auto", "stream": stream, "max_tokens": 128, "temperature": 0,
        "messages": [{"role": "user", "content":
            "Write a python function that checks whether a number is prime, with a docstring."}],
    }).encode()
    request = urllib.request.Request("http://127.0.0.1:10000/v1/chat/completions", data=body,
                                     headers={"content-type": "application/json"})
    start = time.perf_counter()
    with urllib.request.urlopen(request, timeout=300) as response:
        first = None
        while chunk := response.read1(65536):
            if first is None:
                first = time.perf_counter() - start
        return first, time.perf_counter() - start, response.headers.get("x-mom-looper-steps")

call(True)  # warm-up
rounds = int(sys.argv[1])
for stream in (True, False):
    runs = [call(stream) for _ in range(rounds)]
    first = statistics.median(r[0] for r in runs) * 1000
    total = statistics.median(r[1] for r in runs) * 1000
    print(f"stream={str(stream).lower():5}  first chunk {first:7.0f} ms  complete {total:7.0f} ms"
          f"  (median of {rounds}; steps {runs[0][2]})")
PY
