#!/usr/bin/env bash
# Soak: Envoy + mom-router (the quickstart policy, real encoders and NER) + FAKE backends under
# mixed traffic at concurrency 16 — ordinary requests, bodies near 1 MiB, PII-dense bodies,
# streamed answers, malformed JSON, oversize bodies. Reports statuses by kind (anything but the
# declared ones is "unexpected"), whether mom-router stayed up, its RSS and open file descriptors
# after warm-up and at the end, and the p99 of ordinary requests before and during the soak.
# Not a test.
#
#   ./scripts/soak.sh [SECONDS] [CONCURRENCY]     (default 600 s at 16)
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$MOM_ROOT"
SOAK_SECONDS=${1:-600}
CONCURRENCY=${2:-16}

export CARGO_TARGET_DIR="$(default_target_dir)"
install_envoy
install_encoders
cargo build --release --quiet --bin mom-router --example fake_openai --example soak
BIN="$CARGO_TARGET_DIR/release"
RUN="$MOM_CACHE/soak"
mkdir -p "$RUN"
stop_on_exit

FAKE_CHUNK_PAUSE_MS=5 start_fake_backends "$RUN"
"$BIN/mom-router" serve --config examples/quickstart/config.yaml >"$RUN/mom-router.log" 2>&1 &
ROUTER=$!
PIDS+=($ROUTER)
"$MOM_ENVOY_BIN" -c envoy/quickstart.yaml --disable-hot-restart -l error >/dev/null 2>"$RUN/envoy.log" &
PIDS+=($!)
for url in http://127.0.0.1:9190/ready http://127.0.0.1:9901/ready http://127.0.0.1:8101/health; do
  for _ in $(seq 1 300); do curl -sf -o /dev/null "$url" && break; sleep 0.1; done
done

URL=http://127.0.0.1:10000/v1/chat/completions
resources() { echo "rss_kib=$(awk '/VmRSS/ {print $2}' /proc/$ROUTER/status) fds=$(ls /proc/$ROUTER/fd | wc -l)"; }
say "warm-up and baseline: 30 s of ordinary requests at $CONCURRENCY"
"$BIN/examples/soak" "$URL" 30 "$CONCURRENCY" normal | tee "$RUN/baseline.json"
say "after warm-up: $(resources)"
say "soak: $SOAK_SECONDS s of mixed traffic at $CONCURRENCY"
# mom-router's resources every 30 s, to tell growth from a plateau.
( start=$SECONDS; while kill -0 "$ROUTER" 2>/dev/null; do
    echo "t=$((SECONDS - start))s $(resources)"; sleep 30; done ) >"$RUN/resources.txt" 2>/dev/null &
SAMPLER=$!
"$BIN/examples/soak" "$URL" "$SOAK_SECONDS" "$CONCURRENCY" mixed | tee "$RUN/soak.json"
kill "$SAMPLER" 2>/dev/null || true
say "resources every 30 s:"
cat "$RUN/resources.txt"
kill -0 "$ROUTER" 2>/dev/null || die "mom-router died during the soak (log: $RUN/mom-router.log)"
say "at the end: $(resources)"
panics=$(grep -c 'panicked' "$RUN/mom-router.log" || true)
say "mom-router up; panics in its log: $panics"
