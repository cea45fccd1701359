#!/usr/bin/env bash
# Side-by-side latency of the same request through: the upstream directly, Envoy alone (the
# internal listener, routing on a fixed x-selected-model), and Envoy + mom-router (the public
# listener, mom/auto). Same FAKE backend behind all three; interleaved rounds; concurrency 1 and
# 16. Prints p50/p99, the ratios, and mom-router's resident memory. Not a test.
#
#   ./scripts/load.sh [COUNT]     (default 5000 requests per target and concurrency)
#   ENVOY_CONFIG=…, MOM_CONFIG=… (a policy), MOM_SERVE_ARGS="--grpc-listen unix:/tmp/mom.sock" to compare variants
#   LATENCY=0 skips the latency rounds (CPU per request only); ROUNDS=n sets the CPU rounds (3),
#   CPU_AT=n their concurrency (16)
#   MOM_BIN=path runs that mom-router binary instead of this checkout's (another commit's build)
#   FLOOR=1 adds the mechanism's floor: a no-op ext_proc server (benches/noop_extproc.rs) behind a
#   second Envoy from the same configuration (ports moved by 100; admin 9911, ext_proc 50061),
#   and reports mom-router's added latency and CPU per request as ratios to it. FLOOR=rewrite
#   has the no-op server also write the provider model into the body, as any router of a virtual
#   model name must (Envoy then replaces the buffered body, as it does for mom-router).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$MOM_ROOT"
COUNT=${1:-5000}

export CARGO_TARGET_DIR="$(default_target_dir)"
install_envoy
cargo build --release --quiet --bin mom-router --example fake_openai --example loadgen --example noop_extproc
BIN="$CARGO_TARGET_DIR/release"
RUN="$MOM_CACHE/load"
mkdir -p "$RUN"
stop_on_exit

start_fake_backends "$RUN"
"${MOM_BIN:-$BIN/mom-router}" serve --config "${MOM_CONFIG:-examples/rules/config.yaml}" ${MOM_SERVE_ARGS:-} >"$RUN/mom-router.log" 2>&1 &
ROUTER=$!
PIDS+=($ROUTER)
"$MOM_ENVOY_BIN" -c "${ENVOY_CONFIG:-envoy/quickstart.yaml}" --disable-hot-restart --concurrency 1 -l error \
  >/dev/null 2>"$RUN/envoy.log" &
ENVOY=$!
PIDS+=($ENVOY)
READY=(http://127.0.0.1:9190/ready http://127.0.0.1:9901/ready http://127.0.0.1:8101/health)
FLOOR_TARGET=()
case "${FLOOR:-0}" in
  0) ;;
  1) FLOOR_ARGS=(smollm2-135m) ;;
  rewrite) FLOOR_ARGS=(smollm2-135m SmolLM2-135M-Instruct) ;;
  *) die "FLOOR is 0, 1 or rewrite, not '$FLOOR'" ;;
esac
if [ "${FLOOR:-0}" != 0 ]; then
  "$BIN/examples/noop_extproc" 127.0.0.1:50061 "${FLOOR_ARGS[@]}" 2>"$RUN/noop.log" &
  NOOP=$!
  PIDS+=($NOOP)
  sed -e 's/port_value: 10000/port_value: 10100/; s/port_value: 10001/port_value: 10101/' \
      -e 's/port_value: 9901/port_value: 9911/; s/port_value: 50051/port_value: 50061/' \
      "${ENVOY_CONFIG:-envoy/quickstart.yaml}" >"$RUN/envoy-floor.yaml"
  "$MOM_ENVOY_BIN" -c "$RUN/envoy-floor.yaml" --disable-hot-restart --concurrency 1 -l error \
    >/dev/null 2>"$RUN/envoy-floor.log" &
  FLOOR_ENVOY=$!
  PIDS+=($FLOOR_ENVOY)
  READY+=(http://127.0.0.1:9911/ready)
  FLOOR_TARGET=("envoy+noop-ext_proc=http://127.0.0.1:10100/v1/chat/completions")
fi
for url in "${READY[@]}"; do
  for _ in $(seq 1 100); do curl -sf -o /dev/null "$url" && break; sleep 0.1; done
done

cpu_ms() { # PID: user+system CPU time so far, in ms
  awk -v hz="$(getconf CLK_TCK)" '{ print int(($14 + $15) * 1000 / hz) }' "/proc/$1/stat"
}

say "$COUNT requests per target; Envoy --concurrency 1; $(nproc) cores"
for concurrency in $([ "${LATENCY:-1}" = 0 ] || echo 1 16); do
  LOADGEN_FLOOR="${FLOOR_TARGET:+envoy+noop-ext_proc}" "$BIN/examples/loadgen" "$COUNT" "$concurrency" \
    "direct=http://127.0.0.1:8101/v1/chat/completions" \
    "envoy=http://127.0.0.1:10001/v1/chat/completions|x-selected-model:smollm2-135m" \
    "${FLOOR_TARGET[@]}" \
    "envoy+mom-router=http://127.0.0.1:10000/v1/chat/completions"
done

# CPU cost per request of each proxy, from runs through one full path at a time: ROUNDS
# (default 3) interleaved rounds, summed, so a busy moment weighs on both sides alike.
ROUNDS=${ROUNDS:-3}
CPU_AT=${CPU_AT:-16}
router_cpu=0; envoy_cpu=0; noop_cpu=0; floor_envoy_cpu=0
for _ in $(seq 1 "$ROUNDS"); do
  router_before=$(cpu_ms $ROUTER); envoy_before=$(cpu_ms $ENVOY)
  "$BIN/examples/loadgen" "$COUNT" "$CPU_AT" "envoy+mom-router=http://127.0.0.1:10000/v1/chat/completions" >/dev/null
  router_cpu=$(( router_cpu + $(cpu_ms $ROUTER) - router_before ))
  envoy_cpu=$(( envoy_cpu + $(cpu_ms $ENVOY) - envoy_before ))
  if [ "${FLOOR:-0}" != 0 ]; then
    noop_before=$(cpu_ms $NOOP); floor_envoy_before=$(cpu_ms $FLOOR_ENVOY)
    "$BIN/examples/loadgen" "$COUNT" "$CPU_AT" "${FLOOR_TARGET[0]}" >/dev/null
    noop_cpu=$(( noop_cpu + $(cpu_ms $NOOP) - noop_before ))
    floor_envoy_cpu=$(( floor_envoy_cpu + $(cpu_ms $FLOOR_ENVOY) - floor_envoy_before ))
  fi
done
total=$(( ROUNDS * (COUNT + CPU_AT * 20) ))
say "CPU per request at c=$CPU_AT through envoy+mom-router: mom-router $(( router_cpu * 1000 / total )) µs, Envoy $(( envoy_cpu * 1000 / total )) µs"
if [ "${FLOOR:-0}" != 0 ]; then
  say "CPU per request at c=$CPU_AT through envoy+noop-ext_proc: the no-op server $(( noop_cpu * 1000 / total )) µs, its Envoy $(( floor_envoy_cpu * 1000 / total )) µs"
  awk -v c="$CPU_AT" -v r="$router_cpu" -v n="$noop_cpu" -v e="$envoy_cpu" -v f="$floor_envoy_cpu" 'BEGIN {
    if (n > 0 && f > 0) printf "==> CPU ratio to the floor at c=%d: mom-router x%.2f of the no-op server, its Envoy x%.2f\n", c, r / n, e / f }'
fi
say "mom-router memory: $(grep -E 'VmRSS|VmHWM' /proc/$ROUTER/status | tr -s ' \n' ' ')"
