#!/usr/bin/env bash
# The learned router on real models, on the split it never trained on: the three tiny models
# under llama.cpp behind Envoy, mom-router serving examples/eval/config.yaml (its identities read
# heads/router.safetensors), and `mom-router eval` over the held-out quarter of the router
# training suite for every identity and fixed model, checked against examples/eval/gate.yaml.
# Exit 1 when the gate fails. Not a test: about half an hour on two cores.
#
#   ./scripts/router_eval.sh [OUT]      (scorecard and gate verdicts, default eval-out/router-held-out)
#
# CONCURRENCY (default 3) requests in flight; IDENTITIES (default all five) to score; FIXED
# (default every configured model) the fixed models to compare with; SUITE (default the held-out
# quarter of heads/data/router-suite.jsonl) another suite to score whole, for example
# heads/data/router-fresh.jsonl, the hand-written workload in other words than the suite's;
# CONFIG (default examples/eval/config.yaml) another policy to serve, for example the quickstart's
# (the gate was declared for the default one and is left out).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$MOM_ROOT"
OUT=${1:-eval-out/router-held-out}

export CARGO_TARGET_DIR="$(default_target_dir)"
cargo build --release --quiet --bin mom-router
RUN="$MOM_CACHE/router-eval"

CONFIG=${CONFIG:-examples/eval/config.yaml}
start_eval_stack "$CONFIG" "$RUN"

IDENTITIES=${IDENTITIES:-mom/auto mom/flash mom/light mom/ultra mom/cascade}
args=()
for identity in $IDENTITIES; do args+=(--identity "$identity"); done
for model in ${FIXED:-}; do args+=(--fixed "$model"); done
gate=(--gate examples/eval/gate.yaml)
# The gate names every identity and compares with every model; a partial run is scored without it.
[ "$IDENTITIES" = "mom/auto mom/flash mom/light mom/ultra mom/cascade" ] && [ -z "${FIXED:-}" ] \
  && [ "$CONFIG" = examples/eval/config.yaml ] || gate=()
suite=(--suite heads/data/router-suite.jsonl --held-out 25)
# The gate's bounds were declared for the held-out split; another suite is scored without it.
[ -z "${SUITE:-}" ] || { suite=(--suite "$SUITE"); gate=(); }
"$CARGO_TARGET_DIR/release/mom-router" eval "${suite[@]}" \
  --config "$CONFIG" "${args[@]}" --concurrency "${CONCURRENCY:-3}" \
  "${gate[@]}" --out "$OUT"
