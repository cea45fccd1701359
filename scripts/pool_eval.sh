#!/usr/bin/env bash
# Allocation that reads the pool, on real models: the three tiny models under llama.cpp (two
# slots each, one CPU thread each) behind Envoy, and the held-out quarter of the router suite
# (a mixed workload: facts, formats, arithmetic, code) sent CONCURRENCY (default 4) at a time to
#   aware   mom/auto as examples/eval/config.yaml declares it (each model's two slots and its
#           llama.cpp queue metrics: a busy choice gives way to a free model predicted at most
#           busyMaxLoss less likely to be right),
#   blind   the same mom/auto with the pool left out of the configuration (no slots, no
#           metrics: the choice ignores what is in flight),
#   fixed   the best fixed model (FIXED, default qwen2.5-coder-0.5b) for every request.
# One arm at a time, each alone on the pool, mom-router restarted with the arm's configuration.
# Writes each arm's scorecard under OUT/ARM and OUT/summary.md: quality, p50 and p99 latency,
# throughput (items per minute of wall time) and where the identity's requests went. Not a test:
# over an hour on two cores for the whole split (LIMIT below).
#
#   ./scripts/pool_eval.sh [OUT]      (default eval-out/pool)
#
# EVERY (default 1) keeps every EVERY-th held-out item, in suite order, so a shorter run is still
# a mix of every family: on two cores one arm of the whole split takes over 20 minutes.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$MOM_ROOT"
OUT=${1:-eval-out/pool}
CONCURRENCY=${CONCURRENCY:-4}
FIXED=${FIXED:-qwen2.5-coder-0.5b}
ARMS=${ARMS:-blind aware fixed}
EVERY=${EVERY:-1}

export CARGO_TARGET_DIR="$(default_target_dir)"
cargo build --release --quiet --bin mom-router
RUN="$MOM_CACHE/pool-eval"
mkdir -p "$RUN" "$OUT"

# The pool-blind configuration: the eval configuration without its capacity lines, its paths
# made absolute so it can live elsewhere.
CONFIG=examples/eval/config.yaml
sed -e '/^    maxConcurrency:/d' -e '/^    maxQueue:/d' -e '/^    queueMetrics:/d' \
  -e "s#\.\./\.\./#$MOM_ROOT/#g" "$CONFIG" >"$RUN/blind.yaml"
if grep -q 'maxConcurrency' "$RUN/blind.yaml" || ! grep -q 'maxConcurrency' "$CONFIG"; then
  die "$CONFIG must declare each model's maxConcurrency on its own line"
fi

# The held-out quarter (the split `mom-router eval --held-out 25` takes), every EVERY-th item.
python3 - heads/data/router-suite.jsonl "$EVERY" >"$RUN/suite.jsonl" <<'EOF'
import json, sys
def held_out(key, percent=25):
    h = 0xcbf29ce484222325
    for b in key.encode():
        h = ((h ^ b) * 0x100000001b3) % 2**64
    return h % 100 < percent
kept = [l for l in open(sys.argv[1]) if l.strip() and held_out(json.loads(l)["id"])]
sys.stdout.writelines(kept[:: int(sys.argv[2])])
EOF

start_eval_stack "$CONFIG" "$RUN"
# start_eval_stack's mom-router is the one before Envoy in PIDS.
ROUTER_INDEX=$((${#PIDS[@]} - 2))

# restart_router CONFIG ARM: mom-router serving CONFIG in place of the running one.
restart_router() {
  local config=$1 arm=$2 pid=${PIDS[$ROUTER_INDEX]}
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  "$CARGO_TARGET_DIR/release/mom-router" serve --config "$config" \
    --lock "$RUN/lock-$arm.json" >"$RUN/mom-router-$arm.log" 2>&1 &
  PIDS[ROUTER_INDEX]=$!
  for _ in $(seq 1 240); do curl -sf -o /dev/null http://127.0.0.1:9190/ready && return; sleep 0.5; done
  die "mom-router did not become ready with $config (log in $RUN/mom-router-$arm.log)"
}

for arm in $ARMS; do
  case $arm in
    aware) restart_router "$CONFIG" aware; target=(--identity mom/auto) ;;
    blind) restart_router "$RUN/blind.yaml" blind; target=(--identity mom/auto) ;;
    fixed) restart_router "$CONFIG" fixed; target=(--fixed "$FIXED") ;;
    *) die "unknown arm $arm (aware, blind, fixed)" ;;
  esac
  started=$(date +%s.%N)
  "$CARGO_TARGET_DIR/release/mom-router" eval --suite "$RUN/suite.jsonl" \
    --config "$CONFIG" "${target[@]}" --concurrency "$CONCURRENCY" --out "$OUT/$arm" >"$RUN/eval-$arm.log"
  ended=$(date +%s.%N)
  echo "$started $ended" >"$OUT/$arm/wall.txt"
  echo "$arm done in $(python3 -c "print(round($ended - $started))") s" >&2
done

python3 - "$OUT" "$CONCURRENCY" $ARMS <<'EOF' | tee "$OUT/summary.md"
import collections, json, sys
out, concurrency, arms = sys.argv[1], sys.argv[2], sys.argv[3:]
print(f"Held-out router suite at concurrency {concurrency}, one arm at a time.\n")
print("| arm | target | items | quality | p50 ms | p99 ms | wall s | items/min | errors | models |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|---|")
for arm in arms:
    card = json.load(open(f"{out}/{arm}/scorecard.json"))
    started, ended = map(float, open(f"{out}/{arm}/wall.txt").read().split())
    wall = ended - started
    s = card["summaries"][0]
    models = collections.Counter(o["model"] for o in card["outcomes"] if o["target"] == s["target"])
    spread = ", ".join(f"{m} {n}" for m, n in models.most_common())
    print(f"| {arm} | {s['target']} | {s['items']} | {s['quality']:.3f} | {s['latency_p50_ms']:.0f} "
          f"| {s['latency_p99_ms']:.0f} | {wall:.0f} | {60 * s['items'] / wall:.1f} | {s['errors']} | {spread} |")
EOF
