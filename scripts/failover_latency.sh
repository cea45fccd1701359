#!/usr/bin/env bash
# Time to the first byte of an answer through Envoy + mom-router (examples/rules/config.yaml,
# envoy/quickstart.yaml) when nothing fails, when the chosen model answers 503 and the request
# fails over, and when its server is stopped (Envoy's connection is refused). FAKE backends that
# answer at once, so the differences are failover's own cost. Interleaved rounds; p50 and p99
# per case. Not a test.
#
#   ./scripts/failover_latency.sh [COUNT]     (default 200 requests per case)
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$MOM_ROOT"
COUNT=${1:-200}

export CARGO_TARGET_DIR="$(default_target_dir)"
install_envoy
cargo build --release --quiet --bin mom-router --example fake_openai
BIN="$CARGO_TARGET_DIR/release"
RUN="$MOM_CACHE/failover-latency"
mkdir -p "$RUN"
stop_on_exit

# Failures never set the coder aside here: every code request fails over.
sed 's/failover: { maxAttempts: 3,/failover: { ejectAfter: 1000000, maxAttempts: 3,/' \
  examples/rules/config.yaml >"$RUN/config.yaml"
grep -q ejectAfter "$RUN/config.yaml" || die "examples/rules/config.yaml has no failover line to edit"
"$BIN/examples/fake_openai" 8101 smollm2-135m >"$RUN/smollm2.log" 2>&1 &
PIDS+=($!)
FAKE_FAIL_STATUS=503 "$BIN/examples/fake_openai" 8102 qwen2.5-coder-0.5b >"$RUN/coder.log" 2>&1 &
CODER=$!
PIDS+=($CODER)
"$BIN/examples/fake_openai" 8103 gemma3-270m >"$RUN/gemma.log" 2>&1 &
PIDS+=($!)
"$BIN/mom-router" serve --config "$RUN/config.yaml" >"$RUN/mom-router.log" 2>&1 &
PIDS+=($!)
"$MOM_ENVOY_BIN" -c envoy/quickstart.yaml --disable-hot-restart --concurrency 1 -l error \
  >/dev/null 2>"$RUN/envoy.log" &
PIDS+=($!)
for url in http://127.0.0.1:9190/ready http://127.0.0.1:9901/ready http://127.0.0.1:8101/health \
  http://127.0.0.1:8102/health; do
  for _ in $(seq 1 100); do curl -sf -o /dev/null "$url" && break; sleep 0.1; done
done

URL=http://127.0.0.1:10000/v1/chat/completions
ask() { printf '{"model":"mom/auto","messages":[{"role":"user","content":"%s"}]}' "$1"; }
# ttfb CASE BODY EXPECTED_FALLBACK: one request's time to first byte in ms, appended to CASE's file.
ttfb() {
  local out
  out=$(curl -s -o /dev/null -D "$RUN/headers" -w '%{http_code} %{time_starttransfer}' \
    -H 'content-type: application/json' -d "$2" "$URL")
  [ "${out%% *}" = 200 ] || die "$1: status ${out%% *}"
  if [ -n "$3" ]; then grep -qi "^x-mom-fallback: $3" "$RUN/headers" || die "$1: no fallback $3"; fi
  awk -v t="${out#* }" 'BEGIN { printf "%.3f\n", t * 1000 }' >>"$RUN/$1.ms"
}
rm -f "$RUN"/*.ms
for _ in $(seq 1 "$COUNT"); do
  ttfb healthy "$(ask 'Hello there, how are you?')" ""
  ttfb after-503 "$(ask 'Write a python function that reverses a list')" "qwen2.5-coder-0.5b 503"
done
kill "$CODER"; wait "$CODER" 2>/dev/null || true
for _ in $(seq 1 "$COUNT"); do
  ttfb healthy-2 "$(ask 'Hello there, how are you?')" ""
  ttfb after-refused "$(ask 'Write a python function that reverses a list')" "qwen2.5-coder-0.5b 503"
done
say "time to first byte, ms ($COUNT requests each; Envoy --concurrency 1; $(nproc) cores)"
for case in healthy after-503 healthy-2 after-refused; do
  sort -n "$RUN/$case.ms" | awk -v name="$case" '{ v[NR] = $1 } END {
    printf "  %-14s p50 %7.2f  p99 %7.2f\n", name, v[int(NR * 0.5 + 0.5)], v[int(NR * 0.99 + 0.5)] }'
done
