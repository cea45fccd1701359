#!/usr/bin/env bash
# Instructions each ext_proc server spends per request behind the same Envoy, counted by
# callgrind over the whole process (gRPC, HTTP/2, the runtime and the allocator included, which
# ./scripts/instructions.sh leaves out): mom-router on the rule path (examples/rules/config.yaml)
# and the no-op server of benches/noop_extproc.rs, the mechanism's floor, one after the other
# behind one Envoy from envoy/quickstart.yaml, at concurrency 1. Each is warmed up, then counted
# from one callgrind dump to the next around COUNT requests. Prints both and the ratio.
# On an idle machine repeated runs of one build agree within 0.2 %; a busy one changes how the
# runtime batches its wake-ups and so the count (by a few per cent): compare runs made alike.
# Counts weigh large copies (memcpy of big futures) more than a CPU does. Not a test.
#
#   ./scripts/instructions_envoy.sh [COUNT]    (default 1000; needs valgrind)
#   MOM_BIN=path counts that mom-router binary instead of this checkout's
#   COUNT_ENVOY=1 counts Envoy instead (under callgrind, in front of each server running
#   natively): what Envoy spends on each server's exchange, its metadata and what the
#   configuration reads from it; ENVOY_CONFIG=file names another configuration for Envoy
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$MOM_ROOT"
COUNT=${1:-1000}
ENVOY_CONFIG=${ENVOY_CONFIG:-envoy/quickstart.yaml}
command -v valgrind >/dev/null || die "valgrind is not installed (apt-get install valgrind)"
RUN="$MOM_CACHE/instructions-envoy"
rm -rf "$RUN"
mkdir -p "$RUN"
export CARGO_TARGET_DIR="$(default_target_dir)"
cargo build --release --quiet --bin mom-router --example fake_openai --example loadgen --example noop_extproc
BIN="$CARGO_TARGET_DIR/release"
install_envoy
stop_on_exit

start_fake_backends "$RUN"
URL=http://127.0.0.1:10000/v1/chat/completions
callgrind() { # NAME COMMAND...: COMMAND under callgrind, its output files $RUN/NAME.PID.N
  local name=$1
  shift
  exec valgrind --tool=callgrind --callgrind-out-file="$RUN/$name.%p" "$@"
}
ENVOY=("$MOM_ENVOY_BIN" -c "$ENVOY_CONFIG" --disable-hot-restart --concurrency 1 -l error)

routes() { # true once a chat request comes back 200 through Envoy and the server
  [ "$(curl -s -o /dev/null -w '%{http_code}' "$URL" -H 'content-type: application/json' \
    -d '{"model":"mom/auto","messages":[{"role":"user","content":"hi"}]}')" = 200 ]
}

count() { # NAME COMMAND...: instructions per request of the counted process
  local name=$1 counted other
  shift
  # count runs in $( ), a subshell: its own trap stops what it starts, even when it dies.
  stop_on_exit
  if [ "${COUNT_ENVOY:-0}" = 1 ]; then
    "$@" >"$RUN/$name.log" 2>&1 &
    other=$!
    (callgrind "envoy-$name" "${ENVOY[@]}") >/dev/null 2>"$RUN/envoy-$name.log" &
    counted=$!
    name=envoy-$name
  else
    (callgrind "$name" "$@") >"$RUN/$name.log" 2>&1 &
    counted=$!
    "${ENVOY[@]}" >/dev/null 2>"$RUN/envoy-$name.log" &
    other=$!
  fi
  PIDS+=("$counted" "$other")
  for _ in $(seq 1 600); do routes && break; sleep 0.2; done
  routes || die "$name did not start routing (see $RUN/$name.log)"
  "$BIN/examples/loadgen" 100 1 "warm=$URL" >/dev/null
  callgrind_control -d "$counted" >/dev/null 2>&1
  "$BIN/examples/loadgen" "$COUNT" 1 "$name=$URL" >"$RUN/$name.load" 2>&1 \
    || die "the load through $name failed (see $RUN/$name.load)"
  callgrind_control -d "$counted" >/dev/null 2>&1
  kill "$counted" "$other"
  wait "$counted" "$other" 2>/dev/null || true
  # The second dump holds exactly the counted requests (loadgen's warm-up of 20 included).
  awk -v n=$((COUNT + 20)) '/^totals:/ { printf "%d\n", $2 / n }' "$RUN/$name.$counted.2"
}

mom=$(count mom-router "${MOM_BIN:-$BIN/mom-router}" serve --config examples/rules/config.yaml)
floor=$(count noop "$BIN/examples/noop_extproc" 127.0.0.1:50051 smollm2-135m)
if [ "${COUNT_ENVOY:-0}" = 1 ]; then
  say "Envoy's instructions per request ($ENVOY_CONFIG): in front of mom-router $mom, of the no-op server $floor"
else
  say "instructions per request behind Envoy: mom-router $mom, the no-op server $floor"
fi
if [ "${COUNT_ENVOY:-0}" = 1 ]; then
  awk -v m="$mom" -v f="$floor" 'BEGIN { printf "==> Envoy with mom-router x%.2f Envoy with the floor\n", m / f }'
else
  awk -v m="$mom" -v f="$floor" 'BEGIN { printf "==> mom-router x%.2f the floor\n", m / f }'
fi
